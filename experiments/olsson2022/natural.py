"""Induction heads where the finding can fail: the induction study's claims on small language models
trained on natural text only (Olsson et al. 2022; Elhage et al. 2021).

Why: the study ``induction`` (``experiments.olsson2022.study``) reads LMs trained half the time on
repeated random segments, so their drop on repeated random tokens is the training objective; and its
random-head baseline mixed layer-0 heads (which cannot match a prefix) into the pool of the induction
head's rivals. Here the LMs (``induction-natural-attn-only[-s1..-s4]``, ``induction-natural-gpt2[-s1..-s4]``,
``jattn.artefacts.induction``: the same 2 layers x 8 heads, d 128; context 256; 3,000 steps) never see
a planted repeat: every training sequence is a window of English running text (Multi30k captions,
LitBank novels, GAP's Wikipedia paragraphs, the EWT web documents). They are scored, as in ``induction``,
on repeated random tokens ("A A"), with heads named on selection sequences and measured on separate
evaluation sequences (``lms.sequences``, ``lms.SELECT_SEED``, ``lms.EVAL_SEED``).

Per model (stage ``induction-natural.<kind>-s<seed>``): I = the head of layers ≥ 1 with the largest
mean induction score on the selection set, P = the head of the layers below I's with the largest mean
previous-token score; the induction heads R = I and every head of layers ≥ 1 whose selection score is
at least half of I's. Path patching (``jattn.sweeps.path_patching``): every sender's clean "B A" output
reaches the keys of all heads of R in the "A A" run; the metric m is the second copy's mean next-token
log-probability (``lms.second_copy_logprob``); the whole in-context effect on m is m("B A") − m("A A")
per sequence (everything the first copy gives the second). The model's training curve (in-context drop
on repeated tokens and the validation loss every 100 steps, ``training.json``) is kept with the result.

Claims (stage ``induction-natural.<kind>``; rows one evaluation sequence of one training seed; decision
rules ``experiments.olsson2022.natural_verdicts``: the paired difference measure − baseline, per seed the
mean over sequences, Student-t interval over the 5 seeds, directional):

- icl: the in-context drop (first copy's loss − second copy's) above the same drop on "A B";
- induction-head: I's induction score above the mean of the other heads of its layer;
- induction-head-control: I's induction score on "A A" above its score at the same positions of "A B"
  (the same head on the control sequences: prefix matching, not a fixed offset);
- induction-head-chance: I's score above uniform causal attention's, computed exactly (``uniform_scores``);
- previous-token-head: P's previous-token score above the mean of the other heads of its layer;
- previous-token-head-chance: P's score above uniform causal attention's;
- path: P's effect through the keys of all induction heads below ``SHARE`` (one half) of the whole
  in-context effect (both negative: P's path carries at least half of what the repeat is worth).

If induction heads do not form on the text available here, the claims say so and the figure shows the
training curves. Run: ``jattn reproduce induction-natural`` (full; the models are made first, about
2.3 h alone on 2 CPU cores); ``--quick``: tiny models trained for a few steps in the work folder.
"""

from __future__ import annotations

import json

import numpy as np

from experiments.olsson2022.lms import (EVAL_SEED, SELECT_SEED, model_folder, scores, second_copy_logprob,
                                        sequences)
from jattn.io import manifest
from jattn.reproduce import studies
from jattn.reproduce.pipeline import Context, Profile, Stage

KINDS = {"attn-only": "induction-natural-attn-only", "gpt2": "induction-natural-gpt2"}  # kind -> seed 0's artefact
TEXT = ("multi30k", "litbank", "gap", "ud-english-ewt")
FULL = {"kinds": ("attn-only", "gpt2"), "seeds": (0, 1, 2, 3, 4), "length": 32, "sequences": 256, "selection": 64,
        "batch": 32}
QUICK = {"kinds": ("attn-only",), "seeds": (0, 1), "length": 8, "sequences": 12, "selection": 8, "batch": 12,
         "train": {"steps": 40, "warmup": 4, "eval_every": 10, "batch_size": 8, "limit_text": 20, "d_model": 32,
                   "ffn": 64, "vocab_size": 400, "context": 64, "random_share": 0.0, "text": TEXT, "distinct": True}}
# the files the models are trained on (the quick profile trains them; the full one's recipes name the data sets)
DATA = tuple(f"{e.dataset}/{e.path}" for e in manifest.files(TEXT) if not e.path.startswith("LICENSE")
             and e.path.endswith((".en", ".conll", ".tsv", "-train.conllu")))
SHARE = 0.5  # the path claim: P's path through the induction heads' keys carries at least this share of the effect
MEMBER = 0.5  # an induction head scores at least this share of the named head's selection score


def artefact(kind: str, seed: int) -> str:
    return KINDS[kind] + (f"-s{seed}" if seed else "")


def uniform_scores(length: int, offset: int) -> dict[str, float]:
    """The detectors' scores of uniform causal attention (query i weighs keys 0..i by 1 / (i + 1)) on a
    sequence of ``offset`` + 2 ``length`` tokens: their chance level, exact (``head_scores`` on it)."""
    from jattn.analyses.lm_heads import head_scores

    n = offset + 2 * length
    uniform = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]  # (n, n) row i: 1 / (i + 1) on keys ≤ i
    scores = head_scores(uniform[None, None, None], length, offset)  # each (1, 1, 1)
    return {k: float(np.asarray(v).reshape(())) for k, v in scores.items()}


def induction_heads(chosen: np.ndarray, named: tuple[int, int]) -> list[tuple[int, int]]:
    """The named head and every head of layers ≥ 1 whose selection score is at least MEMBER of its.
    chosen (L, H) mean induction scores on the selection sequences."""
    bar = MEMBER * chosen[named]
    return sorted({tuple(named)} | {(l, h) for l in range(1, chosen.shape[0]) for h in range(chosen.shape[1])
                                    if chosen[l, h] >= bar})



def _measure_stage(kind: str, seed: int):
    def run(ctx: Context) -> dict:
        import time

        import jattn
        from jattn.sweeps.path_patching import path_patch
        from jattn.training.lm import repeat_losses

        p, t0 = ctx.params, time.perf_counter()
        folder = model_folder(ctx, artefact(kind, seed), kind, seed)
        model = jattn.load(str(folder), tokenizer=False)
        c, T = model.config, p["length"]
        L, H = c.num_layers, c.num_heads
        if L < 2:
            raise ValueError(f"{artefact(kind, seed)} has {L} layer: an induction head composes with a head of a "
                             "layer below it, so the study needs at least 2 layers")
        select = sequences(c.vocab_size, c.bos_token_id, T, p["selection"], SELECT_SEED)
        chosen = {k: v.mean(0) for k, v in scores(model, select["repeated"], T, p["batch"]).items()}  # (L, H)
        li, hi = np.unravel_index(int(np.argmax(chosen["induction"][1:])), (L - 1, H))
        li += 1  # I: among the heads of layers ≥ 1
        lp, hp = np.unravel_index(int(np.argmax(chosen["previous_token"][:li])), (li, H))  # P: below I
        receivers = induction_heads(chosen["induction"], (int(li), int(hi)))
        s = sequences(c.vocab_size, c.bos_token_id, T, p["sequences"], EVAL_SEED)
        scored = scores(model, s["repeated"], T, p["batch"])  # each (N, L, H)
        on_control = scores(model, s["control"], T, p["batch"])["induction"]  # (N, L, H)
        drop = repeat_losses(model.params, c, s["repeated"], T, offset=1)
        control = repeat_losses(model.params, c, s["control"], T, offset=1)
        N, n = s["repeated"].shape
        used = np.zeros((N, n), np.float32)
        used[:, 1 + T: n - 1] = 1  # positions predicting the second copy's tokens 2..T
        rows = {"target": np.concatenate([s["repeated"][:, 1:], s["repeated"][:, -1:]], 1), "used": used}
        batch = lambda ids: {"input_ids": ids, "attention_mask": np.ones_like(ids)}  # noqa: E731
        m = {}
        for run_name in ("repeated", "broken"):
            out = model.forward(batch(s[run_name]), internals=None)
            m[run_name] = np.asarray(second_copy_logprob({"lm_logits": out.logits}, rows), float)  # (N,)
        path = path_patch(model, batch(s["broken"]), batch(s["repeated"]), second_copy_logprob,
                          [(l, h, "k") for l, h in receivers], batch_size=p["batch"], metric_inputs=rows,
                          per_example=True)["encoder"]  # (N, L, H)
        flat = lambda a: np.round(np.asarray(a, float).reshape(len(a), -1), 6).tolist()  # noqa: E731
        training = json.loads((folder / "training.json").read_text())
        return {"kind": kind, "seed": seed, "artefact": artefact(kind, seed), "shape": [L, H],
                "induction_head": [int(li), int(hi)], "previous_head": [int(lp), int(hp)],
                "induction_heads": [list(r) for r in receivers], "chance": uniform_scores(T, 1),
                "selection": {k: np.round(v, 6).tolist() for k, v in chosen.items()},
                "first": flat(drop["first"][:, None]), "second": flat(drop["second"][:, None]),
                "control_first": flat(control["first"][:, None]), "control_second": flat(control["second"][:, None]),
                **{k: flat(v) for k, v in scored.items()}, "induction_on_control": flat(on_control),
                "path_k": flat(path), "whole": flat((m["broken"] - m["repeated"])[:, None]),
                "curve": [{k: pt[k] for k in ("step", "train_loss", "in_context_drop", "val_text_loss")}
                          for pt in training["curve"]],
                "measured_s": round(time.perf_counter() - t0, 1)}

    return run


def stages(profile: Profile) -> list[Stage]:
    from experiments.olsson2022 import natural_claims

    sizes = profile.pick(FULL, QUICK)
    code = ("jattn.sweeps.path_patching", "jattn.sweeps.patching", "jattn.analyses.lm_heads", "jattn.training.lm",
            "experiments.olsson2022.lms")
    params = {k: v for k, v in sizes.items() if k not in ("kinds", "seeds")}
    out = []
    for kind in sizes["kinds"]:
        measured = []
        for seed in sizes["seeds"]:
            name = f"induction-natural.{kind}-s{seed}"
            models = (artefact(kind, seed),) if profile.name == "full" else ()
            out.append(Stage(name, _measure_stage(kind, seed), params=params, data=DATA, models=models,
                             code=code + (() if models else ("jattn.artefacts.induction",))))
            measured.append(name)
        out.append(Stage(f"induction-natural.{kind}", natural_claims.claims_stage(kind, tuple(measured)),
                         params={"seeds": list(sizes["seeds"]), "share": SHARE}, needs=tuple(measured),
                         code=("experiments.olsson2022.claims",)))
    return out


studies.register("induction-natural", stages, "Olsson et al. 2022 where the finding can fail: induction heads in "
                 "small language models trained here on natural text only, against same-layer baselines")
