"""The induction studies' shared parts (``study.py``: LMs trained with repeated segments;
``natural.py``: on natural text only): the trained models, the repeated-token sequences and the
heads' scores on them."""

from __future__ import annotations

import numpy as np

from jattn.reproduce.pipeline import Context
from experiments.common import COMMITTED

EVAL_SEED, SELECT_SEED = 20_000, 30_000  # the random draws of the evaluation and selection sequences


def model_folder(ctx: Context, name: str, kind: str, seed: int):
    """The trained model ``name``: full profile, its copy committed in ``checkpoints/`` (made by its
    recipe), else the artefact made in jattn's cache (``jattn models make``); quick, a few steps
    trained in the work folder (``ctx.params["train"]``, attention-only for ``kind`` "attn-only")."""
    if ctx.profile.name == "full":
        from jattn.artefacts.making import make
        from jattn.io.artefacts import DONE

        committed = COMMITTED / name
        return committed if (committed / DONE).is_file() else make(name, progress=ctx.progress)
    from jattn.artefacts.induction import InductionLMConfig, train_lm

    out = ctx.work_root / "models" / name
    if not (out / "DONE").is_file():
        c = InductionLMConfig(attention_only=kind == "attn-only", seed=seed, **ctx.params["train"])
        train_lm(out, ctx.work_root / "models" / f"{name}-work", c, data_dir=ctx.data_dir, progress=False)
    return out


def sequences(vocab: int, bos: int, length: int, count: int, seed: int) -> dict[str, np.ndarray]:
    """"A A" (repeated), "A B" (control: a fresh second half) and "B A" (broken: a fresh first
    copy), each (count, 1 + 2T) with BOS first."""
    from jattn.analyses.lm_heads import repeated_tokens

    repeated = repeated_tokens(vocab, length, count, seed=seed, first=bos)  # (N, 1 + 2T)
    fresh = repeated_tokens(vocab, length, count, seed=seed + 1)[:, :length]  # (N, T)
    control, broken = repeated.copy(), repeated.copy()
    control[:, 1 + length:] = fresh
    broken[:, 1: 1 + length] = fresh
    return {"repeated": repeated, "control": control, "broken": broken}


def second_copy_logprob(out, rows):
    """m: the mean log-probability of the next token over the second copy's tokens 2..T (``rows``:
    ``target`` (b, n) the next token at each position, ``used`` (b, n) the positions counted). -> (b,)"""
    import jax
    import jax.numpy as jnp

    logp = jax.nn.log_softmax(out["lm_logits"].astype(jnp.float32), -1)  # (b, n, V)
    picked = jnp.take_along_axis(logp, rows["target"][..., None], -1)[..., 0]  # (b, n)
    return (picked * rows["used"]).sum(-1) / rows["used"].sum(-1)  # (b,)


def scores(model, ids: np.ndarray, length: int, batch: int) -> dict[str, np.ndarray]:
    from jattn.analyses.lm_heads import head_scores

    out = []
    for start in range(0, len(ids), batch):
        rows = ids[start:start + batch]  # (b, n)
        weights = model.forward({"input_ids": rows, "attention_mask": np.ones_like(rows)},
                                internals=("weights",), heads=()).attentions  # (L, b, H, n, n); no logits
        out.append({k: np.asarray(v) for k, v in head_scores(weights, length, offset=1).items()})  # each (b, L, H)
    return {k: np.concatenate([o[k] for o in out]) for k in out[0]}
