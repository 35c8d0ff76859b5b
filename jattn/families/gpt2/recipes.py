"""The induction study's language models as named artefacts (``jattn models make NAME``), trained by
``jattn.families.gpt2.train``."""

from __future__ import annotations

from jattn.io.artefacts import register, seeded

MAKER = "jattn.families.gpt2.train"

# The induction study's models (Olsson et al. 2022 find induction heads in 2-layer attention-only models
# and in small models with MLPs alike): 2 layers x 8 heads, d 128, context 128, each with seeds 0-4
# (STATISTICS.md: >= 5 seeds where a seed costs minutes).
RECIPES = [register(r) for r in (
    *seeded("induction-attn-only", "a 2-layer attention-only GPT-2 (8 heads, d 128) trained on English captions and "
            "repeated random tokens", "about 5 min on 2 CPU cores (4.7 min of training measured; 5.2-9.0 min "
            "shared with other jobs)", kind="language_model", maker=MAKER,
            options=(("attention_only", True),), needs=("multi30k",), seeds=5),
    *seeded("induction-gpt2", "a 2-layer GPT-2 with MLPs (8 heads, d 128, FFN 512) trained on English captions and "
            "repeated random tokens", "about 6 min on 2 CPU cores (5.6-6.0 min of training measured; 7.3 min "
            "shared with other jobs)", kind="language_model", maker=MAKER,
            needs=("multi30k",), seeds=5),
)]
