"""Clark et al. 2019, "What Does BERT Look At?": special tokens, syntax heads, coreference heads,
the attention probe, on all-mpnet-base-v2 (12 × 12 heads, the headline) and MiniLM (6 × 12).

Per model five stages (``STATISTICS.md`` §4-§6; the paper used bert-base on Wikipedia, PTB WSJ
with Stanford Dependencies and CoNLL-2012):

- ``shares``: attention share to the [CLS] role, the [SEP] role and "." / "," per layer on GAP
  Wikipedia paragraphs as segment pairs (``clark_shares``), beside uniform attention; bootstrap
  over segments.
- ``syntax``: best head and best offset per UD relation chosen on EWT train sentences,
  reported on EWT dev with a bootstrap over words (``clark_syntax``); paired bootstrap of head
  vs offset per relation, Holm over the relations; the probe's feature shards of the same pass.
- ``probe``: Clark's attention probe ("attn", "attn+emb") and the distances + embeddings
  baseline trained on those train sentences, early-stopped on the first half of the dev
  sentences, UAS on the second half, beside right-branching.
- ``litbank`` / ``gap``: coreference heads (``clark_coref``) chosen on one set of documents /
  rows, reported on another, by mention type, beside nearest / same-head-word / same-type.

Status rules (``_status``, in code): a finding is "reproduced" when the paired or interval test
the claim names holds, "partly" when only its weaker part holds, else "not reproduced".

Measured costs (nice 10, on the shared 2-core CPU at load average ≈ 11, i.e. pessimistic), per
model, MPNet / MiniLM: segment pairs (GAP, ≤ 128 tokens) 7.8 / 1.2 ms per token after the
first batch of a shape (10.3 / 3.1 with compiles): 300 segments ≈ 28 k tokens ≈ 290 / 90 s.
EWT (128-token sentences, batch 16): 256 dev sentences 63 / 7.4 s, so 1,500 train + 2,001 dev
sentences ≈ 860 / 110 s. LitBank in 256-token segments 9.5 / 2.3 ms per token, ≈ 2,700 tokens
and ≈ 165 queries a document: 14 + 14 documents ≈ 720 / 200 s. GAP paragraphs (≤ 256 tokens,
≈ 120): 150 + 400 rows ≈ 550 / 150 s. Probe: see ``PROBE_COST``. Full profile ≈ 45 min of
stage time for both models at that load (75 min budget); quick profile ≈ 75 s (MiniLM).
"""

from __future__ import annotations

from jattn.reproduce.pipeline import Profile, Stage
from jattn.reproduce.studies import clark_coref, clark_probe, clark_shares, clark_syntax
from jattn.reproduce.studies.clark_common import MODELS

CODE = ("jattn.reproduce.studies.clark_common", "jattn.io.labels", "jattn.analyses.word_attention",
        "jattn.analyses.weights")  # beside each stage's own module


def models(profile: Profile) -> tuple[str, ...]:
    return profile.pick(("mpnet", "minilm"), ("minilm",))


def sizes(profile: Profile) -> dict:
    """The profile's sizes (every stage's params are the ones it reads)."""
    return profile.pick(
        full={"segments": 300, "select_sentences": 1500, "report_sentences": None, "min_count": 100,
              "probe_epochs": 40, "patience": 3, "litbank_documents": 14, "litbank_budget": 256,
              "litbank_segments": None, "gap_select": 150, "gap_report": 400},
        quick={"segments": 24, "select_sentences": 40, "report_sentences": 40, "min_count": 10,
               "probe_epochs": 4, "patience": 2, "litbank_documents": 1, "litbank_budget": 128,
               "litbank_segments": 3, "gap_select": 16, "gap_report": 24})


def stages(profile: Profile) -> list[Stage]:
    size = sizes(profile)
    pick = lambda *keys: {k: size[k] for k in keys}  # noqa: E731
    select_files, report_files = clark_coref.litbank_split(clark_coref.litbank_names(), size["litbank_documents"])
    out = []
    for model in models(profile):
        artefact = (MODELS[model],) if MODELS[model] else ()
        out += [
            Stage(f"clark.{model}-shares", clark_shares.stage(model), pick("segments"), data=(clark_shares.GAP_DEV,),
                  models=artefact, code=CODE),
            Stage(f"clark.{model}-syntax", clark_syntax.stage(model),
                  pick("select_sentences", "report_sentences", "stop_sentences", "min_count"),
                  data=(clark_syntax.EWT_TRAIN, clark_syntax.EWT_DEV), models=artefact,
                  code=CODE + ("jattn.analyses.syntax", "jattn.analyses.probe")),
            Stage(f"clark.{model}-probe", clark_probe.stage(model), pick("probe_epochs", "patience"),
                  needs=(f"clark.{model}-syntax",), code=CODE + ("jattn.analyses.probe",)),
            Stage(f"clark.{model}-litbank", clark_coref.litbank_stage(model, select_files, report_files),
                  {**pick("litbank_documents", "litbank_budget", "litbank_segments")},
                  data=tuple(select_files + report_files), models=artefact, code=CODE + ("jattn.analyses.coref",)),
            Stage(f"clark.{model}-gap", clark_coref.gap_stage(model), pick("gap_select", "gap_report"),
                  data=(clark_coref.GAP_VAL, clark_coref.GAP_TEST), models=artefact,
                  code=CODE + ("jattn.analyses.coref",)),
        ]
    return out
