"""The Voita stages that train or translate (``voita`` has the protocol): the unpruned model's test
translations, one gate run (a λ and a setting), the all-gates-open control, the importance
estimate, Michel's pruning to each gate run's open-head count, and the model trained from scratch
with no encoder self-attention. Each system's translations are a text file under
``<out>/predictions/voita/`` (one line per test sentence, aligned with the test file); a stopped
stage continues from its work folder (gate checkpoints, finished files).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from jattn.reproduce.pipeline import Context

MODEL = "multi30k-fr-en-6x8"
CONTROL = "multi30k-fr-en-6x8-no-encoder-attention"  # MODEL's recipe with no encoder self-attention
SETTINGS = {"encoder": ("encoder",), "all": ("encoder", "decoder", "cross")}  # setting -> gated attention types
TEST = "test_2016_flickr"
PAPER = ("Voita et al. 2019: Transformer-base (6+6 x 8 heads) on WMT en-ru; 38 of 48 encoder heads pruned for "
         "-0.15 BLEU; gates trained jointly with the model from convergence")
DATA = tuple(f"multi30k/{split}.{side}" for split in ("train", "val", TEST) for side in ("fr", "en"))


def quick_model_config():
    from jattn.artefacts.translation import TranslationConfig

    return TranslationConfig(limit_train=300, limit_eval=24, vocab_size=400, layers=1, heads=2, d_model=32, ffn=64,
                             epochs=2, patience=0, max_len=24, test_beams=2, val_pairs=24)


def translation_model(ctx: Context) -> Path:
    """The model's folder: the made artefact (full profile), or the quick profile's tiny model
    trained into the work folder."""
    return _made(ctx, MODEL, "tiny-fr-en", quick_model_config())


def control_model(ctx: Context) -> Path:
    """The control's folder: the same recipe with no encoder self-attention, trained from scratch
    (full profile: the made artefact ``CONTROL``; quick: the tiny model's settings without it)."""
    return _made(ctx, CONTROL, "tiny-fr-en-no-encoder-attention",
                 dataclasses.replace(quick_model_config(), encoder_self_attention=False))


COMMITTED = Path(__file__).resolve().parents[2] / "checkpoints"  # the checkout's committed models


def _made(ctx: Context, artefact: str, tiny: str, config) -> Path:
    """Full profile: the copy of ``artefact`` committed in ``checkpoints/`` (made by its recipe), else
    the artefact made in jattn's cache (``jattn models make``); quick: ``config`` trained here."""
    from jattn.io.artefacts import DONE

    if ctx.profile.name == "full":
        from jattn.artefacts.making import make

        committed = COMMITTED / artefact
        return committed if (committed / DONE).is_file() else make(artefact, progress=ctx.progress)
    from jattn.artefacts.translation import train_translation

    out = ctx.work_root / "models" / tiny
    if not (out / DONE).is_file():
        train_translation(out, ctx.work_root / "models" / f"{tiny}-work", config, data_dir=ctx.data_dir,
                          progress=False)
    return out


def lam_name(lam: float) -> str:
    return f"lam{lam:g}"


@dataclasses.dataclass
class Setup:
    """The model and the data a stage works on (texts prepared as the model's folder says)."""

    model: object
    test_src: list  # token ids per test sentence
    test_refs: list[str]
    p: dict

    @classmethod
    def load(cls, ctx: Context, folder: Path | None = None) -> "Setup":
        """The study's model (``folder``: another model of the study, the control)."""
        import jattn
        from jattn.io.parallel import encode

        model = jattn.load(folder or translation_model(ctx), use_cache=False)
        src, refs = (read(ctx, TEST, side, model) for side in ("fr", "en"))
        n = ctx.params["test_sentences"] or len(src)
        return cls(model, encode(model.tokenizer, src[:n], model.config.max_length), refs[:n], ctx.params)

    def translate(self, params) -> list[str]:
        """Beam-search translations of the test sources with ``params`` (a nested dict)."""
        from jattn.training.nmt import translations

        return translations(params, self.model.config, self.model.tokenizer, self.test_src, num_beams=self.p["beams"],
                            max_length=self.p["max_decode"])

    def pure_params(self) -> dict:
        from flax import nnx

        return nnx.to_pure_dict(self.model.params)


def read(ctx: Context, split: str, side: str, model) -> list[str]:
    return model.prepare_texts(ctx.data(f"multi30k/{split}.{side}").read_text(encoding="utf-8").splitlines())


def translations_file(ctx: Context, system: str) -> Path:
    path = ctx.out / "predictions" / "voita" / f"{system}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def write_translations(ctx: Context, system: str, hyps: list[str]) -> str:
    if any("\n" in h for h in hyps):
        raise ValueError(f"{system}: a translation holds a line break; one line per sentence is the file's layout")
    path = translations_file(ctx, system)
    path.write_text("\n".join(hyps) + "\n", encoding="utf-8")
    return ctx.relative(path)


def repository_path(ctx: Context, relative: str) -> Path:
    """The file a result names (relative to the repository, or to the output folder outside one)."""
    from jattn.reproduce.pipeline import repository_root

    return (repository_root(ctx.out.resolve()) or ctx.out.resolve()) / relative


def read_translations(ctx: Context, relative: str) -> list[str]:
    return repository_path(ctx, relative).read_text(encoding="utf-8").split("\n")[:-1]


def unpruned_stage(ctx: Context) -> dict:
    s = Setup.load(ctx)
    start = time.perf_counter()
    hyps = s.translate(s.pure_params())
    sources = read(ctx, TEST, "fr", s.model)[: len(hyps)]
    return {"translations": write_translations(ctx, "unpruned", hyps), "refs": s.test_refs, "sources": sources,
            "heads": {k: int(L * H) for k, (L, H) in s.model.head_shapes.items()},
            "seconds": {"decode": round(time.perf_counter() - start, 1)}}


def no_encoder_attention_stage(ctx: Context) -> dict:
    """The control trained from scratch with no encoder self-attention (``control_model``),
    translating the test set as the unpruned model does."""
    s = Setup.load(ctx, control_model(ctx))
    start = time.perf_counter()
    hyps = s.translate(s.pure_params())
    return {"translations": write_translations(ctx, "no-encoder-attention", hyps),
            "seconds": {"decode": round(time.perf_counter() - start, 1)}}


def _training_batches(ctx: Context, s: Setup, p: dict):
    """``epoch -> list of batches`` over the training split (its first ``train_pairs``), as the model
    was trained (token-based batches of ``max_tokens``, sentences cut to ``max_len``), shuffled per
    epoch."""
    from jattn.io.parallel import encode
    from jattn.runner import token_batches
    from jattn.training.nmt import device_batch

    tok, c, n = s.model.tokenizer, s.model.config, p["train_pairs"] or None
    src = encode(tok, read(ctx, "train", "fr", s.model)[:n], p["max_len"], truncate=True)
    tgt = encode(tok, read(ctx, "train", "en", s.model)[:n], p["max_len"], target=True, truncate=True)
    return lambda epoch: [device_batch(b) for b in token_batches(src, tgt, p["max_tokens"], c.pad_token_id,
                                                                 c.decoder_start_token_id,
                                                                 np.random.default_rng(1000 + epoch))]


def _fractional(gates: dict) -> int:
    return int(sum(((g > 0) & (g < 1)).sum() for g in gates.values()))


def _gate_config(p: dict, setting: str, lam: float, steps: int):
    """The joint gate training of a run: ``lam`` 0 is the all-gates-open control (gates held at 1)."""
    from jattn.training.l0 import GateConfig

    return GateConfig(lam=lam, kinds=SETTINGS[setting], steps=steps, lr=p["gate_lr"], model_lr=p["model_lr"],
                      fixed_open=lam == 0, dropout=True, label_smoothing=0.1, save_every=p["save_every"])


def gate_stage(setting: str, lam: float):
    """Gates on ``setting``'s attention types trained jointly with the model at penalty ``lam``."""
    def run(ctx: Context) -> dict:
        from jattn.training.l0 import GateTrainer, fold_gates

        p, s = ctx.params, Setup.load(ctx)
        batches = _training_batches(ctx, s, p)
        steps, start = p["steps"], time.perf_counter()
        trainer = GateTrainer(s.model.config, s.pure_params(), _gate_config(p, setting, lam, steps),
                              ctx.work() / "gates", batches)
        trainer.fit(progress=ctx.progress)
        while _fractional(trainer.evaluation_gates()) and steps < p["max_steps"]:
            steps = min(steps + p["steps"] // 2, p["max_steps"])
            trainer = GateTrainer(s.model.config, s.pure_params(), _gate_config(p, setting, lam, steps),
                                  ctx.work() / "gates", batches)  # resumes
            trainer.fit(progress=ctx.progress)
        trained = time.perf_counter() - start
        gates = trainer.evaluation_gates()  # {kind: (L, H)}, 1 for the ungated types
        hyps = s.translate(fold_gates(trainer.params, s.model.config, gates))
        return {"setting": setting, "lam": lam, "steps": trainer.meta["step"],
                "gates": {k: np.asarray(g).tolist() for k, g in gates.items()},
                "open_heads": {k: int((np.asarray(g) > 0).sum()) for k, g in gates.items()},
                "fractional_gates": _fractional(gates), "curve": trainer.meta["curve"],
                "translations": write_translations(ctx, f"{setting}-{lam_name(lam)}", hyps),
                "seconds": {"training": round(trained, 1), "decode": round(time.perf_counter() - start - trained, 1)}}

    return run


def control_stage(gate_stages: tuple[str, ...]):
    """The all-gates-open control: the model trained as the gate runs train it (gates held at 1,
    λ 0), one run up to the longest gate run's updates, translating the test set at every update
    count a gate run stopped at, so each gate run has a control trained for as many updates."""
    def run(ctx: Context) -> dict:
        from jattn.training.l0 import GateTrainer

        p, s = ctx.params, Setup.load(ctx)
        batches = _training_batches(ctx, s, p)
        counts = sorted({ctx.result(g)["steps"] for g in gate_stages})
        done, start = ctx.work() / "done.json", time.perf_counter()
        files = json.loads(done.read_text()) if done.is_file() else {}
        for steps in counts:
            if str(steps) not in files:
                trainer = GateTrainer(s.model.config, s.pure_params(), _gate_config(p, "all", 0.0, steps),
                                      ctx.work() / "gates", batches)  # resumes from the previous count
                trainer.fit(progress=ctx.progress)
                files[str(steps)] = write_translations(ctx, f"control-{steps}", s.translate(trainer.params))
                done.write_text(json.dumps(files))
        return {"steps": counts, "translations": files, "seconds": round(time.perf_counter() - start, 1)}

    return run


def importance_stage(ctx: Context) -> dict:
    """Michel's head importance of the converged model over a seeded slice of the validation split."""
    import jattn

    p, s = ctx.params, Setup.load(ctx)
    src, tgt = read(ctx, "val", "fr", s.model), read(ctx, "val", "en", s.model)
    pick = np.sort(np.random.default_rng(0).choice(len(src), min(p["importance_pairs"], len(src)), replace=False))
    start = time.perf_counter()
    scores = jattn.importance(s.model, [(src[i], tgt[i]) for i in pick], estimator="token", batch_size=32,
                              progress=ctx.progress)  # sentences of up to 128 tokens, none cut
    return {"importance": {k: np.asarray(v).tolist() for k, v in scores.items()}, "pairs": len(pick),
            "seconds": round(time.perf_counter() - start, 1)}


def keep_top(scores: dict, kinds: tuple, k: int, shapes: dict) -> dict[str, np.ndarray]:
    """Head masks (1 kept) keeping the ``k`` highest-scoring heads of ``kinds`` ranked together (ties:
    the lower flat index first); the other attention types keep every head."""
    flat = np.concatenate([np.asarray(scores[t], np.float64).ravel() for t in kinds])
    order = np.lexsort((np.arange(flat.size), -flat))  # highest first
    kept = np.zeros(flat.size, np.float32)
    kept[order[:k]] = 1.0
    masks, start = {t: np.ones(shapes[t], np.float32) for t in shapes}, 0
    for t in kinds:
        size = int(np.prod(shapes[t]))
        masks[t] = kept[start:start + size].reshape(shapes[t])
        start += size
    return masks


def michel_stage(setting: str, gate_stages: tuple[str, ...]):
    """The converged model pruned to each gate run's open-head count (of ``setting``'s types) by
    importance and by random orders; every system translates the test set."""
    def run(ctx: Context) -> dict:
        from experiments.michel2019 import curves as mc
        from jattn.training.l0 import fold_gates

        p, s = ctx.params, Setup.load(ctx)
        kinds, shapes = SETTINGS[setting], s.model.head_shapes
        n = sum(int(np.prod(shapes[t])) for t in kinds)
        orders = {"importance": ctx.result("voita.importance")["importance"]}
        for r, scores in enumerate(mc.random_orders(n, p["random_orders"], seed=0)):
            parts = np.split(scores, np.cumsum([int(np.prod(shapes[t])) for t in kinds])[:-1])
            orders[f"random-{r}"] = {t: part.reshape(shapes[t]) for t, part in zip(kinds, parts)}
        counts = sorted({sum(ctx.result(g)["open_heads"][t] for t in kinds) for g in gate_stages})
        done, start = ctx.work() / "done.json", time.perf_counter()
        files = json.loads(done.read_text()) if done.is_file() else {}
        for k in counts:
            for name, scores in orders.items():
                system = f"michel-{setting}-{k}-{name}"
                if system not in files:
                    masks = keep_top(scores, kinds, k, shapes)
                    files[system] = write_translations(ctx, system, s.translate(fold_gates(s.pure_params(),
                                                                                          s.model.config, masks)))
                    done.write_text(json.dumps(files))
        return {"setting": setting, "counts": counts, "heads": n, "orders": list(orders), "translations": files,
                "seconds": round(time.perf_counter() - start, 1)}

    return run
