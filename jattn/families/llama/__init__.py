"""Llama (Touvron et al. 2023)."""
