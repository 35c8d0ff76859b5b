"""See study.py."""
