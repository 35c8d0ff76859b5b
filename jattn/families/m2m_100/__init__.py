"""The M2M100 family (Fan et al. 2021), also NLLB-200's dense checkpoints (NLLB Team 2022): model_type "m2m_100"."""
