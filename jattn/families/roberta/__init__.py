"""The RoBERTa family (Liu et al. 2019)."""
