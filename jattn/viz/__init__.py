"""Figures and the attention viewer."""
