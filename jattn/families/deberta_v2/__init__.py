"""DeBERTa-v2 / v3 (He et al. 2021; 2023): disentangled attention."""
