"""Rule 5 of the synthetic Voita plan (``experiments/voita2019/synthetic_plan.py``): the role
detectors (``jattn.analyses.roles``, Voita et al. 2019 §4.1-4.2) validated on a model with planted
heads before the roles stage runs on the clause language. A tiny random Marian model (2 encoder
layers × 4 heads) whose tokenizer is trained on clause sentences; three of its encoder heads have
their attention α replaced, through the library's intervention mechanism (``Interventions``'
"weights" patch), by exactly the previous token, the next token, and each dependent's clause head
(the generator's gold structure, ``SyntheticTask.structure``). The detectors must find exactly
those three heads and no other."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from jattn.analyses import roles
from jattn.artefacts.synthetic import CLAUSE, TASKS

PREVIOUS, NEXT, SYNTACTIC = (0, 1), (1, 2), (1, 0)  # (layer, head) of each planted head


def test_the_gold_structure_is_each_dependents_clause_head():
    from jattn.artefacts.translation import TranslationConfig, gold_structure

    heads, relations = gold_structure(TranslationConfig(corpus="clauses"), "ka b c ta mo d ru")
    assert heads == [0, 1, 1, 0, 0, 5, 0] and relations == ["root", CLAUSE, CLAUSE, "mark", "root", CLAUSE, "mark"]
    with pytest.raises(ValueError, match="ends inside a clause"):
        TASKS["clauses"].structure("ka b ta mo d".split())
    with pytest.raises(ValueError, match="no gold structure"):
        gold_structure(TranslationConfig(), "un homme")


def test_the_gold_structure_gives_each_dependents_target_form():
    """The structure is the generator's: each dependent's head is a noun, the words between are
    dependents, and the target holds the dependent's form for that noun's class."""
    task = TASKS["clauses"]
    lex = task.lexicon()
    src = task.sentence(np.random.default_rng(0), lex)
    target = task.translate(src, lex)
    heads, relations = task.structure(src)
    assert relations.count(CLAUSE) >= 5
    for i, (h, r) in enumerate(zip(heads, relations)):
        if r == CLAUSE:
            assert src[h - 1] in lex["nouns"] and all(w in lex["dependents"] for w in src[h:i + 1])
            assert lex["form"][src[i], lex["class"][src[h - 1]]] in target


def _planted(word: np.ndarray, dep_head: np.ndarray, length: int, n: int) -> np.ndarray:
    """(3, n, n) the planted heads' α on one sentence of ``length`` real tokens (EOS last): the
    previous token, the next token, each dependent's clause head (at its first token; other rows
    attend to themselves); padding rows attend to themselves."""
    out = np.zeros((3, n, n), np.float32)
    first = {}
    for k in range(length):
        first.setdefault(int(word[k]), k)
    for k in range(n):
        prev = k - 1 if 0 < k < length else k
        nxt = k + 1 if k + 1 < length else k
        syn = first[int(dep_head[k])] if k < length and dep_head[k] >= 0 else k
        out[0, k, prev] = out[1, k, nxt] = out[2, k, syn] = 1.0
    return out


@dataclasses.dataclass(frozen=True)
class PlantedRoles(roles.TokenRoles):
    """``TokenRoles`` on the model with the planted heads' α patched in (``Interventions``): reduced
    after the layer loop, on the internals of its own patched forward."""

    layerwise = False
    internals = ()

    def prepare(self, batch) -> dict:
        f = super().prepare(batch)
        lengths, n = batch.attention_mask.sum(1), batch.attention_mask.shape[1]
        planted = np.stack([_planted(w, d, int(m), n) for w, d, m in zip(f["word"], f["dep_head"], lengths)])
        return {**f, "planted": planted}  # (b, 3, n, n)

    def reduce(self, ctx):
        from jattn.nn.interventions import Interventions

        L, H = ctx.config.encoder_layers, ctx.config.encoder_heads
        planted = ctx.features["planted"]  # (b, 3, n, n)
        b, _, n, _ = planted.shape
        value, where = jnp.zeros((L, b, H, n, n)), np.zeros((L, 1, H, 1), bool)
        for i, (layer, head) in enumerate((PREVIOUS, NEXT, SYNTACTIC)):
            value = value.at[layer, :, head].set(planted[:, i])
            where[layer, 0, head, 0] = True
        _, internals = ctx.forward(interventions={"encoder": Interventions(patch={"weights": (value, where)})},
                                   internals=("weights",))
        return super().reduce(dataclasses.replace(ctx, internals=internals["encoder"]))


@pytest.fixture(scope="module")
def clause_marian(tmp_path_factory):
    """A tiny random Marian model whose sentencepiece vocabulary is trained on clause sentences."""
    import tiny_seq2seq

    import jattn

    src = TASKS["clauses"].split("test")[0][:400]
    folder = tmp_path_factory.mktemp("clauses-tiny")
    patch = pytest.MonkeyPatch()
    patch.setattr(tiny_seq2seq, "sentences", lambda n, seed=0: src[:n])
    try:
        tiny_seq2seq.save_tiny(folder, "marian", max_position_embeddings=256)
    finally:
        patch.undo()
    return jattn.load(folder, use_cache=False), src[:40]


def _found(model, sources: list[str], method) -> dict:
    from jattn.io.parallel import encode
    from jattn.io.readers import Example
    from jattn.runner import run_corpus

    task, ids = TASKS["clauses"], encode(model.tokenizer, sources, model.config.max_length)
    rank = np.zeros(model.config.vocab_size, np.int64)  # every token frequent: no rare-word sentence
    examples = []
    for text, x in zip(sources, ids):
        heads, relations = task.structure(text.split())
        word = roles.token_words(model.tokenizer, x, text, text.split())
        assert word is not None, "the tokenizer does not give back the sentence"
        labels = roles.token_labels(word, np.asarray(heads), relations, x, rank, top=1, known=(CLAUSE,))
        examples.append(Example(text, text, source="clauses", labels=labels))
    run = run_corpus(model, examples, [method], batch_size=8, max_length=model.config.max_length, progress=False)
    return method.roles(run.statistics)


def test_the_detectors_find_exactly_the_planted_heads(clause_marian):
    model, sources = clause_marian
    found = _found(model, sources, PlantedRoles(min_count=20, relations=(CLAUSE,)))
    want = np.full((2, 4), "other", dtype=object)
    want[PREVIOUS], want[NEXT], want[SYNTACTIC] = "positional", "positional", "syntactic"
    assert found["role"].tolist() == want.tolist(), found
    assert found["positional"][PREVIOUS] == "previous" and found["positional"][NEXT] == "next"
    assert found["prev"][PREVIOUS] == 1.0 and found["next"][NEXT] == 1.0
    assert found["relation"][SYNTACTIC] == CLAUSE and found["margin"][SYNTACTIC] >= 50


def test_the_unplanted_model_has_no_role(clause_marian):
    """The same random model without the patch: no head is found (the planted roles above are the
    patch's, not the random weights')."""
    model, sources = clause_marian
    found = _found(model, sources, roles.TokenRoles(min_count=20, relations=(CLAUSE,)))
    assert (found["role"] == "other").all(), found["role"]
