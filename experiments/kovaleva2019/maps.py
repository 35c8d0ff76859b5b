"""Per dev example, from one forward of a fine-tuned classifier and one of its pretrained base:

- the pattern type (Kovaleva et al. 2019 §4; ``jattn.analyses.patterns`` rules with the given
  thresholds) of every head's map, counted per example, for both models;
- the type the same rules give *uniform* attention over the example's tokens: the baseline, since
  the rules' masses depend on the length alone for a map without structure (a uniform map of n
  tokens has V = 2/n on [CLS]/[SEP] and diagonal share 3/(n − 2), so short sentences look
  "diagonal" or "vertical" with no structure at all);
- the cosine of each head's map before and after fine-tuning (§5, Fig. 5; real tokens only,
  ``jattn.analyses.patterns.map_cosine``), averaged over the heads of each layer.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from jattn.analyses.patterns import TYPES, Thresholds, classify, map_cosine, map_statistics


@partial(jax.jit, static_argnames=("config_a", "config_b", "thresholds"))
def _step(params_a, config_a, params_b, config_b, batch, token_class, thresholds):
    """-> cosine (L, b, H), types of the base and fine-tuned maps (2, L, b, H), type of the uniform
    map (b,), body rows (b,)."""
    from jattn.nn.encoder import forward

    A = forward(params_a, config_a, batch, None, internals=("weights",))[1]["weights"]  # (L, b, H, n, n)
    B = forward(params_b, config_b, batch, None, internals=("weights",))[1]["weights"]  # (L, b, H, n, n)
    real = batch["attention_mask"].astype(A.dtype)  # (b, n)
    n = real.shape[-1]
    # (b, 1, n, n)
    U = jnp.broadcast_to((real / real.sum(-1, keepdims=True))[:, None, None, :], (real.shape[0], 1, n, n))
    stats_u = map_statistics(U, token_class)
    types = jnp.stack([classify(map_statistics(M, token_class), thresholds) for M in (A, B)])  # (2, L, b, H)
    return map_cosine(A, B, batch["attention_mask"]), types, classify(stats_u, thresholds)[:, 0], stats_u["rows"]


def dev_maps(pretrained, finetuned, examples: list[tuple[str, int]], thresholds: Thresholds, *,
             batch_size: int = 32, max_length: int = 128) -> dict:
    """Over (text, label) ``examples``: ``cosine`` (N, L) mean over heads, ``cosine_heads`` (L, H)
    mean over examples, ``types`` {"pretrained", "finetuned"} (N, 5) counts of maps per type,
    ``share_heads`` (L, H, 5) share of each type per head (fine-tuned), ``uniform`` (N,) type of
    the uniform map, ``rows`` (N,) body rows (0: no pattern statistic)."""
    from jattn.runner import token_classes
    from jattn.sweeps.disable import batches

    c = finetuned.config
    if (pretrained.config.num_layers, pretrained.config.num_heads) != (c.num_layers, c.num_heads):
        raise ValueError("the pretrained and the fine-tuned model must have the same layers and heads")
    N, L, H, K = len(examples), c.num_layers, c.num_heads, len(TYPES)
    cosine, types = np.zeros((N, L)), {"pretrained": np.zeros((N, K)), "finetuned": np.zeros((N, K))}
    cos_heads, share = np.zeros((L, H)), np.zeros((L, H, K))
    uniform, rows = np.zeros(N, np.int64), np.zeros(N, np.int64)
    for batch, idx in batches(finetuned, examples, batch_size, max_length):
        cls = token_classes(finetuned.tokenizer, np.asarray(batch["input_ids"]), np.asarray(batch["attention_mask"]))
        cos, t, u, r = _step(pretrained.params, pretrained.config, finetuned.params, c, batch,
                             jnp.asarray(cls), thresholds)
        m = len(idx)
        cos, t = np.asarray(cos, np.float64)[:, :m], np.asarray(t)[:, :, :m]  # (L, m, H), (2, L, m, H)
        cosine[idx] = cos.mean(-1).T  # (m, L)
        cos_heads += cos.sum(1)
        onehot = np.eye(K)[t]  # (2, L, m, H, K)
        types["pretrained"][idx] = onehot[0].sum((0, 2))  # (m, K)
        types["finetuned"][idx] = onehot[1].sum((0, 2))
        share += onehot[1].sum(1)  # (L, H, K)
        uniform[idx], rows[idx] = np.asarray(u)[:m], np.asarray(r)[:m]
    return {"cosine": cosine, "cosine_heads": cos_heads / N, "types": types, "share_heads": share / N,
            "uniform": uniform, "rows": rows}
