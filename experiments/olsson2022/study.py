"""Induction heads in small language models trained here (Olsson et al. 2022; Elhage et al. 2021).

The papers: Olsson et al. 2022, "In-context Learning and Induction Heads", and Elhage et al. 2021,
"A Mathematical Framework for Transformer Circuits". Reproduced: small transformers predict the
second copy of a repeated random sequence far better than the first; they form an induction head
(attending from a token to the one after its earlier occurrence) and a previous-token head in a
layer below it; and the induction head finds its target through the previous-token head's output
in its keys (K-composition). Their protocol: the authors' own small attention-only and MLP
transformers (not released), in-context learning read as a loss difference along the context,
heads found by their attention on repeated random tokens, K-composition read from the weights
(Elhage) and tested by ablations (Olsson).

Differences here: the models are trained here (no released checkpoints offline) on captions with
half their training sequences repeated random segments (the papers trained on natural text;
``jattn.artefacts.induction``); the in-context drop is read on repeated
random tokens against a non-repeating control; heads are named on selection sequences and measured
on separate evaluation sequences; K-composition is measured by path patching (Wang et al. 2022,
"Interpretability in the Wild") against a random head; intervals are over the training seeds (5 in the full profile).
The study ``induction-natural`` (``experiments.olsson2022.natural``) asks the same questions where the
finding can fail: LMs trained on natural text only, each head against the other heads of its layer, its
own score on the control sequences and uniform attention's, and the previous-token head's path into all
induction heads' keys against the whole in-context effect.

Models (``jattn.artefacts.induction``): a 2-layer attention-only GPT-2 and a 2-layer GPT-2 with
MLPs, 8 heads each, trained on English captions mixed with repeated random tokens; seeds 0-4
(full profile: the named artefacts ``induction-attn-only[-s1..-s4]`` and ``induction-gpt2[-s1..-s4]``;
quick: the attention-only model, seeds 0 and 1, trained for a few steps in the work folder).

Sequences (``jattn.analyses.lm_heads.repeated_tokens``): BOS then T random tokens repeated once,
"A A". Heads are *named* on a selection set of sequences and *measured* on a separate evaluation
set (other random draws), so no number below is read on the sequences that chose the head.

Per model (stage ``induction.<kind>-s<seed>``):

- the in-context drop (Olsson et al. 2022's measure on repeated tokens): the mean loss predicting
  the first copy's tokens 2..T minus the second copy's, per sequence; its control is the same drop
  on "A B" (the second half fresh random tokens), which no mechanism can lower;
- the detectors (``head_scores``): the induction head I = the head with the largest mean induction
  score on the selection set among the heads of layers ≥ 1 (a layer-0 head reads tokens and
  positions only, so it cannot match a prefix; the figure shows every head's score); the
  previous-token head P = the largest mean previous-token score among the heads of the layers
  below I's;
- path patching (``jattn.sweeps.path_patching``, Wang et al. 2022) of K-composition (Elhage et al.
  2021: an induction head finds the token after the current token's earlier occurrence by a key
  that a previous-token head wrote): clean = "B A" (the first copy replaced by fresh tokens),
  corrupted = "A A"; the metric m is the mean log-probability of the next token over the second
  copy's tokens 2..T. Every sender head's clean ("B A") output reaches I's keys only, in the
  "A A" run: effect = m(patched) − m("A A"), per sequence. Through I's queries instead: the
  control path, reported beside it.

Decision rules (written after the first records they judge: post hoc, ``verdicts.PROVENANCE`` and
docs/STATISTICS.md's Provenance table; claims stage ``induction.<kind>``, Student-t
intervals over the 5 training seeds of each seed's mean over sequences, ``ci_method="seeds"``; seeds 3
and 4 were added after the results of seeds 0-2 were seen, to meet ``STATISTICS.md``'s ≥ 5 seeds where a
seed costs minutes, and the rules below were left as they were):

- icl: reproduced when the drop's interval lies above the control drop's interval;
- induction-head / previous-token-head: reproduced when the named head's score (on the evaluation
  sequences) has an interval above that of a random head (per sequence one head drawn uniformly
  from the other heads; for P from the other heads of the layers below I's);
- path: reproduced when P's effect through I's keys has an interval below (more negative than) that
  of a random other head of the layers below I's through the same keys.

Run: ``jattn reproduce induction --publish`` (full profile, into ``experiments/results/``; or ``--out FOLDER``);
``jattn reproduce induction --quick`` (small subsets, into ``results/reproduce-quick/``).
"""

from __future__ import annotations

import numpy as np

from experiments.olsson2022.lms import (EVAL_SEED, SELECT_SEED, model_folder, scores, second_copy_logprob,
                                        sequences)
from jattn.reproduce.pipeline import Context, Profile, Stage
from jattn.reproduce import studies

KINDS = {"attn-only": "induction-attn-only", "gpt2": "induction-gpt2"}  # kind -> artefact name of seed 0
FULL = {"kinds": ("attn-only", "gpt2"), "seeds": (0, 1, 2, 3, 4), "length": 32, "sequences": 256, "selection": 64,
        "batch": 32}
QUICK = {"kinds": ("attn-only",), "seeds": (0, 1), "length": 8, "sequences": 12, "selection": 8, "batch": 12,
         "train": {"steps": 40, "warmup": 4, "batch_size": 8, "limit_text": 400, "d_model": 32, "ffn": 64,
                   "vocab_size": 400, "context": 32}}


def artefact(kind: str, seed: int) -> str:
    return KINDS[kind] + (f"-s{seed}" if seed else "")


def _sizes(profile: Profile) -> dict:
    return profile.pick(FULL, QUICK)


def _measure_stage(kind: str, seed: int):
    def run(ctx: Context) -> dict:
        import time

        import jattn
        from jattn.sweeps.path_patching import path_patch
        from jattn.training.lm import repeat_losses

        p, t0 = ctx.params, time.perf_counter()
        model = jattn.load(str(model_folder(ctx, artefact(kind, seed), kind, seed)), tokenizer=False)
        c, T = model.config, p["length"]
        L, H = c.num_layers, c.num_heads
        select = sequences(c.vocab_size, c.bos_token_id, T, p["selection"], SELECT_SEED)
        chosen = {k: v.mean(0) for k, v in scores(model, select["repeated"], T, p["batch"]).items()}  # (L, H)
        if L < 2:
            raise ValueError(f"{artefact(kind, seed)} has {L} layer: an induction head composes with a head of a "
                             "layer below it, so the study needs at least 2 layers")
        li, hi = np.unravel_index(int(np.argmax(chosen["induction"][1:])), (L - 1, H))
        li += 1  # I: among the heads of layers ≥ 1
        below = chosen["previous_token"][:li]  # (li, H) the candidates for I's keys
        lp, hp = np.unravel_index(int(np.argmax(below)), below.shape)
        s = sequences(c.vocab_size, c.bos_token_id, T, p["sequences"], EVAL_SEED)
        scored = scores(model, s["repeated"], T, p["batch"])  # each (N, L, H)
        drop = repeat_losses(model.params, c, s["repeated"], T, offset=1)
        control = repeat_losses(model.params, c, s["control"], T, offset=1)
        n = s["repeated"].shape[1]
        used = np.zeros((len(s["repeated"]), n), np.float32)
        used[:, 1 + T: n - 1] = 1  # positions predicting the second copy's tokens 2..T
        rows = {"target": np.concatenate([s["repeated"][:, 1:], s["repeated"][:, -1:]], 1), "used": used}
        paths = {}
        for role in ("k", "q"):
            batch = lambda ids: {"input_ids": ids, "attention_mask": np.ones_like(ids)}  # noqa: E731
            paths[role] = path_patch(model, batch(s["broken"]), batch(s["repeated"]), second_copy_logprob,
                                     [(int(li), int(hi), role)], batch_size=p["batch"], metric_inputs=rows,
                                     per_example=True)["encoder"]  # (N, L, H)
        flat = lambda a: np.round(np.asarray(a, float).reshape(len(a), -1), 6).tolist()  # noqa: E731
        return {"kind": kind, "seed": seed, "artefact": artefact(kind, seed), "shape": [L, H],
                "induction_head": [int(li), int(hi)], "previous_head": [int(lp), int(hp)],
                "selection": {k: np.round(v, 6).tolist() for k, v in chosen.items()},
                "first": flat(drop["first"][:, None]), "second": flat(drop["second"][:, None]),
                "control_first": flat(control["first"][:, None]), "control_second": flat(control["second"][:, None]),
                **{k: flat(v) for k, v in scored.items()}, **{f"path_{r}": flat(v) for r, v in paths.items()},
                "measured_s": round(time.perf_counter() - t0, 1)}

    return run


def stages(profile: Profile) -> list[Stage]:
    from experiments.olsson2022 import claims as induction_claims

    sizes = _sizes(profile)
    code = ("jattn.sweeps.path_patching", "jattn.sweeps.patching", "jattn.analyses.lm_heads", "jattn.training.lm",
            "experiments.olsson2022.lms")
    params = {k: v for k, v in sizes.items() if k not in ("kinds", "seeds")}
    data = ("multi30k/train.en", "multi30k/val.en")
    out = []
    for kind in sizes["kinds"]:
        measured = []
        for seed in sizes["seeds"]:
            name = f"induction.{kind}-s{seed}"
            models = (artefact(kind, seed),) if profile.name == "full" else ()
            out.append(Stage(name, _measure_stage(kind, seed), params=params, data=data, models=models,
                             code=code + (() if models else ("jattn.artefacts.induction",))))
            measured.append(name)
        out.append(Stage(f"induction.{kind}", induction_claims.claims_stage(kind, tuple(measured)),
                         params={"seeds": list(sizes["seeds"])}, needs=tuple(measured)))
    return out


studies.register(
    "induction",
    stages,
    "Olsson et al. 2022: induction heads in small language models trained here, confirmed by path patching",
)
