"""RoBERTa-PreLayerNorm (``jattn.families.roberta_prelayernorm.spec``)."""
