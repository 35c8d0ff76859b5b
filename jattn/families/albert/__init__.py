"""The ALBERT family (Lan et al. 2020)."""
