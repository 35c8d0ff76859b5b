"""Qwen2 (Yang et al. 2024)."""
