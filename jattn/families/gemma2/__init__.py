"""Gemma 2 (Gemma Team 2024)."""
