"""Michel et al. 2019, "Are Sixteen Heads Really Better than One?" (§4, Fig. 3), BERT side:
head importance estimated on one split, heads pruned by it in 10 % steps of all heads, the dev
metric evaluated on another, beside ≥ 5 random pruning orders and the unpruned model.

The paper (Michel, Levy and Neubig 2019) finds that a large share of a fine-tuned model's heads
can be pruned with no noticeable loss when heads are pruned by their importance. Its protocol
(BERT side): BERT-base fine-tuned on MNLI, heads pruned by importance in steps of 10 % of all
heads, importance re-estimated as heads are pruned, MNLI dev accuracy against the share pruned.

jattn's protocol (``STATISTICS.md`` §2, §4–§6). Importance I_h = E|∂L/∂ξ_h| (``jattn.importance``, Michel
Eq. 3) with the *token* estimator and per-layer L2 normalisation (the authors' released code,
``--normalize_pruning_by_layer``), estimated once on the unpruned classifier over a seeded random
slice of the task's training split; the dev split (disjoint from it) is where every point is
evaluated. At share p ∈ {0, 10 %, …, 100 %} the round(p·N) least important heads are masked
(gate 0; ``experiments.michel2019.curves``); the same for ``random_orders`` random orders (the band). Each point
carries a paired bootstrap Δ against the unpruned model; the *prunable share* of an order is the
largest p up to which every point is shown within ±1 metric point of it, its 95 % interval inside
the margin (``experiments.michel2019.claims.equivalent_share``). Claims per model and task: (1) Δ at
40 % pruned by importance vs unpruned (the paper: about 40 % of BERT's heads prunable with no
noticeable loss), baseline the random orders' Δ; (2) importance order vs the random orders' mean at
50 % pruned, baseline one random order against the others (what a ranking no better than chance
gives). Δ's interval: paired bootstrap over dev examples for one seed, Student-t over fine-tuning
seeds where there are ≥ 2.
Deviations: MPNet / MiniLM on SST-2 and CoLA instead of BERT-base on MNLI (the encoders jattn
has offline, fine-tuned by the ``finetune`` study, the classifiers the Kovaleva study reads too);
importance once (the paper's iterative re-estimation not run: budget); the random orders are a
baseline the paper does not have (``STATISTICS.md`` "Baselines").

Costs, quiet AMD EPYC (2 cores; the stage records' ``runtime_s``): a curve stage runs
1 + 9 x (1 + 5) + 1 = 56 dev passes under head masks (the unpruned and all-pruned masks are shared
by every order) after 1,000 importance examples (forward + backward). MPNet: 4.3 min (CoLA, 527
dev sentences) and 10.5 min (SST-2, 872) a seed; MiniLM 0.7 and 1.6 min a seed.
Quick profile: MiniLM, 32 importance sentences, 64 dev sentences, 2 seeds.

Run: ``jattn reproduce michel --publish`` (full profile, into ``experiments/results/``; or ``--out FOLDER``);
``jattn reproduce michel --quick`` (small subsets, into ``results/reproduce-quick/``).
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Callable

import numpy as np

from jattn.reproduce.pipeline import Context, Profile, Stage
from jattn.reproduce import studies
from experiments import common
from experiments.michel2019 import curves as mc

@dataclasses.dataclass(frozen=True)
class Task:
    """What a Michel stage measures on one task: the metric (pred, gold) -> float, its claims
    statistic (a ``*_gain`` of ``jattn.reproduce.claims``), unit and the paper's setting."""

    name: str
    unit: str
    statistic: str
    metric: Callable
    data: tuple[str, ...]
    paper: str


def _tasks() -> dict[str, Task]:
    from jattn.io import glue

    paper = "BERT-base on MNLI (dev accuracy, Fig. 3)"
    return {"sst2": Task("sst2", "accuracy", "accuracy_gain", glue.accuracy, ("sst2/train.tsv", "sst2/dev.tsv"), paper),
            "cola": Task("cola", "MCC", "mcc_gain", glue.matthews_corr,
                         ("cola/in_domain_train.tsv", "cola/in_domain_dev.tsv"), paper)}


TOLERANCE = 0.01  # 1 metric point (accuracy or MCC ×100): "no noticeable loss"
AT_PRUNE, AT_RANDOM = 0.4, 0.5  # the shares the two claims read


def models(profile: Profile) -> tuple[str, ...]:
    return profile.pick(("mpnet", "minilm"), ("minilm",))


def seeds(profile: Profile, model: str) -> tuple[int, ...]:
    """Fine-tuning seeds analysed: every seed the fine-tuning stages train, for both models."""
    return common.seeds(profile)


def params(profile: Profile) -> dict:
    """A curve stage's sizes; ``dev_examples`` 0 = the whole dev split."""
    return {"importance_examples": profile.pick(1000, 32), "dev_examples": profile.pick(0, 64), "random_orders": 5,
            "estimator": "token", "shares": list(mc.SHARES), "batch_size": 32}


def stages(profile: Profile) -> list[Stage]:
    from experiments.michel2019 import claims as michel_claims

    out = []
    for model in models(profile):
        for name, task in _tasks().items():
            p, curves = params(profile), []
            for seed in seeds(profile, model):
                stage = f"michel.curves-{model}-{name}-s{seed}"
                curves.append(stage)
                out.append(Stage(stage, _curves_stage(model, name, seed), params=p, data=task.data,
                                 needs=(f"finetune.{model}-{name}-s{seed}",),
                                 code=("experiments.common", "experiments.michel2019.curves",
                                       "jattn.sweeps.importance", "jattn.sweeps.pruning_curve")))
            out.append(Stage(f"michel.{model}-{name}", michel_claims.claims_stage(model, task, curves, TOLERANCE,
                                                                                  AT_PRUNE, AT_RANDOM),
                             needs=tuple(curves), params={"tolerance": TOLERANCE, "at": [AT_PRUNE, AT_RANDOM]},
                             code=("experiments.michel2019.study", "experiments.michel2019.curves",
                                   "experiments.michel2019.claims")))
    return out


def _curves_stage(model: str, task: str, seed: int):
    def run(ctx: Context) -> dict:
        import jattn
        from jattn.sweeps.pruning_curve import classification_predictions, flat_scores

        p, work = ctx.params, ctx.work()
        net = jattn.load(common.classifier(ctx, model, task, seed))
        imp_examples, dev = _slices(task, p)
        shape = (net.config.num_layers, net.config.num_heads)
        seconds = {}
        saved = work / "importance.json"
        if saved.is_file():
            imp = np.asarray(json.loads(saved.read_text()))
        else:
            start = time.perf_counter()
            imp = np.asarray(jattn.importance(net, imp_examples, estimator=p["estimator"], batch_size=p["batch_size"],
                                              progress=ctx.progress)["encoder"])  # (L, H)
            seconds["importance"] = round(time.perf_counter() - start, 1)
            saved.write_text(json.dumps(imp.tolist()))
        orders = {"importance": flat_scores(net, imp)}
        for r, scores in enumerate(common.random_orders(imp.size, p["random_orders"], seed=seed)):
            orders[f"random-{r}"] = scores
        start = time.perf_counter()
        predict = classification_predictions(net, [x for x, _ in dev], batch_size=p["batch_size"])
        preds = mc.predictions_along(predict, orders, shape, work / "predictions", p["shares"])
        seconds["evaluation"] = round(time.perf_counter() - start, 1)
        return {"model": model, "task": task, "seed": seed, "heads": int(imp.size), "importance": imp.tolist(),
                "importance_examples": len(imp_examples), "gold": mc.digits([y for _, y in dev]),
                "shares": p["shares"], "orders": {k: [mc.digits(x) for x in v] for k, v in preds.items()},
                "seconds": seconds}

    return run


def _seeded_slice(rows: list, n: int) -> list:
    """``n`` of ``rows`` drawn with seed 0, in their order (all of them when n is 0 or ≥ len)."""
    if not n or n >= len(rows):
        return list(rows)
    return [rows[i] for i in np.sort(np.random.default_rng(0).choice(len(rows), n, replace=False))]


def _slices(task: str, p: dict) -> tuple[list, list]:
    """(importance examples: a seeded slice of the train split, dev examples: of the dev split)."""
    from jattn.io import glue

    return (_seeded_slice(glue.read_task(task, "train"), p["importance_examples"]),
            _seeded_slice(glue.read_task(task, "dev"), p["dev_examples"]))


studies.register('michel', stages,
                 'Michel et al. 2019: Are sixteen heads really better than one?')
