"""Subprocess of tests/test_contract_devices.py (not a test module): every kernel of
tests/test_contract.py, every registered analysis through the runner, and the sweeps, on meshes
made as JAX makes them now (``jax.make_mesh``: Explicit axes by default) and with Auto axes, over
all the process's devices (1, or 8 faked CPU devices).

    python contract_devices_worker.py BERT_FOLDER CLASSIFIER_FOLDER MARIAN_FOLDER OUT.npz PART

PART: ``fast`` (one kernel of the encoder on one mesh) | ``kernels`` | ``runner`` | ``sweeps``. OUT holds
``one/<mesh>/<result>`` and ``many/<mesh>/<result>`` arrays: the same mesh (``explicit_data``,
``auto_data_model``, ...) over the first device and over all of them (the sweeps, which shard over
every local device, write ``one/`` in a process with one device and ``many/`` in one with 8).
"""

from __future__ import annotations

import sys

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import jattn
from jattn.analyses import registry

TEXTS = ["The cat sat on the mat.", "Hi.", "A b c, d.", "Dogs bark loudly.", "Paris is big.", "Stop it now.",
         "Yes.", "One, two, three."]  # 8 rows: one per data-parallel device
PAIRS = [("a b c d e", "f g h"), ("a", "b c d e f"), ("a b", "c"), ("d e f", "g"), ("h", "i j"), ("k l m n", "o p"),
         ("q", "r"), ("s t", "u v w")]
LABELS = [0, 1, 2, 0, 1, 2, 0, 1]


def meshes(which: str = "all") -> dict:
    """{name: mesh}: the batch over ``data`` with Explicit axes, and data × model (with 8 devices
    data 4 × model 2: 2 divides every tiny model's heads) with Explicit and with Auto axes, over
    all the devices (``many/<name>``) and over the first alone (``one/<name>``); ``which="fast"``:
    the data × model mesh with Explicit axes alone."""
    return {f"{which_devices}/{name}": mesh for which_devices, devices in (("one", jax.devices()[:1]),
                                                                         ("many", jax.devices()))
            for name, mesh in _meshes(devices, which).items()}


def _meshes(devices: list, which: str) -> dict:
    n = len(devices)
    data_model = ((n // 2, 2), ("data", "model")) if n > 1 else ((1, 1), ("data", "model"))
    chosen = {"explicit_data": (((n,), ("data",)), AxisType.Explicit),
              "explicit_data_model": (data_model, AxisType.Explicit),
              "auto_data_model": (data_model, AxisType.Auto)}
    if which == "fast":
        chosen = {"explicit_data_model": chosen["explicit_data_model"]}
    return {name: jax.make_mesh(shape, axes, axis_types=(kind,) * len(axes), devices=devices)
            for name, ((shape, axes), kind) in chosen.items()}


def kernels(folders, which: str = "all") -> dict:
    from test_contract import KERNELS

    if which == "fast":
        KERNELS = {"norms": KERNELS["norms"]}  # noqa: N806
    shapes = (("encoder", folders[0]),) if which == "fast" else (("encoder", folders[0]), ("seq2seq", folders[2]))
    out = {}
    for name, mesh in meshes(which).items():
        for shape, folder in shapes:
            model = jattn.load(folder, use_cache=False, mesh=mesh)
            inputs = (model.check_batch(model.tokenize(TEXTS, max_length=32)) if shape == "encoder"
                      else model.batch(PAIRS))
            inputs = jax.device_put(inputs, NamedSharding(mesh, P("data")))
            for kernel, k in KERNELS.items():
                fn = getattr(k, shape)
                if fn is not None:
                    got = jax.jit(fn, static_argnums=1)(model.params, model.config, inputs)
                    for path, leaf in jax.tree_util.tree_leaves_with_path(got):
                        out[f"{name}/{kernel}-{shape}{jax.tree_util.keystr(path)}"] = np.asarray(leaf)
    return out


def runner(folders) -> dict:
    from pathlib import Path

    from jattn.io.readers import read_conllu

    sample = Path(jattn.__file__).parent / "io" / "sample" / "en_ewt-ud-dev.sample.conllu"
    pool = [ex for ex in read_conllu(sample) if 3 <= len(ex.a) <= 12][:8]
    ranks = Path(folders[0]) / "ranks.txt"
    ranks.write_text("".join(f"{r} {1000 - r} {i}\n" for r, i in enumerate([1996, 4937, 1012, 1010, 1997], 1)))
    options = registry.Options(
        rank_file=ranks, relations=tuple(sorted({r for ex in pool for r in ex.labels["relations"]})), min_count=1
    )
    encoder = jattn.load(folders[0], use_cache=False)
    families = {n: getattr(e.factory(encoder, options), "families", ("encoder",)) for n, e in registry.entries().items()
                if n != "coref"}
    out = {}
    for name, mesh in meshes().items():
        for shape, folder, corpus in (("encoder", folders[0], pool), ("seq2seq", folders[2], PAIRS)):
            model = jattn.load(folder, use_cache=False, mesh=mesh)
            methods = [m for m in (e.factory(model, options) for n, e in registry.entries().items()
                                   if n != "coref" and shape in families[n])
                       if shape == "encoder" or getattr(m, "level", "token") == "token"]
            res = jattn.run_corpus(model, corpus, methods, batch_size=8, max_length=32, mesh=mesh, progress=False)
            out.update({f"{name}/{shape}-{k}": np.asarray(s.value) for k, s in res.statistics.items()})
    return out


def sweeps(folders) -> dict:
    from jattn.sweeps.pruning_curve import classification_metric

    out = {}
    prefix = "one" if len(jax.devices()) == 1 else "many"  # the sweeps shard over every local device: a process each
    for name, mesh in _meshes(jax.devices(), "all").items():
        name = f"{prefix}/{name}"
        mlm = jattn.load(folders[0], use_cache=False, mesh=mesh)
        cls = jattn.load(folders[1], use_cache=False, mesh=mesh)
        marian = jattn.load(folders[2], use_cache=False, mesh=mesh)
        labelled = list(zip(TEXTS, LABELS))
        out[f"{name}/importance-mlm"] = jattn.importance(mlm, TEXTS, batch_size=8, max_length=32, progress=False)[
            "encoder"
        ]
        out[f"{name}/importance-cls"] = jattn.importance(cls, labelled, batch_size=8, max_length=32,
                                                         progress=False)["encoder"]
        for kind, v in jattn.importance(marian, PAIRS, batch_size=8, max_length=32, progress=False).items():
            out[f"{name}/importance-seq2seq-{kind}"] = v
        out[f"{name}/disable"] = jattn.disable(cls, labelled, "accuracy", batch_size=8, max_length=32,
                                               progress=False).metric
        metric = lambda outputs: outputs["logits"][:, 0] - outputs["logits"][:, 1]  # noqa: E731 (b,)
        clean, corrupted = TEXTS[3:5], ["Cats bark loudly.", "Rome is big."]
        logits = cls.forward(cls.tokenize(corrupted, max_length=32)).logits  # (2, C)
        out[f"{name}/patch_metric"] = np.asarray(metric({"logits": logits}))  # the scale the effects cancel from
        out[f"{name}/patch_heads"] = jattn.patch_heads(cls, clean, corrupted, metric, batch_size=2)["encoder"]
        out[f"{name}/attribution_patch_heads"] = jattn.attribution_patch_heads(cls, clean, corrupted, metric,
                                                                               batch_size=2)["encoder"]
        curve = jattn.prune(cls, labelled, classification_metric(cls, labelled, batch_size=8), step=0.25,
                            batch_size=8, max_length=32)
        out[f"{name}/prune"] = np.asarray(curve)
    return out


def fast(folders) -> dict:
    """The quick check beside the whole one: the encoder's norms kernel on the Explicit data × model mesh."""
    return kernels(folders, "fast")


def main(bert, classifier, marian, out, part):
    result = {"fast": fast, "kernels": kernels, "runner": runner, "sweeps": sweeps}[part]((bert, classifier, marian))
    np.savez(out, **result)


if __name__ == "__main__":
    main(*sys.argv[1:])
