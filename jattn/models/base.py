"""What every jattn model wrapper shares: its NNX module, the module's parameters, placement."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jattn import families
from jattn.io.tokenize import SequenceTooLongError
from jattn.nn import state
from jattn.nn.config import Seq2SeqConfig
from jattn.nn.engine import held_whole, layer_views, on_one_cpu


def concrete(x) -> bool:
    """Whether ``x``'s values can be read: not a tracer (inside ``jax.jit``, ``grad`` or ``vmap``
    only its shape and dtype are known). The models' input checks read values only where this
    holds; shapes and dtypes are checked either way."""
    return not isinstance(x, jax.core.Tracer)


def as_int32(x):
    """``x`` as int32 where it is: a host array stays a numpy array, a jax array (sharded, or a
    tracer) stays a jax array with its placement."""
    if isinstance(x, jax.Array):
        return x if x.dtype == jnp.int32 else x.astype(jnp.int32)
    return np.asarray(x, np.int32)


def check_traced(check, interventions):
    """``check(interventions)``: ``Interventions.check`` (or a mapping of them checked per attention
    type) where ``head_gates`` or ``disabled_heads`` may be tracers. That check reads the values of
    (L, H) gates and of non-bool disabled heads on the host; a traced field's values are unknown,
    so zeros of its shape and dtype are checked in its place (at once, also inside a trace) and
    the tracer is put back (disabled heads as bool). Its shape and dtype are checked all the same."""
    one = not isinstance(interventions, dict)
    given = {0: interventions} if one else dict(interventions)
    traced = {k: {f: getattr(iv, f) for f in ("head_gates", "disabled_heads") if not concrete(getattr(iv, f, None))}
              for k, iv in given.items()}
    traced = {k: fields for k, fields in traced.items() if fields}
    given.update({k: dataclasses.replace(given[k], **{f: np.zeros(x.shape, x.dtype) for f, x in fields.items()})
                  for k, fields in traced.items()})
    with jax.ensure_compile_time_eval():  # the stand-ins' checks run now, also inside a trace
        out = {0: check(given[0])} if one else dict(check(given))
    for k, fields in traced.items():
        out[k] = dataclasses.replace(out[k], **{f: x.astype(bool) if f == "disabled_heads" else x
                                               for f, x in fields.items()})
    return out[0] if one else out


class NoTokenizer:
    """The tokenizer of a model loaded without one (``jattn.load(..., tokenizer=False)``): any use
    raises an error saying so and how to get one; ``forward`` on token ids needs none."""

    def __init__(self, source: str):
        self.source = source

    def _fail(self):
        raise ValueError(f"the model from {self.source or 'this folder'} was loaded without a tokenizer "
                         "(jattn.load(..., tokenizer=False)): pass token ids (input_ids, attention_mask) to "
                         "forward. Fix: load it with tokenizer=True from a folder holding its tokenizer files")

    def __getattr__(self, name):
        if name.startswith("__"):  # copy, pickle and repr probe dunders: answer as a plain object
            raise AttributeError(name)
        self._fail()

    def __call__(self, *args, **kwargs):
        self._fail()

    def __repr__(self) -> str:
        return "NoTokenizer()"


class ModuleModel:
    """Holds ``.module`` built from ``(config, params)``; ``.params`` is its ``nnx.Param`` state."""

    def __init__(self, config, params):
        self.config = config
        self.module = state.merge(params, config)
        self._layout = None  # (module treedef, state treedef, the state leaves' places among the module's)
        self._views = None  # (the module's leaves, layer_views of the parameters)

    @property
    def family(self) -> families.FamilySpec:
        """The spec of the model's family (``jattn.families``)."""
        return families.get(self.config.model_type)

    @property
    def params(self):
        """The module's parameters (``nnx.State``): the first argument of the pure face.

        Read afresh on every call, so updates and replaced submodules are seen. ``nnx.state``
        walks the module graph in Python (≈ 0.8 ms for a 44-array model, more than a small
        model's forward pass costs to dispatch); NNX modules are also JAX pytrees, whose
        flattening is ≈ 10× cheaper, so the state is rebuilt from the module's leaves in the
        layout found by the last ``nnx.state``, and that layout is found again whenever the
        module's tree structure (submodules, variable types, metadata) differs from last time."""
        leaves, treedef = jax.tree.flatten(self.module)
        if self._layout is None or self._layout[0] != treedef:
            params = nnx.state(self.module, nnx.Param)
            place = {id(x): i for i, x in enumerate(leaves)}
            wanted = jax.tree.leaves(params)
            if len(place) != len(leaves) or any(id(x) not in place for x in wanted):
                self._layout = None  # shared or unmatched arrays: keep the graph walk
                return params
            self._layout = (treedef, jax.tree.structure(params), [place[id(x)] for x in wanted])
            return params
        _, params_def, where = self._layout
        return jax.tree.unflatten(params_def, [leaves[i] for i in where])

    def copy(self):
        """A model of its own holding this model's parameters as they are now, e.g. the frozen
        reference kept before fine-tuning ``.module`` in place. Cheap: no array is copied (JAX
        arrays are immutable; an optimizer step puts new arrays into the trained module's
        variables and never touches the copy's), only the module graph is rebuilt (``nnx.clone``)."""
        twin = copy.copy(self)
        twin.module, twin._layout, twin._views = nnx.clone(self.module), None, None
        return twin

    def layer_views(self):
        """``jattn.nn.engine.layer_views`` of ``params`` (each layer's weights an array of its own),
        made again only when an array of the module is replaced: making them costs ≈ 2 ms for
        MiniLM, an eighth of its forward on 16 short examples."""
        leaves = jax.tree.leaves(self.module)
        if self._views is None or len(leaves) != len(self._views[0]) or any(
                a is not b for a, b in zip(leaves, self._views[0])):
            with jax.ensure_compile_time_eval():  # concrete, also when first asked for inside a trace
                self._views = (leaves, layer_views(self.params))  # the leaves held: their ids stay theirs
        return self._views[1]

    def forward_params(self):
        """The parameters a jitted forward takes: on one CPU device ``layer_views``, over which the
        layers run unrolled (``jattn.nn.engine.unrolled``; up to 7 % less time than the layer loop,
        never more beyond the noise: ``benchmarks/bench_layer_loop.py``), else ``params`` and the
        loop (on GPU/TPU or a mesh the views would be copies of the weights). bfloat16 / float16
        stacks (``held_whole``) take the loop too: unrolled, XLA:CPU widens every layer's weights
        to float32 as the program starts (a float32 copy of them all), where the loop widens one
        layer's at a time (``jattn.nn.engine.layer_slice``)."""
        params = self.params
        held = any(held_whole(a) for a in jax.tree.leaves(params))
        return self.layer_views() if on_one_cpu(params) and not held else params

    @property
    def head_shapes(self) -> dict[str, tuple[int, int]]:
        """(L, H) of each attention type the model has, in the order every result lists them:
        ``{"encoder": ...}`` for an encoder, ``{"encoder", "decoder", "cross"}`` for a translation model."""
        raise NotImplementedError

    def per_type(self, value, name: str) -> dict:
        """``value`` keyed by attention type: a dict over (some of) ``head_shapes``' types, or, for a
        model with a single attention type, the bare value (an encoder's (L, H) mask, its
        ``Interventions``) — the one form every analysis, sweep and forward takes."""
        kinds = tuple(self.head_shapes)
        if isinstance(value, dict):
            if unknown := sorted(set(value) - set(kinds)):
                raise ValueError(f"{name}: this model's attention types are {kinds}, got {unknown}")
            return dict(value)
        if len(kinds) > 1:
            raise ValueError(f"{name}: this model has attention types {kinds}; give one value per type, "
                             f"e.g. {{{kinds[0]!r}: ...}}")
        return {kinds[0]: value}

    @property
    def has_tokenizer(self) -> bool:
        """False for a model loaded without one (``jattn.load(..., tokenizer=False)``): it takes token ids only."""
        return not isinstance(self.tokenizer, NoTokenizer)

    def batch_keys(self) -> tuple[str, ...]:
        """The arrays a tokenized batch of this model may hold (``check_batch`` names those it needs);
        ``labels`` (what a sweep scores against) is read by the analyses that use it, never by the forward."""
        if isinstance(self.config, Seq2SeqConfig):
            return "input_ids", "attention_mask", "decoder_input_ids", "decoder_attention_mask", "labels"
        return "input_ids", "attention_mask", "token_type_ids", "inputs_embeds", "labels"

    def batch(self, examples) -> dict:
        """The checked input dict of ``examples``: a tokenized batch (a ``TokenBatch`` or a dict of
        arrays, its keys among ``batch_keys``) as it is, or a non-empty list of examples tokenized at
        the model's full length (``tokenize_examples``; nothing is cut: an example longer than the
        model's positions is an error)."""
        if isinstance(examples, str) or (isinstance(examples, (list, tuple)) and not examples):
            raise ValueError(f"expected a non-empty list of examples or a tokenized batch, got {examples!r}")
        if isinstance(examples, Mapping):
            keys = self.batch_keys()
            if unknown := sorted(set(examples) - set(keys)):
                raise ValueError(f"a tokenized batch of this model holds {', '.join(keys)}; got the unknown key(s) "
                                 f"{unknown}. Fix: pass model.batch(examples) or model.tokenize(texts)")
        if isinstance(examples, (list, tuple)):
            try:
                batch = self.tokenize_examples(list(examples))
            except SequenceTooLongError as e:  # its fix names tokenize's arguments, which the caller did not pass
                what = str(e).split(" Fix:")[0].replace("max_length=", "the model's positions, ")
                raise SequenceTooLongError(f"{what} Fix: shorten or split the example (an analysis cuts "
                                           "nothing), or pass a batch cut to length: "
                                           "model.tokenize(examples, truncate=True)") from None
            return self.check_batch(batch)
        return self.check_batch(examples)

    def check_placement(self, inputs: dict) -> None:
        """A batch of jax arrays on several devices (sharded over a mesh) needs the parameters on
        those devices too; else a clear error rather than JAX's about the first pair it meets."""
        devices = {d for x in jax.tree.leaves(inputs) if isinstance(x, jax.Array) and concrete(x)
                   for d in x.sharding.device_set}
        if len(devices) > 1:
            placed = {d for a in jax.tree.leaves(self.params) for d in a.sharding.device_set}
            if not devices <= placed:
                raise ValueError(f"the batch is sharded over {len(devices)} devices, the model's parameters are on "
                                 f"{len(placed)}. Fix: place the model on the batch's mesh: model.shard(mesh), or "
                                 "jattn.load(..., mesh=mesh)")

    def shard(self, mesh):
        """Place the parameters on ``mesh`` by their partitioning metadata (in place; returns self):
        ``jattn.nn.state.shard``, on the mesh's Auto form whatever its axis types; a ``model`` axis
        that does not divide the heads or FFN columns is an error."""
        nnx.update(self.module, state.shard(self.params, mesh))
        return self
