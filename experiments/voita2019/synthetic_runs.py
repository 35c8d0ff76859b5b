"""The Voita stages on the synthetic clause language (``synthetic_plan``: the plan, fixed before any
gate run; ``synthetic``: its rules). They run in the full profile once the models of the plan are
made: a model not made (``MODELS``, ``CONTROLS``: ``jattn models make NAME``) leaves the stages that
read it not run, said with the command that makes it, as for every artefact of the pipeline.

- ``voita.synthetic-precondition``: each seed's test BLEU of the model and of its control without
  encoder self-attention (``training.json``, beam 4 on the 1,000 test sentences), rule 1.
- ``voita.synthetic-unpruned-s<seed>``: the unpruned model's test translations (as the gate runs
  decode) and each encoder head's confidence on the test pairs (``jattn.analyses.confidence``).
- ``voita.synthetic-gates-s<seed>-lam<λ>``: hard-concrete gates on the encoder self-attention only,
  trained jointly with the model from its checkpoint as the Multi30k gate runs are (``runs``:
  ``steps``, then on by ``steps`` / 2 while an evaluation gate is fractional, up to
  ``max_steps``), on the clause language's training split; the test set translated with the gates
  folded in.
- ``voita.synthetic-claims``: each gate run's paired-bootstrap Δ BLEU vs its seed's unpruned model
  (the study's ``bleu_gain``), then rules 3 and 4 (``synthetic``), their verdicts and a table.

The quick profile has none of these stages (six models of hours each);
``tests/reproduce/test_voita_synthetic.py`` runs them on tiny random models.
"""

from __future__ import annotations

import dataclasses
import functools
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
        "jattn.training.l0", "jattn.nn.gates", "jattn.artefacts.synthetic", "jattn.artefacts.translation")


def params(profile: Profile) -> dict:
    """The Multi30k gate runs' settings (``study.params``), with the clause recipe's cut (``max_len``
    128 cuts no sentence) and its test decoding (beam 4, up to ``max_len`` + 16 tokens)."""
    return {"lams": list(LAMS), "steps": 600, "max_steps": 3600, "gate_lr": 0.05, "model_lr": 1e-4,
            "max_tokens": 2048, "max_len": 128, "save_every": 100, "beams": 4, "max_decode": 144,
            "test_sentences": 0, "train_pairs": 0}


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


def precondition_stage(ctx: Context) -> dict:
    """Rule 1 on each pair's recorded test BLEU."""
    import json

    bleu = {name: json.loads((model_folder(name) / "training.json").read_text())["test"]["bleu"]
            for name in (*MODELS, *CONTROLS)}
    return {"bleu": bleu, **S.precondition([bleu[m] for m in MODELS], [bleu[c] for c in CONTROLS])}


def unpruned_stage(seed: int):
    def run(ctx: Context) -> dict:
        from jattn.analyses.confidence import HeadConfidence
        from jattn.io.readers import Example
        from jattn.runner import run_corpus

        s, start = _setup(ctx, seed), time.perf_counter()
        hyps = s.translate(s.pure_params())
        decoded = time.perf_counter()
        src = corpus()["test"][0][: len(s.test_refs)]
        examples = [Example(a, b, source=f"clauses test:{k + 1}") for k, (a, b) in enumerate(zip(src, s.test_refs))]
        found = run_corpus(s.model, examples, [HeadConfidence()], batch_size=32, max_length=s.model.config.max_length,
                           progress=ctx.progress)
        return {"translations": R.write_translations(ctx, f"synthetic-s{seed}-unpruned", hyps), "refs": s.test_refs,
                "confidence": np.asarray(found.statistics["encoder_confidence"].value).tolist(),
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


def claims_stage(lams: list[float]):
    """Rules 3 and 4 on the gate runs of every seed at ``lams``."""
    def run(ctx: Context) -> dict:
        pre, fewest, kept, runs = ctx.result(PRE), [], [], []
        for seed in range(len(MODELS)):
            base = ctx.result(f"voita.synthetic-unpruned-s{seed}")
            unpruned, mine = R.read_translations(ctx, base["translations"]), []
            for lam in lams:
                g = ctx.result(gate_name(seed, lam))
                rows = [{"ref": r, "gated": h, "unpruned": u} for r, h, u in
                        zip(base["refs"], R.read_translations(ctx, g["translations"]), unpruned)]
                delta = C.evaluate(rows, voita_claims._gain("gated", "unpruned"))
                mine.append({"seed": seed, "lam": lam, "open": g["open_heads"], "steps": g["steps"],
                             "fractional_gates": g["fractional_gates"], "delta": delta["value"], "ci": delta["ci"]})
            fewest.append(S.fewest_heads(mine))
            f, runs = fewest[-1], runs + mine
            chosen = None if f["censored"] or f["k"] is None else ctx.result(gate_name(seed, f["lam"]))["gates"]
            kept.append(None if chosen is None else (base["confidence"], np.asarray(chosen) > 0))
        heads = int(np.size(ctx.result("voita.synthetic-unpruned-s0")["confidence"]))
        fewest_v = S.fewest_verdict(fewest, heads, pre)
        kept_v, tested = S.kept_confidence(kept, pre)
        verdicts = {"fewest-heads": dataclasses.asdict(fewest_v), "kept-confidence": dataclasses.asdict(kept_v)}
        return {"precondition": pre, "fewest": fewest, "kept": tested, "runs": runs, "verdicts": verdicts,
                "table": _table(pre, runs, verdicts)}

    return run


def _table(pre: dict, runs: list[dict], verdicts: dict) -> str:
    lines = [f"Synthetic clause language (experiments/voita2019/synthetic_plan.py). Precondition: the encoder's "
             f"self-attention is {pre['status']} ({pre['said']}).", "",
             "| seed | λ | updates | open encoder heads | gates in (0, 1) | Δ BLEU vs unpruned [95 % CI] |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['seed']} | {r['lam']:g} | {r['steps']} | {r['open']} | {r['fractional_gates']} | "
              f"{r['delta']:+.2f} [{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}] |" for r in runs]
    lines += [""] + [f"- {name}: **{v['status']}** ({v['rule']}): {v['reason']}" for name, v in verdicts.items()]
    return "\n".join(lines)


def stages(profile: Profile) -> list[Stage]:
    """The synthetic setting's stages (full profile only; none in the quick one)."""
    if profile.name != "full":
        return []
    p = params(profile)
    shared = dict(params={k: v for k, v in p.items() if k != "lams"}, code=CODE)
    rules = CODE + ("experiments.voita2019.synthetic",)
    out = [Stage(PRE, precondition_stage, models=(*MODELS, *CONTROLS), code=rules)]
    for seed, model in enumerate(MODELS):
        out.append(Stage(f"voita.synthetic-unpruned-s{seed}", unpruned_stage(seed), models=(model,), **shared))
        out += [Stage(gate_name(seed, lam), gate_stage(seed, lam), models=(model,), **shared) for lam in p["lams"]]
    needs = (PRE, *(s.name for s in out[1:]))
    out.append(Stage(CLAIMS, claims_stage(p["lams"]), needs=needs, params=p,
                     code=rules + ("experiments.voita2019.claims", "experiments.voita2019.verdicts")))
    return out
