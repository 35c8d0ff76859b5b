"""The validation layer every public function and command calls before any compiled work.

One error type, ``BadArgument`` (a ``ValueError``, so the CLI prints it as one line and exits
with status 1), built from four parts: the argument, the value given, what was expected and the
fix. The checks:

* ``number``: type (no bool, no string), finiteness (NaN / inf), range; ``cli_number`` is the
  same check as an argparse ``type`` (status 2, one line).
* ``labels``: integer class labels against a classifier's ``num_labels``.
* ``array``: a numeric array's shape on every axis (named) and its finiteness;
  ``interventions``: head gates, disabled heads, weight deltas and patches against the batch they act on.
* ``heads``: ``"L:H,L:H"`` head lists against the model's layers and heads.
* ``visible``: text made only of NUL bytes, control or zero-width characters.
* ``model_kind``: the model shape a command needs (encoder, classifier, translation model).
* ``address``: a ``HOST:PORT`` coordinator address that parses and resolves.

This module imports nothing from jattn (it sits in ``io``, which everything may use); models are
checked by duck typing on their config (``decoder_layers``: a translation model).
"""

from __future__ import annotations

import argparse
import math
import numbers
import socket
import unicodedata

import jax
import numpy as np


class BadArgument(ValueError):
    """``ARGUMENT VALUE: expected EXPECTED. Fix: FIX`` (one line)."""

    def __init__(self, argument: str, value, expected: str, fix: str):
        self.argument, self.value, self.expected, self.fix = argument, value, expected, fix
        shown = value if isinstance(value, str) and not value.startswith("<") else _show(value)
        super().__init__(f"{argument} {shown}: expected {expected}. Fix: {fix}")


def _traced(value) -> bool:
    """A tracer: an array inside ``jax.jit``, ``grad`` or ``vmap``, whose values are unknown."""
    return isinstance(value, jax.core.Tracer)


def _show(value) -> str:
    if isinstance(value, np.ndarray):
        return f"<array {value.dtype} {tuple(value.shape)}>"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _interval(low, high, low_open, high_open) -> str:
    if low is not None and high is not None:
        return f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '≥'} {low:g}"
    if high is not None:
        return f"{'<' if high_open else '≤'} {high:g}"
    return "any finite value"


def number(argument: str, value, *, low=None, high=None, low_open: bool = False, high_open: bool = False,
           integer: bool = False, fix: str | None = None):
    """``value`` as a finite number in the range (``integer``: an int); else ``BadArgument``."""
    kind = "an integer" if integer else "a finite number"
    expected = f"{kind} {_interval(low, high, low_open, high_open)}"
    fix = fix or f"pass {argument} {_example(low, high, low_open, integer)}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise BadArgument(argument, value, expected, fix)
    if integer and not float(value).is_integer():
        raise BadArgument(argument, value, expected, fix)
    if not math.isfinite(float(value)):
        raise BadArgument(argument, value, expected, fix)
    v = float(value)
    if (low is not None and (v < low or (low_open and v == low))) or \
            (high is not None and (v > high or (high_open and v == high))):
        raise BadArgument(argument, value, expected, fix)
    return int(value) if integer else float(value)


def _example(low, high, low_open, integer) -> str:
    if low is None and high is None:
        return "a finite value"
    if low is None:
        return f"≤ {high:g}"
    if high is None:
        return f"{'above' if low_open else 'at least'} {low:g}"
    return f"within {_interval(low, high, low_open, False)}"


def cli_number(**bounds):
    """An argparse ``type`` running ``number`` on the parsed text (usage error, status 2)."""
    integer = bounds.get("integer", False)

    def parse(text: str):
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if integer else 'a number'}") from None
        try:
            return number("value", value, **bounds)
        except BadArgument as e:
            raise argparse.ArgumentTypeError(f"{text}: expected {e.expected}") from None

    parse.__name__ = "integer" if integer else "number"
    return parse


def labels(argument: str, values, num_labels: int, where=None) -> np.ndarray:
    """Integer class labels in ``0..num_labels-1``; ``where``: names per example (file:line)."""
    a = np.asarray(values)
    if a.size and not (np.issubdtype(a.dtype, np.integer) or
                       (np.issubdtype(a.dtype, np.floating) and np.isfinite(a).all() and (a == np.round(a)).all())):
        raise BadArgument(argument, a, f"integer class labels in 0..{num_labels - 1}",
                          "write each label as a class index (0, 1, ...)")
    a = a.astype(np.int64)
    bad = np.flatnonzero((a < 0) | (a >= num_labels))
    if bad.size:
        i = int(bad[0])
        at = where[i] if where is not None else f"example {i}"
        raise BadArgument(argument, f"label {int(a[i])} ({at}; {bad.size} such)",
                          f"labels in 0..{num_labels - 1}: the model classifies into {num_labels} classes",
                          "fix the labels, or use a model fine-tuned for this task's classes")
    return a


def array(argument: str, value, axes: tuple, *, finite: bool = True, dtype: str = "float") -> np.ndarray:
    """``value`` as an array whose axes match ``axes``: (name, size) pairs, size None = any.
    Checks every axis and, for ``finite``, every value (NaN / inf); a tracer (inside ``jax.jit``,
    ``grad``, ``vmap``) is returned as it is, its shape and dtype checked, its values unknown."""
    expected = "(" + ", ".join(f"{n}={s}" if s is not None else n for n, s in axes) + ")"
    if isinstance(value, (str, bytes, dict)):
        raise BadArgument(argument, value, f"an array of shape {expected}", "pass a numeric array")
    a = value if _traced(value) else np.asarray(value)
    kinds = {"float": "f", "bool": "b"}
    if dtype == "float" and a.dtype.kind not in "fiu":
        raise BadArgument(argument, a, f"a float array {expected}", "pass numbers (a boolean mask goes in "
                          "disabled_heads)" if a.dtype.kind == "b" else "pass numbers")
    if dtype == "bool" and a.dtype.kind not in "biu":
        raise BadArgument(argument, a, f"a boolean array {expected}", "pass a bool array, e.g. mask > 0.5")
    if a.ndim != len(axes):
        raise BadArgument(argument, a, f"{len(axes)} axes {expected}", f"reshape it to {expected}")
    for i, ((name, size), got) in enumerate(zip(axes, a.shape)):
        if size is not None and got != size:
            raise BadArgument(argument, a, f"shape {expected}: axis {i} ({name}) is {got}, not {size}",
                              f"make axis {i} hold {size} entries, one per {name}; nothing is broadcast or cut")
    if finite and a.dtype.kind == kinds["float"] and not _traced(a) and not np.isfinite(a).all():
        bad = np.argwhere(~np.isfinite(a))
        raise BadArgument(argument, a, f"finite values; {len(bad)} NaN/inf, the first at index "
                          f"{tuple(int(i) for i in bad[0])}", "replace the NaN / inf entries")
    return a


# the shapes each intervention field may take, by axis name (b: batch rows, q/k: query/key tokens)
GATE_LAYOUTS = {2: ("layer", "head"), 3: ("layer", "example", "head"), 4: ("layer", "example", "head", "query")}
MASK_LAYOUTS = {2: ("layer", "head"), 3: ("layer", "example", "head")}


# patch site -> the axes of one layer's value after its example axis (None: the model width), as
# jattn.nn.interventions.PATCH_SITES documents them; its ``where`` has the value's axes but the last
# (receivers: the head axis), an example, query or key axis of size 1 broadcasting
PATCH_LAYOUTS = {
    "context": ("head", "query", None), "weights": ("head", "query", "key"), "values": ("head", "key", None),
    **{site: ("query", None) for site in ("residual", "ffn_residual", "ffn_output", "layer_output", "query_input")},
    "key_input": ("key", None), "value_input": ("key", None),
}
RECEIVERS = ("query_input", "key_input", "value_input")


def interventions(iv, what: str, L: int, H: int, b: int, q: int, k: int) -> None:
    """Every axis and value of an ``Interventions``' arrays against the batch they act on:
    ``head_gates`` (L, H) / (L, b, H) / (L, b, H, q), finite; ``disabled_heads`` (L, H) /
    (L, b, H), 0/1; ``weights_delta`` (L, b, H, q, k), finite; each ``patch`` site's value and
    ``where`` (``PATCH_LAYOUTS``), finite (unknown sites are ``Interventions.check``'s to name)."""
    sizes = {"layer": L, "head": H, "example": b, "query": q, "key": k}
    if iv is None:
        return
    for field, layouts, dtype in (("head_gates", GATE_LAYOUTS, "float"), ("disabled_heads", MASK_LAYOUTS, "bool"),
                                  ("weights_delta", {5: ("layer", "example", "head", "query", "key")}, "float")):
        value = getattr(iv, field, None)
        if value is None:
            continue
        ndim = np.ndim(value)
        names = layouts.get(ndim)
        if names is None:
            shapes = " or ".join("(" + ", ".join(f"{n}={sizes[n]}" for n in ns) + ")" for ns in layouts.values())
            raise BadArgument(f"{what}.{field}", value if _traced(value) else np.asarray(value), f"shape {shapes}",
                              "reshape it; see jattn.Interventions")
        a = array(f"{what}.{field}", value, tuple((n, sizes[n]) for n in names), finite=dtype == "float", dtype=dtype)
        if dtype == "bool" and a.dtype.kind != "b" and not _traced(a) and not np.isin(a, (0, 1)).all():
            raise BadArgument(f"{what}.{field}", a, "0/1 values (True = disabled)",
                              "pass a bool array, e.g. mask > 0.5")
    for site, pair in (getattr(iv, "patch", None) or {}).items():
        if site in PATCH_LAYOUTS and isinstance(pair, tuple) and len(pair) == 2:
            _patch(f"{what}.patch[{site!r}]", site, pair, sizes)


def _patch(argument: str, site: str, pair: tuple, sizes: dict) -> None:
    """One patch site's (value, where) against the batch's ``sizes`` (``PATCH_LAYOUTS``)."""
    layout = PATCH_LAYOUTS[site]
    array(f"{argument} value", pair[0], (("layer", sizes["layer"]), ("example", sizes["example"]),
                                         *((n, sizes[n]) if n else ("width", None) for n in layout)))
    names = ("layer", "example", "head") if site in RECEIVERS else ("layer", "example", *layout[:-1])
    where = pair[1] if _traced(pair[1]) else np.asarray(pair[1])
    expected = "(" + ", ".join(f"{n}={sizes[n]}" if n in ("layer", "head") else f"{n}=1|{sizes[n]}"
                               for n in names) + ")"
    if where.dtype.kind not in "bf" or where.ndim != len(names) or any(
            got != sizes[n] and not (got == 1 and n not in ("layer", "head")) for n, got in zip(names, where.shape)):
        raise BadArgument(f"{argument} where", where, f"a bool (replace) or float (blend) array {expected}",
                          "shape it as the value without its last axis (1 broadcasts over examples or positions)")
    if where.dtype.kind == "f" and not _traced(where) and not np.isfinite(where).all():
        raise BadArgument(f"{argument} where", where, "finite blend weights", "replace the NaN / inf entries")


def heads(text: str, num_layers: int, num_heads: int, argument: str = "--heads") -> list[tuple[int, int]]:
    """``"L:H,L:H"`` (0-based layer and head) -> [(layer, head)], sorted, no repeats."""
    fix = f"list 0-based layer:head pairs, e.g. {argument} 0:1,{num_layers - 1}:{num_heads - 1}"
    expected = f"comma-separated LAYER:HEAD pairs with 0 ≤ LAYER < {num_layers} and 0 ≤ HEAD < {num_heads}"
    if not isinstance(text, str) or not text.strip():
        raise BadArgument(argument, text, expected, fix)
    out = set()
    for part in text.split(","):
        layer, sep, head = part.strip().partition(":")
        if not sep or not layer.strip().isdigit() or not head.strip().isdigit():
            raise BadArgument(argument, text, f"{expected} ({part.strip()!r} is not one)", fix)
        l, h = int(layer), int(head)
        if l >= num_layers or h >= num_heads:
            raise BadArgument(argument, text, f"{expected} ({l}:{h} is outside the model's {num_layers} layers "
                              f"× {num_heads} heads)", fix)
        out.add((l, h))
    return sorted(out)


_INVISIBLE = {"Cc", "Cf", "Zs", "Zl", "Zp", "Cn", "Co", "Cs"}


def is_invisible(text: str) -> bool:
    """Non-empty text without a single visible character (NUL bytes, controls, zero-width
    spaces and joiners, BOMs, blanks): tokenizers drop these, leaving an empty segment."""
    return bool(text) and all(unicodedata.category(c) in _INVISIBLE for c in text) and bool(text.strip(" \t\r\n"))


def visible(text: str, where: str) -> str:
    """``text`` unless it is made only of invisible characters (``is_invisible``)."""
    if isinstance(text, str) and is_invisible(text):
        codes = ", ".join(sorted({f"U+{ord(c):04X}" for c in text})[:4])
        raise BadArgument(where, f"holds only invisible characters ({codes})",
                          "text with at least one visible character",
                          "remove the line or clean the file (NUL bytes usually mean a binary or UTF-16 file: "
                          "check the file and --encoding)")
    return text


def model_kind(model, need: str, command: str, argument: str = "--model") -> None:
    """``need``: "encoder", "classifier" (an encoder with a classification head) or "translation"."""
    config = model.config
    translation = hasattr(config, "decoder_layers")
    name = getattr(model, "source", "") or "the model"
    if need == "translation" and not translation:
        raise BadArgument(argument, name, f"a translation (encoder–decoder) model for {command}",
                          "pass an encoder–decoder model folder")
    if need in ("encoder", "classifier") and translation:
        raise BadArgument(argument, name, f"an encoder{' classifier' if need == 'classifier' else ''} for "
                          f"{command}, not a translation model", "pass an encoder model folder"
                          + (" with a classification head (e.g. one made by jattn finetune)"
                             if need == "classifier" else ""))
    if need == "classifier" and not getattr(config, "num_labels", 0):
        raise BadArgument(argument, name, f"a sequence classifier for {command} (this encoder has no "
                          "classification head)", "fine-tune it first (jattn finetune) or pass a fine-tuned "
                          "classifier")


def address(text: str, argument: str = "--coordinator") -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port), the host resolved (no connection is made)."""
    fix = f"e.g. {argument} 10.0.0.1:1234 (the address of process 0)"
    host, sep, port = (text or "").strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadArgument(argument, text, "HOST:PORT with a port in 1..65535", fix)
    try:
        socket.getaddrinfo(host, int(port))
    except (socket.gaierror, UnicodeError) as e:
        raise BadArgument(argument, text, f"a host name that resolves ({getattr(e, 'strerror', None) or e})",
                          "check the host name, or use process 0's IP address") from None
    return host, int(port)
