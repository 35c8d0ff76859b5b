"""Attention analyses: one file per method, each registered under its command-line name (``registry``)."""

from jattn.nn.token_classes import CLASS_NAMES
from jattn.analyses.registry import Options, entries, make_methods, register

__all__ = ["CLASS_NAMES", "entries", "make_methods", "Options", "register"]
