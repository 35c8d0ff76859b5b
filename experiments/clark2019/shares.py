"""Attention to special tokens and punctuation per segment (Clark et al. 2019, §3, Fig. 2).

Input: Wikipedia paragraphs of GAP split at the sentence boundary closest to the middle into a
segment pair (``jattn.io.readers`` format ``gap``: ``[CLS] A [SEP] B [SEP]``), kept when the pair
fits ``max_length`` tokens, as Clark's 992 Wikipedia segments of ≤ 128 tokens. The roles come
from the tokenizer's special tokens (``jattn.runner.token_classes``): ``cls_token`` is the
[CLS] role, ``sep_token`` the [SEP] role, so MPNet's ``<s>`` counts as [CLS] and each of its
``</s>`` (a pair is ``<s> A </s></s> B </s>``: three) as [SEP].

Per segment s, layer l, head h and class c: share[s, l, h, c] = mean over the segment's real
query rows i of Σ_{j ∈ c} α[l, h, i, j] (``METHODS.md`` §1). Uniform attention gives every row
the share n_c / n (n_c keys of the class among the segment's n tokens): the baseline of
``STATISTICS.md`` §4, per segment, averaged the same way.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jattn.analyses import CLASS_NAMES

PAD_MULTIPLE = 16  # padded lengths: one compile per multiple


def gap_pairs(path: Path, tokenizer, count: int, max_length: int = 128) -> tuple[list[tuple[str, str]], int]:
    """The first ``count`` GAP paragraphs that split into two sentences and fit ``max_length``
    tokens as a pair -> (pairs, paragraphs passed over)."""
    from jattn.io.readers import read

    pairs, passed = [], 0
    for ex in read(path, "gap"):
        if len(pairs) == count:
            break
        if ex.b is None or len(tokenizer(ex.a, ex.b)["input_ids"]) > max_length:
            passed += 1
            continue
        pairs.append((ex.a, ex.b))
    if len(pairs) < count:
        raise ValueError(f"{path}: only {len(pairs)} paragraphs fit as pairs of ≤ {max_length} tokens, "
                         f"{count} asked. Fix: ask for fewer segments")
    return pairs, passed


@jax.jit
def _shares(alpha: jax.Array, token_class: jax.Array) -> tuple[jax.Array, jax.Array]:
    """alpha (L, b, H, n, n), token_class (b, n) -1 on padding -> (share (b, L, H, C), uniform (b, C))."""
    onehot = (token_class[..., None] == jnp.arange(len(CLASS_NAMES))).astype(alpha.dtype)  # (b, n, C)
    real = (token_class >= 0).astype(alpha.dtype)  # (b, n)
    to_class = jnp.einsum("lbhij,bjc->lbhic", alpha, onehot)  # (L, b, H, n, C)
    rows = real.sum(-1)  # (b,)
    share = jnp.einsum("lbhic,bi->blhc", to_class, real) / rows[:, None, None, None]  # (b, L, H, C)
    return share, onehot.sum(1) / rows[:, None]  # (b, L, H, C), (b, C)


def segment_shares(model, pairs: list[tuple[str, str]], batch_size: int = 16) -> dict[str, np.ndarray]:
    """``{"share": (s, L, H, C), "uniform": (s, C)}`` (classes ``CLASS_NAMES``: cls, sep, punct,
    other), segments in the order of ``pairs``."""
    from jattn.runner import token_classes

    s, c = len(pairs), len(CLASS_NAMES)
    L, H = model.config.num_layers, model.config.num_heads
    share, uniform = np.zeros((s, L, H, c), np.float32), np.zeros((s, c), np.float32)
    order = sorted(range(s), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))  # similar lengths together
    for start in range(0, s, batch_size):
        idx = order[start:start + batch_size]
        batch = model.tokenize([pairs[i] for i in idx], max_length=model.config.max_length)
        pad = -(-batch.input_ids.shape[1] // PAD_MULTIPLE) * PAD_MULTIPLE
        batch = model.tokenize([pairs[i] for i in idx], max_length=model.config.max_length, pad_to=pad)
        alpha = model.forward(batch, internals=("weights",)).attentions  # (L, b, H, n, n)
        got, u = _shares(alpha, jnp.asarray(token_classes(model.tokenizer, batch.input_ids, batch.attention_mask)))
        share[idx], uniform[idx] = np.asarray(got), np.asarray(u)
    return {"share": share, "uniform": uniform}


def region(num_layers: int, first: int, last: int) -> list[int]:
    """0-based layers of a model with ``num_layers`` layers at the relative depth of BERT-base's
    1-based layers ``first..last`` of 12 (e.g. 6-10 of 12 -> 5..9; of 6 layers -> 2..4)."""
    lo, hi = -(-first * num_layers // 12), -(-last * num_layers // 12)
    return list(range(lo - 1, hi))


def figure(share: np.ndarray, uniform: np.ndarray, title: str, path: Path) -> Path:
    """Clark's Fig. 2: per layer, each head's mean share to [CLS], [SEP], ". ,", with the layer
    mean and the uniform share."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mean = share.mean(0)  # (L, H, C)
    L, H = mean.shape[:2]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4), sharey=True)
    for ax, c, label in zip(axes, range(3), ("[CLS] role", "[SEP] role", '"." or ","')):
        for l in range(L):
            ax.scatter(np.full(H, l + 1), mean[l, :, c], s=9, color="tab:blue", alpha=0.6)
        ax.plot(np.arange(1, L + 1), mean[:, :, c].mean(1), color="tab:blue", label="layer mean")
        ax.axhline(uniform[:, c].mean(), color="gray", ls="--", label="uniform attention")
        ax.set(title=label, xlabel="layer (1-based)", xticks=range(1, L + 1))
    axes[0].set_ylabel("mean attention share")
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


# ---------------------------------------------------------------- the stage

GAP_DEV = "gap/gap-development.tsv"
ROLES = ("[CLS]", "[SEP]", '"." / ","')  # classes 0, 1, 2 of CLASS_NAMES
CLAIMS = {"sep-middle": (1, 6, 10), "cls-early": (0, 1, 4), "punct-deep": (2, 11, 12)}  # id -> (class, BERT-base
# layers first..last of 12, 1-based: where Clark et al.'s Fig. 2 places the role; its words are experiments/papers.py's)


def stage(model: str):
    """The stage function of ``clark.<model>-shares`` (params: ``segments``)."""

    def run(ctx) -> dict:
        from experiments.clark2019.common import load

        net = load(model)
        pairs, passed = gap_pairs(ctx.data(GAP_DEV), net.tokenizer, ctx.params["segments"])
        got = segment_shares(net, pairs)
        share, uniform = got["share"], got["uniform"]  # (s, L, H, C), (s, C)
        L = share.shape[1]
        tok = net.tokenizer
        roles = f"[CLS] role = {tok.cls_token}, [SEP] role = {tok.sep_token} (the tokenizer's special tokens)"
        claims = []
        for key, (c, first, last) in CLAIMS.items():
            layers = region(L, first, last)
            value = share[:, layers][..., c].mean((1, 2))  # (s,) per segment: mean over the region's heads
            rows = [
                {"index": i, "share": float(v), "uniform": float(u)}
                for i, (v, u) in enumerate(zip(value, uniform[:, c]))
            ]
            claims.append(ctx.claim(
                id=f"clark-{model}-{key}", claim=f"{model}: attention share to {ROLES[c]} in layers "
                f"{layers[0] + 1}-{layers[-1] + 1} (1-based)", unit="share", rows=rows,
                measure={"statistic": "mean", "columns": {"value": "share"}, "ci_method": "bootstrap"},
                baseline={"name": "uniform attention", "columns": {"value": "uniform"}},
                protocol=f"{len(pairs)} GAP development paragraphs as segment pairs of ≤ 128 tokens ({passed} passed "
                         f"over: one sentence or too long); {roles}; layers at the relative depth of BERT-base's "
                         f"{first}-{last}; per segment the mean over those layers' heads and the query rows.",
                **share_tests(share[..., c], value, uniform[:, c])))
        path = ctx.figure(f"{model}_shares.png")
        figure(share, uniform, f"{model}: attention to special tokens and punctuation (Clark Fig. 2), "
               f"{len(pairs)} GAP segment pairs; {roles}", path)
        mean = share.mean((0, 2))  # (L, C)
        table = ["| layer (1-based) | " + " | ".join(f"{r} (uniform {uniform[:, c].mean():.3f})"
                                                     for c, r in enumerate(ROLES)) + " | other |",
                 "|---|---:|---:|---:|---:|"]
        table += [f"| {l + 1} | " + " | ".join(f"{mean[l, c]:.3f}" for c in range(4)) + " |" for l in range(L)]
        return {"claims": claims, "figures": [str(path.relative_to(ctx.out))], "table": "\n".join(table)}

    return run


def share_tests(share_c: np.ndarray, value: np.ndarray, uniform: np.ndarray) -> dict:
    """The note of a share claim: the region's share − uniform attention (paired, segments
    resampled) and the layer where the per-layer mean share peaks. share_c (s, L, H), value and
    uniform (s,)."""
    from experiments.clark2019.common import mean_deltas, note, said

    peak = int(np.argmax(share_c.mean((0, 2))))  # the layer with the largest mean share
    test = mean_deltas(np.asarray(value, np.float64) - np.asarray(uniform, np.float64))[""]  # (s,) per segment
    return note(f"share − uniform {said(test, 'segments')}; the per-layer mean peaks in layer {peak + 1}")
