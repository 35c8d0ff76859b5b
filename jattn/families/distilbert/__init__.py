"""The DistilBERT family (Sanh et al. 2019)."""
