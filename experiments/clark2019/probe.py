"""The attention probe (Clark et al. 2019, §5, Table 3) on the syntax stage's feature shards.

``jattn.analyses.probe`` defines the probes ("attn": a weight per map; "attn+emb": weights from
the two words' embeddings; "dist+emb": the baseline on signed distances). Each is trained on the
selection split's sentences (EWT train), early-stopped on the first dev sentences
(dev UAS after every epoch, training ends after ``patience`` epochs without a gain, the best
epoch kept) and scored on the other dev sentences; right-branching needs no training. Embeddings are
the model's own input embeddings averaged over a word's subwords (Clark used GloVe).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

KINDS = {"attn": "attn", "attn+emb": "attn_emb", "dist+emb": "dist_emb"}  # probe -> column
def predictions(folder: Path, params: dict | None = None, kind: str = "") -> dict:
    """Per scored word (real, not punctuation) of the shards in ``folder``, in the fixed order of
    ``jattn.analyses.probe.batches``: {"gold", "pred"} (0 = ROOT, else the 1-based head) of the
    probe ``params`` of ``kind``, or of right-branching (each word's head the next word, the
    last word's ROOT) when ``params`` is None, and "sentence" (the word's sentence, numbered in
    that order: the unit the intervals resample)."""
    import jax

    from jattn.analyses import probe

    predict = jax.jit(lambda p, b: probe.scores(p, kind, b).argmax(-1)) if params is not None else None
    gold, pred, sentence, seen = [], [], [], 0
    for b in probe.batches(folder, 64):
        if predict is None:
            pos = np.arange(1, b["mask"].shape[1] + 1)[None]  # (1, W) 1-based
            p = np.where(pos < b["mask"].sum(1, keepdims=True), pos + 1, 0)  # (B, W)
        else:
            p = np.asarray(predict(params, {k: b[k] for k in ("pair", "root", "emb", "mask", "heads")}))  # (B, W)
        gold.append(b["heads"][b["score"]])
        pred.append(p[b["score"]])
        rows = seen + np.arange(len(b["score"]))[:, None]  # (B, 1) sentence numbers
        sentence.append(np.broadcast_to(rows, b["score"].shape)[b["score"]])
        seen += len(b["score"])
    return {"gold": np.concatenate(gold).astype(int), "pred": np.concatenate(pred).astype(int),
            "sentence": np.concatenate(sentence).astype(int)}


def stage(model: str):
    """The stage function of ``clark.<model>-probe`` (params: ``probe_epochs``, ``patience``);
    reads the shards the stage ``clark.<model>-syntax`` wrote."""

    def run(ctx) -> dict:
        from jattn.analyses import probe
        from experiments.clark2019.common import mean_deltas, note, rate, said

        syntax = ctx.result(f"clark.{model}-syntax")
        shards = {k: Path(v) for k, v in syntax["shards"].items()}
        for name, folder in shards.items():
            if not any(folder.glob("shard_*.npz")):
                raise FileNotFoundError(f"{folder}: the {name} feature shards of clark.{model}-syntax are gone. Fix: "
                                        f"rerun it: jattn reproduce clark --force clark.{model}-syntax")
        p, history, cols = ctx.params, {}, {}
        for kind, col in KINDS.items():
            params, history[kind] = probe.train(kind, shards["select"], shards["dev_a"], epochs=p["probe_epochs"],
                                                learning_rate=p["probe_lr"], patience=p["patience"],
                                                progress=ctx.progress)
            got = predictions(shards["dev_b"], params, kind)
            cols[col], gold, sentence = got["pred"], got["gold"], got["sentence"]
        cols["right_branching"] = predictions(shards["dev_b"])["pred"]
        rows = [{"index": i, "sentence": int(sentence[i]), "gold": int(g), **{c: int(v[i]) for c, v in cols.items()}}
                for i, g in enumerate(gold)]
        protocol = (
            f"trained on {syntax['sentences']['select']} EWT train sentences, Adam {p['probe_lr']} "
            "(Clark's code: 0.002; raised so that the probes converge within the budget), batch 32, at most "
            f"{p['probe_epochs']} epochs, early stopping (patience {p['patience']}) on the dev UAS of "
            f"{syntax['sentences']['dev_a']} EWT dev sentences; UAS on the other {syntax['sentences']['dev_b']}, "
            "punctuation excluded; the model's input embeddings for GloVe (Clark: PTB, GloVe)."
        )
        claims = []
        for kind, base, base_name in (("attn+emb", "dist_emb", "distances + embeddings probe"),
                                      ("attn", "right_branching", "right-branching")):
            right = cols[KINDS[kind]] == gold  # (N,) per word
            test, floor = (mean_deltas(right.astype(float) - (cols[other] == gold), sentence)[""]
                           for other in (base, "right_branching"))
            claims.append(ctx.claim(
                id=f"clark-{model}-probe-{KINDS[kind].replace('_', '-')}", claim=f"{model}: {kind} probe UAS",
                unit="UAS", rows=rows, protocol=protocol,
                measure={"statistic": "accuracy", "columns": {"gold": "gold", "pred": KINDS[kind]},
                         "ci_method": "bootstrap", "cluster": "sentence"},
                baseline={"name": base_name, "columns": {"gold": "gold", "pred": base}, "cluster": "sentence"},
                **note(f"{kind} − {base_name} {said(test, 'sentences')}"
                         + (f"; − right-branching {said(floor, 'sentences')}" if base != "right_branching" else "")
                         + f"; {_stopped(history[kind], p)}")))
        lines = ["| probe | epochs run | stopped | best stopping-set UAS | held-out UAS |", "|---|---:|---|---:|---:|"]
        for kind, col in KINDS.items():
            best = max(h["dev_uas"] for h in history[kind]) / 100
            lines.append(f"| {kind} | {len(history[kind])} | {_stopped(history[kind], p)} | {best:.3f} | "
                         f"{rate(rows, col):.3f} |")
        lines.append(f"| right-branching | – | – | – | {rate(rows, 'right_branching'):.3f} |")
        return {"claims": claims, "table": "\n".join(lines), "history": history}

    return run


def _stopped(history: list[dict], params: dict) -> str:
    """Whether training converged by the early-stopping rule or hit the epoch cap still improving."""
    uas = [h["dev_uas"] for h in history]
    best = uas.index(max(uas))  # the first best epoch, as probe.train keeps it
    if len(uas) - 1 - best >= params["patience"]:
        return f"converged (no gain in the last {params['patience']} of {len(uas)} epochs)"
    return f"hit the cap of {len(uas)} epochs still improving (not converged)"
