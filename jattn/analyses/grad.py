"""Gradient of a loss w.r.t. the attention weights, per token class (Clark et al. 2019, Fig. 3).

grad_to_c[l, h] = mean over sequences of the mean over real rows i of Σ_{j ∈ c} |∂L_s/∂α[h,i,j]|,
c ∈ {[CLS], [SEP], punctuation, other}. ∂L/∂α is the gradient w.r.t. a zero additive
perturbation of α (``Interventions.weights_delta``). L_s is the loss of
sequence s; the batch loss is Σ_s L_s, so one backward pass gives every sequence's own gradient.

Loss: the masked-LM loss for a checkpoint with an MLM head (``jattn.nn.losses.mask_tokens`` /
``mlm_loss``, shared with head importance: 15% of the real non-special tokens of each sequence,
at least one, replaced by [MASK]; L_s = mean cross-entropy over them; masked positions drawn
with a generator seeded by (seed, corpus index), so the result does not depend on batching),
or any differentiable per-sequence loss ``loss(params, config, outputs, batch) -> (b,)``.
Key classes are those of the input the model sees (a masked "." counts as other).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp

from jattn.nn.interventions import Interventions
from jattn.nn.losses import mask_tokens, mlm_loss
from jattn.nn.token_classes import CLASS_NAMES
from jattn.runner.protocol import HostBatch, Method, Statistic, StepContext
from jattn.analyses.base import ratio, segment_mean
from jattn.analyses.registry import register


@dataclasses.dataclass(frozen=True)
class AttentionGradient(Method):
    """Σ_{j ∈ class} |∂L/∂α[h,i,j]|, averaged over real rows then sequences, per (l, h)."""

    model: dataclasses.InitVar[object]
    loss: Callable | None = None
    _: dataclasses.KW_ONLY
    mask_rate: float = 0.15
    seed: int = 0
    mask_token_id: int = dataclasses.field(init=False)
    name = "grad"
    remat = True  # the gradient keeps one layer's activations at a time (``jattn.nn.engine.layer_loop``): exact

    def __post_init__(self, model):
        if not hasattr(model.config, "with_mlm_head"):
            raise ValueError("grad reads an encoder's attention gradients (Clark et al. 2019); this is a translation "
                             "model. Fix: run grad on an encoder, or importance for a translation model's heads")
        if self.loss is None and not model.config.with_mlm_head:
            raise ValueError(f"{model.source or 'this model'} has no masked-LM head, so the default "
                             "masked-LM loss is unavailable. Fix: load a *ForMaskedLM checkpoint, or "
                             "pass loss=fn(params, config, outputs, batch) -> (b,) per-sequence losses")
        object.__setattr__(self, "mask_token_id", model.tokenizer.mask_token_id)

    def prepare(self, batch: HostBatch) -> dict:
        if self.loss is not None:
            return {}
        return mask_tokens(batch, self.mask_token_id, self.mask_rate, self.seed)

    def reduce(self, ctx: StepContext) -> dict:
        f = ctx.features
        overrides = {"input_ids": f["input_ids"]} if self.loss is None else {}
        token_class = f.get("token_class", ctx.batch["token_class"])  # (b, n)
        used = ctx.batch["example"] >= 0  # (b,)

        def total_loss(delta):
            outputs, _ = ctx.forward(interventions=Interventions(weights_delta=delta), internals=None,
                                     remat=self.remat, **overrides)
            per_seq = (mlm_loss(ctx.params, ctx.config, outputs, f) if self.loss is None
                       else self.loss(ctx.params, ctx.config, outputs, ctx.batch))  # (b,)
            return jnp.where(used, per_seq, 0.0).sum()

        delta = jnp.zeros_like(ctx.internals["weights"])  # (L, b, H, n, n)
        g = jnp.abs(jax.grad(total_loss)(delta))  # (L, b, H, n, n) |∂L/∂α|
        real = ctx.batch["attention_mask"] > 0  # (b, n)
        out = {}
        for c, name in enumerate(CLASS_NAMES):
            to_c = jnp.einsum("lbhij,bj->lbhi", g, (token_class == c).astype(g.dtype))  # (L, b, H, n)
            out[f"grad_to_{name}"], out[f"grad_to_{name}_n"] = segment_mean(to_c, real)
        return out

    def finalize(self, totals, meta):
        loss = "masked-LM loss (15% masked)" if self.loss is None else "the given loss"
        return {f"grad_to_{c}": Statistic(ratio(totals, f"grad_to_{c}"),
                                          f"(L, H) Σ over {c} keys of |∂L/∂α|, mean over real rows then "
                                          f"sequences; L = {loss} (Clark et al. 2019, Fig. 3)")
                for c in CLASS_NAMES}


register("grad", "|dL/d attention| per key class (masked-LM loss; needs an MLM head; Clark et al. 2019)",
         lambda model, options: AttentionGradient(model))
