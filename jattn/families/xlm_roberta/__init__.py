"""The XLM-RoBERTa family (Conneau et al. 2020)."""
