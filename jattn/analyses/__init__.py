"""Attention analyses: one file per method, each registered under its command-line name (``registry``)."""

from jattn.analyses.base import CLASS_NAMES, Method, Statistic
from jattn.analyses.registry import Options, entries, make_methods, register

__all__ = ["CLASS_NAMES", "entries", "make_methods", "Method", "Options", "register", "Statistic"]
