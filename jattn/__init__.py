"""jattn: attention internals of BERT-family encoders and NMT Transformers, as JAX data."""

from jattn.interventions import Interventions
from jattn.io.manifest import data_path
from jattn.load import load
from jattn.methods.attribution import attributions
from jattn.methods.disable import disable_sweep
from jattn.methods.importance import importance
from jattn.methods.norms import norms
from jattn.methods.pruning_curve import pruning_curve
from jattn.view import view

__all__ = ["Interventions", "attributions", "data_path", "disable_sweep", "importance", "load", "norms", "pruning_curve",
           "view"]
