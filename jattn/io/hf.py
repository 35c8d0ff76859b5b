"""Reading Hugging Face model folders without torch, and applying key tables.

A converter describes a checkpoint family as a list of ``Entry`` rows (HF key, our param
path, expected HF shape, transform). ``apply_table`` checks a state dict against the table
and reports every missing, unexpected and mis-shaped tensor in one ``ConversionError``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
from pathlib import Path
from typing import Callable

import numpy as np

from jattn.io import tensors


class ConversionError(ValueError):
    """A checkpoint that does not match what its converter expects."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """One tensor: HF key, path in our params (ints index stacked layers), HF shape, transform
    (HF -> ours) and its inverse (ours -> HF, for exporting). A transform only moves elements
    (transposes, reshapes, slices, zero pads): the streaming load runs it on the tensor's bits."""

    key: str
    path: tuple
    shape: tuple[int, ...]
    transform: Callable[[np.ndarray], np.ndarray] = lambda w: w
    inverse: Callable[[np.ndarray], np.ndarray] = lambda w: w


def read_config(folder: Path) -> dict:
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} has no config.json; a Hugging Face model folder "
                                "needs config.json and model.safetensors (or pytorch_model.bin)")
    return read_json(path, "a Hugging Face config.json")


def read_json(path: Path, what: str):
    """A JSON file, or a ``ConversionError`` naming the file, line and column."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConversionError(f"{path}:{e.lineno}:{e.colno}: invalid JSON ({e.msg}). Fix: repair the file or "
                              "download it again") from None
    except UnicodeDecodeError:
        raise ConversionError(f"{path} is not UTF-8 text. Fix: download {Path(path).name} again") from None
    if not isinstance(value, dict):
        raise ConversionError(f"{path}: expected {what} (a JSON object), got a {type(value).__name__}")
    return value


def weight_files(folder: Path) -> list[Path]:
    """The checkpoint's weight files, safetensors preferred (sharded indexes followed)."""
    folder = Path(folder)
    for name, index in (("model.safetensors", "model.safetensors.index.json"),
                        ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        if (folder / name).is_file():
            return [folder / name]
        if (folder / index).is_file():
            weight_map = read_json(folder / index, "a sharded checkpoint index").get("weight_map")
            if not isinstance(weight_map, dict):
                raise ConversionError(f"{folder / index} has no 'weight_map'. Fix: download the index again")
            shards = [folder / s for s in sorted(set(weight_map.values()))]
            missing = [s.name for s in shards if not s.is_file()]
            if missing:
                raise FileNotFoundError(f"{folder}: shard(s) {', '.join(missing)} listed in {index} are missing. "
                                        "Fix: download them")
            return shards
    raise FileNotFoundError(f"{folder} has no model.safetensors or pytorch_model.bin; save the "
                            "model with `model.save_pretrained(folder)`")


def check_shards(folder: Path, held: dict[Path, set[str]]) -> None:
    """Every tensor a sharded checkpoint's index places in a shard is there (``held``: each weight
    file's tensor names), or a ``ConversionError`` naming the index file, the tensors and shards."""
    if len(held) == 1 and next(iter(held)).name in ("model.safetensors", "pytorch_model.bin"):
        return  # not sharded
    index = Path(folder) / ("model.safetensors.index.json" if next(iter(held)).suffix == ".safetensors"
                            else "pytorch_model.bin.index.json")
    found = {k: path.name for path, keys in held.items() for k in keys}
    by_name = {path.name: keys for path, keys in held.items()}
    wrong = [f"{k}: placed in {shard}, " + (f"found in {found[k]}" if k in found else "in no shard the index lists")
             for k, shard in read_json(index, "a sharded checkpoint index")["weight_map"].items()
             if k not in by_name.get(shard, ())]
    if wrong:
        raise ConversionError(f"{index}: {len(wrong)} tensor(s) not in the shard the index names:\n  "
                              + "\n  ".join(wrong[:20]) + "\nFix: download the index and its shards again (or "
                              "re-save the model with save_pretrained)")


def read_state_dict(folder: Path) -> dict[str, np.ndarray]:
    """All tensors of a HF checkpoint as float32/int numpy arrays (``open_state_dict``, read whole)."""
    return {k: np.asarray(v).astype(np.float32) if tensors.floating(v.dtype) else np.asarray(v)
            for k, v in open_state_dict(folder).items()}


def open_state_dict(folder: Path) -> dict:
    """The checkpoint's tensors without reading them: safetensors shards as ``jattn.io.tensors.Lazy``
    tensors in their own dtype (read when placed), a PyTorch pickle (which cannot be read in parts)
    as float32/int numpy arrays; the shards checked against their index (``check_shards``)."""
    state: dict = {}
    held: dict[Path, set[str]] = {}
    for path in weight_files(folder):
        shard = _safetensors(path) if path.suffix == ".safetensors" else _pickle(path)
        held[path] = set(shard)
        state.update(shard)
    check_shards(folder, held)
    return {_renamed(k): v for k, v in state.items()}


def _safetensors(path: Path) -> dict:
    try:
        return tensors.safetensors_state(path)
    except Exception as e:  # SafetensorError, OSError, ...: truncated, empty or not safetensors
        raise ConversionError(f"{path} cannot be read as safetensors ({_first_line(e)}): the file is truncated, "
                              "empty or damaged. Fix: download it again (or re-save the model with "
                              "save_pretrained)") from None


def _pickle(path: Path) -> dict[str, np.ndarray]:
    try:
        import torch
    except ImportError as e:
        raise ConversionError(f"{path} is a PyTorch pickle and reading it needs torch; "
                              "install torch or re-save the model as safetensors") from e
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # RuntimeError, EOFError, UnpicklingError on a truncated file
        raise ConversionError(f"{path} cannot be read as a PyTorch checkpoint ({_first_line(e)}): the "
                              "file is truncated or damaged. Fix: download it again") from None
    if not isinstance(sd, dict):
        raise ConversionError(f"{path} holds a {type(sd).__name__}, not a state dict of tensors. Fix: "
                              "save model.state_dict() (or use save_pretrained)")
    return {k: v.float().numpy() if v.is_floating_point() else v.numpy() for k, v in sd.items()}


def _renamed(key: str) -> str:
    """Old TF-converted BERT checkpoints name LayerNorm parameters gamma/beta."""
    return re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key))


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{e.__class__.__name__}: {text[0]}" if text else e.__class__.__name__


def apply_table(state: dict[str, np.ndarray], entries: list[Entry], ignore: tuple[str, ...] = (),
                source: str = "checkpoint") -> dict:
    """Convert ``state`` with ``entries``; keys matching an ``ignore`` regex are allowed extras.

    Returns the nested params; integer path elements become a stacked leading axis. Of a state
    holding lazy tensors (``open_state_dict``), the params are ``jattn.io.tensors`` leaves, read
    when placed (``tensors.place``); of numpy arrays, numpy arrays.
    """
    lazy = any(tensors.is_lazy(v) for v in state.values())
    missing, misshaped, flat = [], [], {}
    for e in entries:
        if e.key not in state:
            missing.append(e.key)
        elif tuple(state[e.key].shape) != tuple(e.shape):
            misshaped.append(f"{e.key}: has shape {tuple(state[e.key].shape)}, expected {tuple(e.shape)}")
        else:
            flat[e.path] = tensors.Pending(state[e.key], e.transform, e.key)
    known = {e.key for e in entries}
    unexpected = [k for k in state if k not in known and not any(re.fullmatch(p, k) for p in ignore)]
    if missing or unexpected or misshaped:
        lines = [f"cannot convert {source}:"]
        for title, keys in (("missing tensors", missing), ("unexpected tensors", unexpected),
                            ("tensors with the wrong shape", misshaped)):
            if keys:
                lines.append(f"  {len(keys)} {title}:")
                lines += [f"    {k}" for k in sorted(keys)]
        lines.append("Fix: check that config.json matches the weights and that the folder holds "
                     "a supported model type (a renamed or truncated checkpoint shows up here).")
        raise ConversionError("\n".join(lines))
    tree = nest(flat)
    return tree if lazy else tensors.realize(tree)


def check_tied(state: dict[str, np.ndarray], copies: dict[str, str], source: str, fix: str) -> None:
    """Every tied copy in ``state`` ({copy key: the key it is tied to}) equal to what it is tied
    to, where both are there: Hugging Face's loader overwrites a tied copy, so a copy that differs
    holds weights the checkpoint's own model computed with. Else a ``ConversionError`` with ``fix``."""
    for copy, original in copies.items():
        if copy in state and original in state and not np.array_equal(state[copy], state[original]):
            raise ConversionError(f"{source}: {copy} differs from {original}, which config.json ties it to (Hugging "
                                  f"Face would silently use {original}). Fix: {fix}")


def nest(flat: dict[tuple, np.ndarray]) -> dict:
    """{('a', 0, 'b'): x, ('a', 1, 'b'): y} -> {'a': {'b': stack([x, y])}}."""
    tree: dict = {}
    for path, value in flat.items():
        node = tree
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = value
    return _stack_int_keys(tree)


def _stack_int_keys(node):
    if not isinstance(node, dict):
        return node
    node = {k: _stack_int_keys(v) for k, v in node.items()}
    if node and all(isinstance(k, int) for k in node):
        items = [node[i] for i in range(len(node))]
        return _stack_trees(items)
    return node


def _stack_trees(items):
    if isinstance(items[0], dict):
        return {k: _stack_trees([it[k] for it in items]) for k in items[0]}
    return tensors.Stacked(items) if tensors.is_lazy(items[0]) else np.stack(items)


def linear(n_in: int, n_out: int) -> tuple[tuple[int, int], Callable, Callable]:
    """torch Linear weight (out, in) <-> kernel (in, out): (HF shape, transform, inverse)."""
    return (n_out, n_in), lambda w: w.T, lambda k: k.T


def pad_heads(x: np.ndarray, axis: int, slots: int) -> np.ndarray:
    """Zero head slots appended along ``axis`` up to ``slots`` (a physically pruned layer with
    fewer heads than its stack has slots; see ``jattn.sweeps.pruning``). ``x`` itself (a view, not a
    copy) when it has them all: every layer of an unpruned checkpoint."""
    if x.shape[axis] == slots:
        return x
    width = [(0, 0)] * x.ndim
    width[axis] = (0, slots - x.shape[axis])
    return np.pad(x, width)


def split_heads_in(d: int, h: int, d_h: int, slots: int | None = None) -> tuple[tuple[int, int], Callable, Callable]:
    """Q/K/V projection (h*d_h, D) <-> kernel (D, slots, d_h): h heads, zero slots after them
    (``slots`` defaults to h)."""
    s = h if slots is None else slots
    return ((h * d_h, d), lambda w: pad_heads(w.T.reshape(d, h, d_h), 1, s),
            lambda k: k[:, :h].reshape(d, h * d_h).T)


def split_heads_bias(h: int, d_h: int, slots: int | None = None) -> tuple[tuple[int], Callable, Callable]:
    """Q/K/V bias (h*d_h,) <-> (slots, d_h): h heads, zero slots after them."""
    s = h if slots is None else slots
    return (h * d_h,), lambda b: pad_heads(b.reshape(h, d_h), 0, s), lambda b: b[:h].reshape(h * d_h)


def split_heads_out(d: int, h: int, d_h: int, slots: int | None = None) -> tuple[tuple[int, int], Callable, Callable]:
    """Output projection (D, h*d_h) <-> kernel (slots, d_h, D): h heads, zero slots after them."""
    s = h if slots is None else slots
    return ((d, h * d_h), lambda w: pad_heads(w.T.reshape(h, d_h, d), 0, s),
            lambda k: k[:h].reshape(h * d_h, d).T)


def to_state_dict(params, entries: list[Entry]) -> dict[str, np.ndarray]:
    """jattn params -> a HF state dict through a key table's inverses (ints in a path index the
    leading, stacked layer axis)."""
    out = {}
    for entry in entries:
        node, layer = params, None
        for k in entry.path:
            if isinstance(k, int):
                layer = k
            else:
                node = node[k]
        node = np.asarray(node) if layer is None else np.asarray(node)[layer]
        out[entry.key] = np.ascontiguousarray(np.asarray(entry.inverse(node), np.float32))
    return out


def resolve(name_or_path: str | os.PathLike) -> Path:
    """A local folder, or a hub id found in the local HF cache or downloaded when online.

    Offline, fails at once with the cause and the fix instead of waiting on the network.
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    if path.exists() or str(name_or_path).startswith((".", "/", "~")):
        raise FileNotFoundError(f"{name_or_path} is not a model folder (expected a directory "
                                "with config.json and model.safetensors)")
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.safetensors", "*.txt", "*.model", "*.bin"]
    try:
        return Path(snapshot_download(str(name_or_path), local_files_only=True, allow_patterns=patterns))
    except Exception:
        pass
    why = None
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false"):
        why = "HF_HUB_OFFLINE is set"
    else:
        try:
            socket.create_connection(("huggingface.co", 443), timeout=3).close()
        except OSError as e:
            why = f"the hub is unreachable ({e.__class__.__name__}: {e})"
    if why:
        raise FileNotFoundError(
            f"{name_or_path!r} is neither a local folder nor in the local Hugging Face cache, and "
            f"{why}. Fix: on a machine with internet run `huggingface-cli download {name_or_path}` "
            "and pass the downloaded folder's path (or copy the HF cache here); or call "
            "jattn.load() with no argument for the embedded offline MiniLM.")
    return Path(snapshot_download(str(name_or_path), allow_patterns=patterns))
