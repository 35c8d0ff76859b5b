"""ALBERT's quirks (``jattn/families/albert``; Lan et al. 2020): one layer shared by all L layers (held as L
equal copies), ``num_hidden_groups`` = L, copies that diverged exported as one group per layer, the
pretraining checkpoint, the pruned export refused. The rest of ALBERT's checks: the conformance table."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

import jattn
from encoder_family_parity import check_outputs, load_pair
from encoder_family_smoke import check_mlm_logits, check_round_trip
from family_pairs import pair_fixture, save
from tiny_encoders import hf_model, hf_run
from tolerance import assert_close, model_terms

pair = pair_fixture("albert")


def test_shared_copies(pair):
    """The L layers hold equal copies of the one shared layer."""
    for path, leaf in jax.tree_util.tree_leaves_with_path(pair[0].params["layers"]):
        leaf = np.asarray(leaf[...])
        assert leaf.shape[0] == 3, path
        for layer in range(1, 3):
            np.testing.assert_array_equal(leaf[layer], leaf[0], err_msg=str(path))


def test_groups_per_layer(pair, tmp_path):
    """``num_hidden_groups`` = L (a layer of its own per layer), converted and exported key for key."""
    model, oracle = load_pair(save(tmp_path / "src", "albert", num_hidden_groups=3))
    check_outputs(model, oracle, pair[2])
    check_round_trip(model, oracle, "base", pair[2], tmp_path / "exported")


def test_pretraining_checkpoint(pair, tmp_path):
    """AlbertForPreTraining: the sentence-order head ignored, the masked-LM head and pooler read."""
    folder = save(tmp_path, "albert", head="pretraining")
    model = jattn.load(folder, tokenizer=False, use_cache=False)
    assert model.config.with_mlm_head and model.config.with_pooler
    check_mlm_logits(model, hf_model(folder, "mlm"), pair[2])


def test_untied_layers_export(pair, tmp_path):
    """Copies that diverged (as fine-tuning makes them) export as one group per layer, and HF's
    ALBERT reads the folder and computes what jattn computes."""
    from safetensors.numpy import save_file

    from jattn.nn.state import from_arrays, to_arrays

    model, _, batch = pair
    arrays = to_arrays(model.params)
    kernel = arrays["layers"]["ffn_in"]["kernel"]  # (L, D, F)
    arrays["layers"]["ffn_in"]["kernel"] = kernel * np.array([1.0, 0.5, -1.0], np.float32)[:, None, None]
    state = model.family.to_hf_state_dict(arrays, model.config)
    np.testing.assert_array_equal(state["encoder.albert_layer_groups.2.albert_layers.0.ffn.weight"], -kernel[2].T)
    (tmp_path / "config.json").write_text(json.dumps(model.family.to_hf_config(model.config)))
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    untied = type(model)(model.config, from_arrays(model.config, arrays), None, None)
    ours = untied.forward(batch, internals=None).last_hidden_state
    assert_close(ours, hf_run(hf_model(tmp_path), batch).last_hidden_state,
                 terms=model_terms(model.config, batch["input_ids"].shape[1]))


def test_pruned_export_refused(pair, tmp_path):
    from jattn.sweeps.pruning import export_pruned

    keep = np.ones((3, 4), bool)
    keep[0, 1] = False
    with pytest.raises(ValueError, match="pruned ALBERT"):
        export_pruned(pair[0], keep, tmp_path / "pruned")
