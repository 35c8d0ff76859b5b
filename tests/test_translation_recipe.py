"""The translation recipe (``jattn.artefacts.translation``): BLEU with a bootstrap interval,
training to convergence, a cased model that both readers of its folder translate alike."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from jattn.stats import bleu_ci, bleu_from_statistics, bleu_statistics

CAPITALISED = "Une table pleine de photos dans des cadres, sur un marché de plein air."


def test_bleu_of_resampled_statistics_is_sacrebleu_of_the_resampled_corpus():
    """The bootstrap's statistic: BLEU summed from per-sentence rows equals sacreBLEU's corpus BLEU of
    the same sentences, for the whole corpus and for resamples with repeated sentences."""
    import sacrebleu

    rng = np.random.default_rng(0)
    words = "a man in a red shirt is riding a bike down the street while two dogs watch".split()
    refs = [" ".join(rng.choice(words, rng.integers(3, 12))) for _ in range(60)]
    hyps = [" ".join(w for w in r.split() if rng.random() > keep) or "a" for keep in (0.25, 0.8) for r in refs[:30]]
    refs = refs[:30] * 2  # half the sentences nearly right, half with no 4-gram match (smoothing matters)
    rows = bleu_statistics(hyps, refs)
    for idx in (np.arange(60), *rng.integers(0, 60, (3, 60)), np.arange(30, 60)):
        want = sacrebleu.corpus_bleu([hyps[i] for i in idx], [[refs[i] for i in idx]]).score
        assert bleu_from_statistics(rows[idx]) == pytest.approx(want, abs=1e-9)  # same integer counts, same formula
    got = bleu_ci(hyps, refs)
    assert got["ci"][0] < got["bleu"] < got["ci"][1] and got["signature"].startswith("nrefs:1|case:mixed")
    with pytest.raises(ValueError, match="aligned line by line"):
        bleu_statistics(hyps, refs[:-1])


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, data_set):
    """A 1+1-layer model trained cased for a few updates on 120 Multi30k pairs, with patience 1."""
    from jattn.artefacts.translation import TranslationConfig, train_translation

    data_set("multi30k")
    root = tmp_path_factory.mktemp("translation")
    c = TranslationConfig(limit_train=120, limit_eval=6, vocab_size=400, layers=1, d_model=32, ffn=64, heads=2,
                          epochs=6, patience=1, max_len=16, test_beams=2, val_pairs=6)
    return root / "out", train_translation(root / "out", root / "work", c, progress=False), c


def test_training_stops_at_convergence_and_records_bleu_of_its_translations(tiny_model, data_set):
    from jattn.io.parallel import read_parallel

    out, result, c = tiny_model
    saved = json.loads((out / "training.json").read_text())
    assert (out / "DONE").is_file() and saved["test"] == result["test"]
    # greedy validation BLEU of a model this small stays 0: never better, so patience 1 stops after epoch 2
    assert saved["converged"] and saved["epochs"] == 2 < c.epochs
    refs = read_parallel(*(data_set("multi30k") / f"test_2016_flickr.{s}" for s in ("fr", "en")))[1][: c.limit_eval]
    hyps = (out / "test.hyp").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(hyps) == len(refs) == saved["test"]["n"]
    assert saved["test"]["bleu"] == bleu_ci(hyps, refs)["bleu"]


def test_a_cased_model_reads_capitals_and_both_readers_agree(tiny_model):
    """Trained cased: a capitalised sentence has no <unk> piece; ``translate`` and HF's
    ``MarianMTModel.generate`` on the exported folder give the same tokens (greedy)."""
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    import jattn

    out = tiny_model[0]
    tok = MarianTokenizer.from_pretrained(str(out))
    ids = tok([CAPITALISED])["input_ids"][0]
    assert tok.unk_token_id not in ids, tok.convert_ids_to_tokens(ids)
    ours = jattn.load(out, use_cache=False).translate([CAPITALISED], num_beams=1, max_length=12)
    hf = MarianMTModel.from_pretrained(str(out)).eval()
    with torch.no_grad():
        gen = hf.generate(**tok([CAPITALISED], return_tensors="pt"), num_beams=1, do_sample=False, max_length=12)
    assert ours == tok.batch_decode(gen, skip_special_tokens=True)


CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"
COMMITTED = CHECKPOINTS / "multi30k-fr-en-6x8"
CONTROL = CHECKPOINTS / "multi30k-fr-en-6x8-no-encoder-attention"  # the same recipe without encoder self-attention


def test_the_committed_model_translates_a_capitalised_sentence():
    """The recipe's model as committed (``jattn models make multi30k-fr-en-6x8``'s folder): the
    sentence a lowercased model turned into "emergency medical table ..." has no <unk> piece and
    translates with its ordinary words, alike through ``translate`` and HF's reader (beam 4, as
    the folder's generation config says)."""
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    import jattn
    from jattn.artefacts.translation import RECIPE

    tok = MarianTokenizer.from_pretrained(str(COMMITTED))
    assert tok.unk_token_id not in tok([CAPITALISED])["input_ids"][0]
    model = jattn.load(COMMITTED, use_cache=False)
    c = model.config
    assert (c.encoder_layers, c.decoder_layers, c.encoder_heads, c.d_model) == (6, 6, 8, 256)
    ours = model.translate([CAPITALISED], num_beams=4)
    with torch.no_grad():
        gen = MarianMTModel.from_pretrained(str(COMMITTED)).eval().generate(**tok([CAPITALISED], return_tensors="pt"))
    assert ours == tok.batch_decode(gen, skip_special_tokens=True)
    words = set(ours[0].lower().replace(",", " ").replace(".", " ").split())
    assert {"table", "market"} <= words and words & {"pictures", "photos"}, ours
    settings = json.loads((COMMITTED / "training.json").read_text())["settings"]
    assert settings["epochs"] == RECIPE.epochs and {k: settings[k] for k, _ in RECIPE.options} == dict(RECIPE.options)


@pytest.mark.parametrize("folder", [COMMITTED, CONTROL], ids=lambda f: f.name)
def test_the_committed_model_s_test_translations_score_its_recorded_bleu(data_set, folder):
    """``test.hyp`` (one translation per test sentence) against the cased references gives the BLEU
    and interval ``training.json`` records; ``--runslow`` checks that the weights give ``test.hyp``."""
    from jattn.io.parallel import read_parallel

    recorded = json.loads((folder / "training.json").read_text())["test"]
    root = data_set("multi30k")
    refs = read_parallel(root / f"{recorded['split']}.fr", root / f"{recorded['split']}.en", lowercase=False)[1]
    hyps = (folder / "test.hyp").read_text(encoding="utf-8").split("\n")[:-1]
    got = bleu_ci(hyps, refs)
    assert (got["bleu"], got["ci"], got["n"]) == (recorded["bleu"], recorded["ci"], recorded["n"])
    assert "<unk>" not in " ".join(hyps)


@pytest.mark.slow(twin="tests/test_translation_recipe.py::test_training_stops_at_convergence_and_records_bleu_of_its_"
                       "translations")
@pytest.mark.parametrize("folder", [COMMITTED, CONTROL], ids=lambda f: f.name)
def test_the_committed_weights_decode_their_test_translations(data_set, folder):
    """The whole test set decoded again (beam 4, as at export): the committed ``test.hyp``."""
    from flax import nnx

    import jattn
    from jattn.io.parallel import encode, read_parallel
    from jattn.training.nmt import translations

    recorded = json.loads((folder / "training.json").read_text())
    model = jattn.load(folder, use_cache=False)
    root = data_set("multi30k")
    src = read_parallel(root / f"{recorded['test']['split']}.fr", root / f"{recorded['test']['split']}.en",
                        lowercase=False)[0]
    hyps = translations(nnx.to_pure_dict(model.params), model.config, model.tokenizer,
                        encode(model.tokenizer, src, model.config.max_length), num_beams=recorded["test"]["beams"],
                        max_length=recorded["settings"]["max_len"] + 16)  # as the export decoded them
    assert hyps == (folder / "test.hyp").read_text(encoding="utf-8").split("\n")[:-1]


def test_the_committed_control_is_the_recipe_without_encoder_self_attention():
    """The committed control: its recipe's settings (the model's, and no encoder self-attention), the
    same width and depth, and every encoder self-attention weight zero while the decoder's are not."""
    from safetensors.numpy import load_file

    from jattn.artefacts.translation import NO_ENCODER_ATTENTION, RECIPE

    ours, control = (json.loads((f / "training.json").read_text())["settings"] for f in (COMMITTED, CONTROL))
    assert {k: control[k] for k, _ in NO_ENCODER_ATTENTION.options} == dict(NO_ENCODER_ATTENTION.options)
    assert control["epochs"] == NO_ENCODER_ATTENTION.epochs == RECIPE.epochs
    assert {k: v for k, v in control.items() if k != "encoder_self_attention"} == \
        {k: v for k, v in ours.items() if k != "encoder_self_attention"}
    weights = load_file(str(CONTROL / "model.safetensors"))
    attention = [n for n in weights if ".self_attn." in n]
    encoder = [n for n in attention if n.startswith("model.encoder.")]
    assert len(encoder) == 6 * 8 and len(attention) == 2 * len(encoder)  # q, k, v, out: weight and bias, 6 layers
    assert not any(weights[n].any() for n in encoder)
    assert all(weights[n].any() for n in attention if n.startswith("model.decoder.") and n.endswith("weight"))


def test_the_control_without_encoder_self_attention_keeps_it_zero_and_each_position_sees_only_itself(tmp_path):
    """``encoder_self_attention=False``: after training steps the encoder's attention projections
    are still zero while its feed-forward weights moved; HF's reading of the exported folder gives
    encoder position i the same output whatever the other source tokens are."""
    import jax
    import torch
    from transformers import MarianMTModel

    from jattn.families.marian.convert import save_marian_folder
    from jattn.nn.config import Seq2SeqConfig
    from jattn.training import nmt

    config = Seq2SeqConfig(model_type="marian", src_vocab_size=40, tgt_vocab_size=40, d_model=16, encoder_layers=2,
                           decoder_layers=1, encoder_heads=2, decoder_heads=2, encoder_ffn_dim=32,
                           decoder_ffn_dim=32, max_position_embeddings=32, activation="relu", scale_embedding=True,
                           shared_embeddings=True, tie_output=True, positions="vaswani", final_logits_bias=True,
                           decoder_mask="all", pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
                           forced_eos_token_id=1)
    tc = nmt.TrainConfig(peak_lr=1e-2, warmup_steps=1, encoder_self_attention=False)
    params = nmt.init_params(config, jax.random.key(0), encoder_self_attention=False)
    ffn_start = np.asarray(params["encoder"]["layers"]["ffn_in"]["kernel"])
    optimizer = nmt.make_optimizer(tc)
    opt_state = optimizer.init(params)
    ids = np.random.default_rng(0).integers(2, 40, (4, 7)).astype(np.int32)  # (b, t)
    batch = {"input_ids": ids, "attention_mask": np.ones_like(ids), "decoder_input_ids": ids, "labels": ids,
             "label_mask": np.ones_like(ids)}
    for step in range(3):
        params, opt_state, _ = nmt.train_step(params, opt_state, batch, jax.random.key(step), config=config, tc=tc,
                                              optimizer=optimizer)
    assert not any(np.asarray(x).any() for x in jax.tree_util.tree_leaves(params["encoder"]["layers"]["self_attn"]))
    assert np.abs(np.asarray(params["encoder"]["layers"]["ffn_in"]["kernel"]) - ffn_start).max() > 1e-4
    save_marian_folder(tmp_path, params, config)
    encoder = MarianMTModel.from_pretrained(str(tmp_path)).eval().get_encoder()
    other = ids.copy()
    other[:, 3:] = (other[:, 3:] + 5) % 38 + 2  # every token after position 2 changed
    with torch.no_grad():
        a, b = (encoder(input_ids=torch.tensor(x)).last_hidden_state.numpy() for x in (ids, other))
    np.testing.assert_allclose(a[:, :3], b[:, :3], atol=1e-5)  # positions 0-2 do not see the others
    assert np.abs(a[:, 3:] - b[:, 3:]).max() > 1e-3
