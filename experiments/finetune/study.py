"""The classifiers the Kovaleva and Michel stages analyse, and their dev scores over seeds.

Not a paper's study: it makes the fine-tuned classifiers that ``kovaleva`` (Kovaleva et al. 2019)
and ``michel`` (Michel et al. 2019) read, and reports how good they are, so that those studies'
findings can be set beside a classifier of known quality. The reference numbers (``PAPER``) are
BERT-base's GLUE scores (Devlin et al. 2019, test sets) and Kovaleva's setting (BERT-base
fine-tuned per GLUE task); differences: MiniLM and all-mpnet-base-v2 (the encoders jattn has
offline) instead of BERT-base, SST-2 and CoLA only, scored on the dev sets (the GLUE test labels
are not public), ≥ 2 training seeds with a Student-t interval (``STATISTICS.md``) instead of one run.

Full profile: the named artefacts ``<model>-<task>[-s1|-s2]`` (``jattn.artefacts``: MiniLM and
all-mpnet-base-v2 on SST-2 and CoLA, training seeds 0-4), made into the cache (resumable).
Quick profile: MiniLM on 96 training sentences of each task, seeds 0 and 1, into the run's work
folder (the other studies read the same classifiers through ``experiments.common``). Per model
and task, one claim: the dev metric (SST-2 accuracy, CoLA Matthews correlation on the in-domain
dev set) as the mean over seeds with a Student-t interval, beside the majority class of the
training split; the per-seed dev predictions are the claim's file.

Run: ``jattn reproduce finetune --publish`` (full profile, into ``experiments/results/``; or ``--out FOLDER``);
``jattn reproduce finetune --quick`` (small subsets, into ``results/reproduce-quick/``).
"""

from __future__ import annotations

import numpy as np

from jattn.reproduce.pipeline import Context, Profile, Stage
from jattn.reproduce import studies
from experiments.common import QUICK_TRAIN, artefact, classifier, dev_examples, models, seeds, train_majority

TASKS = {"sst2": ("accuracy", "accuracy"), "cola": ("MCC", "mcc")}  # task -> (unit, claims statistic)
PAPER = {  # what the papers report for the fine-tuned base models (dev sets)
    "sst2": "BERT-base 93.5 accuracy (Devlin et al. 2019, test); Kovaleva: BERT-base fine-tuned per GLUE task",
    "cola": "BERT-base 52.1 MCC (Devlin et al. 2019, test); Kovaleva: BERT-base, 3 epochs",
}


def stages(profile: Profile) -> list[Stage]:
    out = []
    data = {"sst2": ("sst2/train.tsv", "sst2/dev.tsv"), "cola": ("cola/in_domain_train.tsv", "cola/in_domain_dev.tsv")}
    for model in models(profile):
        for task in TASKS:
            names = []
            for seed in seeds(profile):
                name = f"finetune.{model}-{task}-s{seed}"
                names.append(name)
                out.append(Stage(name, _train_stage(model, task, seed), data=data[task],
                                 params={"quick_train": QUICK_TRAIN} if profile.name == "quick" else {},
                                 models=(artefact(model, task, seed),) if profile.name == "full" else (),
                                 code=("experiments.common", "jattn.training.finetune",
                                       "jattn.sweeps.pruning_curve")))
            out.append(Stage(f"finetune.{model}-{task}", _claim_stage(model, task, names), needs=tuple(names),
                             data=data[task], code=("experiments.common",)))
    return out


def _train_stage(model: str, task: str, seed: int):
    def run(ctx: Context) -> dict:
        import jattn
        from jattn.sweeps.pruning_curve import classification_predictions

        folder = classifier(ctx, model, task, seed)
        net = jattn.load(folder)
        dev = dev_examples(task)
        heads = (net.config.num_layers, net.config.num_heads)
        pred = classification_predictions(net, [x for x, _ in dev])(np.ones(heads))  # (n,) every head open
        return {"model": model, "task": task, "seed": seed, "folder": str(folder),
                "gold": [y for _, y in dev], "pred": pred.tolist()}

    return run


def _claim_stage(model: str, task: str, names: list[str]):
    def run(ctx: Context) -> dict:
        unit, statistic = TASKS[task]
        majority = train_majority(task)
        rows = []
        for name in names:
            r = ctx.result(name)
            rows += [{"index": i, "seed": r["seed"], "gold": g, "pred": p, "majority": majority}
                     for i, (g, p) in enumerate(zip(r["gold"], r["pred"]))]
        claim = ctx.claim(
            id=f"finetune-{model}-{task}", claim=f"{model} fine-tuned on {task}: dev {unit}", paper=PAPER[task],
            unit=unit, rows=rows, n=len(rows) // len(names), seeds=len(names),
            measure={"statistic": statistic, "columns": {"gold": "gold", "pred": "pred"}, "ci_method": "seeds"},
            baseline={"name": "majority class of train", "columns": {"gold": "gold", "pred": "majority"}},
            protocol=f"dev split ({len(rows) // len(names)} sentences), recipes in jattn.artefacts "
                     f"({artefact(model, task, 0)} …); mean over seeds with a t-interval")
        return {"claims": [claim]}

    return run


studies.register('finetune', stages,
                 'Fine-tuned classifiers (the models Kovaleva and Michel analyse)')
