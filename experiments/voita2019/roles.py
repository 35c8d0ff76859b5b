"""The Voita stages that characterise the unpruned model's encoder heads (Voita et al. 2019, §4):
a dependency parse of the test sources, then per head its role (``jattn.analyses.roles``),
confidence (``jattn.analyses.confidence``), LRP relevance (``jattn.analyses.lrp``; checked for
conservation layer by layer) and the gradient × input baseline LRP is compared with.

LRP covers the encoder heads only: the decoder is one block on top of the encoder in
``lrp.head_relevance`` (its own heads are not decomposed), so no decoder or cross-attention head
gets a relevance and no claim is made about them.

Per-sentence values (confidence; LRP and |gradient × input|, each layer's heads scaled to sum to 1)
of every encoder head are the rows of the claims built in ``experiments.voita2019.claims``; the role counts are
corpus totals (a table and a figure).
"""

from __future__ import annotations

import time

import numpy as np

from jattn.reproduce.pipeline import Context
from experiments.common import TEST, read_multi30k
from experiments.voita2019 import runs as V


def parse_stage(ctx: Context) -> dict:
    """The test sources (as the model reads them) parsed into ``predictions/voita/source.conllu``."""
    from jattn.io.parse import parse_to_conllu

    s = V.Setup.load(ctx)
    sources = read_multi30k(ctx, TEST, "fr", s.model)[: len(s.test_src)]
    path = V.translations_file(ctx, "source").with_suffix(".conllu")
    start = time.perf_counter()
    meta = parse_to_conllu(sources, path)
    return {"parse": ctx.relative(path), "sentences": len(sources), **meta,
            "seconds": round(time.perf_counter() - start, 1)}


def _labelled_pairs(ctx: Context, s: V.Setup) -> tuple[list, dict]:
    """(source, reference) ``Example``s labelled by ``roles.token_labels``, and counts of what the
    labels cover."""
    from jattn.analyses import roles
    from jattn.io.labels import read_conllu_trees
    from jattn.io.parallel import encode
    from jattn.io.readers import Example

    tok, p = s.model.tokenizer, ctx.params
    sources = read_multi30k(ctx, TEST, "fr", s.model)[: len(s.test_src)]
    trees = list(read_conllu_trees(V.repository_path(ctx, ctx.result("voita.parse")["parse"])))
    if len(trees) != len(sources):
        raise ValueError(f"the parse has {len(trees)} sentences, the test set {len(sources)}: rerun voita.parse")
    train = encode(tok, read_multi30k(ctx, "train", "fr", s.model)[: p["train_pairs"] or None], 10**6)
    rank = roles.frequency_rank([x[:-1] for x in train], s.model.config.vocab_size)
    examples, mapped, rare = [], 0, 0
    for k, (text, ids, tree) in enumerate(zip(sources, s.test_src, trees)):
        words = roles.token_words(tok, ids, text, tree.words)
        labels = roles.token_labels(words, tree.heads, tree.relations, ids, rank, p["rare_top"])
        mapped += words is not None
        rare += int(labels["rarest"].any())
        examples.append(Example(text, s.test_refs[k], source=f"{TEST}:{k + 1}", labels=labels))
    return examples, {"sentences": len(sources), "mapped_to_tokens": mapped, "rare_word_sentences": rare}


def _relevance(s: V.Setup, pairs: list, progress: bool) -> dict:
    """Per test pair: LRP relevance, gradient × input and confidence of every encoder head, and
    LRP's conservation (Σ R at each layer's input against the number of explained predictions)."""
    import dataclasses

    import jax
    import jax.numpy as jnp
    from tqdm.auto import tqdm

    from jattn.analyses import confidence, lrp
    from jattn.nn import seq2seq
    from jattn.sweeps.importance import translation_batches

    c, n = s.model.config, len(pairs)
    L, H = c.encoder_layers, c.encoder_heads
    out = {k: np.zeros((n, L, H)) for k in ("lrp", "gradient_x_input", "confidence")}
    error, residual = np.zeros((n, L)), np.zeros((n, L))

    @jax.jit
    def encoder_confidence(params, batch):
        _, internals = seq2seq.forward(params, c, batch, internals=("weights",))
        rows = (batch["attention_mask"] > 0) & (batch["input_ids"] != c.eos_token_id)  # (b, s) real, not EOS
        return jnp.moveaxis(confidence.per_example(internals["encoder"]["weights"], rows), 1, 0)  # (b, L, H)

    bar = tqdm(total=n, unit="pair", desc="LRP", disable=not progress, dynamic_ncols=True)
    for b, idx in translation_batches(s.model, pairs, 8, c.max_length):
        arrays = {k: jnp.asarray(v) for k, v in dataclasses.asdict(b).items()}
        batch = {"input_ids": arrays["input_ids"], "attention_mask": arrays["attention_mask"],
                 "decoder_input_ids": arrays["decoder_input_ids"], "decoder_attention_mask": arrays["label_mask"],
                 "target_mask": arrays["label_mask"]}
        r = jax.tree.map(np.asarray, lrp.head_relevance(s.model.params, c, batch))
        k = len(idx)
        total = b.label_mask.sum(1)[:k, None].astype(np.float64)  # (k, 1) one unit per explained prediction
        out["lrp"][idx] = r["heads"][:k]
        error[idx] = np.abs(r["layer_input"][:k] / total - 1.0)
        residual[idx] = r["residual"][:k] / total
        out["gradient_x_input"][idx] = np.asarray(lrp.head_gradient_x_input(s.model.params, c, batch))[:k]
        out["confidence"][idx] = np.asarray(encoder_confidence(s.model.params, batch))[:k]
        bar.update(k)
    bar.close()
    return {**out, "conservation_error": error, "residual_share": residual}


def roles_stage(ctx: Context) -> dict:
    from jattn.analyses import roles
    from jattn.analyses.confidence import HeadConfidence
    from jattn.runner import run_corpus

    s = V.Setup.load(ctx)
    examples, coverage = _labelled_pairs(ctx, s)
    start = time.perf_counter()
    method = roles.TokenRoles(ctx.params["min_relation_count"])
    run = run_corpus(s.model, examples, [method, HeadConfidence()], batch_size=32, max_length=s.model.config.max_length,
                     progress=ctx.progress)
    found = method.roles(run.statistics)
    counted = time.perf_counter() - start
    per_pair = _relevance(s, [(e.a, e.b) for e in examples], ctx.progress)
    per_head = {"lrp": _layer_normalised(per_pair["lrp"]),
                "gradient_x_input": _layer_normalised(np.abs(per_pair["gradient_x_input"])),
                "confidence": per_pair["confidence"]}  # (n, L, H) each
    rows = [{"index": i, **{k: np.round(v[i].ravel(), 7).tolist() for k, v in per_head.items()}}
            for i in range(len(examples))]
    table = lambda a: np.asarray(a).tolist()  # noqa: E731
    return {
        **coverage, "relations": list(roles.RELATIONS), "min_relation_count": ctx.params["min_relation_count"],
        "relation_counts": table(run.statistics["encoder_roles_total"].value),
        "roles": table(found["role"]), "relation": table(found["relation"]), "margin": table(found["margin"]),
        "previous": table(found["prev"]), "next": table(found["next"]), "rare": table(found["rare"]),
        "confidence": {k: table(run.statistics[f"{k}_confidence"].value) for k in ("encoder", "decoder", "cross")},
        "lrp": table(per_head["lrp"].mean(0)), "gradient_x_input": table(per_head["gradient_x_input"].mean(0)),
        "lrp_conservation_error": table(per_pair["conservation_error"].max(0)),  # (L,) worst pair per layer
        "lrp_residual_share": table(per_pair["residual_share"].mean(0)),
        "rows": rows,
        "seconds": {"roles_confidence": round(counted, 1), "lrp": round(time.perf_counter() - start - counted, 1)},
    }


def _layer_normalised(x: np.ndarray) -> np.ndarray:
    """(n, L, H) per example and layer scaled to sum to 1 (a layer with no relevance stays 0)."""
    total = x.sum(-1, keepdims=True)
    return np.divide(x, total, out=np.zeros_like(x), where=total > 0)
