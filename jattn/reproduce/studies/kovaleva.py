"""Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT": disabling heads and layers (§6,
Fig. 9-10), attention-pattern types (§4, Fig. 1-2) and the change of the maps under fine-tuning
(§5, Fig. 5), on the fine-tuned classifiers of the ``finetune`` study (all-mpnet-base-v2,
12 × 12 heads, the headline; MiniLM, 6 × 12, the small variant; SST-2 and CoLA).

Stages:

- ``kovaleva.sweep-<model>-<task>-s<seed>``: dev predictions with each head, and each layer,
  disabled (Kovaleva's uniform attention), resumable by chunks (``kovaleva_disabling``);
- ``kovaleva.disabling-<model>-<task>``: paired bootstrap Δ per head and layer against the
  unmodified model, Holm over the family, the best head selected on one half of dev and
  reported on the other and, as the paper did, on the same examples (``kovaleva_claims``);
- ``kovaleva.labels``: the pattern rules' thresholds and the CNN fitted on one fold of the 72
  hand-labelled maps and scored on the other (cross-fitted, ``kovaleva_labels``);
- ``kovaleva.maps-<model>-<task>``: per dev example the pattern types of every head (seed 0
  classifier), the uniform-attention baseline, and the per-layer cosine to the pretrained maps
  (``kovaleva_maps``).

Costs, measured with ``nice -n 10`` while the machine ran ~20 other jobs (load average ~20 on 2
cores; wall times were 4-5× the process CPU times, so the CPU seconds below are the better guide
to a quiet run): the head sweep re-runs, for each of the L·H heads, the layers from the head's
layer up (prefix reuse), ≈ Σ_l (L − l) / L forwards per head (66 of 12 layers for MPNet, 15 of
6 for MiniLM per layer of heads).
SIZES_NOTE
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from jattn.reproduce.pipeline import Context, Profile, Stage, repository_root
from jattn.reproduce.studies import finetune
from jattn.reproduce.studies import kovaleva_claims as KC

TASK_DATA = {"sst2": ("sst2/dev.tsv",), "cola": ("cola/in_domain_dev.tsv",)}
PRETRAINED = {"mpnet": "all-mpnet-base-v2", "minilm": None}  # the base of each classifier (None: embedded)
PAPER_MODEL = "BERT-base fine-tuned per GLUE task (MRPC, STS-B, SST-2, QQP, RTE, QNLI, MNLI), dev sets"


def sizes(profile: Profile) -> dict:
    """What each profile sweeps: per model the seeds and dev examples per task (0: all)."""
    return profile.pick(
        full={"sweep": {"mpnet": {"seeds": (0,), "dev": {"sst2": 0, "cola": 0}},
                        "minilm": {"seeds": (0, 1, 2), "dev": {"sst2": 0, "cola": 0}}},
              "chunk": 64, "maps_dev": 0, "cnn_steps": 600, "corpus_sentences": 250, "per_sentence": 8},
        quick={"sweep": {"minilm": {"seeds": (0, 1), "dev": {"sst2": 12, "cola": 12}}},
               "chunk": 64, "maps_dev": 24, "cnn_steps": 40, "corpus_sentences": 20, "per_sentence": 4})


def _dev(ctx: Context, task: str) -> list[tuple[str, int]]:
    from jattn.io import glue

    return glue.read_task(task, "dev", root=ctx.data(TASK_DATA[task][0]).parents[1])


def subset(n_all: int, n: int) -> np.ndarray:
    """A fixed random subset of n of n_all dev examples (all when n is 0 or ≥ n_all), sorted."""
    if not n or n >= n_all:
        return np.arange(n_all)
    return np.sort(np.random.default_rng(0).choice(n_all, n, replace=False))


def _protocol(model: str, task: str, seeds: tuple, n: int, n_all: int) -> str:
    part = "all" if n == n_all else f"a fixed random {n} of the {n_all}"
    return (f"{model} fine-tuned on {task} (seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}), "
            f"{part} dev examples; a head disabled as in the paper (its attention uniform over the real tokens); "
            f"deviations: model ({'12 × 12' if model == 'mpnet' else '6 × 12'} heads, not BERT-base), "
            f"task{' (CoLA is not among the paper’s tasks)' if task == 'cola' else ''}")


def _sweep_stage(model: str, task: str, seed: int):
    def run(ctx: Context) -> dict:
        import jattn
        from jattn.reproduce.studies import kovaleva_disabling as D

        dev = _dev(ctx, task)
        index = subset(len(dev), ctx.params["dev"])
        net = jattn.load(finetune.classifier(ctx, model, task, seed))
        if net.config.num_labels != 2:
            raise ValueError(f"the disabling claims store binary predictions; {model}-{task} has {net.config.num_labels} labels")
        r = D.sweep(net, [dev[i] for i in index], ctx.work(), chunk=ctx.params["chunk"], progress=ctx.progress)
        L, H = net.config.num_layers, net.config.num_heads
        return {"model": model, "task": task, "seed": seed, "index": index.tolist(), "heads_per_layer": H,
                "gold": [dev[i][1] for i in index], "base": r["base"].tolist(),
                "head_flips": D.flips(r["base"], r["heads"].reshape(L * H, -1)),  # per head (l·H + h): flipped examples
                "layer_flips": D.flips(r["base"], r["layers"])}

    return run


def _disabling_stage(model: str, task: str, names: list[str]):
    def run(ctx: Context) -> dict:
        sweeps = []
        for name in names:
            record = ctx.result(name)
            sweeps.append({**KC.unpack(record), "heads_per_layer": record["heads_per_layer"]})
        seeds = tuple(s["seed"] for s in sweeps)
        n, n_all = len(sweeps[0]["gold"]), len(_dev(ctx, task))
        protocol = _protocol(model, task, seeds, n, n_all)
        paper_heads = (f"{PAPER_MODEL}: disabling some single heads raises dev performance (by up to 3.2 % in the "
                       "paper's abstract), chosen and reported on the same dev set, no test")
        claims, best = KC.best_head_claims(ctx, model, task, sweeps, paper_heads,
                                           protocol + "; selection half and report half: a fixed random split of "
                                           "those examples (seed 0)")
        heads, head_summary = KC.family_claim(ctx, model, task, sweeps, "head", paper_heads, protocol)
        paper_layers = (f"{PAPER_MODEL}: Fig. 10, dev performance with each whole layer disabled, against the "
                        "fine-tuned model, no test")
        layers, layer_summary = KC.family_claim(ctx, model, task, sweeps, "layer", paper_layers, protocol)
        L = len(sweeps[0]["layers"])
        H = sweeps[0]["heads_per_layer"]
        return {"claims": [*claims, heads, layers],
                "table": KC.table(model, task, sweeps, head_summary, layer_summary, best),
                "figures": KC.figures(ctx, model, task, L, H, head_summary[0], layer_summary[0])}

    return run


def _labels_stage(ctx: Context) -> dict:
    import jattn
    from jattn.io import glue
    from jattn.reproduce.studies import kovaleva_patterns as KP

    root = repository_root(Path(__file__).resolve())
    if root is None:
        raise FileNotFoundError("the hand-labelled maps are files of the jattn checkout "
                                "(experiments/results/kovaleva_disabling_patterns). Fix: run from a checkout")
    data = ctx.data("sst2/train.tsv").parents[1]
    return KP.labels_result(ctx, jattn.load(), root, glue.read_task("sst2", "dev", root=data),
                            glue.read_task("sst2", "train", root=data))


def _maps_stage(model: str, task: str):
    def run(ctx: Context) -> dict:
        import jattn
        from jattn.analyses.patterns import Thresholds
        from jattn.reproduce.studies import kovaleva_maps as KM
        from jattn.reproduce.studies import kovaleva_patterns as KP

        dev = _dev(ctx, task)
        index = subset(len(dev), ctx.params["dev"])
        t = ctx.result("kovaleva.labels")["thresholds"]
        thresholds = Thresholds(vertical=t["vertical"], diagonal=t["diagonal"])
        base = jattn.load(PRETRAINED[model]) if PRETRAINED[model] else jattn.load()
        tuned = jattn.load(finetune.classifier(ctx, model, task, 0))
        r = KM.dev_maps(base, tuned, [dev[i] for i in index], thresholds)
        protocol = (f"{model} fine-tuned on {task} (seed 0) against its pretrained base, "
                    f"{'all' if len(index) == len(dev) else f'a fixed random {len(index)} of the {len(dev)}'} dev "
                    f"examples; deviations: model, task{' (not among the paper’s)' if task == 'cola' else ''}")
        return KP.maps_result(ctx, model, task, index, r, thresholds, protocol)

    return run


def _hand_sha256() -> str:
    from jattn.reproduce.studies.kovaleva_labels import hand_files

    root = repository_root(Path(__file__).resolve())
    if root is None:
        return "no checkout"
    return hashlib.sha256(b"".join(p.read_bytes() for p in hand_files(root))).hexdigest()


def stages(profile: Profile) -> list[Stage]:
    size = sizes(profile)
    code = ("jattn.reproduce.studies.kovaleva_disabling", "jattn.reproduce.studies.kovaleva_claims",
            "jattn.sweeps.disable")
    out = []
    for model, plan in size["sweep"].items():
        for task in ("sst2", "cola"):
            names = []
            for seed in plan["seeds"]:
                name = f"kovaleva.sweep-{model}-{task}-s{seed}"
                out.append(Stage(name, _sweep_stage(model, task, seed), needs=(f"finetune.{model}-{task}-s{seed}",),
                                 params={"dev": plan["dev"][task], "chunk": size["chunk"]}, data=TASK_DATA[task],
                                 code=code))
                names.append(name)
            out.append(Stage(f"kovaleva.disabling-{model}-{task}", _disabling_stage(model, task, names),
                             needs=tuple(names), data=TASK_DATA[task], code=code))
    out.append(Stage("kovaleva.labels", _labels_stage, data=("sst2/dev.tsv", "sst2/train.tsv"),
                     params={"hand_sha256": _hand_sha256(), **{k: size[k] for k in
                                                                ("cnn_steps", "corpus_sentences", "per_sentence")}},
                     code=("jattn.reproduce.studies.kovaleva_labels", "jattn.reproduce.studies.kovaleva_patterns",
                           "jattn.analyses.patterns",
                           "jattn.analyses.pattern_cnn")))
    for model in finetune.models(profile):
        for task in ("sst2", "cola"):
            out.append(Stage(f"kovaleva.maps-{model}-{task}", _maps_stage(model, task),
                             needs=(f"finetune.{model}-{task}-s0", "kovaleva.labels"), data=TASK_DATA[task],
                             params={"dev": size["maps_dev"]},
                             models=(PRETRAINED[model],) if PRETRAINED[model] and profile.name == "full" else (),
                             code=("jattn.reproduce.studies.kovaleva_maps", "jattn.reproduce.studies.kovaleva_patterns",
                                   "jattn.analyses.patterns")))
    return out
