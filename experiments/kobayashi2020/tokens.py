"""Token-level measurements of the Kobayashi et al. study: one ``jattn.norms`` pass over segments.

Per segment (``[CLS] A [SEP] B [SEP]``, ≤ 128 tokens; on a model whose specials are ``<s>``/``</s>``
those take the [CLS]/[SEP] roles, as ``jattn.runner.token_classes`` assigns them), for
each token class c of ``jattn.analyses.CLASS_NAMES`` ([CLS], [SEP], "."/",", other):

- ``weight_<c>``: Σ_{j∈c} α[h,i,j], averaged over real query rows i, heads h and layers
  (Kobayashi et al. 2020, §4.2, weight-based);
- ``norm_<c>``: Σ_{j∈c} ‖α[h,i,j] f_h(x_j)‖ / Σ_j ‖α[h,i,j] f_h(x_j)‖, averaged the same way (the
  norm-based analysis as a share, so that it is comparable with α, whose rows sum to 1);
- ``uniform_<c>``: |c| / n, the share uniform attention over the n real tokens gives (the same
  for every row, head and layer);
- ``mixing_<k>``: the 2021 mixing ratios (``jattn.analyses.norms.residual_norms``: Attn-W,
  Attn-N, AttnRes-W, AttnRes-N, AttnResLn-N) averaged over real tokens and layers, unmasked input.

Per token occurrence: its vocabulary id and ‖f(x)‖ averaged over heads and layers (2020, §4.3;
the authors' per-occurrence statistic, ``jattn.analyses.norm_occurrences``).
Per layer (for the figure): the class shares averaged over segments, and the mean ‖f(x)‖ and
mean received α of each class's tokens.

The pass runs in chunks of segments whose results are saved in a work folder with a fingerprint
of what they depend on, so a killed run continues from the last finished chunk.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from jattn.analyses import CLASS_NAMES
from jattn.analyses.norm_stats import MIXING

CHUNK = 64  # segments per checkpoint


def batch_measures(norms: dict, classes: np.ndarray, mask: np.ndarray) -> dict:
    """One batch of ``jattn.norms(..., residual=True)["encoder"]`` -> per-row measures.

    classes (b, n) token class (-1 on padding), mask (b, n). Returns ``weight``, ``norm``,
    ``uniform`` (b, C); ``weight_layer``, ``norm_layer`` (L, b, C); ``fnorm`` (b, n) ‖f(x)‖ mean
    over layers and heads; ``fnorm_class``, ``received_class`` (L, b, C) sums over the class's
    tokens (divide by ``count``); ``count`` (b, C); ``mixing_<k>`` (b,)."""
    real = (np.asarray(mask) > 0).astype(np.float64)  # (b, n)
    rows = np.maximum(real.sum(-1), 1.0)  # (b,)
    onehot = (np.asarray(classes)[..., None] == np.arange(len(CLASS_NAMES))).astype(np.float64)  # (b, k, C)
    w = np.asarray(norms["weights"], np.float32)  # (L, b, H, q, k), padding 0
    wn = np.asarray(norms["weighted_norm"], np.float32)  # (L, b, H, q, k)
    by_class = onehot[None, :, None].astype(np.float32)  # (1, b, 1, k, C)
    to_w = np.matmul(w, by_class).mean(2, dtype=np.float64)  # (L, b, q, C) head mean
    total = wn.sum(-1, dtype=np.float64)  # (L, b, H, q)
    share = np.matmul(wn, by_class) / np.where(total > 0, total, 1.0)[..., None]  # (L, b, H, q, C)
    to_n = share.mean(2)  # (L, b, q, C)
    weight_layer = np.einsum("lbqc,bq->lbc", to_w, real) / rows[:, None]  # (L, b, C)
    norm_layer = np.einsum("lbqc,bq->lbc", to_n, real) / rows[:, None]  # (L, b, C)
    count = onehot.sum(1)  # (b, C)
    f = np.asarray(norms["f_norm"], np.float64)  # (L, b, H, k)
    received = w.sum(3, dtype=np.float64) / rows[None, :, None, None]  # (L, b, H, k) row-mean α[:, j]
    out = {"weight": weight_layer.mean(0), "norm": norm_layer.mean(0), "uniform": count / rows[:, None],
           "weight_layer": weight_layer, "norm_layer": norm_layer, "count": count,
           "fnorm": f.mean((0, 2)),  # (b, n)
           "fnorm_class": np.einsum("lbk,bkc->lbc", f.mean(2), onehot),  # (L, b, C)
           "received_class": np.einsum("lbk,bkc->lbc", received.mean(2), onehot)}  # (L, b, C)
    for k in MIXING:
        out[f"mixing_{k}"] = (np.asarray(norms[f"mixing_{k}"], np.float64).mean(0) * real).sum(-1) / rows  # (b,)
    return out


def _chunk(model, segments: list, start: int, batch_size: int, max_length: int) -> dict:
    """Measures of ``segments`` (corpus indices from ``start``): rows, occurrences, layer sums."""
    import jattn
    from jattn.runner import model_batches, token_classes

    L, C = model.config.num_layers, len(CLASS_NAMES)
    rows, occ = {}, {"segment": [], "id": [], "fnorm": []}
    sums = {k: np.zeros((L, C)) for k in ("weight_layer", "norm_layer", "fnorm_class", "received_class")}
    counts = np.zeros(C)
    for inputs, idx in model_batches(model, segments, batch_size, max_length, truncate=True):
        norms = jattn.norms(model, inputs, residual=True)["encoder"]
        mask = inputs["attention_mask"]
        m = batch_measures(norms, token_classes(model.tokenizer, inputs["input_ids"], mask), mask)
        for r, k in enumerate(int(i) for i in idx):
            row = {"index": start + k, "tokens": int(mask[r].sum())}
            for c, name in enumerate(CLASS_NAMES):
                row |= {f"weight_{name}": float(m["weight"][r, c]), f"norm_{name}": float(m["norm"][r, c]),
                        f"uniform_{name}": float(m["uniform"][r, c])}
            rows[start + k] = row | {f"mixing_{x}": float(m[f"mixing_{x}"][r]) for x in MIXING}
            real = mask[r] > 0
            occ["segment"] += [start + k] * int(real.sum())
            occ["id"] += inputs["input_ids"][r][real].tolist()
            occ["fnorm"] += m["fnorm"][r][real].tolist()
        n = len(idx)
        for key in ("weight_layer", "norm_layer"):
            sums[key] += m[key][:, :n].sum(1)
        for key in ("fnorm_class", "received_class"):
            sums[key] += m[key][:, :n].sum(1)
        counts += m["count"][:n].sum(0)
    return {"rows": [rows[i] for i in sorted(rows)], "occurrences": occ, "segments": len(rows),
            "sums": {k: v.tolist() for k, v in sums.items()}, "class_counts": counts.tolist()}


def fingerprint(**what) -> str:
    """sha256 of what a chunk's numbers depend on (settings, this module's source)."""
    blob = json.dumps(what, sort_keys=True, default=str) + Path(__file__).read_text()
    return hashlib.sha256(blob.encode()).hexdigest()


def measure(model, segments: list, folder: Path, *, batch_size: int = 16, max_length: int = 128,
            key: str = "", progress: bool = False) -> dict:
    """The pass over ``segments`` in chunks of ``CHUNK``, each saved to ``folder`` (reused when
    ``fingerprint`` matches ``key`` + this module). -> {"rows": per segment, "occurrences":
    {"segment", "id", "fnorm"} lists, "layers": per-layer means (L, C) of ``weight``, ``norm``
    (over segments), ``fnorm``, ``received`` (over the class's tokens), "segments"}."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = folder / "fingerprint"
    fp = fingerprint(key=key, n=len(segments), batch_size=batch_size, max_length=max_length)
    if not stamp.is_file() or stamp.read_text() != fp:
        for old in folder.glob("chunk-*.json"):
            old.unlink()
        stamp.write_text(fp)
    parts = []
    for start in range(0, len(segments), CHUNK):
        path = folder / f"chunk-{start:06d}.json"
        if not path.is_file():
            part = _chunk(model, segments[start:start + CHUNK], start, batch_size, max_length)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(part))
            tmp.replace(path)
            if progress:
                print(f"    segments {start + part['segments']}/{len(segments)}", flush=True)
        parts.append(json.loads(path.read_text()))
    n = sum(p["segments"] for p in parts)
    sums = {k: sum(np.asarray(p["sums"][k]) for p in parts) for k in parts[0]["sums"]}
    counts = sum(np.asarray(p["class_counts"]) for p in parts)  # (C,)
    occ = {k: [v for p in parts for v in p["occurrences"][k]] for k in ("segment", "id", "fnorm")}
    return {"rows": [r for p in parts for r in p["rows"]], "occurrences": occ, "segments": n,
            "layers": {"weight": sums["weight_layer"] / n, "norm": sums["norm_layer"] / n,
                       "fnorm": sums["fnorm_class"] / np.maximum(counts, 1), "received":
                       sums["received_class"] / np.maximum(counts, 1)}}


def rank_table(model, reference_tokenizer, ranks: np.ndarray) -> tuple[np.ndarray, int]:
    """Frequency rank per id of ``model``'s vocabulary, from ``ranks`` over ``reference_tokenizer``'s
    ids (``read_ranks``: NaN where unranked): each token string looked up in the reference
    vocabulary; special tokens not found there by string are matched by role (cls, sep, pad, unk,
    mask). -> (ranks (V,), NaN where unranked; how many of the V ids found a reference id)."""
    vocab, ref = model.tokenizer.get_vocab(), reference_tokenizer.get_vocab()
    roles = {getattr(model.tokenizer, f"{r}_token"): getattr(reference_tokenizer, f"{r}_token")
             for r in ("cls", "sep", "pad", "unk", "mask")}
    out = np.full(max(model.config.vocab_size, max(vocab.values()) + 1), np.nan)
    mapped = 0
    for token, i in vocab.items():
        j = ref.get(token, ref.get(roles.get(token, ""), None))
        if j is not None:
            mapped += 1
            out[i] = ranks[j]
    return out, mapped
