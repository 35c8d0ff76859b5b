"""The Voita stages on the synthetic clause language (``synthetic_plan``: the plan, fixed before any
gate run; ``synthetic``: its rules). They are the full profile's. The precondition stage runs
always, on the models of the plan that are made (``made``: committed in ``checkpoints/`` or in
jattn's cache; which are made is part of its key, so making one reruns it); every stage that
decodes or trains waits for it: it spends no compute, and records why, unless rule 1 says the
encoder's self-attention is "needed" (which takes every seed's model and control made).

- ``voita.synthetic-precondition``: each made model's and control's test BLEU (``training.json``,
  beam 4 on the 1,000 test sentences), rule 1 once all are made; else the missing models and the
  ``jattn models make`` command (``synthetic.models_missing``).
- ``voita.synthetic-unpruned-s<seed>``: the unpruned model's test translations (as the gate runs
  decode), each encoder head's confidence on the test pairs (``jattn.analyses.confidence``) and
  its role (``jattn.analyses.roles``: positional, rare-word, and syntactic against the generator's
  gold structure, ``jattn.artefacts.translation.gold_structure``, which replaces spaCy's parse on this language; the
  detectors validated on planted heads first, plan rule 5:
  ``tests/reproduce/test_voita_synthetic_roles.py``).
- ``voita.synthetic-gates-s<seed>-lam<λ>``: hard-concrete gates on the encoder self-attention only,
  trained jointly with the model from its checkpoint as the Multi30k gate runs are (``runs``:
  ``steps``, then on by ``steps`` / 2 while an evaluation gate is fractional, up to
  ``max_steps``), on the clause language's training split; the test set translated with the gates
  folded in.
- ``voita.synthetic-control-s<seed>``: rule 2's all-gates-open control of that seed (gates held at
  1, λ 0, as ``runs.control_stage`` trains Multi30k's), one run up to the seed's longest gate run,
  translating the test set at every update count a gate run of the seed stopped at: each gate run
  has a control trained as long.
- ``voita.synthetic-claims``: per gate run the paired-bootstrap Δ BLEU vs its seed's unpruned model
  (rule 3's, the study's ``bleu_gain``), the control's Δ vs the unpruned model at as many updates
  and the gate run's Δ vs that control beside it; the claims ``voita-synthetic-precondition``,
  ``-fewest-heads``, ``-kept-confidence`` (judged by ``synthetic.judge``) and a table.

The quick profile has none of these stages (six models of hours each);
``tests/reproduce/test_voita_synthetic.py`` runs them on tiny random models.
"""

from __future__ import annotations

import functools
import json
import math
import time
from pathlib import Path

import numpy as np

from jattn.reproduce import claims as C
from jattn.reproduce.pipeline import Context, Profile, Stage
from experiments import common
from experiments.voita2019 import claims as voita_claims
from experiments.voita2019 import runs as R
from experiments.voita2019 import synthetic as S
from experiments.voita2019.synthetic_plan import CONTROLS, LAMS, MODELS

PRE, CLAIMS = "voita.synthetic-precondition", "voita.synthetic-claims"
CODE = ("experiments.common", "experiments.voita2019.runs", "experiments.voita2019.synthetic_plan",
        "jattn.training.l0", "jattn.nn.gates", "jattn.artefacts.synthetic", "jattn.artefacts.translation",
        "jattn.analyses.roles")


def params(profile: Profile) -> dict:
    """The Multi30k gate runs' settings (``study.params``), with the clause recipe's cut (``max_len``
    128 cuts no sentence) and its test decoding (beam 4, up to ``max_len`` + 16 tokens)."""
    return {"lams": list(LAMS), "steps": 600, "max_steps": 3600, "gate_lr": 0.05, "model_lr": 1e-4,
            "max_tokens": 2048, "max_len": 128, "save_every": 100, "beams": 4, "max_decode": 144,
            "test_sentences": 0, "train_pairs": 0, "rare_top": 500, "min_relation_count": 100}


def model_folder(name: str) -> Path:
    """A made model of the plan: its copy committed in ``checkpoints/``, else the artefact in jattn's
    cache (``ArtefactNotMade``, naming the command, when it is not made: the stage does not run)."""
    from jattn import artefacts
    from jattn.io.artefacts import DONE

    committed = common.COMMITTED / name
    return committed if (committed / DONE).is_file() else artefacts.path(name)


@functools.cache
def corpus() -> dict[str, tuple[list[str], list[str]]]:
    """The clause language's training and test splits (sources, targets), as the models were trained."""
    from jattn.artefacts.translation import TranslationConfig, splits

    train, _, test = splits(TranslationConfig(corpus="clauses"))
    return {"train": train, "test": test}


def _setup(ctx: Context, seed: int) -> R.Setup:
    import jattn
    from jattn.io.parallel import encode

    model = jattn.load(model_folder(MODELS[seed]), use_cache=False)
    src, refs = corpus()["test"]
    n = ctx.params["test_sentences"] or len(src)
    return R.Setup(model, encode(model.tokenizer, src[:n], model.config.max_length), refs[:n], ctx.params)


def made(name: str) -> bool:
    """Whether the model ``name`` of the plan is made (committed or in jattn's cache)."""
    try:
        return model_folder(name).is_dir()
    except FileNotFoundError:  # ArtefactNotMade
        return False


def precondition_stage(ctx: Context) -> dict:
    """Rule 1 on each pair's recorded test BLEU; the missing models while any is not made."""
    bleu = {name: json.loads((model_folder(name) / "training.json").read_text())["test"]["bleu"]
            for name in ctx.params["made"]}
    if missing := [name for name in (*MODELS, *CONTROLS) if name not in bleu]:
        return {"bleu": bleu, **S.models_missing(missing)}
    return {"bleu": bleu, **S.precondition([bleu[m] for m in MODELS], [bleu[c] for c in CONTROLS])}


def when_needed(run):
    """``run`` as a stage that first reads the precondition: unless it says "needed", the stage
    returns ``{"skipped": why}`` without loading a model (no compute spent)."""
    @functools.wraps(run)
    def stage(ctx: Context) -> dict:
        pre = ctx.result(PRE)
        if pre["status"] != S.NEEDED:
            return {"skipped": f"the encoder's self-attention is {pre['status']} ({pre['said']})"}
        return run(ctx)

    return stage


def _gold_labelled(s: R.Setup, sources: list[str], p: dict) -> list:
    """The test pairs labelled for ``roles.TokenRoles`` by the generator's gold structure (each
    dependent's head its clause's head noun: ``SyntheticTask.structure``, in place of a parse;
    the detectors validated on planted heads first, plan rule 5) and the training split's token
    frequencies (rare-word heads)."""
    from jattn.analyses import roles
    from jattn.artefacts.translation import CLAUSE, TranslationConfig, gold_structure
    from jattn.io.parallel import encode
    from jattn.io.readers import Example

    tok, config = s.model.tokenizer, TranslationConfig(corpus="clauses")
    train = encode(tok, corpus()["train"][0][: p["train_pairs"] or None], 10**6)
    rank = roles.frequency_rank([x[:-1] for x in train], s.model.config.vocab_size)
    examples = []
    for k, (text, ids, ref) in enumerate(zip(sources, s.test_src, s.test_refs)):
        heads, relations = gold_structure(config, text)
        word = roles.token_words(tok, ids, text, text.split())
        labels = roles.token_labels(word, np.asarray(heads), relations, ids, rank, p["rare_top"], known=(CLAUSE,))
        examples.append(Example(text, ref, source=f"clauses test:{k + 1}", labels=labels))
    return examples


def unpruned_stage(seed: int):
    """The unpruned model's test translations, each encoder head's confidence, and its role
    (``jattn.analyses.roles`` against the gold structure: ``_gold_labelled``)."""
    def run(ctx: Context) -> dict:
        from jattn.analyses import roles
        from jattn.analyses.confidence import HeadConfidence
        from jattn.artefacts.translation import CLAUSE
        from jattn.runner import run_corpus

        s, start = _setup(ctx, seed), time.perf_counter()
        hyps = s.translate(s.pure_params())
        decoded = time.perf_counter()
        examples = _gold_labelled(s, corpus()["test"][0][: len(s.test_refs)], ctx.params)
        method = roles.TokenRoles(ctx.params["min_relation_count"], relations=(CLAUSE,))
        found = run_corpus(s.model, examples, [HeadConfidence(), method], batch_size=32,
                           max_length=s.model.config.max_length, progress=ctx.progress)
        r = method.roles(found.statistics)
        return {"translations": R.write_translations(ctx, f"synthetic-s{seed}-unpruned", hyps), "refs": s.test_refs,
                "confidence": np.asarray(found.statistics["encoder_confidence"].value).tolist(),
                "roles": np.asarray(r["role"]).tolist(), "margin": np.asarray(r["margin"]).tolist(),
                "previous": np.asarray(r["prev"]).tolist(), "next": np.asarray(r["next"]).tolist(),
                "rare": np.asarray(r["rare"]).tolist(),
                "seconds": {"decode": round(decoded - start, 1), "confidence": round(time.perf_counter() - decoded, 1)}}

    return run


def _batches(s: R.Setup, p: dict):
    """``epoch -> batches`` of the training split as the gate runs of ``runs`` batch Multi30k."""
    from jattn.io.parallel import encode
    from jattn.runner import token_batches
    from jattn.training.nmt import device_batch

    src, tgt = (texts[: p["train_pairs"] or None] for texts in corpus()["train"])
    cut = functools.partial(encode, s.model.tokenizer, max_tokens=p["max_len"], truncate=True)
    src, tgt, c = cut(src), cut(tgt, target=True), s.model.config
    return lambda epoch: [device_batch(b) for b in token_batches(
        src, tgt, p["max_tokens"], c.pad_token_id, c.decoder_start_token_id, np.random.default_rng(1000 + epoch))]


def gate_stage(seed: int, lam: float):
    """Encoder gates of seed ``seed``'s model at penalty ``lam``, trained until no evaluation gate
    is fractional or ``max_steps``."""
    def run(ctx: Context) -> dict:
        from jattn.training.l0 import GateTrainer, fold_gates

        p, s, start = ctx.params, _setup(ctx, seed), time.perf_counter()
        batches, steps = _batches(s, p), p["steps"]
        while True:  # each GateTrainer resumes from the work folder's checkpoint
            trainer = GateTrainer(s.model.config, s.pure_params(), R._gate_config(p, "encoder", lam, steps),
                                  ctx.work() / "gates", batches)
            trainer.fit(progress=ctx.progress)
            if not R._fractional(trainer.evaluation_gates()) or steps >= p["max_steps"]:
                break
            steps = min(steps + p["steps"] // 2, p["max_steps"])
        trained, gates = time.perf_counter() - start, trainer.evaluation_gates()
        hyps = s.translate(fold_gates(trainer.params, s.model.config, gates))
        encoder = np.asarray(gates["encoder"])
        return {"seed": seed, "lam": lam, "steps": trainer.meta["step"], "gates": encoder.tolist(),
                "open_heads": int((encoder > 0).sum()), "fractional_gates": R._fractional(gates),
                "curve": trainer.meta["curve"],
                "translations": R.write_translations(ctx, f"synthetic-s{seed}-{R.lam_name(lam)}", hyps),
                "seconds": {"training": round(trained, 1), "decode": round(time.perf_counter() - start - trained, 1)}}

    return run


def gate_name(seed: int, lam: float) -> str:
    return f"voita.synthetic-gates-s{seed}-{R.lam_name(lam)}"


def control_name(seed: int) -> str:
    return f"voita.synthetic-control-s{seed}"


def control_stage(seed: int, lams: list[float]):
    """Rule 2's all-gates-open control of seed ``seed``, translated at every update count one of its
    gate runs stopped at (``runs.control_stage``'s protocol on the clause language)."""
    def run(ctx: Context) -> dict:
        from jattn.training.l0 import GateTrainer

        p, s, start = ctx.params, _setup(ctx, seed), time.perf_counter()
        batches = _batches(s, p)
        counts = sorted({ctx.result(gate_name(seed, lam))["steps"] for lam in lams})
        done = ctx.work() / "done.json"
        files = json.loads(done.read_text()) if done.is_file() else {}
        for steps in counts:
            if str(steps) not in files:
                trainer = GateTrainer(s.model.config, s.pure_params(), R._gate_config(p, "encoder", 0.0, steps),
                                      ctx.work() / "gates", batches)  # resumes from the previous count
                trainer.fit(progress=ctx.progress)
                files[str(steps)] = R.write_translations(ctx, f"synthetic-s{seed}-control-{steps}",
                                                         s.translate(trainer.params))
                done.write_text(json.dumps(files))
        return {"seed": seed, "steps": counts, "translations": files, "seconds": round(time.perf_counter() - start, 1)}

    return run


def _delta(rows: list[dict], hyp: str, reference: str) -> dict:
    return C.evaluate(rows, voita_claims._gain(hyp, reference))


def _measured(ctx: Context, lams: list[float]) -> tuple[list[dict], list]:
    """Every gate run's numbers (Δ BLEU vs its seed's unpruned model; the control's Δ at as many
    updates and the run's Δ vs that control beside it) and each seed's head confidences."""
    runs, confidence = [], []
    for seed in range(len(MODELS)):
        base, control = ctx.result(f"voita.synthetic-unpruned-s{seed}"), ctx.result(control_name(seed))
        unpruned = R.read_translations(ctx, base["translations"])
        confidence.append(np.asarray(base["confidence"]).ravel().tolist())
        for lam in lams:
            g = ctx.result(gate_name(seed, lam))
            trained = R.read_translations(ctx, control["translations"][str(g["steps"])])
            rows = [{"ref": r, "gated": h, "unpruned": u, "control": c} for r, h, u, c in
                    zip(base["refs"], R.read_translations(ctx, g["translations"]), unpruned, trained)]
            delta, versus, control_delta = (_delta(rows, "gated", "unpruned"), _delta(rows, "gated", "control"),
                                            _delta(rows, "control", "unpruned"))
            runs.append({"seed": seed, "lam": lam, "open": g["open_heads"], "steps": g["steps"],
                         "fractional_gates": g["fractional_gates"], "gates": np.asarray(g["gates"]).ravel().tolist(),
                         "delta": delta["value"], "ci": delta["ci"], "vs_control": versus["value"],
                         "vs_control_ci": versus["ci"], "control_delta": control_delta["value"],
                         "control_ci": control_delta["ci"]})
    return runs, confidence


def claims_stage(lams: list[float]):
    """The synthetic claims: rule 1's numbers, and rules 3 and 4's on the gate runs of every seed at
    ``lams`` (none where the precondition is unmet: the claims then carry it, and NaN numbers)."""
    def run(ctx: Context) -> dict:
        pre = ctx.result(PRE)
        runs, confidence = _measured(ctx, lams) if pre["status"] == S.NEEDED else ([], [None] * len(MODELS))
        heads = len(confidence[0]) if confidence[0] is not None else 24
        carried = {"precondition": pre, "runs": runs, "confidence": confidence, "heads": heads,
                   "seed_count": len(MODELS)}
        claims = _claims(ctx, carried)
        return {**carried, "claims": claims, "table": _table(pre, runs)}

    return run


def _claims(ctx: Context, carried: dict) -> list[dict]:
    """The three claims, one row per seed (NaN where a seed has no number yet)."""
    pre, runs, heads = carried["precondition"], carried["runs"], carried["heads"]
    nan, seeds = math.nan, range(len(MODELS))
    protocol = ("synthetic clause language (experiments/voita2019/synthetic_plan.py), 3 + 3 × 8 models, seeds 0-2, "
                "1,000 test sentences, beam 4; Student-t interval over the seeds")
    seeds_mean = lambda column: {"statistic": "mean", "ci_method": "seeds", "columns": {"value": column}}  # noqa
    deltas = pre.get("deltas") or [nan] * len(MODELS)
    rows = [{"seed": s, "delta": d, "threshold": -S.BLEU_THRESHOLD} for s, d in zip(seeds, deltas)]
    out = [ctx.claim(id=S.PREFIX + "precondition", unit="Δ BLEU", rows=rows, n=len(rows), seeds=len(rows),
                     claim="BLEU of the model without encoder self-attention minus the model's (the precondition, "
                           "rule 1)", paper=R.PAPER, measure=seeds_mean("delta"), protocol=protocol,
                     baseline={"name": "the threshold", **seeds_mean("threshold")}, **carried)]
    fewest = [S.fewest_heads([r for r in runs if r["seed"] == s]) if runs else {"k": None} for s in seeds]
    rows = [{"seed": s, "k": nan if f["k"] is None else f["k"], "limit": S.KEPT_SHARE * heads}
            for s, f in zip(seeds, fewest)]
    out.append(ctx.claim(id=S.PREFIX + "fewest-heads", unit="heads", rows=rows, n=len(rows), seeds=len(rows),
                         claim=f"fewest open encoder heads (of {heads}) within {S.BLEU_THRESHOLD:g} BLEU of the "
                               "unpruned model, per seed (rule 3)", paper=R.PAPER, measure=seeds_mean("k"),
                         protocol=protocol, baseline={"name": f"the limit {S.KEPT_SHARE:g} × {heads}",
                                                      **seeds_mean("limit")}, **carried))
    rows = []
    for s, f in zip(seeds, fewest):
        confidence = carried["confidence"][s]
        run = next((r for r in runs if r["seed"] == s and r["lam"] == f.get("lam")), None)
        kept = None if run is None or confidence is None else np.asarray(run["gates"]) > 0
        rows.append({"seed": s, "kept": nan if kept is None or not kept.any() else float(np.mean(
            np.asarray(confidence)[kept])), "all": nan if confidence is None else float(np.mean(confidence))})
    out.append(ctx.claim(id=S.PREFIX + "kept-confidence", unit="confidence", rows=rows, n=len(rows),
                         seeds=len(rows), claim="mean confidence of the encoder heads kept at each seed's fewest "
                                                "count (rule 4)", paper=R.PAPER, measure=seeds_mean("kept"),
                         protocol=protocol, baseline={"name": "mean confidence of all encoder heads (the mean of "
                                                              "random same-size subsets)", **seeds_mean("all")},
                         **carried))
    return out


def _table(pre: dict, runs: list[dict]) -> str:
    lines = [f"Synthetic clause language (experiments/voita2019/synthetic_plan.py). Precondition: the encoder's "
             f"self-attention is {pre['status']} ({pre['said']}).", ""]
    if not runs:
        return lines[0] + " No gate run: they wait for the precondition."
    ci = lambda lo_hi: f"[{lo_hi[0]:+.2f}, {lo_hi[1]:+.2f}]"  # noqa: E731
    lines += ["| seed | λ | updates | open encoder heads | gates in (0, 1) | Δ BLEU vs unpruned [95 % CI] | "
              "control (as many updates) vs unpruned | gates vs control |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['seed']} | {r['lam']:g} | {r['steps']} | {r['open']} | {r['fractional_gates']} | "
              f"{r['delta']:+.2f} {ci(r['ci'])} | {r['control_delta']:+.2f} {ci(r['control_ci'])} | "
              f"{r['vs_control']:+.2f} {ci(r['vs_control_ci'])} |" for r in runs]
    return "\n".join(lines)


def stages(profile: Profile) -> list[Stage]:
    """The synthetic setting's stages (full profile only; none in the quick one)."""
    if profile.name != "full":
        return []
    p, made_now = params(profile), tuple(m for m in (*MODELS, *CONTROLS) if made(m))
    shared = dict(params={k: v for k, v in p.items() if k != "lams"}, code=CODE + ("experiments.voita2019.synthetic",),
                  needs=(PRE,))
    out = [Stage(PRE, precondition_stage, params={"made": list(made_now)}, models=made_now,
                 code=CODE + ("experiments.voita2019.synthetic",))]
    for seed, model in enumerate(MODELS):
        out.append(Stage(f"voita.synthetic-unpruned-s{seed}", when_needed(unpruned_stage(seed)), models=(model,),
                         **shared))
        out += [Stage(gate_name(seed, lam), when_needed(gate_stage(seed, lam)), models=(model,), **shared)
                for lam in p["lams"]]
        out.append(Stage(control_name(seed), when_needed(control_stage(seed, p["lams"])), models=(model,),
                         **{**shared, "needs": (PRE, *(gate_name(seed, lam) for lam in p["lams"]))}))
    out.append(Stage(CLAIMS, claims_stage(p["lams"]), needs=tuple(s.name for s in out), params=p,
                     code=CODE + ("experiments.voita2019.synthetic", "experiments.voita2019.claims")))
    return out
