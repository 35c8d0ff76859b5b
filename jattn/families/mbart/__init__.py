"""The mBART family (Liu et al. 2020): mBART-cc25 and mBART-50 checkpoints (model_type "mbart")."""
