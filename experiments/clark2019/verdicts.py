"""Decision rules of the Clark study (Clark, Khandelwal, Levy and Manning 2019, "What Does BERT
Look At?"); the rules are those of ``jattn.reproduce.verdicts``. Written after the records they
judge (``PROVENANCE``; ``docs/STATISTICS.md``, "Provenance"). Every "not reproduced" states the
minimum detectable effect of its test at 80 % power beside the paper's effect
(``experiments.papers.effect``), and is "inconclusive (underpowered)" where nothing was detected
and the paper's effect lies below it.

Every test is two-sided at α = .05 (a 95 % percentile bootstrap interval; B = 1000, seed 0, the
resamples of ``jattn.reproduce.claims``), on the paired difference Δ of the same examples:

- ``clark-<m>-cls-early``, ``-punct-deep`` (Fig. 2: early heads attend to [CLS], deep heads to
  "." / ","): Δ = the region's share − uniform attention's on the same segment, segments resampled
  → ``directional`` (reproduced when the interval of Δ lies above 0).
- ``clark-<m>-sep-middle`` (§3: "more than half" of the attention of layers 6-10 goes to [SEP]):
  ``directional`` against uniform as above, then a threshold: reproduced when the 95 % interval of
  the share lies above ``MAJORITY`` = .5 (a one-sided test of share > .5 at α = .025), not
  reproduced when it lies below, inconclusive when it straddles it.
- No precondition: the share findings assert that the role takes the attention, so a role that
  takes less than uniform attention would give it is "not reproduced" (MiniLM parks its attention
  on [CLS]; the reason gives the [CLS] share beside the claimed role's for context).
- ``clark-<m>-syntax-<relation>`` (Table 1): Δ = held-out accuracy of the head chosen on EWT train
  − of the offset chosen there, sentences resampled (B = ``FAMILY_RESAMPLES``); Holm (1979) over
  every relation the stage tested for that model (the family, Table-1 relations or not); reproduced
  when Holm rejects Δ = 0 and Δ > 0, not reproduced otherwise (the detectable effect at the
  family's Bonferroni level, Holm's first step, beside Table 1's head − offset).
- ``-syntax-all`` (one head for every relation), ``-syntax-pooled`` (each relation's head, pooled):
  ``directional``, sentences resampled.
- ``clark-<m>-probe-attn``, ``-attn-emb`` (Table 3): Δ = UAS of the probe − its baseline
  (right-branching; the distances + embeddings probe), sentences resampled (words, for records
  whose rows name no sentence) → ``directional``.
- ``clark-<m>-coref-litbank[-type]`` (§4.3, Table 2): Δ = the head chosen on other documents −
  the same-head-word baseline (the paper's strong baseline) → ``directional`` on the cluster-robust
  t interval over the documents (``cluster_t``, t with K − 1 df: LitBank's 10 novels are too few
  clusters for a percentile bootstrap); the cluster bootstrap's verdict is reported beside it, and
  where the two disagree the claim is "inconclusive" (the verdict depends on the method); head −
  nearest and the head chosen on the scored queries themselves (Clark's way) are reported, not judged.
- ``clark-<m>-coref-gap`` (GAP, not in the paper): Δ = the head chosen on validation rows − the
  nearest name on test rows, Wikipedia pages resampled where the rows name them → ``directional``.
"""

from __future__ import annotations

import re
import sys
import weakref

import numpy as np

from jattn.reproduce import claims as claim_stats
from experiments import papers
from experiments.papers import effect
from experiments.clark2019.common import FAMILY_RESAMPLES, mean_deltas
from jattn.reproduce import studies
from jattn.reproduce.verdicts import (ALPHA, Evidence, Verdict, cluster_t, detectable, directional, holm_family,
                                      powered, standard_error)

PROVENANCE = ("post hoc: these rules were first committed in 170b1f4 (2026-11-28), after the Clark records they judge "
              "(first committed in 6df38f9, 2026-11-26)")
FEW_CLUSTERS = 30  # below this many clusters an interval is the cluster-robust t, not a percentile bootstrap

# Clark §3: "more than half of the attention in layers 6-10 goes to [SEP]": the share itself must
# exceed one half; the paper states no other number for the shares.
MAJORITY = 0.5
ROLES = ("[CLS]", "[SEP]", '"." / ","')  # classes 0, 1, 2 of jattn.analyses.CLASS_NAMES


def _model(claim: dict) -> str:
    return claim["id"].split("-")[1]


def _hits(rows: list[dict], column: str, gold: str = "gold") -> np.ndarray:
    return np.asarray([r[column] == r[gold] for r in rows], np.float64)


def _accuracy_diff(claim: dict, rows: list[dict]) -> np.ndarray:
    """Per row: system right − baseline right, the columns the claim's measures name."""
    cols, base = claim["measure"]["columns"], claim["baseline_measure"]["columns"]
    return _hits(rows, cols["pred"], cols["gold"]) - _hits(rows, base["pred"], base["gold"])


# ---------------------------------------------------------------- shares

def layer_shares(table: str) -> np.ndarray:
    """(L, 4) per-layer mean share to [CLS], [SEP], "." / "," and the rest, from the shares
    stage's table (one row a layer, 1-based)."""
    lines = [x for x in table.splitlines() if re.match(r"\|\s*\d+\s*\|", x)]
    if not lines:
        raise ValueError("the shares stage's table has no layer rows. Fix: rerun the stage clark.<model>-shares")
    return np.asarray([[float(v) for v in x.strip().strip("|").split("|")[1:]] for x in lines])


def judge_share(claim: dict, evidence: Evidence) -> Verdict:
    from experiments.clark2019.shares import CLAIMS, region

    key = claim["id"].split("-", 2)[2]
    c, first, last = CLAIMS[key][:3]
    per_layer = layer_shares(evidence.results[f"clark.{_model(claim)}-shares"]["table"])
    layers = region(len(per_layer), first, last)
    where = f"layer {layers[0] + 1}" if len(layers) == 1 else f"layers {layers[0] + 1}-{layers[-1] + 1}"
    cls, mine = per_layer[layers, 0].mean(), per_layer[layers, c].mean()
    rows = evidence.rows(claim)
    d = [r[claim["measure"]["columns"]["value"]] - r[claim["baseline_measure"]["columns"]["value"]] for r in rows]
    t = mean_deltas(d)[""]
    paper = MAJORITY - claim["baseline"]["value"] if key == "sep-middle" else None  # "more than half" vs uniform
    above = directional(t["value"], t["ci"], what=f"share − uniform ({where}, segments resampled)", paper=paper)
    if c != 0:
        above = Verdict(above.status, above.rule, f"{above.reason}; the [CLS] role takes {cls:.3f} of {where}'s "
                                                  f"attention, {ROLES[c]} {mine:.3f}")
    if key != "sep-middle" or above.status != "reproduced":
        return above
    lo, hi = claim["ci"]
    said = (
        f"{above.reason}; share {claim['value']:.3f} [{lo:.3f}, {hi:.3f}] against the paper's 'more than {MAJORITY:g}'"
    )
    if lo > MAJORITY:
        return Verdict("reproduced", "directional + threshold", said)
    if hi < MAJORITY:
        mde = detectable(standard_error(claim["ci"]), sides=1)
        return powered(Verdict("not reproduced", "directional + threshold", f"{said}: below it"), mde,
                       paper=MAJORITY - claim["baseline"]["value"], detected=True)
    return Verdict("inconclusive", "directional + threshold", f"{said}: straddles it")


# ---------------------------------------------------------------- syntax and probe

_FAMILIES: dict = {}  # (id(evidence), model) -> (weak reference to the evidence, the family): computed once


def relation_family(evidence: Evidence, model: str) -> dict[str, dict]:
    """{relation: {"value", "ci", "p", "holm"}}: held-out head − offset per relation of the model's
    pooled rows (every relation the stage tested), sentences resampled, Holm over them."""
    ref, family = _FAMILIES.get((id(evidence), model), (None, None))
    if ref is None or ref() is not evidence:
        family = _relation_family(evidence, model)
        _FAMILIES[(id(evidence), model)] = (weakref.ref(evidence), family)
    return family


def _relation_family(evidence: Evidence, model: str) -> dict[str, dict]:
    pooled = evidence.claims.get(f"clark-{model}-syntax-pooled")
    if pooled is None:
        raise ValueError(f"clark-{model}-syntax-pooled is missing: its rows are the Holm family of the "
                         "per-relation claims. Fix: rerun the stage clark.<model>-syntax")
    rows = evidence.rows(pooled)
    tests = mean_deltas(_accuracy_diff(pooled, rows), [r["sentence"] for r in rows], [r["relation"] for r in rows],
                        b=FAMILY_RESAMPLES)
    rejected = holm_family({r: t["p"] for r, t in tests.items()}, ALPHA)
    return {r: {**t, "holm": rejected[r]} for r, t in tests.items()}


def judge_relation(claim: dict, evidence: Evidence) -> Verdict:
    rows = evidence.rows(claim)
    relation = rows[0]["relation"]
    family = relation_family(evidence, _model(claim))
    t = family[relation]
    p = f"= {t['p']:.3g}" if t["p"] > 0 else f"< {2 / FAMILY_RESAMPLES:g}"  # bootstrap p in steps of 2 / B
    said = (
        f"head − offset Δ = {t['value']:+.3g} [{t['ci'][0]:+.3g}, {t['ci'][1]:+.3g}] held out, sentences "
        f"resampled, p {p}; Holm over {len(family)} relations "
        f"{'rejects' if t['holm'] else 'keeps'} Δ = 0; in-sample head (Clark's way) "
        f"{_hits(rows, 'in_sample').mean():.3f}"
    )
    if t["holm"] and t["value"] > 0:
        return Verdict("reproduced", "directional + Holm", said)
    mde = detectable(standard_error(t["ci"]), tests=len(family))
    return powered(Verdict("not reproduced", "directional + Holm",
                           said + (": the offset wins" if t["holm"] else ": no difference after Holm")),
                   mde, paper=effect(claim["id"]), detected=bool(t["holm"]))


def judge_syntax_overall(claim: dict, evidence: Evidence) -> Verdict:
    rows = evidence.rows(claim)
    t = mean_deltas(_accuracy_diff(claim, rows), [r["sentence"] for r in rows])[""]
    verdict = directional(t["value"], t["ci"], what="head − offset (held out, sentences resampled)",
                          paper=effect(claim["id"]))
    if not claim["id"].endswith("-pooled"):
        return verdict
    family = relation_family(evidence, _model(claim))
    wins = sum(f["holm"] and f["value"] > 0 for f in family.values())
    return Verdict(verdict.status, verdict.rule, f"{verdict.reason}; the head wins after Holm in {wins} of "
                                                 f"{len(family)} relations")


def judge_probe(claim: dict, evidence: Evidence) -> Verdict:
    rows = evidence.rows(claim)
    by_sentence = all("sentence" in r for r in rows)
    t = mean_deltas(_accuracy_diff(claim, rows), [r["sentence"] for r in rows] if by_sentence else None)[""]
    unit = "sentences resampled" if by_sentence else "words resampled: the rows name no sentence"
    return directional(t["value"], t["ci"], what=f"UAS − {claim['baseline']['name']} (held out, {unit})",
                       paper=effect(claim["id"]))


# ---------------------------------------------------------------- coreference

def _paired(rows: list[dict], against: str, cluster: str | None) -> dict:
    spec = {"statistic": "mean", "columns": {"value": "head"}, "against": {"value": against}, "ci_method": "paired"}
    return claim_stats.evaluate(rows, {**spec, "cluster": cluster} if cluster else spec)


def judge_coref(claim: dict, evidence: Evidence) -> Verdict:
    rows = evidence.rows(claim)
    cluster = "document" if all("document" in r for r in rows) else None
    unit = (f"{len({r['document'] for r in rows})} documents resampled" if cluster
            else "rows resampled, the rows name no document")
    baseline = "same_head_word" if "same_head_word" in rows[0] else "nearest"
    strong = _paired(rows, baseline, cluster)
    paper = effect(claim["id"]) if baseline != "nearest" else None
    what = f"head − {baseline.replace('_', ' ')} ({unit})"
    verdict = directional(strong["value"], strong["ci"], what=what, paper=paper)
    if cluster and len({r["document"] for r in rows}) < 2:
        verdict = Verdict("inconclusive", verdict.rule, f"{verdict.reason}; one document: no interval over documents")
    elif cluster and len({r["document"] for r in rows}) < FEW_CLUSTERS:
        value, ci, k = cluster_t([r["head"] - r[baseline] for r in rows], [r["document"] for r in rows])
        by_t = directional(value, ci, what=f"head − {baseline.replace('_', ' ')} (cluster-robust t, {k - 1} df)",
                           paper=paper)
        said = f"{by_t.reason}; the cluster bootstrap: {verdict.reason}"
        status = by_t.status if by_t.status == verdict.status else "inconclusive"
        verdict = Verdict(status, verdict.rule, said if status == by_t.status else
                          f"{said}: the verdict flips between the cluster-robust t ({by_t.status}) and the cluster "
                          f"bootstrap ({verdict.status}) over {k} documents")
    extra = ""
    if baseline != "nearest":
        floor = _paired(rows, "nearest", cluster)
        extra = f"; head − nearest {floor['value']:+.3g} [{floor['ci'][0]:+.3g}, {floor['ci'][1]:+.3g}]"
    held = (f"; judged held out (head chosen on other {'documents' if baseline != 'nearest' else 'rows'}): "
            f"{np.mean([r['head'] for r in rows]):.3f}, the head chosen on these queries (Clark's way, in-sample, "
            f"not judged) {np.mean([r['in_sample'] for r in rows]):.3f}")
    return Verdict(verdict.status, verdict.rule, verdict.reason + extra + held)


# ---------------------------------------------------------------- dispatch

def _kind(claim: dict) -> str:
    tail = claim["id"].split("-", 2)[2]
    if tail in ("sep-middle", "cls-early", "punct-deep"):
        return "shares"
    if tail in ("syntax-all", "syntax-pooled"):
        return "syntax-overall"
    for prefix in ("syntax", "probe", "coref-litbank", "coref-gap"):
        if tail.startswith(prefix):
            return prefix
    raise ValueError(f"{claim['id']}: no Clark rule for this claim type")


JUDGES = {"shares": judge_share, "syntax": judge_relation, "syntax-overall": judge_syntax_overall,
          "probe": judge_probe, "coref-litbank": judge_coref, "coref-gap": judge_coref}

DIFFERS = {
    "shares": "{model} (a contrastively fine-tuned sentence encoder without an MLM head{distilled}) instead of "
    "bert-base; 200 GAP Wikipedia paragraphs as segment pairs of ≤ 128 tokens instead of 992 Wikipedia segments; "
    "BERT-base's layers mapped by relative depth (set by hand), the tokenizer's <s>/</s> as [CLS]/[SEP].",
    "syntax": "{model} instead of bert-base; EWT with UD relations instead of PTB WSJ with Stanford Dependencies "
    "(dobj → obj, poss → nmod:poss, pobj → case reversed); head and offset chosen on 1,000 EWT train sentences and "
    "scored on EWT dev (Clark chose and scored on the same data).",
    "syntax-overall": "{model} instead of bert-base; EWT/UD instead of PTB/Stanford Dependencies; heads and offsets "
    "chosen on EWT train and scored on EWT dev (Clark: the same data); UD list left out.",
    "probe": "{model} instead of bert-base; EWT/UD instead of PTB WSJ; the model's input embeddings instead of GloVe; "
    "trained on 1,000 EWT train sentences, early-stopped on 400 dev sentences, scored on the other dev "
    "sentences; Adam lr .01 (Clark .002), at most 20 epochs.",
    "coref-litbank": "{model} instead of bert-base; LitBank (10 novels to choose the head, 10 others to score it) "
    "instead of CoNLL-2012; mention heads are last words and mention types come from the head word; "
    "Clark chose and scored the head on the same data.",
    "coref-gap": "not in the paper: {model} on GAP (a pronoun and two same-gender names), head chosen on 100 "
    "validation rows and scored on 250 test rows, beside the nearest name (Clark: CoNLL-2012).",
}


def judge(claim: dict, evidence: Evidence) -> Verdict:
    """The claim's verdict by the rule of its type (the module docstring)."""
    return JUDGES[_kind(claim)](claim, evidence)


FINDINGS = {  # the claim's kind (its id's tail for the three shares) -> the paper's finding it tests
    "sep-middle": "[SEP] takes over half of the middle layers' attention",
    "cls-early": "early layers attend to [CLS]",
    "punct-deep": "deep layers attend to periods and commas",
    "syntax": "a head beats the best fixed offset on a dependency relation",
    "syntax-overall": "heads beat the best fixed offset over all relations, one head or each relation's own",
    "probe": "attention probes beat their baselines",
    "coref-litbank": "a coreference head beats the same-head-word rule on LitBank, all mentions and by type",
    "coref-gap": "a coreference head finds GAP's antecedent more often than the nearest name",
}


def describe(claim: dict) -> dict[str, str]:
    model = {"mpnet": "all-mpnet-base-v2", "minilm": "all-MiniLM-L6-v2"}.get(_model(claim), _model(claim))
    distilled = ", attention-distilled" if _model(claim) == "minilm" else ""
    kind = _kind(claim)
    return {"paper": papers.for_claim(claim), "differs": DIFFERS[kind].format(model=model, distilled=distilled),
            "finding": FINDINGS[claim["id"].split("-", 2)[2] if kind == "shares" else kind],
            "on": {"mpnet": "MPNet", "minilm": "MiniLM"}[_model(claim)]}


studies.register_rules("clark", sys.modules[__name__])
