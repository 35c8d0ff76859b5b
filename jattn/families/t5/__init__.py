"""The T5 family (Raffel et al. 2020) and mT5 (Xue et al. 2021): model_type "t5" and "mt5"."""
