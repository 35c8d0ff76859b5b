"""Voita et al. 2019, "Analyzing Multi-Head Self-Attention" (§5-6, Fig. 7-8), with Michel et al.
2019's importance pruning at the same head counts, on a translation model at the papers' head
count: 6 + 6 layers × 8 heads (48 encoder-self, 48 decoder-self, 48 cross-attention heads).

The paper (Voita, Talbot, Moiseev, Sennrich and Titov 2019) finds that a few encoder heads play
identifiable roles (positional, syntactic, rare words), are confident and are the most relevant by
LRP, and that most heads can be pruned, by L0 gates trained with the model, at a small cost in
BLEU, the specialised heads the last to go. Its protocol: Transformer-base NMT (6 + 6 layers × 8
heads), mainly on WMT and OpenSubtitles en→ru, gates on the encoder self-attention and on all three
attention types, BLEU against the number of open heads.

jattn's protocol (``STATISTICS.md`` §2, §4, §6). The model is the artefact ``multi30k-fr-en-6x8``
(``jattn.artefacts.translation``: Multi30k fr→en, cased, trained until validation BLEU stops
improving). For each λ of the sweep and each setting — gates on the encoder self-attention
only, and on all three attention types — hard-concrete gates (``jattn.nn.gates``) are trained
*jointly with every parameter* from the converged model (``jattn.training.l0.GateTrainer`` with
``model_lr`` > 0, dropout and label smoothing as in training), the task loss plus λ · Σ_heads
P(g ≠ 0) (Eq. 5 as written), for ``steps`` updates, then on in steps of ``steps`` / 2 while
any evaluation gate lies strictly between 0 and 1, up to ``max_steps``. Kept heads are the gates
open at evaluation (the deterministic gates folded into W_O); a gate still fractional at the end
is counted and reported, never rounded. The control is the all-gates-open model trained the same
way (what the fine-tuning alone does), translated at each update count a gate run stopped at, so
every gate run is set beside the control trained for as many updates. Michel's baseline: importance
(token estimator, per-layer L2; ``jattn.importance``) estimated once on the converged model over
a slice of the validation split, the heads of the gated types ranked together, and the model
pruned to each λ's open-head count by it and by ``random_orders`` random orders. Every system
translates the whole test set (test_2016_flickr, 1,000 sentences) with beam search; BLEU is
sacreBLEU (13a, cased) with bootstrap intervals; differences are paired bootstrap Δ. The harder
set: the encoder setting's claims again on the longest quarter of the test sentences by source
words (250; ``claims.longest``), from the same translations. The control of the fewest-heads
claim: ``multi30k-fr-en-6x8-no-encoder-attention``, the same recipe trained from scratch with no
encoder self-attention (its projections zero and frozen), translating the test set beside the
unpruned model; the claim's precondition is that this model loses more than 1 BLEU.

The heads themselves (§4, ``experiments.voita2019.roles``): on the unpruned model and the test set, each encoder
head's role (positional, syntactic against spaCy's parse of the French sources, rare words),
confidence, and LRP relevance (conservation checked layer by layer) beside gradient × input;
claims (``experiments.voita2019.head_claims``): confidence vs LRP relevance over heads, and the confidence of the
heads each λ keeps against those it closes.

Deviations from the paper: Multi30k fr→en (29k pairs, a data set a model can be trained on here)
instead of WMT / OpenSubtitles en→ru, a model of width 256 and dropout 0.3 (the papers' 512 and
0.1: the data set is small and the machine two CPU cores) initialised with DS-Init (Zhang et al.
2019; the deep post-LN stack learns slowly from plain Xavier initialisation), one training seed
of the model, 600-3,600 joint updates per λ (until no evaluation gate is fractional, rather than
the paper's training schedule).

Costs, from measured parts (AMD EPYC, 2 cores): a joint gate update (the model trained, dropout
on) costs 0.91-1.12× a training update in alternated rounds (``benchmarks/bench_gate_update.py``)
and took 0.79 s in the study's own run on an otherwise idle machine (all three attention types
gated, λ = 0.001: 2,100 updates in 28 min), so a gate run of 600-3,600 updates takes 8-48 min and
the 11 runs (10 λ runs and the control, as long as the longest) 2-6 h; the model without encoder
self-attention is made once, like the studied one (3-5 h);
beam-4 decoding of the 1,000 test sentences took 42-73 s in the same run (102 s on one core
shared with another job), and the study decodes up to 82 systems (the unpruned model, 10 gate
runs, the control at up to 10 update counts, and for each setting and each distinct open-head
count of its 5 λ runs the importance-pruned model and 5 random orders), about 1-1.5 h. The study
as a whole: 3-8 h.

The λ grid, 0.001-0.02, was set on the earlier, lowercased model of the same shape (``METHODS.md``,
item 5): there encoder gates at λ = 0.005 kept 9 of 48 heads and at λ = 0.01 three (600 and 900
joint updates), so the grid runs from there towards fewer pruned heads rather than past λ = 0.02,
where none or one would stay open: the runs then spread over the open-head counts the paper's
curve (BLEU against open heads, Fig. 7) spans. On that model, at λ = 0.001 two gates were still
fractional (0.96, 0.87) after 1,200 updates, and with gates on all three types at λ = 0.002 one
cross-attention gate (0.89) after 2,400: hence up to 3,600. On the committed model the encoder
gates keep 27, 13, 6, 2 and 1 heads over the grid, every gate closed or open after 600-2,100
updates (the REPORT's table).

The fewest-heads and kept-confidence claims again where the encoder's self-attention is needed: the
synthetic clause language, three seeds of a 3 + 3 × 8 model and of its control without encoder
self-attention, by rules fixed before any gate run (``experiments.voita2019.synthetic_plan``; the
rules ``synthetic``, the stages ``synthetic_runs``, the grid extended for a censored seed by
``synthetic_extension``; full profile only). Its precondition runs on
the models made so far and names the missing ones with the ``jattn models make`` command; the gate
runs, each seed's all-gates-open control trained as long and the roles (against the generator's
gold structure, the detectors validated on planted heads first) spend compute only once the
precondition says the encoder's self-attention is needed; the claims ``voita-synthetic-*`` say why
otherwise, their rules marked as written before their records.

Quick profile: a 1 + 1-layer, 2-head model trained in the work folder on 300 pairs, 2 λ, 20
updates, 24 test sentences, beam 2: the pipeline end to end, not the paper's numbers.

Run: ``jattn reproduce voita --publish`` (full profile, into ``experiments/results/``; or ``--out FOLDER``);
``jattn reproduce voita --quick`` (small subsets, into ``results/reproduce-quick/``).
"""

from __future__ import annotations

from jattn.reproduce.pipeline import Profile, Stage
from jattn.reproduce import studies
from experiments.voita2019 import claims as voita_claims
from experiments.voita2019 import roles as voita_roles
from experiments.voita2019 import runs as R
from experiments.voita2019 import synthetic_extension
from experiments.common import MODEL
from experiments.voita2019.runs import DATA, SETTINGS, lam_name

def params(profile: Profile) -> dict:
    """Sizes: λ sweep, joint-training updates, decoding, the Michel baseline (0: all sentences)."""
    return profile.pick(
        full={"lams": [0.001, 0.002, 0.005, 0.01, 0.02], "steps": 600, "max_steps": 3600, "gate_lr": 0.05,
              "model_lr": 1e-4, "max_tokens": 2048, "max_len": 64, "save_every": 100, "beams": 4, "max_decode": 80,
              "test_sentences": 0, "train_pairs": 0, "importance_pairs": 1000, "random_orders": 5,
              "rare_top": 500, "min_relation_count": 100},
        quick={"lams": [0.05, 0.5], "steps": 20, "max_steps": 30, "gate_lr": 0.2, "model_lr": 1e-4,
               "max_tokens": 512, "max_len": 24, "save_every": 10, "beams": 2, "max_decode": 32,
               "test_sentences": 24, "train_pairs": 2000, "importance_pairs": 32, "random_orders": 2,
               "rare_top": 50, "min_relation_count": 1})


def stages(profile: Profile) -> list[Stage]:
    p = params(profile)
    # a run reads its own λ (in its name) and the sizes, not the sweep: another grid keeps finished runs
    code = ("experiments.common", "jattn.training.l0", "jattn.nn.gates", "jattn.artefacts.translation")
    models = (MODEL,) if profile.name == "full" else ()
    common = dict(params={k: v for k, v in p.items() if k != "lams"}, data=DATA, models=models, code=code)
    out = [Stage("voita.unpruned", R.unpruned_stage, **common)]
    gate_stages = []
    for setting in SETTINGS:
        for lam in p["lams"]:
            gate_stages.append(f"voita.gates-{setting}-{lam_name(lam)}")
            out.append(Stage(gate_stages[-1], R.gate_stage(setting, lam), **common))
    analyses = dict(common, code=code + ("jattn.analyses.roles", "jattn.analyses.lrp", "jattn.analyses.confidence",
                                         "jattn.io.parse"))
    out.append(Stage("voita.parse", voita_roles.parse_stage, **analyses))
    out.append(Stage("voita.roles", voita_roles.roles_stage, needs=("voita.parse",), **analyses))
    out.append(Stage("voita.control", R.control_stage(tuple(gate_stages)), needs=tuple(gate_stages), **common))
    out.append(Stage("voita.importance", R.importance_stage, **common))
    control = dict(common, models=(R.CONTROL,) if profile.name == "full" else ())
    out.append(Stage("voita.no-encoder-attention", R.no_encoder_attention_stage, **control))
    michel = []
    for setting in SETTINGS:
        michel.append(f"voita.michel-{setting}")
        names = tuple(f"voita.gates-{setting}-{lam_name(lam)}" for lam in p["lams"])
        out.append(Stage(michel[-1], R.michel_stage(setting, names), needs=("voita.importance", *names), **common))
    out.append(Stage("voita.claims", voita_claims.claims_stage(gate_stages, michel),
                     needs=("voita.unpruned", "voita.control", "voita.roles", "voita.no-encoder-attention",
                            *gate_stages, *michel), params=p,
                     code=("experiments.voita2019.study", "experiments.voita2019.claims",
                           "experiments.voita2019.head_claims")))
    return out + synthetic_extension.stages(profile)  # the synthetic setting's, once its models are made


studies.register('voita', stages,
                 'Voita et al. 2019: Analyzing multi-head self-attention')
