"""jattn: attention internals of Transformer encoders, translation models and causal LMs, as JAX data.

Every analysis takes a model and its examples (or a tokenized batch) the same way and returns
its numbers per attention type, ``{"encoder": ...}`` for an encoder and ``{"encoder", "decoder",
"cross"}`` for a translation model; what is given per attention type (head masks, scores,
``Interventions``) takes the same form, or the bare value for a model with one type. The
functions carry the names of the command-line commands that run them (``jattn disable``,
``jattn prune``, ``jattn importance``, ...).
"""

import importlib as _importlib
import warnings as _warnings

from jattn import host_memory as host_memory  # keep_freed_memory(): for a program that owns its process (the CLI does)

# The public functions, imported on first use (PEP 562): ``import jattn`` itself reads no JAX, so
# the command line starts in a fraction of a second and takes Ctrl-C cleanly from its first moment.
_PUBLIC = {
    "Interventions": "jattn.nn.interventions",
    "data_path": "jattn.io.manifest",
    "load": "jattn.artefacts",
    "attributions": "jattn.analyses.attribution",
    "disable": "jattn.sweeps.disable",
    "importance": "jattn.sweeps.importance",
    "norms": "jattn.analyses.norms",
    "finetune": "jattn.training.finetune",
    "attribution_patch_heads": "jattn.sweeps.patching",
    "patch_heads": "jattn.sweeps.patching",
    "prune": "jattn.sweeps.pruning_curve",
    "run_corpus": "jattn.runner.loop",
    "view": "jattn.viz.view",
}

__all__ = sorted(_PUBLIC, key=str.lower)

_RENAMED = {"disable_sweep": "disable", "pruning_curve": "prune"}  # the names before the CLI's


def __getattr__(name: str):
    if name in _PUBLIC:
        value = getattr(_importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value  # imported once
        return value
    if name in _RENAMED:
        _warnings.warn(f"jattn.{name} is now jattn.{_RENAMED[name]} (the command's name); the old name goes "
                       "in the next release", DeprecationWarning, stacklevel=2)
        return __getattr__(_RENAMED[name])
    raise AttributeError(f"module 'jattn' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
