"""The patching study's data and measurements: GAP clean/corrupted pairs, the metric, the sweeps.

**Pairs.** Clean: a GAP paragraph whose pronoun corefers with exactly one of its two candidate
names (``gold`` "A" or "B"). GAP's two candidates share the pronoun's gender. Corrupted: the same
paragraph with the coreferent name's labelled mention replaced by a name of the *other* gender —
a candidate mention of another GAP example whose pronoun has that gender — with the same number
of word pieces under every tokenizer of the run, so that the two texts align token by token
(``jattn.patch_heads`` patches position by position). The pronoun then agrees in gender with the
other candidate only: the gender cue that points it at its antecedent is gone.

**Metric** (the models are sentence encoders without a masked-LM head, so it reads the encoder's
last hidden states h): m = ⟨h_p, h̄_gold⟩ − ⟨h_p, h̄_other⟩, the pronoun's final vector against the
mean final vector of each candidate mention's word pieces, at the clean run's positions. m > 0
says the pronoun's vector leans to its antecedent; the study reports how often it does on the
clean run beside the nearest-name rule (the behaviour) and how much the corruption lowers m
(what patching can restore).

**Weight-based score** (Clark et al. 2019, §4.3 on GAP, ``jattn.analyses.coref.gap_correct``):
per example and head, 1 if the pronoun's word attends more (word level) to the coreferent name
than to the other, on the clean paragraph.
"""

from __future__ import annotations

import numpy as np

MALE = frozenset({"he", "him", "his", "himself"})
FEMALE = frozenset({"she", "her", "hers", "herself"})


def gender(word: str) -> str | None:
    w = word.lower()
    return "m" if w in MALE else "f" if w in FEMALE else None


def _pieces(tokenizer, words) -> int:
    return len(tokenizer(list(words), is_split_into_words=True, add_special_tokens=False)["input_ids"])


def inventory(examples) -> dict[str, list[tuple[str, ...]]]:
    """Candidate-name mentions by the gender of their example's pronoun (letters only, distinct,
    in order of first appearance)."""
    out: dict[str, dict] = {"m": {}, "f": {}}
    for ex in examples:
        g = gender(ex.words[ex.pronoun])
        if g is None:
            continue
        for span in (ex.a, ex.b):
            words = tuple(ex.words[i] for i in span)
            if all(w.isalpha() for w in words):
                out[g].setdefault(words, None)
    return {g: list(names) for g, names in out.items()}


def make_pairs(examples, tokenizers, *, limit: int, max_tokens: int, seed: int = 0) -> tuple[list[dict], dict]:
    """Clean/corrupted pairs (module docstring) from GAP ``examples``, in file order, at most
    ``limit``; every paragraph ≤ ``max_tokens`` pieces (specials included) and every word giving
    a piece under each of ``tokenizers``. -> (pairs, counts of the examples skipped and why).
    A pair: {"id", "clean", "corrupted" (word lists), "pronoun", "gold", "other" (word indices in
    the clean paragraph), "nearest" (1 when the nearest name is the coreferent one), "inserted"}."""
    from jattn.analyses.coref import gap_baselines
    from jattn.io.labels import fit_words

    names = inventory(examples)
    fits = [set(fit_words(t, [list(ex.words) for ex in examples], max_tokens)[0]) for t in tokenizers]
    pieces = {g: {n: [_pieces(t, n) for t in tokenizers] for n in ns} for g, ns in names.items()}
    skipped = {"no single coreferent name": 0, "pronoun without gender": 0, "too long or unmappable": 0,
               "no other-gender name of equal pieces": 0}
    pairs = []
    for index, ex in enumerate(examples):
        if len(pairs) >= limit:
            break
        g = gender(ex.words[ex.pronoun])
        if ex.gold is None or g is None:
            skipped["no single coreferent name" if ex.gold is None else "pronoun without gender"] += 1
            continue
        if any(index not in fit for fit in fits):
            skipped["too long or unmappable"] += 1
            continue
        gold, other = (ex.a, ex.b) if ex.gold == "A" else (ex.b, ex.a)
        present = {w.lower() for w in ex.words}
        want = [_pieces(t, [ex.words[i] for i in gold]) for t in tokenizers]
        other_gender = pieces["f" if g == "m" else "m"]
        options = [n for n in other_gender if other_gender[n] == want and not present & {w.lower() for w in n}]
        if not options:
            skipped["no other-gender name of equal pieces"] += 1
            continue
        new = options[int(np.random.default_rng([seed, index]).integers(len(options)))]
        corrupted = [*ex.words[:gold[0]], *new, *ex.words[gold[-1] + 1:]]
        pairs.append({"id": ex.id, "clean": list(ex.words), "corrupted": corrupted, "pronoun": ex.pronoun,
                      "gold": list(gold), "other": list(other), "nearest": int(gap_baselines(ex)["nearest"]),
                      "inserted": " ".join(new)})
    return pairs, skipped


def encode(model, pairs: list[dict], pad_to: int) -> tuple[dict, dict, dict]:
    """(clean batch, corrupted batch, metric inputs) for ``pairs``, padded to ``pad_to`` tokens.
    Metric inputs: 0/1 masks (N, n) of the pronoun's, the coreferent name's and the other name's
    pieces in the clean paragraph (the corrupted one has the same positions)."""
    clean = model.tokenize([p["clean"] for p in pairs], max_length=pad_to, pad_to=pad_to)
    corrupted = model.tokenize([p["corrupted"] for p in pairs], max_length=pad_to, pad_to=pad_to)
    if not (clean.attention_mask == corrupted.attention_mask).all():
        raise ValueError("a clean/corrupted pair tokenizes to different lengths under this model's tokenizer; "
                         "the pairs were built with other tokenizers. Fix: rebuild the pairs with this model's")
    words = clean.word_ids  # (N, n), -1 on specials and padding
    masks = {key: np.stack([np.isin(words[r], np.asarray(p[key] if key != "pronoun" else [p[key]]))
                            for r, p in enumerate(pairs)]).astype(np.float32) for key in ("pronoun", "gold", "other")}
    return clean.inputs(), corrupted.inputs(), masks


def metric(outputs, rows):
    """m = ⟨h_p, h̄_gold⟩ − ⟨h_p, h̄_other⟩ per example (module docstring): (b,)."""
    import jax.numpy as jnp

    h = outputs["last_hidden_state"]  # (b, n, D)

    def mean(mask):  # (b, n) -> (b, D)
        return jnp.einsum("bn,bnd->bd", mask, h) / mask.sum(1, keepdims=True)

    p = mean(rows["pronoun"])  # (b, D)
    return (p * mean(rows["gold"])).sum(-1) - (p * mean(rows["other"])).sum(-1)  # (b,)


def clark_correct(model, batch: dict, pairs: list[dict], word_ids: np.ndarray) -> np.ndarray:
    """(N, L, H) 0/1: the pronoun's word attends more to the coreferent name than to the other
    (``gap_correct`` on the clean paragraph's word-level map)."""
    from jattn.analyses.coref import gap_correct
    from jattn.analyses.weights import word_level
    from jattn.io.labels import GapExample
    from jattn.runner import unit_ids

    out = model.forward(batch, internals=("weights",))
    maps = np.asarray(word_level(out.attentions, unit_ids(word_ids, batch["attention_mask"])))  # (L, b, H, u, u)
    return np.stack([gap_correct(maps[:, r], GapExample(p["id"], p["clean"], p["pronoun"], tuple(p["gold"]),
                                                          tuple(p["other"]), "A")) for r, p in enumerate(pairs)])


def measure(model, pairs: list[dict], pad_to: int, batch_size: int) -> dict:
    """Everything the claims read, for ``pairs`` padded to ``pad_to``: per example the clean and
    corrupted metric, the exact and the attribution patching effect of every head (N, L, H) and
    Clark's weight-based score (N, L, H)."""
    from jattn.sweeps.patching import attribution_patch_heads, patch_heads

    clean, corrupted, masks = encode(model, pairs, pad_to)
    word_ids = model.tokenize([p["clean"] for p in pairs], max_length=pad_to, pad_to=pad_to).word_ids
    m_clean = np.asarray(metric({"last_hidden_state": model.forward(clean, internals=None).last_hidden_state}, masks))
    m_corr = np.asarray(metric({"last_hidden_state": model.forward(corrupted, internals=None).last_hidden_state},
                               masks))
    kw = dict(metric_inputs=masks, per_example=True, batch_size=batch_size)
    return {"clean": m_clean, "corrupted": m_corr,
            "exact": patch_heads(model, clean, corrupted, metric, **kw)["encoder"],
            "attribution": attribution_patch_heads(model, clean, corrupted, metric, **kw)["encoder"],
            "clark": clark_correct(model, clean, pairs, word_ids).astype(np.float64)}


# ---------------------------------------------------------------- stages (the expensive ones)

GAP_FILE = "gap/gap-development.tsv"


def load(model: str):
    import jattn
    from experiments.common import base_model

    base = base_model(model)
    return jattn.load() if base is None else jattn.load(base)


def kept_table(what: str, pairs: list, skipped: dict) -> list[str]:
    """A Markdown table (lines) of how many of ``what`` were read, kept as pairs and skipped, by reason."""
    return [
        "| " + " | ".join([f"{what} read", "pairs kept", *(f"skipped: {k}" for k in skipped)]) + " |",
        "|---" * (2 + len(skipped)) + "|",
        "| " + " | ".join(str(v) for v in (sum(skipped.values()) + len(pairs), len(pairs), *skipped.values())) + " |",
    ]


def pairs_stage(models: tuple[str, ...]):
    def run(ctx) -> dict:
        from jattn.io.labels import read_gap

        examples = read_gap(ctx.data(GAP_FILE))
        tokenizers = [load(m).tokenizer for m in models]
        pairs, skipped = make_pairs(examples, tokenizers, limit=ctx.params["pairs"],
                                    max_tokens=ctx.params["max_tokens"])
        lines = [*kept_table("GAP examples", pairs, skipped), "",
                 f"First pair ({pairs[0]['id']}): the coreferent name "
                 f"“{' '.join(pairs[0]['clean'][i] for i in pairs[0]['gold'])}” replaced by "
                 f"“{pairs[0]['inserted']}”; pronoun “{pairs[0]['clean'][pairs[0]['pronoun']]}”."]
        return {"pairs": pairs, "skipped": skipped, "table": "\n".join(lines)}

    return run


def in_chunks(ctx, items: list, size: int, measure, keys: tuple[str, ...]) -> tuple[dict, float]:
    """``measure(items[k:k + size])`` (a dict of per-item arrays) for each chunk, each checkpointed
    in the work folder (a killed stage resumes at its next chunk). -> (``keys`` joined over the
    chunks, seconds measured)."""
    import time

    parts, seconds = [], 0.0
    for k, start in enumerate(range(0, len(items), size)):
        path = ctx.work() / f"chunk-{k:04d}.npz"
        if not path.is_file():
            begin = time.perf_counter()
            got = measure(items[start:start + size])
            np.savez(path, seconds=time.perf_counter() - begin, **got)
        with np.load(path) as f:
            parts.append({key: f[key] for key in f.files})
            seconds += float(f["seconds"])
    return {key: np.concatenate([p[key] for p in parts]) for key in keys}, seconds


def sweep_stage(model: str, pairs_name: str):
    """Per example: the metrics, exact and attribution effects and Clark's score, in chunks of
    ``batch`` pairs (``in_chunks``)."""
    def run(ctx) -> dict:
        pairs = ctx.result(pairs_name)["pairs"][:ctx.params["pairs"]]
        net, size, pad = load(model), ctx.params["batch"], ctx.params["max_tokens"]
        keys = ("clean", "corrupted", "exact", "attribution", "clark")
        joined, seconds = in_chunks(ctx, pairs, size, lambda chunk: measure(net, chunk, pad, size), keys)
        return {"model": model, "shape": [net.config.num_layers, net.config.num_heads], "ids": [p["id"] for p in pairs],
                "nearest": [p["nearest"] for p in pairs], "measured_s": round(seconds, 1),
                **{key: np.round(v, 6).tolist() for key, v in joined.items()}}

    return run
