"""Patching read from a translation model's output: French→English captions whose source names a
man or a woman (a boy or a girl), the English word's next-token logit, every attention head of
the encoder, the decoder and the cross-attention patched.

**Pairs.** Clean: a Multi30k test caption whose French source holds exactly one noun of
``NOUNS`` (homme, femme, garçon, fille and their plurals) and whose English reference holds
exactly one word of ``ENGLISH`` (man, woman, boy, girl, …), the noun's translation. Corrupted:
the source with that noun swapped for the other gender's (homme ↔ femme, …), and with it the
determiner and an adjective right before it that agree in gender (un ↔ une, le ↔ la, petit ↔
petite, …), kept only when the two sources give the same number of pieces. The target is the
clean reference in both runs (teacher forcing), so only the source's gender cue differs.

**Metric** (read from the output layer): m = z(w) − z(w′) at the target position that predicts
the English word w of the reference, w′ its other-gender counterpart (first pieces; man ↔ woman,
…). m > 0: the model prefers the word the source asks for; the corrupted source should lower it.
"""

from __future__ import annotations

import numpy as np

NOUNS = {"homme": "femme", "garçon": "fille", "hommes": "femmes", "garçons": "filles"}
NOUNS |= {b: a for a, b in NOUNS.items()}
ENGLISH = {"homme": "man", "femme": "woman", "garçon": "boy", "fille": "girl", "hommes": "men",
           "femmes": "women", "garçons": "boys", "filles": "girls"}
OTHER = {ENGLISH[a]: ENGLISH[b] for a, b in NOUNS.items()}  # man -> woman, ...
AGREEING = {"un": "une", "le": "la", "ce": "cette", "petit": "petite", "grand": "grande", "vieil": "vieille",
            "jeune": "jeune"}  # determiners and adjectives before the noun that agree in gender
AGREEING |= {b: a for a, b in AGREEING.items()}
MALE = frozenset({"homme", "garçon", "hommes", "garçons"})


def _words(text: str) -> list[str]:
    return text.split()


def _bare(word: str) -> str:
    return word.lower().strip(".,;:!?\"'")


def _same_case(word: str, like: str) -> str:
    return word[:1].upper() + word[1:] if like[:1].isupper() else word


def swap_gender(source: str) -> tuple[str, str] | None:
    """(the corrupted source, the French noun swapped) when ``source`` holds exactly one noun of
    ``NOUNS``; the word before it (and the one before that) swapped too while they agree."""
    words = _words(source)
    hits = [i for i, w in enumerate(words) if _bare(w) in NOUNS]
    if len(hits) != 1:
        return None
    k = hits[0]
    noun = _bare(words[k])
    out = list(words)
    out[k] = words[k].replace(words[k].strip(".,;:!?\"'"), _same_case(NOUNS[noun], words[k]))
    for j in (k - 1, k - 2):
        if j < 0 or _bare(words[j]) not in AGREEING:
            break
        out[j] = _same_case(AGREEING[_bare(words[j])], words[j])
    return " ".join(out), noun


def make_pairs(sources: list[str], references: list[str], tokenizer, *, limit: int) -> tuple[list[dict], dict]:
    """Clean/corrupted pairs (module docstring) in file order, at most ``limit``. -> (pairs,
    counts of the sentences skipped and why). A pair: {"index", "clean", "corrupted" (sources),
    "target" (the reference), "noun", "word", "position" (the target position predicting the
    English word), "right", "wrong" (the first piece ids of the word and its counterpart)}."""
    skipped = {"no single French noun of the list": 0, "the reference lacks its translation": 0,
               "unequal source pieces": 0, "the reference's pieces do not map to its words": 0,
               "the words share a first piece": 0}
    pairs = []
    for index, (src, ref) in enumerate(zip(sources, references)):
        if len(pairs) >= limit:
            break
        swapped = swap_gender(src)
        if swapped is None:
            skipped["no single French noun of the list"] += 1
            continue
        corrupted, noun = swapped
        ref_words = _words(ref)
        found = [i for i, w in enumerate(ref_words) if _bare(w) in OTHER]
        if len(found) != 1 or _bare(ref_words[found[0]]) != ENGLISH[noun]:
            skipped["the reference lacks its translation"] += 1
            continue
        if len(tokenizer(src)["input_ids"]) != len(tokenizer(corrupted)["input_ids"]):
            skipped["unequal source pieces"] += 1
            continue
        word = ref_words[found[0]].strip(".,;:!?\"'")
        target = tokenizer(text_target=ref)["input_ids"]  # pieces + end of sentence
        starts = [t for t, piece in enumerate(tokenizer.convert_ids_to_tokens(target)) if piece.startswith("▁")]
        if len(starts) != len(ref_words):
            skipped["the reference's pieces do not map to its words"] += 1
            continue
        position = starts[found[0]]  # the piece that starts the English word (one "▁" piece per word)
        wrong = tokenizer(text_target=_same_case(OTHER[_bare(word)], word))["input_ids"][0]
        if wrong == target[position]:
            skipped["the words share a first piece"] += 1
            continue
        pairs.append({"index": index, "clean": src, "corrupted": corrupted, "target": ref, "noun": noun, "word": word,
                      "position": position, "right": int(target[position]), "wrong": int(wrong)})
    return pairs, skipped


def logit_difference(outputs, rows):
    """m = z(right) − z(wrong) at each example's ``position`` (b,): the logits (b, t, V)."""
    import jax.numpy as jnp

    z = jnp.take_along_axis(outputs["logits"], rows["position"][:, None, None], 1)[:, 0]  # (b, V)
    return (jnp.take_along_axis(z, rows["right"][:, None], 1) - jnp.take_along_axis(z, rows["wrong"][:, None], 1))[:, 0]


def measure(model, pairs: list[dict], batch_size: int) -> dict:
    """Per pair: m on the clean and the corrupted source, and every head's exact and attribution
    patching effect (N, L, H) for each attention type."""
    from jattn.sweeps.patching import attribution_patch_heads, patch_heads

    # equal source pieces per pair and one target (make_pairs), so both batches pad alike; patch_heads checks it
    clean = model.batch([(p["clean"], p["target"]) for p in pairs])
    corrupted = model.batch([(p["corrupted"], p["target"]) for p in pairs])
    rows = {k: np.asarray([p[k] for p in pairs], np.int32) for k in ("position", "right", "wrong")}
    m = [np.asarray(logit_difference({"logits": model.forward(b, internals=None).logits}, rows))
         for b in (clean, corrupted)]
    kw = dict(metric_inputs=rows, per_example=True, batch_size=batch_size)
    exact = patch_heads(model, clean, corrupted, logit_difference, **kw)
    attribution = attribution_patch_heads(model, clean, corrupted, logit_difference, **kw)
    return {"clean": m[0], "corrupted": m[1], **{f"exact_{k}": v for k, v in exact.items()},
            **{f"attribution_{k}": v for k, v in attribution.items()}}


KINDS = ("encoder", "decoder", "cross")
KEYS = ("clean", "corrupted", *(f"{what}_{k}" for what in ("exact", "attribution") for k in KINDS))


def _model(ctx):
    import jattn
    from experiments.common import translation_model

    return jattn.load(translation_model(ctx), use_cache=False)


def pairs_stage(ctx) -> dict:
    from collections import Counter

    from experiments.common import TEST, read_multi30k
    from experiments.patching.pairs import kept_table

    model = _model(ctx)
    src, refs = (read_multi30k(ctx, TEST, side, model) for side in ("fr", "en"))
    pairs, skipped = make_pairs(src, refs, model.tokenizer, limit=ctx.params["pairs"])
    words = Counter(_bare(w) for line in read_multi30k(ctx, "train", "en", model) for w in line.split())  # training
    counts = {"male": sum(words[ENGLISH[n]] for n in MALE),
              "female": sum(words[ENGLISH[n]] for n in NOUNS.keys() - MALE)}
    first = pairs[0]
    lines = [*kept_table(f"{TEST} captions", pairs, skipped), "",
             f"First pair (caption {first['index']}): “{first['clean']}” → “{first['corrupted']}”; the metric reads "
             f"“{first['word']}” against “{_same_case(OTHER[_bare(first['word'])], first['word'])}” in "
             f"“{first['target']}”."]
    lines.append(f"Training captions (English): {counts['male']} male and {counts['female']} female words of the "
                 "list; the baseline always prefers the more frequent gender.")
    return {"pairs": pairs, "skipped": skipped, "train_counts": counts, "table": "\n".join(lines)}


def sweep_stage(ctx) -> dict:
    """Per pair (``measure``), in chunks of ``batch`` pairs."""
    from experiments.patching.pairs import in_chunks

    pairs = ctx.result("patching.gender-pairs")["pairs"]
    net, size = _model(ctx), ctx.params["batch"]
    joined, seconds = in_chunks(ctx, pairs, size, lambda chunk: measure(net, chunk, size), KEYS)
    c = net.config
    return {"shapes": {"encoder": [c.encoder_layers, c.encoder_heads], "decoder": [c.decoder_layers, c.decoder_heads],
                       "cross": [c.decoder_layers, c.decoder_heads]},
            "male": [int(p["noun"] in MALE) for p in pairs], "measured_s": round(seconds, 1),
            **{key: np.round(v, 6).tolist() for key, v in joined.items()}}
