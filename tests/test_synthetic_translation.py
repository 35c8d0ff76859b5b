"""The synthetic clause language (``jattn.artefacts.synthetic``): generated the same way every
time, a target that token and position alone do not determine, and its recipes (the Voita setting
where the encoder's self-attention is needed)."""

from __future__ import annotations

import hashlib
from collections import defaultdict

import pytest

from jattn.artefacts.synthetic import MARKERS, TASKS, SyntheticTask

SMALL = SyntheticTask(sizes=(("train", 40), ("val", 5), ("test", 5)))


def test_the_corpus_is_generated_the_same_every_time_and_its_splits_differ():
    """Two generations give the same sentences; the test split (what the trained models are scored
    on) is pinned by its sha256, and it does not depend on the size of the training split."""
    a, b = (SMALL.split(s) for s in ("train", "train"))
    assert a == b and SMALL.split("val") != SMALL.split("test")
    test = TASKS["clauses"].split("test")
    assert test[0][:5] == SMALL.split("test")[0]  # its own seed: the same sentences at any size
    digest = hashlib.sha256("\n".join(test[0] + test[1]).encode()).hexdigest()
    assert digest == "e2930fd0d41c44c9f3910c2edc12ac9a56b872c1209fe38ea91affca13734e92", digest
    lengths = [len(s.split()) for s in test[0]]
    assert min(lengths) >= 10 and max(lengths) <= 40 and len(set(test[0])) == len(test[0])


def test_a_target_word_is_not_a_function_of_its_source_token_and_position():
    """One dependent at one source position gets another target form when only its clause's head
    changes (the head's class) and another target position when only the marker changes; over the
    test split, most (dependent, position) pairs occur with more than one target form."""
    lex = SMALL.lexicon()
    noun_a = lex["nouns"][0]
    noun_b = next(n for n in lex["nouns"] if lex["class"][n] != lex["class"][noun_a])
    d, e = lex["dependents"][:2]
    for head in (noun_a, noun_b):  # dependent d at position 1 in both
        assert SMALL.translate([head, d, e, "ta"], lex) == [
            lex["form"][d, lex["class"][head]],
            lex["form"][e, lex["class"][head]],
            lex["noun_target"][head],
        ]
    assert lex["form"][d, lex["class"][noun_a]] != lex["form"][d, lex["class"][noun_b]]
    assert SMALL.translate([noun_a, d, e, "ru"], lex)[:2] == SMALL.translate([noun_a, d, e, "ta"], lex)[1::-1]
    forms = defaultdict(set)  # (dependent, source position) -> its target forms
    form_of = {v: k for k, v in lex["form"].items()}
    src, tgt = TASKS["clauses"].split("test")
    for s, t in zip(src, tgt):
        s, t = s.split(), t.split()
        clauses, start = [], 0
        for i, w in enumerate(s):
            if w in MARKERS:
                clauses.append((start, i))
                start = i + 1
        forms_in = iter(t)
        for a, z in clauses:
            deps = range(a + 1, z)
            out = [next(forms_in) for _ in deps]
            next(forms_in)  # the head
            for i, f in zip(deps[::-1] if MARKERS[s[z]] else deps, out):
                assert form_of[f][0] == s[i]
                forms[s[i], i].add(f)
    ambiguous = sum(len(f) > 1 for f in forms.values()) / len(forms)
    assert ambiguous > 0.5, ambiguous


def test_an_unfinished_clause_and_an_unknown_corpus_are_errors():
    from jattn.artefacts.translation import TranslationConfig, splits

    lex = SMALL.lexicon()
    with pytest.raises(ValueError, match="ends inside a clause"):
        SMALL.translate([lex["nouns"][0], lex["dependents"][0]], lex)
    with pytest.raises(ValueError, match="unknown synthetic corpus 'nope'; known: clauses"):
        splits(TranslationConfig(corpus="nope"))


def test_the_recipes_are_three_seeds_of_the_model_and_of_its_control():
    """The registered recipes: seeds 0-2 of the model and of the control, the same settings but for
    the seed and the encoder's self-attention, trained on the synthetic corpus."""
    from jattn.artefacts import RECIPES
    from jattn.artefacts.translation import SYNTHETIC, SYNTHETIC_CONTROL

    assert len(SYNTHETIC) == len(SYNTHETIC_CONTROL) >= 3
    for model, control in zip(SYNTHETIC, SYNTHETIC_CONTROL):
        assert RECIPES[model.name] is model and RECIPES[control.name] is control
        assert model.task == control.task == "clauses" and model.epochs == control.epochs
        a, b = dict(model.options), dict(control.options)
        assert b.pop("encoder_self_attention") is False and "encoder_self_attention" not in a and a == b
    assert [dict(r.options)["seed"] for r in SYNTHETIC] == list(range(len(SYNTHETIC)))


@pytest.mark.parametrize("name", ["clauses-3x8", "clauses-3x8-no-encoder-attention"])
def test_the_committed_seed_0_model_scores_its_recorded_test_bleu(name):
    """``checkpoints/<name>`` (what ``jattn models make <name>`` made): its beam-4 translations of the
    test split (``test.hyp``) score the BLEU ``training.json`` records against the generated references, and
    jattn reads the folder with the recorded shape."""
    import json
    from pathlib import Path

    from sacrebleu.metrics import BLEU

    import jattn
    from jattn.artefacts.synthetic import splits

    folder = Path(__file__).resolve().parents[1] / "checkpoints" / name
    record = json.loads((folder / "training.json").read_text())["test"]
    hyp = (folder / "test.hyp").read_text(encoding="utf-8").splitlines()
    _, refs = splits("clauses")["test"]
    assert len(hyp) == len(refs) == record["n"] == 1000
    assert BLEU().corpus_score(hyp, [refs]).score == pytest.approx(record["bleu"], abs=1e-6)
    model = jattn.load(folder, use_cache=False)
    c = model.config
    assert (c.encoder_layers, c.decoder_layers, c.encoder_heads, c.d_model) == (3, 3, 8, 128)
