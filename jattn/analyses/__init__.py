"""Attention analyses: one file per method, each registered under its command-line name (``registry``)."""
