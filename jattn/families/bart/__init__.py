"""The BART family (Lewis et al. 2020)."""
