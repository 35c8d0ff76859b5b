"""What every jattn model wrapper shares: its NNX module, the module's parameters, placement."""

from __future__ import annotations

from flax import nnx

from jattn.nn import state


class ModuleModel:
    """Holds ``.module`` built from ``(config, params)``; ``.params`` is its ``nnx.Param`` state."""

    def __init__(self, config, params):
        self.config = config
        self.module = state.merge(params, config)

    @property
    def params(self):
        """The module's parameters (``nnx.State``): the first argument of the pure face."""
        return nnx.state(self.module, nnx.Param)

    def shard(self, mesh):
        """Place the parameters on ``mesh`` by their partitioning metadata (in place; returns self)."""
        nnx.update(self.module, state.shard(self.params, mesh))
        return self
