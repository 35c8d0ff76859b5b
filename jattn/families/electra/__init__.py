"""The ELECTRA family (Clark et al. 2020): the discriminator."""
