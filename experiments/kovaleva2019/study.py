"""Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT": disabling heads and layers (§6,
Fig. 9-10), attention-pattern types (§4, Fig. 1-2) and the change of the maps under fine-tuning
(§5, Fig. 5), on the fine-tuned classifiers of the ``finetune`` study (all-mpnet-base-v2,
12 × 12 heads, the headline; MiniLM, 6 × 12, the small variant; SST-2 and CoLA).

The paper (Kovaleva, Romanov, Rogers and Rumshisky 2019) finds that a few attention-pattern types
recur across BERT's heads, that fine-tuning changes the last layers' maps most, and that disabling
some single heads or whole layers raises a fine-tuned model's score. Its protocol: BERT-base
fine-tuned per GLUE task (MRPC, STS-B, SST-2, QQP, RTE, QNLI, MNLI), the task metric on the dev
sets with the head or layer disabled (its attention uniform), heads chosen and reported on the
same dev set; pattern types from 400 hand-labelled maps and a CNN trained on them.

Differences here (``docs/METHODS.md``): all-mpnet-base-v2 and MiniLM (the encoders jattn has
offline) instead of BERT-base, each fine-tuned with several seeds by the ``finetune`` study; SST-2
and CoLA only (CoLA is not among the paper's tasks); the best head selected on one half of dev and
reported on the other, the paper's same-set number beside it, paired bootstrap Δ with Holm over
heads and layers (``STATISTICS.md``); jattn's own 72 hand-labelled maps (the paper's maps and CNN
were not released), the rules and CNN cross-fitted on them; the cosine to the pretrained maps over
real tokens only (the released code included padding).

Stages:

- ``kovaleva.sweep-<model>-<task>-s<seed>``: dev predictions with each head, and each layer,
  disabled (Kovaleva's uniform attention), resumable by chunks (``experiments.kovaleva2019.disabling``);
- ``kovaleva.disabling-<model>-<task>``: paired bootstrap Δ per head and layer against the
  unmodified model, Holm over the family, the best head selected on one half of dev and
  reported on the other and, as the paper did, on the same examples (``experiments.kovaleva2019.claims``);
- ``kovaleva.labels``: the pattern rules' thresholds and the CNN fitted on one fold of the 72
  hand-labelled maps and scored on the other (cross-fitted, ``experiments.kovaleva2019.labels``);
- ``kovaleva.maps-<model>-<task>``: per dev example the pattern types of every head (each
  fine-tuning seed's classifier), the uniform-attention baseline, and the per-layer cosine to the
  pretrained maps (``experiments.kovaleva2019.maps``).

Costs, measured with ``nice -n 10`` while the machine ran ~20 other jobs (load average ~20 on
2 cores, so wall times were 5-8× the process CPU times). Process CPU seconds per dev sentence:
MPNet forward 0.065 s (CoLA, 16-token bucket); MPNet sweep of 144 heads 4.36 s (≈ 67 forwards:
prefix reuse re-runs layers l..11 per head of layer l), of 12 layers 0.52 s; MiniLM sweep of 72
heads 0.41 s (SST-2) and 0.22 s (CoLA), compiles of each length bucket included. On the quiet
machine the MPNet forward takes 1.9 ms a token (benchmarks/results/mpnet.json: 30 ms for a
16-token sentence, half the CPU seconds above: two threads), and the MiniLM head sweep of all
872 SST-2 dev sentences 85 s (benchmarks/results/disable.json). Padded tokens per sentence:
SST-2 dev 30.2, CoLA dev 17.4. Quiet wall per padded token, heads and layers: MPNet ≈ 0.145 s
(CPU / 2), MiniLM ≈ 0.008 s (MPNet / 17.6, the ratio of their FLOPs; the benchmark says 0.0035).

Full profile (``sizes``): every fine-tuning seed (5) of each model and task; MPNet on 400 of the
872 SST-2 dev sentences and all 527 CoLA ones, MiniLM on both full dev sets. Measured on a 2-core
AMD EPYC (`experiments/results/REPORT.md` has every stage's time): an MPNet sweep 5-7 min a seed,
a MiniLM sweep 0.4-1.2 min, the labels 0.3-0.5 min, the maps (two forwards with weights per seed,
model and task) 18-231 s a stage with another job on the cores: about 77 min in all. Quick
profile: MiniLM, seeds 0-1, 12 dev sentences of ≤ 16 tokens per task for the sweeps (one
length bucket: one compile per program) and 24 for the maps, a 40-step CNN: 80 s of stage time
at load average ~8, most of it compiling.

Run: ``jattn reproduce kovaleva --publish`` (full profile, into ``experiments/results/``; or ``--out FOLDER``);
``jattn reproduce kovaleva --quick`` (small subsets, into ``results/reproduce-quick/``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from jattn.reproduce.pipeline import Context, Profile, Stage, repository_root
from jattn.reproduce import studies
from experiments import common
from experiments.kovaleva2019 import claims as KC
from experiments.kovaleva2019.disabling import TASK_DATA, dev_examples as _dev, subset, sweep_stage

PRETRAINED = {"mpnet": "all-mpnet-base-v2", "minilm": None}  # the base of each classifier (None: embedded)
PAPER_MODEL = "BERT-base fine-tuned per GLUE task (MRPC, STS-B, SST-2, QQP, RTE, QNLI, MNLI), dev sets"


def sizes(profile: Profile) -> dict:
    """What each profile sweeps: per model the seeds and dev examples per task (0: all)."""
    return profile.pick(
        full={"sweep": {"mpnet": {"seeds": common.seeds(profile), "dev": {"sst2": 400, "cola": 0}},
                        "minilm": {"seeds": common.seeds(profile), "dev": {"sst2": 0, "cola": 0}}},
              "chunk": 64, "maps_dev": 0, "cnn_steps": 600, "corpus_sentences": 250, "per_sentence": 8},
        quick={"sweep": {"minilm": {"seeds": (0, 1), "dev": {"sst2": 12, "cola": 12}}}, "max_tokens": 16,
               "chunk": 64, "maps_dev": 24, "cnn_steps": 40, "corpus_sentences": 20, "per_sentence": 4})


def stages(profile: Profile) -> list[Stage]:
    size = sizes(profile)
    # the sweep's run lives in experiments.kovaleva2019.disabling: edits here keep it
    sweep_code = ("jattn.sweeps.disable",)
    claim_code = ("experiments.kovaleva2019.disabling", "experiments.kovaleva2019.claims")
    out = []
    for model, plan in size["sweep"].items():
        for task in ("sst2", "cola"):
            names = []
            for seed in plan["seeds"]:
                name = f"kovaleva.sweep-{model}-{task}-s{seed}"
                out.append(Stage(name, sweep_stage(model, task, seed), needs=(f"finetune.{model}-{task}-s{seed}",),
                                 params={"dev": plan["dev"][task], "chunk": size["chunk"],
                                         **({"max_tokens": size["max_tokens"]} if "max_tokens" in size else {})},
                                 data=TASK_DATA[task],
                                 code=sweep_code))
                names.append(name)
            out.append(Stage(f"kovaleva.disabling-{model}-{task}", _disabling_stage(model, task, names),
                             needs=tuple(names), data=TASK_DATA[task], code=claim_code,
                             params={"max_tokens": size["max_tokens"]} if "max_tokens" in size else {}))
    out.append(Stage("kovaleva.labels", _labels_stage, data=("sst2/dev.tsv", "sst2/train.tsv"),
                     params={"hand_sha256": _hand_sha256(), **{k: size[k] for k in
                                                                ("cnn_steps", "corpus_sentences", "per_sentence")}},
                     code=("experiments.kovaleva2019.labels", "experiments.kovaleva2019.patterns",
                           "jattn.analyses.patterns",
                           "jattn.analyses.pattern_cnn")))
    seeds = common.seeds(profile)
    for model in common.models(profile):
        for task in ("sst2", "cola"):
            out.append(Stage(f"kovaleva.maps-{model}-{task}", _maps_stage(model, task, seeds),
                             needs=(*(f"finetune.{model}-{task}-s{seed}" for seed in seeds), "kovaleva.labels"),
                             data=TASK_DATA[task],
                             params={"dev": size["maps_dev"]},
                             models=(PRETRAINED[model],) if PRETRAINED[model] and profile.name == "full" else (),
                             code=("experiments.kovaleva2019.maps", "experiments.kovaleva2019.patterns",
                                   "jattn.analyses.patterns")))
    return out


def _disabling_stage(model: str, task: str, names: list[str]):
    def run(ctx: Context) -> dict:
        sweeps = []
        for name in names:
            record = ctx.result(name)
            sweeps.append({**KC.unpack(record), "heads_per_layer": record["heads_per_layer"]})
        seeds = tuple(s["seed"] for s in sweeps)
        n, n_all = len(sweeps[0]["gold"]), len(_dev(ctx, task))
        protocol = _protocol(model, task, seeds, n, n_all, ctx.params.get("max_tokens"))
        paper_heads = (f"{PAPER_MODEL}: disabling some single heads raises dev performance (Fig. 9; up to about 3 "
                       "points), heads chosen and reported on the same dev set, no test")
        claims, best = KC.best_head_claims(ctx, model, task, sweeps, paper_heads, protocol)
        heads, head_summary = KC.family_claim(ctx, model, task, sweeps, "head", paper_heads, protocol)
        paper_layers = (f"{PAPER_MODEL}: disabling some whole layers also raises dev performance (Fig. 10), "
                        "against the fine-tuned model, no test")
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
    from experiments.kovaleva2019 import patterns as KP

    root = repository_root(Path(__file__).resolve())
    if root is None:
        raise FileNotFoundError("the hand-labelled maps are files of the jattn checkout "
                                "(experiments/labels/kovaleva-patterns). Fix: run from a checkout")
    data = ctx.data("sst2/train.tsv").parents[1]
    return KP.labels_result(ctx, jattn.load(), root, glue.read_task("sst2", "dev", root=data),
                            glue.read_task("sst2", "train", root=data))


def _maps_stage(model: str, task: str, seeds: tuple[int, ...]):
    def run(ctx: Context) -> dict:
        import jattn
        from jattn.analyses.patterns import Thresholds
        from experiments.kovaleva2019 import maps as KM
        from experiments.kovaleva2019 import patterns as KP

        dev = _dev(ctx, task)
        index = subset(len(dev), ctx.params["dev"])
        t = ctx.result("kovaleva.labels")["thresholds"]
        thresholds = Thresholds(vertical=t["vertical"], diagonal=t["diagonal"])
        base = jattn.load(PRETRAINED[model]) if PRETRAINED[model] else jattn.load()
        examples = [dev[i] for i in index]
        runs = {seed: KM.dev_maps(base, jattn.load(common.classifier(ctx, model, task, seed)), examples, thresholds)
                for seed in seeds}
        protocol = (f"{model} fine-tuned on {task} (seeds {', '.join(map(str, seeds))}, each) against its pretrained "
                    "base, "
                    f"{'all' if len(index) == len(dev) else f'a fixed random {len(index)} of the {len(dev)}'} dev "
                    f"examples; deviations: model, task{' (not among the paper’s)' if task == 'cola' else ''}")
        return KP.maps_result(ctx, model, task, index, runs, thresholds, protocol)

    return run


def _protocol(model: str, task: str, seeds: tuple, n: int, n_all: int, max_tokens: int | None) -> str:
    part = "all" if n == n_all else f"a fixed random {n} of the {n_all}"
    part += " dev examples" + (f" (drawn among those of ≤ {max_tokens} tokens)" if max_tokens else "")
    return (f"{model} fine-tuned on {task} (seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}), "
            f"{part}; a head disabled as in the paper (its attention uniform over the real tokens); "
            f"deviations: model ({'12 × 12' if model == 'mpnet' else '6 × 12'} heads, not BERT-base), "
            f"task{' (CoLA is not among the paper’s tasks)' if task == 'cola' else ''}")


def _hand_sha256() -> str:
    from experiments.kovaleva2019.labels import hand_files

    root = repository_root(Path(__file__).resolve())
    if root is None:
        return "no checkout"
    return hashlib.sha256(b"".join(p.read_bytes() for p in hand_files(root))).hexdigest()


studies.register('kovaleva', stages,
                 'Kovaleva et al. 2019: Revealing the dark secrets of BERT')
