"""Physically pruned heads of an attention stack (``jattn.sweeps.pruning``), read from a config's
Hugging Face ``pruned_heads`` convention; re-exported by ``jattn.nn.config``."""

from __future__ import annotations

import dataclasses

from jattn.nn.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class PrunedHeads:
    """The heads left in one physically pruned attention stack (``jattn.sweeps.pruning``).

    Layer l's remaining heads, by their index before pruning (ascending), fill the module's
    head slots 0..len(kept[l])-1; slots after them hold zero weights and are not heads."""

    heads: int  # heads per layer before pruning
    kept: tuple[tuple[int, ...], ...]  # per layer, the original index of the head in each slot

    @classmethod
    def full(cls, num_layers: int, heads: int) -> "PrunedHeads":
        """Nothing pruned."""
        return cls(heads, (tuple(range(heads)),) * num_layers)

    @classmethod
    def from_removed(cls, removed, num_layers: int, heads: int, what: str) -> "PrunedHeads":
        """From Hugging Face's ``pruned_heads`` convention {layer: [removed heads]} (JSON keys are
        strings); ``what`` names the field in errors."""
        if not isinstance(removed, dict):
            raise ConfigError(f"{what} must map layers to lists of removed heads, got {type(removed).__name__}")
        drop: dict[int, set] = {}
        for layer, hs in removed.items():
            try:
                layer = int(layer)
                hs = [int(h) for h in hs]
            except (TypeError, ValueError):
                raise ConfigError(f"{what}: {layer!r}: {hs!r} is not layer: [head, ...] with integers") from None
            if not 0 <= layer < num_layers or any(not 0 <= h < heads for h in hs):
                raise ConfigError(f"{what}: layer {layer}, heads {hs} outside the model's {num_layers} layers x "
                                  f"{heads} heads (0-based). Fix: config.json and the weights disagree; export again")
            drop.setdefault(layer, set()).update(hs)
        return cls(heads, tuple(tuple(h for h in range(heads) if h not in drop.get(layer, ()))
                                for layer in range(num_layers)))

    @property
    def counts(self) -> tuple[int, ...]:
        """Heads per layer."""
        return tuple(len(k) for k in self.kept)

    @property
    def slots(self) -> int:
        """Head slots per layer in the module: the most heads a layer keeps (at least 1)."""
        return max((1, *self.counts))

    def removed(self) -> dict[str, list[int]]:
        """Hugging Face's ``pruned_heads``: {layer: removed heads}, for layers that lost heads."""
        return {str(layer): [h for h in range(self.heads) if h not in kept]
                for layer, kept in enumerate(self.kept) if len(kept) < self.heads}
