"""The Clark study's decision rules (``experiments.clark2019.verdicts``) on synthetic claims, where
each rule must say each of its outcomes, and on every committed Clark claim."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from experiments import papers

from jattn.reproduce import claims, verdicts
from experiments.clark2019 import verdicts as clark

NEGATIVE = ("not reproduced", verdicts.UNDERPOWERED)  # nothing detected: which one depends on the power



def _claim(root: Path, id: str, rows: list[dict], measure: dict, baseline: dict, **extra) -> dict:
    """A claim as a stage writes it: rows in a predictions file, value and interval from them."""
    path = f"predictions/{id}.jsonl"
    claims.write_rows(root / path, rows)
    got = claims.evaluate(rows, measure)
    base = {"statistic": measure["statistic"], "ci_method": measure["ci_method"], **baseline}
    return {"id": id, "study": "clark", "claim": id, "paper": "the paper's number", "value": got["value"],
            "ci": got["ci"], "baseline": {"name": baseline["name"], **claims.evaluate(rows, base)},
            "predictions": path, "measure": measure, "baseline_measure": base, **extra}


def _evidence(root: Path, *cs: dict, results: dict | None = None) -> verdicts.Evidence:
    return verdicts.Evidence({c["id"]: c for c in cs}, results or {}, root)


def test_mean_deltas_are_the_paired_intervals_of_evaluate():
    rng = np.random.default_rng(0)
    rows = [{"a": float(rng.normal(0.2)), "b": float(rng.normal()), "doc": int(rng.integers(6))} for _ in range(60)]
    d = [r["a"] - r["b"] for r in rows]
    spec = {"statistic": "mean", "columns": {"value": "a"}, "against": {"value": "b"}, "ci_method": "paired"}
    for cluster in (None, "doc"):
        want = claims.evaluate(rows, {**spec, "cluster": cluster} if cluster else spec)
        got = clark.mean_deltas(d, None if cluster is None else [r["doc"] for r in rows])[""]
        assert got["value"] == pytest.approx(want["value"]) and got["ci"] == pytest.approx(want["ci"])
        assert got["p"] == pytest.approx(want["p"])


# ---------------------------------------------------------------- shares

def _table(per_layer: np.ndarray) -> str:
    """The shares stage's table for per-layer shares (L, 4)."""
    lines = [
        '| layer (1-based) | [CLS] (uniform 0.011) | [SEP] (uniform 0.030) | "." / "," (uniform 0.080) | other |',
        "|---|---:|---:|---:|---:|",
    ]
    return "\n".join(lines + [f"| {l + 1} | " + " | ".join(f"{v:.3f}" for v in row) + " |"
                              for l, row in enumerate(per_layer)])


def _shares(tmp_path, key: str, share: float, cls: float = 0.05, noise: float = 0.02, seed: int = 0):
    """A 12-layer model whose claimed role gets ``share`` in the claim's layers and [CLS] ``cls``;
    200 segments, uniform attention .03."""
    rng = np.random.default_rng(seed)
    c = {"sep-middle": 1, "cls-early": 0, "punct-deep": 2}[key]
    per_layer = np.tile([cls, 0.03, 0.08, 0.0], (12, 1))
    per_layer[:, c] = share
    per_layer[:, 3] = 1 - per_layer[:, :3].sum(1)
    rows = [{"index": i, "share": float(share + rng.normal(0, noise)), "uniform": 0.03} for i in range(200)]
    claim = _claim(tmp_path, f"clark-toy-{key}", rows, {"statistic": "mean", "columns": {"value": "share"},
                                                        "ci_method": "bootstrap"},
                   {"name": "uniform attention", "columns": {"value": "uniform"}})
    return clark.judge(claim, _evidence(tmp_path, claim, results={"clark.toy-shares": {"table": _table(per_layer)}}))


def test_sep_majority_needs_the_interval_above_one_half(tmp_path):
    assert _shares(tmp_path, "sep-middle", 0.62).status == "reproduced"
    below = _shares(tmp_path, "sep-middle", 0.30)
    assert below.status == "not reproduced" and "below it" in below.reason  # above uniform, below one half
    assert _shares(tmp_path, "sep-middle", 0.50, noise=0.05).status == "inconclusive"


def test_share_below_uniform_is_not_reproduced(tmp_path):
    got = _shares(tmp_path, "cls-early", 0.01, cls=0.01)
    assert got.status == "not reproduced" and "opposite" in got.reason
    assert _shares(tmp_path, "cls-early", 0.3, cls=0.3).status == "reproduced"
    assert _shares(tmp_path, "punct-deep", 0.3).status == "reproduced"


def test_a_role_that_takes_less_than_uniform_attention_is_not_reproduced_whatever_the_sink(tmp_path):
    """The finding is that the role takes the attention: no precondition can excuse its failing."""
    for key in ("sep-middle", "punct-deep"):
        got = _shares(tmp_path, key, 0.02, cls=0.4)
        assert got.status == "not reproduced" and "opposite" in got.reason and "minimum detectable" in got.reason
        assert "[CLS]" in got.reason and "0.400" in got.reason


def test_layer_shares_reads_the_stage_table():
    per_layer = np.arange(24, dtype=float).reshape(6, 4) / 100
    assert np.allclose(clark.layer_shares(_table(per_layer)), per_layer)
    with pytest.raises(ValueError):
        clark.layer_shares("| no rows |")


# ---------------------------------------------------------------- syntax and probe

SYNTAX = {"statistic": "accuracy", "columns": {"gold": "gold", "pred": "head"}, "ci_method": "bootstrap"}
OFFSET = {"name": "best fixed offset", "columns": {"gold": "gold", "pred": "offset"}}


def _syntax_rows(accuracy: dict[str, tuple[float, float]], sentences: int = 300, seed: int = 0) -> list[dict]:
    """Words of ``sentences`` sentences, one word of each relation a sentence; a relation's head
    and offset right with the given rates."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(sentences):
        for r, (head, offset) in accuracy.items():
            rows.append({"index": len(rows), "sentence": s, "relation": r, "gold": 1, "head": int(rng.random() < head),
                         "offset": int(rng.random() < offset), "in_sample": 1})
    return rows


def test_relations_are_judged_with_holm_over_the_family(tmp_path):
    accuracy = {"det": (0.9, 0.5), "obj": (0.4, 0.7), "nsubj": (0.5, 0.5),
                **{f"rel{i}": (0.5, 0.5) for i in range(7)}}
    rows = _syntax_rows(accuracy)
    pooled = _claim(tmp_path, "clark-toy-syntax-pooled", rows, SYNTAX, OFFSET)
    per = {r: _claim(tmp_path, f"clark-toy-syntax-{r}", [x for x in rows if x["relation"] == r], SYNTAX, OFFSET)
           for r in ("det", "obj", "nsubj")}
    ev = _evidence(tmp_path, pooled, *per.values())
    win = clark.judge(per["det"], ev)
    assert win.status == "reproduced" and "Holm over 10 relations" in win.reason
    assert (
        clark.judge(per["obj"], ev).status == "not reproduced" and "offset wins" in clark.judge(per["obj"], ev).reason
    )
    assert clark.judge(per["nsubj"], ev).status in NEGATIVE  # nothing detected: underpowered against Table 1's 0.13
    got = clark.judge(pooled, ev)
    assert "wins after Holm in 1 of 10" in got.reason


def test_holm_keeps_a_difference_one_test_alone_would_reject(tmp_path):
    """A relation whose unadjusted p is below .05 but above .05 / family size is not reproduced."""
    for seed in range(40):
        rows = _syntax_rows({"weak": (0.56, 0.5), **{f"rel{i}": (0.5, 0.5) for i in range(19)}}, sentences=400,
                            seed=seed)
        alone = clark.mean_deltas([r["head"] - r["offset"] for r in rows if r["relation"] == "weak"],
                                  [r["sentence"] for r in rows if r["relation"] == "weak"])[""]
        if 0.0025 < alone["p"] < 0.05:
            break
    else:
        pytest.fail("no seed gave a p between .0025 and .05")
    pooled = _claim(tmp_path, "clark-toy-syntax-pooled", rows, SYNTAX, OFFSET)
    weak = _claim(tmp_path, "clark-toy-syntax-weak", [r for r in rows if r["relation"] == "weak"], SYNTAX, OFFSET)
    got = clark.judge(weak, _evidence(tmp_path, pooled, weak))
    assert got.status in NEGATIVE and "no difference after Holm" in got.reason and "minimum detectable" in got.reason


def test_syntax_all_is_directional(tmp_path):
    for (head, offset), want in (((0.6, 0.4), ("reproduced",)), ((0.5, 0.5), NEGATIVE),
                                 ((0.3, 0.6), ("not reproduced",))):  # the last: the finding fails
        c = _claim(tmp_path, "clark-toy-syntax-all", _syntax_rows({"x": (head, offset)}), SYNTAX, OFFSET)
        assert clark.judge(c, _evidence(tmp_path, c)).status in want


def test_probe_is_directional_against_its_baseline(tmp_path):
    rng = np.random.default_rng(3)
    rows = [{"index": i, "gold": 1, "attn": int(rng.random() < 0.6), "right_branching": int(rng.random() < 0.3),
             "same": int(rng.random() < 0.3)} for i in range(2000)]
    measure = {"statistic": "accuracy", "columns": {"gold": "gold", "pred": "attn"}, "ci_method": "bootstrap"}
    c = _claim(tmp_path, "clark-toy-probe-attn", rows, measure,
               {"name": "right-branching", "columns": {"gold": "gold", "pred": "right_branching"}})
    assert clark.judge(c, _evidence(tmp_path, c)).status == "reproduced"
    c = _claim(tmp_path, "clark-toy-probe-attn", rows, {**measure, "columns": {"gold": "gold", "pred": "same"}},
               {"name": "right-branching", "columns": {"gold": "gold", "pred": "right_branching"}})
    assert clark.judge(c, _evidence(tmp_path, c)).status == "not reproduced"


def test_probe_resamples_sentences_when_the_rows_name_them(tmp_path):
    """Words of a sentence succeed or fail together here: resampling sentences widens the interval
    of Δ over resampling words, and turns a words-only "reproduced" into "not reproduced"."""
    good = np.arange(40) % 20 < 13  # (40,) per sentence: the probe right on all its 25 words (65 %), or on none
    rows = [{"index": 25 * s + w, "sentence": s, "gold": 1, "attn": int(good[s]), "right_branching": int(s % 2)}
            for s in range(40) for w in range(25)]
    measure = {"statistic": "accuracy", "columns": {"gold": "gold", "pred": "attn"}, "ci_method": "bootstrap",
               "cluster": "sentence"}
    base = {"name": "right-branching", "columns": {"gold": "gold", "pred": "right_branching"}, "cluster": "sentence"}
    c = _claim(tmp_path, "clark-toy-probe-attn", rows, measure, base)
    by_sentence = clark.judge(c, _evidence(tmp_path, c))
    words = [{k: v for k, v in r.items() if k != "sentence"} for r in rows]
    unclustered = [{k: v for k, v in m.items() if k != "cluster"} for m in (measure, base)]
    c = _claim(tmp_path, "clark-toy-probe-attn", words, *unclustered)
    by_word = clark.judge(c, _evidence(tmp_path, c))
    assert "sentences resampled" in by_sentence.reason and "words resampled" in by_word.reason
    assert (by_word.status, by_sentence.status) == ("reproduced", "not reproduced")


# ---------------------------------------------------------------- coreference

COREF = {"statistic": "mean", "columns": {"value": "head"}, "ci_method": "bootstrap", "cluster": "document"}


def _litbank(gains: list[float], per_doc: int = 60, seed: int = 0) -> list[dict]:
    """Queries of len(gains) documents; in document k the head is right .5 + gains[k] of the time,
    the same-head-word baseline .5, the nearest .2."""
    rng = np.random.default_rng(seed)
    return [{"index": k * per_doc + i, "document": f"doc{k}", "type": "pronoun",
             "head": int(rng.random() < 0.5 + g), "in_sample": 1, "nearest": int(rng.random() < 0.2),
             "same_head_word": int(rng.random() < 0.5), "same_type": 0}
            for k, g in enumerate(gains) for i in range(per_doc)]


def test_litbank_head_must_beat_the_same_head_word_baseline_over_documents(tmp_path):
    base = {"name": "same head word", "columns": {"value": "same_head_word"}, "cluster": "document"}
    c = _claim(tmp_path, "clark-toy-coref-litbank", _litbank([0.3] * 10), COREF, base)
    got = clark.judge(c, _evidence(tmp_path, c))
    assert got.status == "reproduced" and "10 documents resampled" in got.reason and "in-sample" in got.reason
    assert "cluster-robust t, 9 df" in got.reason
    rows = _litbank([0.45] * 5 + [-0.35] * 5)  # documents disagree: mentions alone would look decisive
    by_rows = claims.evaluate(rows, {"statistic": "mean", "columns": {"value": "head"},
                                     "against": {"value": "same_head_word"}, "ci_method": "paired"})
    assert by_rows["ci"][0] > 0
    c = _claim(tmp_path, "clark-toy-coref-litbank-pronoun", rows, COREF, base)
    got = clark.judge(c, _evidence(tmp_path, c))
    assert got.status in NEGATIVE and "cluster-robust t, 9 df" in got.reason
    c = _claim(tmp_path, "clark-toy-coref-litbank-proper", _litbank([-0.3] * 10), COREF, base)
    got = clark.judge(c, _evidence(tmp_path, c))
    assert got.status == "not reproduced" and "opposite" in got.reason


def test_gap_against_the_nearest_name_by_page_when_the_rows_name_it(tmp_path):
    rng = np.random.default_rng(1)
    rows = [{"index": i, "id": f"test-{i}", "head": int(rng.random() < 0.8), "in_sample": 1,
             "nearest": int(rng.random() < 0.5), "first": 0} for i in range(250)]
    measure = {"statistic": "mean", "columns": {"value": "head"}, "ci_method": "bootstrap"}
    base = {"name": "nearest name", "columns": {"value": "nearest"}}
    c = _claim(tmp_path, "clark-toy-coref-gap", rows, measure, base)
    got = clark.judge(c, _evidence(tmp_path, c))
    assert got.status == "reproduced" and "rows resampled" in got.reason
    paged = [{**r, "document": f"page{i // 2}", "head": r["nearest"]} for i, r in enumerate(rows)]
    c = _claim(tmp_path, "clark-toy-coref-gap", paged, measure, base)
    got = clark.judge(c, _evidence(tmp_path, c))
    assert got.status == "not reproduced" and "125 documents resampled" in got.reason


def test_unknown_claims_are_refused_and_described():
    with pytest.raises(ValueError):
        clark.judge({"id": "clark-toy-something"}, None)
    d_id = "clark-minilm-sep-middle"
    d = clark.describe({"id": d_id, "paper": "p"})
    assert d["paper"] == papers.for_claim({"id": d_id, "paper": "p"}) != "p" and "all-MiniLM-L6-v2" in d["differs"]
