"""The MPNet family (Song et al. 2020)."""
