"""A model placed on a mesh is analysed on that mesh: ``run_corpus`` and ``jattn.importance`` called
without ``mesh`` or ``devices`` split the batch over its ``data`` axis only (a batch of 2 on data 2 ×
model 4, where all 8 devices data-parallel would refuse it, or hold a whole copy of the parameters
each) and give the one-device numbers. The run: tests/model_mesh_worker.py, on 8 faked CPU devices."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

import jattn
from jattn.analyses.weights import Entropy
from jattn.runner.loop import run_corpus
from test_sharding import _env
from tiny_encoders import save_tiny
from tolerance import assert_close, model_terms

WORKER = Path(__file__).with_name("model_mesh_worker.py")
TEXTS = ["the cat sat on the mat .", "a dog ran", "birds sing in the morning light", "rain"]


def test_a_model_on_a_mesh_is_analysed_on_it(tmp_path):
    folder = save_tiny(tmp_path / "bert", "bert-2x4", head="mlm")  # 4 heads: split by model 4
    out = tmp_path / "out.npz"
    done = subprocess.run([sys.executable, str(WORKER), str(folder), str(out), json.dumps(TEXTS)], timeout=600,
                          capture_output=True, text=True,
                          env=_env(XLA_FLAGS="--xla_force_host_platform_device_count=8"))
    assert done.returncode == 0, done.stderr[-4000:]
    got = np.load(out)
    assert bool(got["one_mesh"])  # the parameters stayed on data 2 x model 4
    model = jattn.load(folder, use_cache=False)
    one = run_corpus(model, TEXTS, [Entropy()], batch_size=2, progress=False).statistics["entropy"].value
    terms = model_terms(model.config, 9) + len(TEXTS)  # the forward, summed over the corpus
    assert_close(got["entropy"], np.asarray(one), terms=terms)
    want = jattn.importance(model, TEXTS, batch_size=2, progress=False)["encoder"]
    assert_close(got["importance"], want, terms=2 * terms)  # a gradient: the reductions twice
