"""jattn: attention internals of Transformer encoders, translation models and causal LMs, as JAX data.

Every analysis takes a model and its examples (or a tokenized batch) the same way and returns
its numbers per attention type, ``{"encoder": ...}`` for an encoder and ``{"encoder", "decoder",
"cross"}`` for a translation model; what is given per attention type (head masks, scores,
``Interventions``) takes the same form, or the bare value for a model with one type. The
functions carry the names of the command-line commands that run them (``jattn disable``,
``jattn prune``, ``jattn importance``, ...).
"""

import warnings as _warnings

from jattn import host_memory  # keep_freed_memory(): for a program that owns its process (the CLI does)

from jattn.nn.interventions import Interventions
from jattn.io.manifest import data_path
from jattn.models.load import load
from jattn.analyses.attribution import attributions
from jattn.sweeps.disable import disable
from jattn.sweeps.importance import importance
from jattn.analyses.norms import norms
from jattn.sweeps.patching import attribution_patch_heads, patch_heads
from jattn.sweeps.pruning_curve import prune
from jattn.runner.loop import run_corpus
from jattn.viz.view import view

__all__ = ["attribution_patch_heads", "attributions", "data_path", "disable", "importance", "Interventions",
           "load", "norms", "patch_heads", "prune", "run_corpus", "view"]

_RENAMED = {"disable_sweep": "disable", "pruning_curve": "prune"}  # the names before the CLI's


def __getattr__(name: str):
    if name in _RENAMED:
        _warnings.warn(f"jattn.{name} is now jattn.{_RENAMED[name]} (the command's name); the old name goes "
                       "in the next release", DeprecationWarning, stacklevel=2)
        return globals()[_RENAMED[name]]
    raise AttributeError(f"module 'jattn' has no attribute {name!r}")
