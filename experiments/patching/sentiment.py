"""Patching read from an output head: the fine-tuned SST-2 classifiers, clean/corrupted pairs that
differ in one sentiment word, and two metrics on the same patched runs.

**Pairs.** Clean: an SST-2 development sentence holding exactly one word of ``ANTONYMS`` (and no
other). Corrupted: that word swapped for its antonym, kept only when the two words give the same
number of word pieces under every tokenizer of the run (``jattn.patch_heads`` patches position by
position). The label of the clean sentence is SST-2's gold label.

**Output-head metric** (the behaviour, as the classifier reports it): the logit difference
m = z_y − z_{1−y} of the classifier's two logits, y the clean sentence's gold label (Wang et al.
2022 and Heimersheim & Nanda 2024 recommend a logit difference for patching). m > 0 is a right
prediction; the corruption should lower it.

**Hidden-state metric** (what the coreference pairs read, for encoders without a task head): the
final hidden state of the first position — the vector the classification head reads — projected on
the direction the corruption moved it, m_h = ⟨h_0, h_0^clean − h_0^corrupted⟩. It needs no head;
the study asks whether it ranks heads as the output head's logit difference does.
"""

from __future__ import annotations

import numpy as np

# Antonym pairs for SST-2's lowercased, space-tokenized text; each word appears once.
ANTONYMS = (
    ("good", "bad"), ("best", "worst"), ("better", "worse"), ("great", "awful"), ("love", "hate"),
    ("loved", "hated"), ("beautiful", "ugly"), ("brilliant", "dreadful"), ("wonderful", "terrible"),
    ("fun", "dull"), ("funny", "boring"), ("interesting", "tedious"), ("excellent", "poor"), ("smart", "stupid"),
    ("strong", "weak"), ("success", "failure"), ("charming", "annoying"), ("delightful", "tiresome"),
    ("fascinating", "pointless"), ("entertaining", "exhausting"), ("impressive", "disappointing"),
    ("clever", "silly"), ("compelling", "unconvincing"), ("fresh", "stale"), ("masterpiece", "mess"),
    ("engaging", "lifeless"), ("satisfying", "frustrating"), ("memorable", "forgettable"), ("powerful", "feeble"),
    ("solid", "flimsy"), ("intelligent", "dumb"), ("original", "derivative"), ("wise", "foolish"),
    ("sweet", "bitter"), ("gorgeous", "hideous"), ("beautifully", "badly"), ("enjoyable", "unpleasant"),
    ("touching", "cloying"), ("moving", "mawkish"), ("remarkable", "mediocre"), ("perfect", "flawed"),
)
SWAP = {a: b for pair in ANTONYMS for a, b in (pair, pair[::-1])}
DEV_FILE = "sst2/dev.tsv"


def make_pairs(examples: list[tuple[str, int]], tokenizers, *, limit: int) -> tuple[list[dict], dict]:
    """Clean/corrupted pairs (module docstring) from SST-2 ``(sentence, label)`` examples, in file
    order, at most ``limit``. -> (pairs, counts of the examples skipped and why). A pair:
    {"index" (row in the file), "clean", "corrupted" (texts), "label", "word", "swapped"}."""
    skipped = {"no sentiment word of the list": 0, "two or more of them": 0, "unequal word pieces": 0}
    pairs = []
    for index, (sentence, label) in enumerate(examples):
        if len(pairs) >= limit:
            break
        words = sentence.split()
        hits = [i for i, w in enumerate(words) if w in SWAP]
        if len(hits) != 1:
            skipped["no sentiment word of the list" if not hits else "two or more of them"] += 1
            continue
        word = words[hits[0]]
        if any(len(t.tokenize(word)) != len(t.tokenize(SWAP[word])) for t in tokenizers):
            skipped["unequal word pieces"] += 1
            continue
        corrupted = " ".join([*words[:hits[0]], SWAP[word], *words[hits[0] + 1:]])
        pairs.append({"index": index, "clean": " ".join(words), "corrupted": corrupted, "label": int(label),
                      "word": word, "swapped": SWAP[word]})
    return pairs, skipped


def logit_difference(outputs, rows):
    """m = z_y − z_{1−y} (b,): the classifier's logits (b, 2), y = rows["label"] (b,)."""
    import jax.numpy as jnp

    z = outputs["logits"]  # (b, 2)
    y = rows["label"]  # (b,)
    return jnp.take_along_axis(z, y[:, None], 1)[:, 0] - jnp.take_along_axis(z, 1 - y[:, None], 1)[:, 0]


def hidden_projection(outputs, rows):
    """m_h = ⟨h_0, h_0^clean − h_0^corrupted⟩ (b,): the first position's final hidden state (b, D)
    on the per-example direction rows["direction"] (b, D)."""
    return (outputs["last_hidden_state"][:, 0] * rows["direction"]).sum(-1)


def measure(model, pairs: list[dict], batch_size: int) -> dict:
    """Per pair: both metrics on the clean and the corrupted sentence, and every head's exact
    patching effect under each (N, L, H) and its attribution estimate under the logit difference."""
    from jattn.sweeps.patching import attribution_patch_heads, patch_heads

    # equal word pieces per pair (make_pairs), so both batches pad alike; patch_heads checks it
    clean, corrupted = model.batch([p["clean"] for p in pairs]), model.batch([p["corrupted"] for p in pairs])
    runs = [model.forward(b, internals=None) for b in (clean, corrupted)]
    h0 = [np.asarray(r.last_hidden_state[:, 0]) for r in runs]  # (N, D) each
    rows = {"label": np.asarray([p["label"] for p in pairs], np.int32), "direction": h0[0] - h0[1]}
    logits = [{"logits": r.logits} for r in runs]
    hidden = [{"last_hidden_state": r.last_hidden_state} for r in runs]
    kw = dict(metric_inputs=rows, per_example=True, batch_size=batch_size)
    return {"clean": np.asarray(logit_difference(logits[0], rows)),
            "corrupted": np.asarray(logit_difference(logits[1], rows)),
            "hidden_clean": np.asarray(hidden_projection(hidden[0], rows)),
            "hidden_corrupted": np.asarray(hidden_projection(hidden[1], rows)),
            "exact": patch_heads(model, clean, corrupted, logit_difference, **kw)["encoder"],
            "hidden": patch_heads(model, clean, corrupted, hidden_projection, **kw)["encoder"],
            "attribution": attribution_patch_heads(model, clean, corrupted, logit_difference, **kw)["encoder"]}


KEYS = ("clean", "corrupted", "hidden_clean", "hidden_corrupted", "exact", "hidden", "attribution")


def pairs_stage(models: tuple[str, ...]):
    def run(ctx) -> dict:
        import jattn
        from experiments import common
        from experiments.patching.pairs import kept_table

        examples = common.dev_examples("sst2")
        tokenizers = [jattn.load(common.classifier(ctx, m, "sst2", 0)).tokenizer for m in models]
        pairs, skipped = make_pairs(examples, tokenizers, limit=ctx.params["pairs"])
        first = pairs[0]
        lines = [*kept_table("SST-2 dev sentences", pairs, skipped), "",
                 f"First pair (row {first['index']}, label {first['label']}): “{first['word']}” → "
                 f"“{first['swapped']}” in “{first['clean']}”."]
        return {"pairs": pairs, "skipped": skipped, "table": "\n".join(lines)}

    return run


def sweep_stage(model: str, pairs_name: str):
    """Per pair (``measure``) with ``model``'s SST-2 classifier (seed 0), in chunks of ``batch``."""
    def run(ctx) -> dict:
        import jattn
        from experiments import common
        from experiments.patching.pairs import in_chunks

        pairs = ctx.result(pairs_name)["pairs"][:ctx.params["pairs"]]
        net, size = jattn.load(common.classifier(ctx, model, "sst2", 0)), ctx.params["batch"]
        joined, seconds = in_chunks(ctx, pairs, size, lambda chunk: measure(net, chunk, size), KEYS)
        return {"model": model, "shape": [net.config.num_layers, net.config.num_heads],
                "labels": [p["label"] for p in pairs], "measured_s": round(seconds, 1),
                **{key: np.round(v, 6).tolist() for key, v in joined.items()}}

    return run
