"""Per-example records of the corpus runner, streamed into npz shards.

A method that defines ``records(ctx) -> {name: (b, ...) array}`` (traced in the runner's step,
like ``reduce``; rows of padding examples are dropped) has, per example, each array cut to the
example's real length along the axes its ``record_axes[name]`` lists (axes of the per-example
array; the length is the number of word-level units for a ``level = "word"`` method, of
tokens otherwise). ``run_corpus(..., records=folder)`` writes them as they come, for studies
that train something on top (e.g. a probe), so the corpus never has to fit in memory.

Shard ``<method>/shard_<process>_<k>.npz`` holds up to ``shard_size`` examples: ``example``
(N,) corpus indices (examples arrive sorted by length, not in corpus order), and per record
name the examples' arrays flattened and concatenated (``<name>``) with their shapes
(``<name>.shape`` (N, ndim)). ``read_records(folder)`` yields them back one example at a time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np


class RecordWriter:
    """Collects one method's per-example records and writes a shard every ``shard_size`` examples."""

    def __init__(self, folder, method, shard_size: int, process: int = 0):
        self.folder = Path(folder) / method.name
        self.folder.mkdir(parents=True, exist_ok=True)
        self.axes = dict(getattr(method, "record_axes", {}))
        self.word = getattr(method, "level", "token") == "word"
        self.size, self.process, self.count = shard_size, process, 0
        self.buffer: list[tuple[int, dict]] = []
        self.paths: list[Path] = []

    def add(self, records: dict, host) -> None:
        """``records`` {name: (b, ...)} of one batch; ``host`` its host batch (lengths, corpus indices)."""
        lengths = (host.unit_ids.max(1) + 1 if self.word else host.attention_mask.sum(1))  # (b,)
        for r, index in enumerate(host.example):
            if index < 0:
                continue
            row = {}
            for name, value in records.items():
                value = np.asarray(value[r])
                cut = tuple(slice(0, int(lengths[r])) if a in self.axes.get(name, ()) else slice(None)
                            for a in range(value.ndim))
                row[name] = value[cut]
            self.buffer.append((int(index), row))
            if len(self.buffer) == self.size:
                self.flush()

    def flush(self) -> None:
        if not self.buffer:
            return
        path = self.folder / f"shard_{self.process:03d}_{len(self.paths):05d}.npz"
        arrays = {"example": np.array([i for i, _ in self.buffer], np.int64)}
        for name in self.buffer[0][1]:
            values = [row[name] for _, row in self.buffer]
            arrays[name] = np.concatenate([v.reshape(-1) for v in values])
            arrays[f"{name}.shape"] = np.array([v.shape for v in values], np.int64).reshape(len(values), -1)
        np.savez(path, **arrays)
        self.paths.append(path)
        self.count += len(self.buffer)
        self.buffer.clear()


def read_records(folder) -> Iterator[dict]:
    """Yield ``{"example": corpus index, name: array, ...}`` from the shards in ``folder``
    (one method's folder), shard by shard."""
    paths = sorted(Path(folder).glob("shard_*.npz"))
    if not paths:
        raise FileNotFoundError(f"no record shards (shard_*.npz) in {folder}. Fix: run_corpus(..., records=folder) "
                                "with a method that defines records()")
    for path in paths:
        with np.load(path) as npz:
            z = {k: npz[k] for k in npz.files}  # each npz[k] access re-reads the array: read each once
        names = [k for k in z if k != "example" and not k.endswith(".shape")]
        starts = {n: np.concatenate([[0], np.cumsum(np.prod(z[f"{n}.shape"], axis=1))]) for n in names}
        for e, index in enumerate(z["example"]):
            yield {"example": int(index), **{n: z[n][starts[n][e]:starts[n][e + 1]].reshape(z[f"{n}.shape"][e])
                                              for n in names}}
