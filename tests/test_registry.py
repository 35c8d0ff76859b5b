"""The method registry (issue 10, item 5): names equal CLI names, methods compare and hash by
configuration (the runner's compiled step is reused for an equal configuration only), adding a
method is one registration, and a missing rank file is an error saying how to give one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import jattn
from jattn.analyses import registry
from jattn.runner.protocol import Method, Statistic
from jattn.analyses.grad import AttentionGradient
from jattn.analyses.weights import ClassAttention, Entropy
from tiny_encoders import save_tiny


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return jattn.load(save_tiny(tmp_path_factory.mktemp("reg") / "model", "bert-2x4", head="mlm",
                                max_positions=128), use_cache=False)


@pytest.fixture()
def ranks(tmp_path):
    path = tmp_path / "ranks.txt"
    path.write_text("".join(f"{r} {1000 - r} {i}\n" for r, i in enumerate([1996, 4937, 1012, 1010], 1)))
    return path


def test_every_registered_method_is_named_as_on_the_command_line(model, ranks):
    entries = registry.entries()
    assert {"weights", "entropy", "js", "grad", "word-weights", "word-entropy", "norms", "norm-freq",
            "mixing"} <= set(entries)
    methods = registry.make_methods(model, list(entries), registry.Options(rank_file=ranks))
    for name, method in zip(entries, methods):
        assert isinstance(method, Method) and method.name == name
        again = entries[name].factory(model, registry.Options(rank_file=ranks))
        assert again == method and hash(again) == hash(method) and again is not method


def test_methods_compare_by_configuration(model):
    assert ClassAttention() == ClassAttention("token") != ClassAttention("word")
    assert Entropy("word") != ClassAttention("word")  # same fields, other class
    assert AttentionGradient(model) == AttentionGradient(model)
    assert AttentionGradient(model, seed=1) != AttentionGradient(model)
    assert len({ClassAttention(), ClassAttention(), Entropy()}) == 2
    with pytest.raises(ValueError, match="level must be"):
        ClassAttention("sentence")
    with pytest.raises(dataclasses.FrozenInstanceError):
        ClassAttention().level = "word"


def test_the_compiled_step_is_reused_for_an_equal_configuration_only(model):
    from jattn.runner import run_corpus
    from jattn.runner.loop import _step

    run_corpus(model, ["A cat.", "A dog sat."], [ClassAttention()], batch_size=2, progress=False)
    before = _step.cache_info()
    run_corpus(model, ["A cat.", "A dog sat."], [ClassAttention()], batch_size=2, progress=False)  # a new, equal object
    after = _step.cache_info()
    assert after.hits == before.hits + 1 and after.misses == before.misses
    run_corpus(model, [["A", "cat", "."]], [ClassAttention("word")], batch_size=2, progress=False)
    assert _step.cache_info().misses == after.misses + 1


def test_a_method_defined_in_one_place_reaches_the_command_line(model, capsys, tmp_path, monkeypatch):
    import jax.numpy as jnp

    @dataclasses.dataclass(frozen=True)
    class TokenCount(Method):
        name = "token-count"

        def reduce(self, ctx):
            return {"n": (ctx.batch["attention_mask"] > 0).sum().astype(jnp.float32)}

        def finalize(self, totals, meta):
            return {"token_count": Statistic(np.asarray(totals["n"]), "() real tokens")}

    monkeypatch.setitem(registry._ENTRIES, "token-count", registry.Entry(
        "token-count", "real tokens, 100% of them", lambda model, options: TokenCount()))
    monkeypatch.setattr(registry, "entries", lambda: dict(registry._ENTRIES))
    from jattn.cli import main

    with pytest.raises(SystemExit):
        main(["analyze", "--help"])
    # without any whitespace: argparse wraps at hyphens too ("token-" / "count"), wherever the line ends
    assert "token-count:realtokens,100%ofthem" in "".join(capsys.readouterr().out.split())
    corpus = tmp_path / "c.txt"
    corpus.write_text("The cat sat.\nA dog.\n")
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    main(["analyze", "--model", model.source, "--input", str(corpus), "--methods", "token-count,weights",
          "--out", str(tmp_path / "out")])
    import json

    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["token_count"]["value"] == doc["meta"]["tokens"] == 11 and doc["meta"]["methods"] == [
        "token-count",
        "weights",
    ]


def test_rank_file_is_required_and_checked(model, tmp_path):
    for name in ("norm-freq", "mixing"):
        with pytest.raises(ValueError, match=f"'{name}' needs a token frequency rank file.*rank_file=FILE"):
            registry.make_methods(model, [name])
    with pytest.raises(FileNotFoundError, match="nope.txt not found. Fix: pass rank_file= a"):
        registry.make_methods(model, ["norm-freq"], registry.Options(rank_file=tmp_path / "nope.txt"))


def test_unknown_and_empty_method_lists(model):
    with pytest.raises(ValueError, match="'bogus'.*Fix: choose from .*weights"):
        registry.make_methods(model, ["weights", "bogus"])
    with pytest.raises(ValueError, match="none given"):
        registry.make_methods(model, [])
