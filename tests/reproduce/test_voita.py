"""The Voita study of ``jattn reproduce``: the BLEU statistics against sacreBLEU, Michel's top-k
masks against a brute force, joint gate training resumed after a stop, and the quick profile end
to end (every claim recomputed from its files, BLEU from the translation files)."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import jax
import numpy as np
import pytest
import sacrebleu

from jattn.reproduce import claims, pipeline, records
from experiments import common
from experiments.voita2019 import claims as voita_claims
from experiments.voita2019 import runs as voita_runs

WORDS = "a man in a red shirt is riding a bike down the street while two dogs watch".split()


def _corpus(rng, n=40):
    refs = [" ".join(rng.choice(WORDS, rng.integers(3, 10))) for _ in range(n)]
    noisy = lambda keep: [" ".join(w for w in r.split() if rng.random() < keep) or "a" for r in refs]  # noqa: E731
    return refs, noisy


def test_bleu_statistics_are_sacrebleus():
    rng = np.random.default_rng(0)
    refs, noisy = _corpus(rng)
    a, b, c = noisy(0.9), noisy(0.6), noisy(0.3)
    bleu = lambda hyps: sacrebleu.corpus_bleu(list(hyps), [refs]).score  # noqa: E731
    fn = {k: v[1] for k, v in claims.STATISTICS.items()}
    assert fn["bleu"](refs, a) == pytest.approx(bleu(a), abs=1e-9)
    two = np.stack([b, c], 1)  # (n, 2): two systems, their BLEUs averaged
    assert fn["bleu"](refs, two) == pytest.approx((bleu(b) + bleu(c)) / 2, abs=1e-9)
    assert fn["bleu_gain"](refs, a, two) == pytest.approx(bleu(a) - (bleu(b) + bleu(c)) / 2, abs=1e-9)
    # the fewest heads within 1 BLEU of the reference: a loop over systems with sacreBLEU
    systems, heads = np.stack([c, b, a, refs], 1), np.tile([4, 8, 12, 16], (len(refs), 1))
    want = min(h for h, s in zip([4, 8, 12, 16], [c, b, a, refs]) if bleu(s) >= bleu(refs) - 1)
    assert fn["fewest_heads_within_1_bleu"](refs, systems, heads, refs) == want == 16
    near = [r if i else r + " dog" for i, r in enumerate(refs)]  # one word added to one sentence
    assert 99 < bleu(near) < 100
    systems = np.stack([c, near, refs], 1)
    assert fn["fewest_heads_within_1_bleu"](refs, systems, heads[:, :3], refs) == 8


def test_the_fewest_heads_note_names_the_run_that_kept_them():
    runs = [{"setting": "encoder", "lam": lam, "open_heads": {"encoder": k}, "steps": steps}
            for lam, k, steps in ((0.02, 0, 600), (0.005, 9, 900))]
    bleu = {"encoder-lam0.02": 51.954, "encoder-lam0.005": 52.6, "unpruned": 52.291, "control-600": 52.5,
            "control-900": 52.7, "michel-encoder-0-importance": 40.01, "michel-encoder-9-importance": 48.0}.get
    zero = voita_claims.fewest_note(0.0, 48, runs, bleu, 0)
    assert zero.startswith(
        "0 of 48 encoder heads kept within 1 BLEU (the paper: 10 of 48); at 0 open heads (λ 0.02, 600 joint updates) "
        "BLEU 51.95, unpruned 52.29, the all-gates-open control after as many updates 52.50, importance pruning to 0 "
        "heads without training 40.01. With no encoder self-attention head open")
    assert "closing every head without training costs 12.28 BLEU, and the joint training wins back 11.94; " in zero
    assert zero.endswith("; 0 of the unpruned model's 48 encoder heads have a positional, syntactic or rare-word role "
                         "by the paper's criteria (the roles table); reproduced means at most half of them kept, with "
                         "the interval below all 48")
    nine = voita_claims.fewest_note(9.0, 48, runs, bleu, 3)
    assert "(λ 0.005, 900 joint updates) BLEU 52.60" in nine and "control after as many updates 52.70" in nine
    assert "without training 48.00; 3 of the" in nine and "feed-forward" not in nine
    assert "open heads (λ" not in voita_claims.fewest_note(48.0, 48, runs, bleu, 0)


def test_keep_top_ranks_the_gated_types_together():
    rng = np.random.default_rng(1)
    shapes = {"encoder": (2, 3), "decoder": (2, 3), "cross": (2, 3)}
    scores = {k: rng.integers(0, 4, s).astype(float) for k, s in shapes.items()}  # ties on purpose
    kinds = ("encoder", "cross")
    for k in range(13):
        masks = voita_runs.keep_top(scores, kinds, k, shapes)
        flat = [(scores[t][l, h], -(i * 6 + l * 3 + h), t, l, h)
                for i, t in enumerate(kinds) for l, h in itertools.product(range(2), range(3))]
        want = {(t, l, h) for *_, t, l, h in sorted(flat, reverse=True)[:k]}  # highest, then lower flat index
        got = {(t, l, h) for t in kinds for l, h in zip(*np.nonzero(masks[t]))}
        assert got == want and masks["decoder"].all()


# the same GateTrainer resume with the model trained (parameters in the checkpoint) on a tiny classifier;
# the translation model's gate training (dropout, label smoothing) runs in test_every_stage_fast's gate stages
@pytest.mark.slow(twin="tests/test_gates.py::test_resume_continues_the_same_run")
def test_joint_gate_training_resumes_to_the_same_parameters(tmp_path, tiny_marian):
    """Gates trained with the model (``model_lr`` > 0, the paper's setting) stopped after 3 updates
    and resumed end where 6 uninterrupted updates end: gates and every parameter."""
    from flax import nnx

    from jattn.runner.batcher import token_batches
    from jattn.training import l0
    from jattn.training.nmt import device_batch

    c, params = tiny_marian.config, nnx.to_pure_dict(tiny_marian.params)
    rng = np.random.default_rng(0)
    src = [np.append(rng.integers(3, 20, rng.integers(3, 8)), c.eos_token_id).astype(np.int32) for _ in range(24)]
    batches = [device_batch(b) for b in token_batches(src, src, 64, c.pad_token_id, c.decoder_start_token_id)]
    gc = l0.GateConfig(lam=0.05, kinds=("encoder", "cross"), steps=6, lr=0.1, model_lr=1e-3, dropout=True,
                       label_smoothing=0.1, save_every=100)
    whole = l0.GateTrainer(c, params, gc, tmp_path / "whole", lambda e: batches[:4])
    whole.fit(progress=False)
    l0.GateTrainer(c, params, dataclasses.replace(gc, steps=3), tmp_path / "part", lambda e: batches[:4]).fit(
        progress=False)
    resumed = l0.GateTrainer(c, params, gc, tmp_path / "part", lambda e: batches[:4])
    assert resumed.meta["step"] == 3
    resumed.fit(progress=False)
    same = lambda a, b: jax.tree.map(np.testing.assert_array_equal, a, b)  # noqa: E731  the same compiled steps
    same(resumed.log_alpha, whole.log_alpha)
    same(resumed.params, whole.params)
    changed = jax.tree.leaves(jax.tree.map(lambda a, b: bool(np.any(np.asarray(a) != np.asarray(b))),
                                           whole.params, params))
    assert any(changed)  # the model's parameters were trained too


def _recomputes(found: list[dict], out) -> None:
    for c in found:
        again = claims.recompute(c, out)
        assert again["value"]["value"] == c["value"] and again["value"]["ci"] == c["ci"], c["id"]
        assert again["baseline"]["value"] == c["baseline"]["value"], c["id"]


def _chain_parse(texts, path, pipeline=None) -> dict:
    """A stand-in for ``jattn.io.parse.parse_to_conllu`` (spaCy; tests/test_roles.py): each text's
    whitespace words, each word's head the word before it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for k, text in enumerate(texts):
            f.write(f"# sent_id = {k}\n# text = {text}\n")
            for i, word in enumerate(text.split(), 1):
                f.write(f"{i}\t{word}\t_\t_\t_\t_\t{i - 1}\t{'root' if i == 1 else 'nmod'}\t_\t_\n")
            f.write("\n")
    return {"pipeline": "chain", "version": None, "parser_scores": {}}


def _stand_in_lrp(params, config, batch) -> dict:
    """A stand-in for ``lrp.head_relevance`` (tests/test_lrp.py on this model type): relevance that
    is conserved at every layer."""
    b, L, H = batch["input_ids"].shape[0], config.encoder_layers, config.encoder_heads
    total = np.asarray(batch["target_mask"]).sum(1).astype(np.float32)
    heads = np.random.default_rng(b).random((b, L, H)).astype(np.float32)
    return {"heads": heads, "layer_input": np.repeat(total[:, None], L, 1), "residual": np.zeros((b, L), np.float32)}


def test_the_harder_set_is_the_longest_quarter_by_source_words():
    sources = ["a b", "a b c d", "a", "a b c d", "a b c", "x", "y", "z"]
    assert voita_claims.longest(sources) == [1, 3]  # 2 of 8, in test order
    assert voita_claims.longest(sources, 0.5) == [0, 1, 3, 4]
    assert voita_claims.longest(["a b c", "a b c", "a b c", "a"]) == [0]  # ties: the earlier sentence


def test_every_stage_fast(tmp_path, monkeypatch, data_set):
    """``test_every_stage_on_a_tiny_random_model`` with the library's costliest parts, each checked in
    its own tests, replaced: the spaCy parse by a chain of whitespace words, LRP and gradient × input
    by stand-ins of their shapes; and the compiled programs kept from stage to stage (their release:
    tests/reproduce/test_pipeline.py::test_compiled_programs_are_released_between_stages). Every
    stage of the study's own code runs, the gate training, control, importance and Michel's pruning
    as they are."""
    from jattn.analyses import lrp
    from jattn.io import parse

    monkeypatch.setattr(parse, "parse_to_conllu", _chain_parse)
    monkeypatch.setattr(lrp, "head_relevance", _stand_in_lrp)
    monkeypatch.setattr(lrp, "head_gradient_x_input", lambda params, config, batch: -_stand_in_lrp(
        params, config, batch)["heads"])
    monkeypatch.setattr(pipeline, "release_compiled", lambda: None)
    _every_stage(tmp_path, monkeypatch, data_set)


# every stage's own code, the training and pruning included, runs fast in test_every_stage_fast; this
# one adds spaCy's parse, LRP and gradient × input on the translation model, each tested on its own
@pytest.mark.slow(twin="tests/reproduce/test_voita.py::test_every_stage_fast")
def test_every_stage_on_a_tiny_random_model(tmp_path, monkeypatch, data_set):
    """The study's stages on a random 2+3-layer Marian model (no training of the model): gates
    trained jointly and folded, the control, importance and Michel's pruning to the gate runs'
    counts; every claim recomputes from its rows, each system's BLEU from its translations file,
    and a rerun skips every stage."""
    _every_stage(tmp_path, monkeypatch, data_set)


def _every_stage(tmp_path, monkeypatch, data_set) -> None:
    from jattn.io import manifest
    from jattn.reproduce import studies
    from experiments.voita2019 import study as voita
    from tiny_seq2seq import save_tiny

    data_set("multi30k")
    folder = save_tiny(tmp_path / "model", "marian", max_position_embeddings=256)  # Multi30k's sentences fit
    quick = voita.params(pipeline.PROFILES["quick"])
    monkeypatch.setattr(voita, "params", lambda profile: {**quick, "lams": [0.5], "steps": 3, "max_steps": 4,
                                                           "beams": 1, "test_sentences": 6, "train_pairs": 64,
                                                           "max_len": 12, "importance_pairs": 8,
                                                           "random_orders": 2})  # sentences cut to 12: one shape
    monkeypatch.setattr(voita_runs, "translation_model", lambda ctx: folder)
    control = save_tiny(tmp_path / "control", "marian", seed=1, max_position_embeddings=256)  # another model
    monkeypatch.setattr(voita_runs, "control_model", lambda ctx: control)
    profile = pipeline.PROFILES["quick"]
    ctx = pipeline.Context(profile, tmp_path, tmp_path / ".work", manifest.data_dir(), progress=False)
    stages = studies.stages(profile, ("voita",))
    records = pipeline.run(stages, ctx, log=lambda m: None)
    found = records["voita.claims"]["result"]["claims"]
    assert {c["id"] for c in found} >= {"voita-unpruned-bleu", "voita-encoder-lam0.5", "voita-all-lam0.5-vs-importance",
                                        "voita-all-lam0.5-vs-control",
                                        "voita-encoder-fewest-heads", "voita-confidence-lrp",
                                        "voita-unpruned-bleu-long", "voita-encoder-lam0.5-vs-control-long",
                                        "voita-encoder-fewest-heads-long", "voita-no-encoder-attention",
                                        "voita-no-encoder-attention-long"}
    assert not {c["id"] for c in found if c["id"].startswith("voita-all-") and c["id"].endswith("-long")}
    long = next(c for c in found if c["id"] == "voita-encoder-lam0.5-long")
    rows = claims.read_rows(tmp_path / long["predictions"])
    assert [r["index"] for r in rows] == voita_claims.longest(records["voita.unpruned"]["result"]["sources"])
    heads = records["voita.roles"]["result"]
    assert len(heads["rows"]) == 6 and np.asarray(heads["roles"]).shape == (2, 4)
    assert max(heads["lrp_conservation_error"]) < 1e-4  # relevance conserved at every layer (float32 sums)
    per_sentence = np.asarray([r["confidence"] for r in heads["rows"]]).mean(0)  # the claims' rows vs the runner
    np.testing.assert_allclose(per_sentence, np.ravel(heads["confidence"]["encoder"]), atol=1e-5)
    _recomputes(found, tmp_path)
    fewest = next(c for c in found if c["id"] == "voita-encoder-fewest-heads")
    specialised = int((np.asarray(heads["roles"]) != "other").sum())
    assert fewest["note"] == voita_claims.fewest_note(fewest["value"], 8, [], None, specialised)  # all 8 kept
    assert "Largest over the 8 heads: share of rows whose argmax is the previous token" in \
        records["voita.claims"]["result"]["table"]
    gates = records["voita.gates-all-lam0.5"]["result"]
    assert gates["steps"] in (3, 4) and gates["open_heads"] == {k: int((np.asarray(v) > 0).sum())
                                                                 for k, v in gates["gates"].items()}
    refs = [r["ref"] for r in claims.read_rows(tmp_path / found[0]["predictions"])]
    control = records["voita.control"]["result"]
    gate_steps = {records[f"voita.gates-{s}-lam0.5"]["result"]["steps"] for s in ("encoder", "all")}
    assert control["steps"] == sorted(gate_steps) and set(control["translations"]) == {str(k) for k in gate_steps}
    for file in [records[n]["result"]["translations"] for n in ("voita.unpruned", "voita.gates-encoder-lam0.5")] + \
            list(control["translations"].values()):
        hyps = (tmp_path / file).read_text().split("\n")[:-1]
        assert len(hyps) == len(refs) == 6
    hyps = (tmp_path / records["voita.unpruned"]["result"]["translations"]).read_text().split("\n")[:-1]
    assert found[0]["value"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score, abs=1e-9)
    michel = records["voita.michel-encoder"]["result"]
    assert michel["counts"] == [records["voita.gates-encoder-lam0.5"]["result"]["open_heads"]["encoder"]]
    assert all(line.endswith(": up to date") for line in pipeline.plan(stages, ctx))


@pytest.mark.slow
def test_quick_profile_end_to_end(tmp_path, data_set):
    """``jattn reproduce voita --quick`` (trains its tiny model first): every claim recomputes."""
    from jattn.io import manifest
    from jattn.reproduce import studies

    data_set("multi30k")
    profile = pipeline.PROFILES["quick"]
    ctx = pipeline.Context(profile, tmp_path, tmp_path / ".work", manifest.data_dir(), progress=False)
    records = pipeline.run(studies.stages(profile, ("voita",)), ctx, log=lambda m: None)
    found = records["voita.claims"]["result"]["claims"]
    assert len(found) >= 8
    _recomputes(found, tmp_path)


COMMITTED = Path(__file__).resolve().parents[2] / "experiments" / "results"


@pytest.mark.skipif(not (COMMITTED / "stages" / "voita.claims.json").is_file(), reason="no committed Voita records")
def test_committed_bleu_is_sacrebleu_of_the_committed_translations(data_set):
    """Every committed Voita BLEU, and every Δ against the unpruned model, is sacreBLEU of the
    committed translation files against the test references as the data set distributes them.
    A run remade after ``voita.claims`` (the report marks its claim stale) is not what the claim
    read: its Δ is checked once the claims are remade, its gates always."""
    refs = (data_set("multi30k") / f"{common.TEST}.en").read_text(encoding="utf-8").splitlines()
    stage = lambda name: json.loads((COMMITTED / "stages" / f"{name}.json").read_text())  # noqa: E731
    bleu = lambda file: sacrebleu.corpus_bleu(  # noqa: E731
        (COMMITTED.parents[1] / file).read_text(encoding="utf-8").split("\n")[:-1], [refs]).score
    claims = stage("voita.claims")
    read = lambda name: not records.remade_needs(claims, {name: stage(name)})  # noqa: E731
    found = {c["id"]: c for c in claims["result"]["claims"]}
    unpruned = found["voita-unpruned-bleu"]["value"]  # the BLEU every Δ was taken against
    if read("voita.unpruned"):
        assert unpruned == pytest.approx(bleu(stage("voita.unpruned")["result"]["translations"]), abs=1e-9)
    gate_runs = sorted((COMMITTED / "stages").glob("voita.gates-*.json"))
    assert len(gate_runs) >= 10  # two settings x five λ
    for path in gate_runs:
        run = stage(path.stem)["result"]
        name = f"{run['setting']}-{voita_runs.lam_name(run['lam'])}"
        if read(path.stem):
            assert found[f"voita-{name}"]["value"] == pytest.approx(bleu(run["translations"]) - unpruned, abs=1e-9)
        assert run["fractional_gates"] == 0 == sum(0 < g < 1 for g in np.ravel(list(run["gates"].values())))
