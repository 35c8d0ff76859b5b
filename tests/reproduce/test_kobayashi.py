"""The Kobayashi et al. study of ``jattn reproduce``: its measurements against slow loops, its
stages on tiny random models and made-up data, every claim recomputed from its predictions file,
and (slow) the quick profile end to end on the real data."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from tolerance import assert_close

from jattn.analyses import alignment as AL
from jattn.nn.token_classes import CLASS_NAMES
from jattn.analyses.norm_stats import MIXING
from jattn.reproduce import claims, pipeline
from experiments.kobayashi2020 import study as K
from experiments.kobayashi2020 import align as KA
from experiments.kobayashi2020 import tokens as KT

SEGMENTS = [("Alice met Bob in Paris, then left.", "He stayed, of course."), ("One", "two, three."),
            ("The cat sat on the mat.", "It slept. Then it woke, and ate.")]


@pytest.fixture(scope="module")
def tiny(tiny_bert_folder):
    import jattn

    return jattn.load(str(tiny_bert_folder), use_cache=False)


def reference_segment(model, segment) -> dict:
    """Slow shares of one segment run alone (unpadded): loops over layers, heads, rows and keys."""
    import jattn
    from jattn.runner.batcher import token_classes

    enc = model.tokenizer(*segment, return_tensors="np")
    inputs = {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    out = jattn.norms(model, inputs, residual=True)["encoder"]
    cls = token_classes(model.tokenizer, inputs["input_ids"], inputs["attention_mask"])[0]  # (n,)
    L, _, H, n, _ = out["weights"].shape
    want = {f"{s}_{c}": 0.0 for s in ("weight", "norm") for c in CLASS_NAMES}
    for l in range(L):
        for h in range(H):
            for i in range(n):
                a = out["weights"][l, 0, h, i].astype(np.float64)
                af = a * out["f_norm"][l, 0, h].astype(np.float64)
                for c, name in enumerate(CLASS_NAMES):
                    want[f"weight_{name}"] += sum(a[j] for j in range(n) if cls[j] == c) / (L * H * n)
                    want[f"norm_{name}"] += sum(af[j] for j in range(n) if cls[j] == c) / af.sum() / (L * H * n)
    for c, name in enumerate(CLASS_NAMES):
        want[f"uniform_{name}"] = float(np.sum(cls == c)) / n
    for k in MIXING:
        want[f"mixing_{k}"] = float(out[f"mixing_{k}"][:, 0].mean())
    want["fnorm"] = out["f_norm"][:, 0].astype(np.float64).mean((0, 1))  # (n,)
    want["ids"] = inputs["input_ids"][0]
    return want


def test_measure_against_loops_and_resumes(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(KT, "CHUNK", 2)  # two chunks: the second starts at corpus index 2
    got = KT.measure(tiny, SEGMENTS, tmp_path, batch_size=2, key="tiny")
    assert [r["index"] for r in got["rows"]] == list(range(len(SEGMENTS)))
    occ = {k: np.asarray(v) for k, v in got["occurrences"].items()}
    for k, segment in enumerate(SEGMENTS):
        want = reference_segment(tiny, segment)
        row = got["rows"][k]
        n = len(want["ids"])
        assert row["tokens"] == n
        for key, value in want.items():
            if key not in ("fnorm", "ids"):
                assert_close(row[key], value, terms=n * 4, err_msg=key)
        assert occ["id"][occ["segment"] == k].tolist() == want["ids"].tolist()
        assert_close(occ["fnorm"][occ["segment"] == k], want["fnorm"], terms=n, err_msg="fnorm")
    # a rerun reads the saved chunks; a changed key or a missing chunk recomputes (and agrees)
    calls = []
    real = KT._chunk
    monkeypatch.setattr(KT, "_chunk", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    assert KT.measure(tiny, SEGMENTS, tmp_path, batch_size=2, key="tiny")["rows"] == got["rows"] and calls == []
    (tmp_path / "chunk-000002.json").unlink()
    again = KT.measure(tiny, SEGMENTS, tmp_path, batch_size=2, key="tiny")
    assert calls == [2] and len(again["rows"]) == len(SEGMENTS)
    KT.measure(tiny, SEGMENTS, tmp_path, batch_size=2, key="another model")
    assert calls == [2, 0, 2]


def test_rank_table_maps_strings_and_special_roles():
    def tok(vocab, **specials):
        return SimpleNamespace(get_vocab=lambda: vocab, **{f"{r}_token": t for r, t in specials.items()})

    roles = dict(cls="<s>", sep="</s>", pad="<pad>", unk="[UNK]", mask="<mask>")
    model = SimpleNamespace(tokenizer=tok({"<s>": 0, "<pad>": 1, "</s>": 2, "the": 3, "zz": 4, "[UNK]": 5}, **roles),
                            config=SimpleNamespace(vocab_size=7))
    reference = tok({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "the": 5},
                    cls="[CLS]", sep="[SEP]", pad="[PAD]", unk="[UNK]", mask="[MASK]")
    ranks = np.array([np.nan, 9.0, 1.0, 2.0, np.nan, 3.0])  # by reference id
    got, mapped = KT.rank_table(model, reference, ranks)
    assert mapped == 5  # every token but "zz"
    np.testing.assert_array_equal(got, [1.0, np.nan, 2.0, 3.0, np.nan, 9.0, np.nan])


def test_alignment_counts_give_the_pooled_aer():
    rng = np.random.default_rng(0)
    gold, systems = [], {"a": [], "b": []}
    for _ in range(12):
        pairs = {(int(i), int(j)) for i, j in rng.integers(0, 6, (8, 2))}
        sure = set(list(pairs)[:4])
        gold.append((sure, pairs))
        for name in systems:
            systems[name].append({(int(i), int(j)) for i, j in rng.integers(0, 6, (5, 2))})
    table = KA.rows(gold, systems)
    for name in systems:
        want = AL.aer(systems[name], gold)
        assert KA.pooled_aer(table, name) == pytest.approx(want, abs=1e-12)
        stat = claims.STATISTICS["aer"][1](*[np.asarray([r[c] for r in table]) for c in KA.columns(name).values()])
        assert stat == pytest.approx(want, abs=1e-12)
    half = table[::2]
    assert KA.pooled_aer(half, "a") == pytest.approx(AL.aer(systems["a"][::2], gold[::2]), abs=1e-12)


def test_model_links_do_not_depend_on_the_batch(tiny_marian):
    pairs = [("un homme court sur la plage".split(), "a man runs on the beach".split()),
             ("deux chiens".split(), "two dogs are walking near water".split()),
             ("une femme".split(), "a woman".split())]
    items = KA.encode(tiny_marian, KA.normalised(tiny_marian, pairs))
    together = KA.model_links(tiny_marian, items, batch_size=3)
    layers = tiny_marian.config.decoder_layers
    assert len(together) == len(KA.SETTINGS) * len(KA.MAPS) * layers
    for k, item in enumerate(items):
        alone = KA.model_links(tiny_marian, [item], batch_size=1)
        assert {name: links[0] for name, links in alone.items()} == {name: links[k] for name, links in together.items()}
        for links in together.values():
            assert all(0 <= i < len(pairs[k][0]) and 0 <= j < len(pairs[k][1]) for i, j in links[k])


def test_weighted_spearman_and_segment_bootstrap():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(1)
    x, y = rng.integers(0, 5, 200).astype(float), rng.normal(size=200)  # ties in x
    y += x
    y[:20] = y[20:40]  # and in y
    rho = K.WeightedSpearman(x, y)
    for _ in range(5):
        w = rng.integers(0, 4, 200)  # zeros: occurrences left out
        assert rho(w) == pytest.approx(spearmanr(np.repeat(x, w), np.repeat(y, w)).statistic, abs=1e-12)
    segment = np.repeat(np.arange(40), 5)
    got = K.segment_bootstrap(x, y, segment, b=200, seed=3)
    draws = np.random.default_rng(3)  # the same draws, resampled the obvious way
    slow = [spearmanr(x[idx], y[idx]).statistic for idx in
            (np.concatenate([np.flatnonzero(segment == k) for k in draws.integers(0, 40, 40)]) for _ in range(200))]
    assert got == pytest.approx(np.quantile(slow, [0.025, 0.975]).tolist(), abs=1e-12)
    assert got[0] < spearmanr(x, y).statistic < got[1]


def write_data(folder: Path, model) -> None:
    """A GAP file of the test segments, a rank file over a few of the model's ids, a Hansards-like
    pair file with gold links and Multi30k-like test lines made of the tiny Marian model's words."""
    (folder / "gap").mkdir(parents=True)
    head = "ID\tText\tPronoun\tPronoun-offset\tA\tA-offset\tA-coref\tB\tB-offset\tB-coref\tURL\n"
    text = "".join(f"d-{k}\t{a} {b}\the\t0\tA\t0\tTRUE\tB\t0\tFALSE\turl\n" for k, (a, b) in enumerate(SEGMENTS * 3))
    (folder / "gap" / "gap-development.tsv").write_text(head + text)
    (folder / "frequency").mkdir()
    ids = model.tokenizer.convert_tokens_to_ids(["the", ",", ".", "cat", "he", "[CLS]"])
    (folder / "frequency" / "rank_count_ids.txt").write_text(
        "".join(f"{r + 1} {99 - r} {i}\n" for r, i in enumerate(ids))
    )
    (folder / "alignment").mkdir()
    rng = np.random.default_rng(0)
    from tiny_seq2seq import WORDS

    lines, gold = [], []
    for _ in range(12):
        en, fr = list(rng.choice(WORDS, rng.integers(2, 6))), list(rng.choice(WORDS, rng.integers(2, 6)))
        lines.append(f"{' '.join(en)} ||| {' '.join(fr)}\n")
        gold.append(
            " ".join(f"{i + 1}{'-' if i % 2 == 0 else 'p'}{min(i, len(fr) - 1) + 1}" for i in range(len(en))) + "\n"
        )
    (folder / "alignment" / "enfr.src-tgt").write_text("".join(lines))
    (folder / "multi30k").mkdir()
    for side in ("fr", "en"):
        (folder / "multi30k" / f"test_2016_flickr.{side}").write_text(
            "".join(" ".join(rng.choice(WORDS, rng.integers(2, 6))) + "\n" for _ in range(5)))
    (folder / "alignment" / "enfr.gold").write_text("".join(gold))


def check_recomputes(claim: dict, root: Path) -> None:
    again = claims.recompute(claim, root)
    assert again["value"]["value"] == pytest.approx(claim["value"], abs=1e-12)
    assert again["value"]["ci"] == pytest.approx(claim["ci"], abs=1e-12)
    assert again["baseline"]["value"] == pytest.approx(claim["baseline"]["value"], abs=1e-12)
    assert again["baseline"]["ci"] == pytest.approx(claim["baseline"]["ci"], abs=1e-12)
    if "delta" in claim:
        rows = claims.read_rows(root / claim["predictions"])
        delta = claims.evaluate(rows, claim["delta"]["measure"])
        assert [delta["value"], *delta["ci"], delta["p"]] == pytest.approx(
            [claim["delta"]["value"], *claim["delta"]["ci"], claim["delta"]["p"]], abs=1e-12)


def test_stages_on_tiny_models(tiny, tiny_marian_folder, tmp_path, monkeypatch):
    """Both stage functions on tiny random models and made-up files; every claim recomputes."""
    write_data(tmp_path / "data", tiny)
    monkeypatch.setattr(K, "_load", lambda model: tiny)
    monkeypatch.setattr(pipeline, "_data_sha256", lambda relative: relative)  # made-up files: not the manifest's
    quick = pipeline.PROFILES["quick"]
    token = next(s for s in K.stages(quick) if s.name == "kobayashi.minilm-tokens")
    align = K.alignment_stage(quick, str(tiny_marian_folder))
    ctx = pipeline.Context(quick, tmp_path / "out", tmp_path / "work", tmp_path / "data", progress=False)
    records = pipeline.run([token, align], ctx, log=lambda m: None)
    got = [c for r in records.values() for c in r["result"]["claims"]]
    ids = {c["id"] for c in got}
    assert {f"kobayashi-minilm-{k}-{c}" for k in ("weight", "norm") for c in K.CLASSES} <= ids
    tag = f"-{Path(tiny_marian_folder).name}"  # a model other than the committed one: named in stage and claims
    assert align.name == f"kobayashi.alignment{tag}"
    assert {"kobayashi-minilm-mixing", "kobayashi-minilm-frequency", f"kobayashi-align{tag}-eflomal"} <= ids
    aligned = [c for c in got if c["id"].startswith(f"kobayashi-align{tag}-")]
    assert len(aligned) == 9 and all(c["claim"].startswith("fr→en ") for c in aligned)
    in_domain = [c for c in aligned if c["id"].startswith(f"kobayashi-align{tag}-in-domain-")]
    assert len(in_domain) == 4 and all("in domain vs eflomal" in c["claim"] for c in in_domain)  # no eflomal claim
    assert all("silver" in c["protocol"] and "Multi30k" in c["protocol"] for c in in_domain)
    for claim in got:
        check_recomputes(claim, tmp_path / "out")
        assert "status" not in claim  # the study's rules judge it
    freq = next(c for c in got if c["id"] == "kobayashi-minilm-frequency")
    segments = claims.read_rows(
        tmp_path / "out" / next(c for c in got if c["id"] == "kobayashi-minilm-norm-sep")["predictions"]
    )
    assert (
        freq["n"] == len(claims.read_rows(tmp_path / "out" / freq["predictions"])) == sum(r["tokens"] for r in segments)
    )
    assert len(segments) == len(SEGMENTS) * 3
    for record in records.values():
        for fig in record["result"]["figures"]:
            assert (tmp_path / "out" / fig).stat().st_size > 0


@pytest.mark.slow
def test_quick_profile_end_to_end(tmp_path, data_set):
    """The study's quick profile on the real data (MiniLM, the committed translation model); every
    claim recomputes from its predictions file."""
    for name in ("gap", "frequency", "alignment"):
        data_set(name)
    from jattn.io.manifest import data_dir

    quick = pipeline.PROFILES["quick"]
    ctx = pipeline.Context(quick, tmp_path / "out", tmp_path / "work", Path(data_dir()), progress=False)
    records = pipeline.run(K.stages(quick), ctx, log=lambda m: None)
    got = [c for r in records.values() for c in r["result"]["claims"]]
    assert len(got) == 15
    for claim in got:
        check_recomputes(claim, tmp_path / "out")
