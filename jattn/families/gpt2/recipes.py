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

# The same two shapes trained on natural text only, where the finding can fail (Olsson et al. 2022 see
# induction heads emerge on natural text; nothing here plants a repeat): random_share 0, every English
# running text the data manifest offers (Multi30k captions, LitBank's novels, GAP's Wikipedia paragraphs,
# the EWT web documents; 34,028 documents without copies, 1.88 M tokens), context 256, 3,000 steps of 32
# sequences (24 M tokens, about 13 passes over the text), the curve every 100 steps; seeds 0-4.
TEXT = ("multi30k", "litbank", "gap", "ud-english-ewt")
NATURAL = (("context", 256), ("distinct", True), ("eval_every", 100), ("random_share", 0.0), ("steps", 3000),
           ("text", TEXT))
RECIPES += [register(r) for r in (
    *seeded("induction-natural-attn-only", "a 2-layer attention-only GPT-2 (8 heads, d 128, context 256) trained on "
            "English natural text only (no repeated segments)", "about 13 min alone on 2 CPU cores (estimated: the "
            "context-128 recipe's 0.11 s a step x 2.2 for context 256; 4.7 s a step measured over 120 steps while "
            "the 2 cores ran about 12 other jobs)", kind="language_model", maker=MAKER,
            options=(("attention_only", True), *NATURAL), needs=TEXT, seeds=5),
    *seeded("induction-natural-gpt2", "a 2-layer GPT-2 with MLPs (8 heads, d 128, FFN 512, context 256) trained on "
            "English natural text only (no repeated segments)", "about 15 min alone on 2 CPU cores (estimated: the "
            "context-128 recipe's 0.14 s a step x 2.1 for context 256)", kind="language_model", maker=MAKER,
            options=NATURAL, needs=TEXT, seeds=5),
)]
