"""ModernBERT (``jattn.families.modernbert.spec``)."""
