"""Clark et al. 2019, "What Does BERT Look At?": special tokens, syntax heads, coreference heads,
the attention probe, on all-mpnet-base-v2 (12 × 12 heads, the headline) and MiniLM (6 × 12).

The paper (Clark, Khandelwal, Levy and Manning 2019) finds that much of BERT's attention goes to
[CLS], [SEP] and punctuation; that particular heads track particular dependency relations better
than a fixed-offset baseline; that particular heads find coreferent antecedents; and that a probe
reading only the attention maps recovers much of the dependency tree. Its protocol: bert-base on
Wikipedia segments (the shares), PTB WSJ with Stanford Dependencies (the heads per relation and
the probe, UAS), CoNLL-2012 (antecedent accuracy); heads were chosen and reported on the same data.

Differences here (``docs/METHODS.md``): all-mpnet-base-v2 and MiniLM (the encoders jattn has
offline) instead of bert-base; English Web Treebank with UD relations instead of PTB with Stanford
Dependencies (the relation mapping is ``CLARK_TABLE1`` in ``experiments.clark2019.syntax``);
GAP and LitBank instead of CoNLL-2012, GAP paragraphs as the segments (openly licensed data, the
PTB and OntoNotes are not); heads, offsets and the probe's stopping epoch selected on one split
and reported on another (``STATISTICS.md`` "Selection and report"), the paper's same-set number
given beside where it applies.

Per model five stages (``STATISTICS.md`` §4-§6):

- ``shares``: attention share to the [CLS] role, the [SEP] role and "." / "," per layer on GAP
  Wikipedia paragraphs as segment pairs (``experiments.clark2019.shares``), beside uniform
  attention; bootstrap over segments.
- ``syntax``: best head and best offset per UD relation chosen on EWT train sentences,
  reported on EWT dev with a bootstrap over words (``experiments.clark2019.syntax``); paired
  bootstrap of head vs offset per relation, Holm over the relations; the probe's feature shards
  of the same pass.
- ``probe``: Clark's attention probe ("attn", "attn+emb") and the distances + embeddings
  baseline trained on those train sentences, early-stopped on the first ``stop_sentences`` dev
  sentences, UAS on the other dev sentences, beside right-branching (``experiments.clark2019.probe``).
- ``litbank`` / ``gap``: coreference heads (``experiments.clark2019.coref``) chosen on one set of
  documents / rows, reported on another, by mention type, beside nearest / same-head-word / same-type.

Verdicts: by the decision rules of ``experiments.clark2019.verdicts`` (STATISTICS.md, Decision
rules), applied to the claims after the stages: a stage measures and notes its tests' values,
no verdict.

Measured costs (nice 10 on the shared 2-core CPU while other jobs ran, so pessimistic; wall
time). At load average ≈ 11, after the compiles, MPNet / MiniLM: GAP segment pairs (≤ 128
tokens) 7.8 / 1.2 ms a token (10.3 / 3.1 with the compiles); EWT sentences (batch 16) 0.25 /
0.03 s a sentence (256 dev sentences: 63 / 7.4 s); LitBank in 256-token segments 9.5 / 2.3 ms a
token (≈ 2,700 tokens and ≈ 165 queries a document). At load ≈ 20, the full profile's stages at
reduced sizes (MPNet / MiniLM): 32 segment pairs 90 / 36 s; 300 train + 200 dev EWT sentences
438 / 162 s; 1 + 1 LitBank documents 94 / 38 s; 30 + 60 GAP rows 254 / 43 s (compiles dominate
small runs); probe epochs on 300 MPNet train sentences (after ≈ 50 s of compiles a probe): attn
5.2 s, attn+emb 9.0 s, dist+emb 0.4 s. The full profile from the load-11 rates: MPNet ≈ 190 s
(200 segments) + 740 s (1,000 train and 2,001 dev sentences) + 600 s (three probes of ≤ 20
epochs on 1,000 sentences) + 520 s (10 + 10 LitBank documents) + 350 s (100 + 250 GAP rows) ≈
40 min; MiniLM ≈ 13 min; ≈ 53 min in all (budget 75 min; at load 20 ≈ 1.7× that). Quick
profile: 91 s of stage time at load 15 (MiniLM).

Run: ``jattn reproduce clark --publish`` (full profile, into ``experiments/results/``; or ``--out FOLDER``);
``jattn reproduce clark --quick`` (small subsets, into ``results/reproduce-quick/``).
"""

from __future__ import annotations

from jattn.reproduce.pipeline import Profile, Stage
from jattn.reproduce import studies
from experiments.clark2019 import coref as clark_coref
from experiments.clark2019 import probe as clark_probe
from experiments.clark2019 import shares as clark_shares
from experiments.clark2019 import syntax as clark_syntax
from experiments.clark2019.common import MODELS

CODE = ("experiments.clark2019.common", "jattn.io.labels", "jattn.analyses.word_attention",
        "jattn.analyses.weights")  # beside each stage's own module


def models(profile: Profile) -> tuple[str, ...]:
    return profile.pick(("mpnet", "minilm"), ("minilm",))


def sizes(profile: Profile) -> dict:
    """The profile's sizes (every stage's params are the ones it reads)."""
    return profile.pick(
        full={
            "segments": 200,
            "select_sentences": 1000,
            "report_sentences": None,
            "stop_sentences": 400,
            "min_count": 100,
            "probe_epochs": 20,
            "probe_lr": 0.01,
            "patience": 3,
            "litbank_documents": 10,
            "litbank_budget": 256,
            "litbank_segments": None,
            "gap_select": 100,
            "gap_report": 250,
        },
        quick={
            "segments": 16,
            "select_sentences": 32,
            "report_sentences": 40,
            "stop_sentences": 16,
            "min_count": 10,
            "probe_epochs": 2,
            "probe_lr": 0.01,
            "patience": 2,
            "litbank_documents": 1,
            "litbank_budget": 128,
            "litbank_segments": 3,
            "gap_select": 8,
            "gap_report": 12,
        },
    )


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
            Stage(f"clark.{model}-probe", clark_probe.stage(model), pick("probe_epochs", "probe_lr", "patience"),
                  needs=(f"clark.{model}-syntax",), code=CODE + ("jattn.analyses.probe",)),
            Stage(f"clark.{model}-litbank", clark_coref.litbank_stage(model, select_files, report_files),
                  {**pick("litbank_documents", "litbank_budget", "litbank_segments")},
                  data=tuple(select_files + report_files), models=artefact, code=CODE + ("jattn.analyses.coref",)),
            Stage(f"clark.{model}-gap", clark_coref.gap_stage(model), pick("gap_select", "gap_report"),
                  data=(clark_coref.GAP_VAL, clark_coref.GAP_TEST), models=artefact,
                  code=CODE + ("jattn.analyses.coref", "experiments.common")),
        ]
    return out


studies.register('clark', stages,
                 'Clark et al. 2019: What does BERT look at?')
