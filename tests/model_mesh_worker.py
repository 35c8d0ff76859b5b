"""Worker of tests/test_runner_model_mesh.py, run with 8 faked CPU devices: a model loaded onto a
data 2 × model 4 mesh, then the runner and head importance called without ``mesh``/``devices``.
Writes their statistics and where the parameters stayed to an npz. Args: FOLDER OUT TEXTS (JSON)."""

import json
import sys

import jax
import numpy as np

import jattn
from jattn.analyses.weights import Entropy
from jattn.runner.loop import run_corpus

folder, out, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
mesh = jax.make_mesh((2, 4), ("data", "model"))
model = jattn.load(folder, mesh=mesh, use_cache=False)
result = run_corpus(model, texts, [Entropy()], batch_size=2, progress=False)
importance = jattn.importance(model, texts, batch_size=2, progress=False)["encoder"]
meshes = {leaf.sharding.mesh.shape_tuple for leaf in jax.tree.leaves(model.params)}
np.savez(out, entropy=np.asarray(result.statistics["entropy"].value), importance=importance,
         one_mesh=len(meshes) == 1 and meshes.pop() == (("data", 2), ("model", 4)))
