"""Voita et al.'s head roles (jattn.analyses.roles) against numpy loops of the definitions, the
token-to-word mapping, gradient × input of the heads (jattn.analyses.lrp) against finite
differences, and the dependency parser's CoNLL-U (jattn.io.parse)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jattn.analyses import lrp, roles
from jattn.nn.token_classes import OTHER, SEP
from jattn.runner.protocol import StepContext
from jattn.analyses.syntax import OFFSETS


class Pieces:
    """A SentencePiece-like tokenizer over fixed pieces ("▁" opens a word; id 0 is </s>)."""

    def __init__(self, pieces):
        self.pieces = ["</s>", *pieces]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.pieces[i] for i in ids if i).replace("▁", " ").strip()


def test_token_words_maps_pieces_to_parser_words():
    tok = Pieces(["▁Un", "▁hom", "me", "▁l", "'", "app", "areil", "."])
    ids = np.array([1, 2, 3, 4, 5, 6, 7, 8, 0])
    words = roles.token_words(tok, ids, "Un homme l'appareil.", ["Un", "homme", "l'", "appareil", "."])
    np.testing.assert_array_equal(words, [0, 1, 1, 2, 2, 3, 3, 4, -1])  # "'" belongs to "l'"; </s> to none
    assert roles.token_words(tok, ids, "Un homme l'appareil !", ["Un"]) is None  # decoding differs from the text
    assert roles.token_words(tok, ids, "Un homme l'appareil.", ["Un", "femme"]) is None  # a word not in the text


def test_token_labels_mark_first_tokens_and_the_rarest():
    word = np.array([0, 1, 1, 2, -1])
    heads, relations = np.array([2, 0, 2]), ["amod", "root", "nsubj:pass"]
    ids = np.array([5, 6, 7, 8, 0])
    rank = np.arange(10)  # id 8 is the rarest of the sentence
    got = roles.token_labels(word, heads, relations, ids, rank, top=8)
    np.testing.assert_array_equal(got["dep_head"], [1, -1, -1, 1, -1])  # word 0 -> word 1; word 2 -> word 1
    np.testing.assert_array_equal(got["dep_rel"], [2, -1, -1, 0, -1])  # amod, nsubj (subtype dropped)
    np.testing.assert_array_equal(got["rarest"], [0, 0, 0, 1, 0])
    assert not roles.token_labels(word, heads, relations, ids, rank, top=9)["rarest"].any()  # rank 8 is frequent
    assert (roles.token_labels(None, heads, relations, ids, rank, top=8)["dep_head"] == -1).all()  # unmapped


def _reference(W, lengths, word, dep_head, dep_rel, rarest):
    """Loops of the module docstring's definitions. W (L, b, H, n, n) -> dict of counts."""
    L, b, H = W.shape[:3]
    R = len(roles.RELATIONS)
    out = {"correct": np.zeros((2, L, H, R), int), "total": np.zeros(R, int), "offset_correct": np.zeros((6, R), int),
           "prev_hits": np.zeros((L, H), int), "prev_rows": 0, "next_hits": np.zeros((L, H), int), "next_rows": 0,
           "rare_hits": np.zeros((L, H), int), "rare_rows": 0}
    for s in range(b):
        n = lengths[s]  # real tokens, the last one EOS
        for i in range(n - 1):  # non-EOS rows
            for l in range(L):
                for h in range(H):
                    top = int(np.argmax(W[l, s, h, i, :n]))
                    out["prev_hits"][l, h] += i >= 1 and top == i - 1
                    out["next_hits"][l, h] += top == i + 1
                    out["rare_hits"][l, h] += rarest[s].any() and top == int(np.argmax(rarest[s]))
            out["prev_rows"] += i >= 1
            out["next_rows"] += 1  # every non-EOS row has a next token (EOS at the latest)
            out["rare_rows"] += bool(rarest[s].any())
            if dep_head[s, i] < 0:
                continue
            r = dep_rel[s, i]
            out["total"][r] += 1
            others = [j for j in range(n) if word[s, j] != word[s, i] or word[s, j] < 0]
            for l in range(L):
                for h in range(H):
                    row = others[int(np.argmax(W[l, s, h, i, others]))]
                    col = others[int(np.argmax(W[l, s, h, others, i]))]
                    out["correct"][0, l, h, r] += word[s, row] == dep_head[s, i]
                    out["correct"][1, l, h, r] += word[s, col] == dep_head[s, i]
            for k, o in enumerate(OFFSETS):
                out["offset_correct"][k, r] += dep_head[s, i] == word[s, i] + o
    return out


def test_token_roles_counts_equal_loops():
    rng = np.random.default_rng(0)
    L, b, H, n = 2, 3, 4, 9
    lengths = [9, 6, 4]
    logits = rng.normal(size=(L, b, H, n, n)) * 3
    mask = np.arange(n)[None] < np.array(lengths)[:, None]  # (b, n)
    W = np.where(mask[None, :, None, None], np.exp(logits), 0.0)
    W /= W.sum(-1, keepdims=True)
    word, dep_head, dep_rel, rarest = (np.full((b, n), -1) for _ in range(4))
    rarest[:] = 0
    for s, m in enumerate(lengths):
        word[s, : m - 1] = np.sort(rng.integers(0, m - 2, m - 1))  # tokens of a word are contiguous
        for i in range(m - 1):
            if i == 0 or word[s, i] != word[s, i - 1]:  # a word's first token
                if rng.random() < 0.8:
                    dep_head[s, i], dep_rel[s, i] = rng.integers(0, word[s, m - 2] + 1), rng.integers(0, 4)
        if s != 2:
            rarest[s, rng.integers(0, m - 1)] = 1  # the last sentence does not qualify
    cls = np.where(mask, OTHER, -1)
    cls[np.arange(b), np.array(lengths) - 1] = SEP
    batch = {"allowed": jnp.asarray(mask[:, :, None] & mask[:, None, :]), "query_mask": jnp.asarray(mask.astype(int)),
             "key_mask": jnp.asarray(mask.astype(int)), "query_class": jnp.asarray(cls)}
    features = {
        k: jnp.asarray(v) for k, v in dict(word=word, dep_head=dep_head, dep_rel=dep_rel, rarest=rarest).items()
    }
    ctx = StepContext(None, None, batch, features, {}, {"weights": jnp.asarray(W, jnp.float32)}, None, {}, "encoder")
    method = roles.TokenRoles()
    got = method.finalize(jax.tree.map(lambda x: np.asarray(x, np.float64), method.reduce(ctx)), {})
    want = _reference(np.asarray(W, np.float32), lengths, word, dep_head, dep_rel, rarest)
    assert {k for k in got if k.startswith("roles_")} == {f"roles_{k}" for k in want}
    for key in want:
        np.testing.assert_array_equal(got[f"roles_{key}"].value, want[key], err_msg=key)
    assert want["correct"].sum() > 0 and want["rare_hits"].sum() > 0  # the test exercises every count


def test_token_roles_through_the_runner(tiny_marian):
    """Rows are counted over real non-EOS tokens whatever the batching; roles come out per head."""
    from jattn.io.readers import Example
    from jattn.runner import run_corpus

    pairs = [("a b c d e", "a b c"), ("b c", "c"), ("a c d", "d e a b")]
    rank = np.arange(tiny_marian.config.vocab_size)
    examples = []
    for src, tgt in pairs:
        ids = np.asarray(tiny_marian.tokenizer(src)["input_ids"])
        word = np.append(np.arange(len(ids) - 1), -1)
        heads = np.array([2] + [1] * (len(ids) - 2)) if len(ids) > 2 else np.array([0])
        labels = roles.token_labels(word, heads, ["nsubj"] * (len(ids) - 1), ids, rank, top=0)
        examples.append(Example(src, tgt, labels=labels))
    method = roles.TokenRoles(min_count=1)
    tokens = [len(tiny_marian.tokenizer(s)["input_ids"]) - 1 for s, _ in pairs]  # non-EOS tokens
    results = [run_corpus(tiny_marian, examples, [method], batch_size=size, max_length=32, progress=False)
               for size in (1, 3)]
    for run in results:
        stats = run.statistics
        assert stats["encoder_roles_prev_rows"].value == sum(t - 1 for t in tokens)
        assert stats["encoder_roles_rare_rows"].value == sum(tokens)
        found = method.roles(stats)
        assert found["role"].shape == (tiny_marian.config.encoder_layers, tiny_marian.config.encoder_heads)
    with pytest.raises(ValueError, match="needs per-token labels"):
        run_corpus(tiny_marian, [Example(s, t) for s, t in pairs], [method], batch_size=2, max_length=32,
                   progress=False)


def test_gradient_x_input_equals_finite_differences(tiny_marian):
    """∂o/∂ξ_h at ξ = 1 against a central difference of the head's output scale (o is smooth)."""
    from jattn.nn import seq2seq
    from jattn.nn.interventions import Interventions
    from tiny_seq2seq import padded_batch

    c = tiny_marian.config
    raw = padded_batch(c, seed=3, b=2, s=6, t=5)
    batch = {k: jnp.asarray(v) for k, v in tiny_marian.check_batch(raw).items()}
    batch["target_mask"] = jnp.asarray(raw["decoder_attention_mask"])
    got = np.asarray(lrp.head_gradient_x_input(tiny_marian.params, c, batch))  # (b, L, H)
    base = seq2seq.forward(tiny_marian.params, c, batch, internals=None)[0]["logits"]
    top = np.asarray(base.argmax(-1))  # (b, t)

    def o(gates):  # (L, b, H) -> (b,) the same top-1 logits
        logits = np.asarray(seq2seq.forward(tiny_marian.params, c, batch, {"encoder": Interventions(head_gates=gates)},
                                            internals=None)[0]["logits"], np.float64)
        return (np.take_along_axis(logits, top[..., None], -1)[..., 0] * raw["decoder_attention_mask"]).sum(-1)

    eps, L, H = 1e-2, c.encoder_layers, c.encoder_heads
    for l, h in [(0, 0), (L - 1, H - 1)]:
        up, down = np.ones((L, 2, H), np.float32), np.ones((L, 2, H), np.float32)
        up[l, :, h], down[l, :, h] = 1 + eps, 1 - eps
        fd = (o(jnp.asarray(up)) - o(jnp.asarray(down))) / (2 * eps)  # (b,)
        np.testing.assert_allclose(got[:, l, h], fd, rtol=2e-2, atol=2e-3)  # O(eps²) + float32 logits / eps


def test_parse_writes_trees_read_back(tmp_path):
    pytest.importorskip("spacy")
    from jattn.io.labels import read_conllu_trees
    from jattn.io.parse import parse_to_conllu

    texts = ["Un homme regarde l'appareil photo.", "Deux chiens courent dans la neige."]
    meta = parse_to_conllu(texts, tmp_path / "p.conllu")
    trees = list(read_conllu_trees(tmp_path / "p.conllu"))
    assert meta["pipeline"] == "fr_core_news_md" and len(trees) == 2
    for text, tree in zip(texts, trees):
        assert "".join(tree.words) == text.replace(" ", "")  # the parser's words cover the text
        assert (tree.heads == 0).sum() >= 1 and tree.heads.max() <= len(tree.words)
    assert "nsubj" in trees[0].relations


def test_parser_missing_names_the_fix():
    pytest.importorskip("spacy")
    from jattn.io import parse

    with pytest.raises(ImportError, match="spacy download no_such_pipeline"):
        parse.load_parser("no_such_pipeline")


def test_the_positional_detector_finds_the_known_previous_token_head_of_minilm(data_set):
    """Validation on a model with a head of known role: the embedded MiniLM's head 0-2 sends its
    attention to the previous token (≈ 100 % of rows); the detector that judges a translation
    model's heads (``TokenRoles`` and ``roles``: ≥ 90 % of rows) finds it positional, and finds no
    other positional head, on UD English-EWT dev sentences parsed by hand."""
    import jattn
    from jattn.io.labels import read_conllu_trees
    from jattn.io.readers import Example
    from jattn.runner import run_corpus

    net = jattn.load()
    trees = list(read_conllu_trees(data_set("ud-english-ewt") / "en_ewt-ud-dev.conllu"))[:32]
    texts = [" ".join(t.words) for t in trees]
    ids = [np.asarray(net.tokenizer(x)["input_ids"]) for x in texts]
    rank = roles.frequency_rank(ids, len(net.tokenizer.get_vocab()))
    examples = [Example(text, source="ewt", labels=roles.token_labels(
        roles.token_words(net.tokenizer, i, text, tree.words), tree.heads, tree.relations, i, rank, 500))
        for text, i, tree in zip(texts, ids, trees)]
    method = roles.TokenRoles(min_count=20)
    found = method.roles(run_corpus(net, examples, [method], batch_size=32, progress=False).statistics, prefix="")
    assert found["prev"][0, 2] > 0.99 and found["role"][0, 2].startswith("positional")
    positional = {(int(l), int(h)) for l, h in zip(*np.nonzero(np.char.startswith(found["role"].astype(str),
                                                                                   "positional")))}
    assert positional == {(0, 2)}, positional

