"""GPT-2 (Radford et al. 2019)."""
