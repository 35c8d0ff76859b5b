"""The BERT family (Devlin et al. 2019)."""
