"""jattn: attention internals of BERT-family encoders and NMT Transformers, as JAX data."""

from jattn.nn.interventions import Interventions
from jattn.io.manifest import data_path
from jattn.models.load import load
from jattn.analyses.attribution import attributions
from jattn.sweeps.disable import disable_sweep
from jattn.sweeps.importance import importance
from jattn.analyses.norms import norms
from jattn.sweeps.patching import attribution_patch_heads, patch_heads
from jattn.sweeps.pruning_curve import pruning_curve
from jattn.viz.view import view

__all__ = ["Interventions", "attribution_patch_heads", "attributions", "data_path", "disable_sweep", "importance", "load",
           "norms", "patch_heads", "pruning_curve", "view"]
