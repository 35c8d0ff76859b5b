"""jattn: attention internals of BERT-family encoders and NMT Transformers, as JAX data."""

from jattn.load import load

__all__ = ["load"]
