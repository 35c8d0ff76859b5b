"""Reading XLA's own account of a compiled program on CPU: the per-instruction times of a
``jax.profiler`` trace (``hlo_op_times``) and the compiled module's text (``Hlo``), which says what
each traced instruction computes (its group), how many FLOPs its products take and how many bytes
it reads and writes. Used by ``profile_forward.py`` and ``profile_attribution.py``.
"""

from __future__ import annotations

import collections
import gzip
import json
import linecache
import math
import re
from pathlib import Path

GROUPS = ("GEMM", "softmax", "normalisation", "activation", "copies/transposes", "internals written",
          "other element-wise")
CONTROL = {"while", "conditional", "call"}  # their events span their bodies' events: never summed
MOVES = {"copy", "transpose", "dynamic-slice", "dynamic-update-slice", "concatenate", "slice", "bitcast", "reshape",
         "broadcast", "parameter", "constant", "tuple", "get-tuple-element"}  # data moved, nothing computed
WRITES = {"copy", "transpose", "dynamic-update-slice", "concatenate", "slice", "dynamic-slice"}
SIZES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
         "s64": 8, "u64": 8, "f64": 8}
SHAPE = re.compile(r"\b(pred|bf16|[suf]\d+)\[([\d,]*)\]")
NAME = r"%([\w.\-]+)"


def hlo_op_times(trace_dir: Path, calls: int, module: str | None = None) -> dict[str, list[float]]:
    """{HLO instruction: [ms per call, events per call]} from the perfetto trace ``jax.profiler``
    wrote under ``trace_dir``: XLA's operation events (those naming an ``hlo_op``; the host-side
    spans and the ``end:`` markers left out), of ``module`` (every module if None)."""
    with gzip.open(next(trace_dir.rglob("perfetto_trace.json.gz"))) as f:
        events = json.load(f)
    times = collections.defaultdict(lambda: [0.0, 0.0])
    for e in events["traceEvents"] if isinstance(events, dict) else events:
        a = e.get("args", {})
        if e.get("ph") == "X" and "hlo_op" in a and module in (None, a.get("hlo_module")):
            times[a["hlo_op"]][0] += e.get("dur", 0) / 1e3 / calls  # µs -> ms per call
            times[a["hlo_op"]][1] += 1 / calls
    return dict(times)


def dims(shape: str) -> list[int]:
    m = SHAPE.search(shape)
    return [int(d) for d in m.group(2).split(",") if d] if m else []


def nbytes(shape: str) -> int:
    """Bytes of an HLO shape (a tuple's: the sum of its elements')."""
    return sum(SIZES.get(t, 4) * math.prod(int(d) for d in s.split(",") if d) for t, s in SHAPE.findall(shape))


class Hlo:
    """A compiled module's text, parsed: every instruction (name -> opcode, shape, operands,
    attributes, computation), each computation's root, and the source line of each instruction
    (the stack-frame tables), to classify profiler events and estimate their FLOPs and bytes."""

    def __init__(self, text: str):
        self.module = re.match(r"HloModule (\S+?),", text).group(1)
        self.ins, self.roots, self.members, self.entry = {}, {}, collections.defaultdict(list), None
        comp = None
        for line in text.splitlines():
            if (head := re.match(r"^(ENTRY )?" + NAME + r" .*\{$", line)) and not line.startswith(" "):
                comp = head.group(2)
                self.entry = comp if head.group(1) else self.entry
            elif comp and (m := re.match(r"^\s*(ROOT )?" + NAME + r" = (.*)$", line)):
                rest = m.group(3)
                cut = _matching(rest, 0) + 1 if rest.startswith("(") else rest.index(" ")
                shape, rest = rest[:cut], rest[cut:].lstrip()
                op_end = rest.index("(")
                args_end = _matching(rest, op_end)
                self.ins[m.group(2)] = dict(name=m.group(2), op=rest[:op_end], shape=shape, comp=comp,
                                            args=rest[op_end + 1:args_end],
                                            operands=re.findall(NAME, rest[op_end:args_end]), attrs=rest[args_end:])
                self.members[comp].append(m.group(2))
                if m.group(1):
                    self.roots[comp] = m.group(2)
            elif line == "}":
                comp = None
        tables = {t: dict(re.findall(r"^(\d+) (.*)$", s, re.M)) for t, s in re.findall(
            r"^(FileNames|FunctionNames|FileLocations|StackFrames)\n(.*?)(?:\n\n|\Z)", text, re.M | re.S)}
        self.tables = tables

    def called(self, i: dict) -> list[str]:
        return re.findall(r"(?:calls|to_apply)=" + NAME, i["attrs"])

    def inside(self, i: dict) -> list[dict]:
        """The instructions of the computations ``i`` calls (a fusion's, a reduce's), recursively."""
        out = []
        for comp in self.called(i):
            for name in self.members[comp]:
                out += [self.ins[name], *self.inside(self.ins[name])]
        return out

    def source(self, i: dict) -> str:
        """'function source-line' of ``i``'s innermost stack frame (lowercase), or ''."""
        frame = re.search(r"stack_frame_id=(\d+)", i["attrs"])
        t = self.tables
        try:
            loc = t["FileLocations"][re.search(r"file_location_id=(\d+)", t["StackFrames"][frame.group(1)]).group(1)]
            field = dict(re.findall(r"(\w+)=(\d+)", loc))
            path = t["FileNames"][field["file_name_id"]].strip('"')
            function = t["FunctionNames"][field["function_name_id"]].strip('"')
            return f"{function} {linecache.getline(path, int(field['line']))}".lower()
        except (AttributeError, KeyError):
            return ""

    def moves_data(self, i: dict) -> bool:
        """``i``'s result is data moved, not computed: its (fused) root a copy, a transpose, a
        concatenate or a (dynamic-update-)slice (a multi-output fusion's: every root's)."""
        r = self.ins[self.roots[self.called(i)[0]]] if i["op"] == "fusion" else i
        while r["op"] in ("bitcast", "reshape"):
            r = self.ins[r["operands"][0]]
        if r["op"] == "tuple":
            return all(self.moves_data(self.ins[o]) for o in r["operands"])
        return r["op"] in WRITES

    def written(self) -> set[str]:
        """The instructions that write the program's results: the entry's outputs followed through
        tuples and bitcasts, and into the layer loop (a ``while``'s output k is its body's root's
        operand k: the dynamic-update-slice writing each layer's slice of a stacked internal),
        kept where they move data (``moves_data``; a result computed in place stays in its group)."""
        out, todo, seen = set(), [self.roots[self.entry]], set()
        while todo:
            i = self.ins[todo.pop()]
            if i["name"] in seen:
                continue
            seen.add(i["name"])
            if i["op"] in ("tuple", "bitcast"):
                todo += i["operands"]
            elif i["op"] == "get-tuple-element":
                src, k = self.ins[i["operands"][0]], int(re.search(r"index=(\d+)", i["attrs"]).group(1))
                if src["op"] == "while":
                    body = re.search(r"body=" + NAME, src["attrs"]).group(1)
                    todo.append(self.ins[self.roots[body]]["operands"][k])
                elif src["op"] == "tuple":
                    todo.append(src["operands"][k])
                else:
                    todo.append(src["name"])
            elif i["op"] not in ("parameter", "constant") and self.moves_data(i):
                out.add(i["name"])
                todo += self.buffers(i)
        return out

    def buffers(self, i: dict) -> list[str]:
        """The operands ``i`` writes into in place (a dynamic-update-slice's buffer, fused or not: the
        previous layer's write of a stacked internal) or copies (a copy's source)."""
        if i["op"] in ("copy", "dynamic-update-slice"):
            return i["operands"][:1]
        if i["op"] != "fusion":
            return []
        comp = self.called(i)[0]
        root = self.ins[self.roots[comp]]
        roots = [self.ins[o] for o in root["operands"]] if root["op"] == "tuple" else [root]
        params = [self.ins[r["operands"][0]] for r in roots if r["op"] == "dynamic-update-slice"]
        return [i["operands"][int(p["args"])] for p in params if p["op"] == "parameter"]

    def group(self, name: str, written: set[str]) -> str | None:
        """The group of instruction ``name``'s time, by what it computes, in this order: GEMM (a dot,
        a convolution, a YNNPACK / oneDNN / matmul custom call); internals written (``written``);
        softmax (exp, or a max-reduce); normalisation (rsqrt); activation (erf, tanh, logistic);
        copies/transposes (data movement only; scalar index arithmetic aside); then an element-wise
        or reduce fusion XLA split off one of these (a softmax's row sum, a LayerNorm's mean) by
        the source line its root came from; else other element-wise. None for control flow (its
        body's events hold its time)."""
        i = self.ins.get(name)
        if i is None or i["op"] in CONTROL:
            return None
        inner = self.inside(i)
        ops = {j["op"] for j in inner if dims(j["shape"]) or j["op"] == "reduce"} if i["op"] == "fusion" else {i["op"]}
        reduced = {j["op"] for r in [i, *inner] if r["op"] == "reduce" for j in self.inside(r)}
        if ops & {"dot", "convolution"} or re.search(r"ynn|onednn|matmul|gemm", i["attrs"], re.I):
            return "GEMM"
        if name in written:
            return "internals written"
        if "exponential" in ops or "maximum" in reduced:
            return "softmax"
        if ops & {"rsqrt", "sqrt"}:
            return "normalisation"
        if ops & {"erf", "tanh", "logistic"}:
            return "activation"
        if ops <= MOVES:
            return "copies/transposes"
        src = self.source(i)
        for group, pattern in (("softmax", "softmax"), ("normalisation", "norm"), ("activation", r"gelu|silu|act")):
            if re.search(pattern, src):
                return group
        return "other element-wise"

    def flops(self, name: str) -> float:
        """2·(result size)·(contracted size) summed over the dots ``name`` runs."""
        i = self.ins[name]
        total = 0.0
        for d in [i, *self.inside(i)]:
            if d["op"] == "dot":
                lhs = dims(self.ins[d["operands"][0]]["shape"])
                k = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", d["attrs"]).group(1)
                total += 2 * math.prod(dims(d["shape"])) * math.prod(lhs[int(c)] for c in k.split(",") if c)
        return total

    def bytes(self, name: str) -> int:
        """Bytes ``name`` reads and writes, from the HLO shapes: each operand and the result, except
        that an operand read through a (dynamic-)slice or gather counts as the part read, and an
        in-place dynamic-update-slice as its update (read and written)."""
        i = self.ins[name]
        if i["op"] != "fusion":
            if i["op"] in ("dynamic-slice", "slice", "gather"):
                return 2 * nbytes(i["shape"])
            if i["op"] == "dynamic-update-slice":
                return 2 * nbytes(self.ins[i["operands"][1]]["shape"])
            return nbytes(i["shape"]) + sum(nbytes(self.ins[o]["shape"]) for o in i["operands"])
        comp = self.called(i)[0]
        users = collections.defaultdict(list)
        for m in self.members[comp]:
            for o in self.ins[m]["operands"]:
                users[o].append(self.ins[m])
        total = 0
        for m in self.members[comp]:
            p = self.ins[m]
            if p["op"] != "parameter":
                continue
            us = users[p["name"]]
            if any(u["op"] == "dynamic-update-slice" and u["operands"][0] == p["name"] for u in us):
                continue  # the buffer written in place: its update counts below
            if us and all(
                u["op"] in ("dynamic-slice", "slice", "gather") and u["operands"][0] == p["name"] for u in us
            ):
                total += sum(nbytes(u["shape"]) for u in us)
            else:
                total += nbytes(p["shape"])
        roots = [self.ins[self.roots[comp]]]
        if roots[0]["op"] == "tuple":
            roots = [self.ins[o] for o in roots[0]["operands"]]
        return total + sum(nbytes(self.ins[r["operands"][1]]["shape"]) if r["op"] == "dynamic-update-slice"
                           else nbytes(r["shape"]) for r in roots)


def _matching(text: str, start: int) -> int:
    """Index of the parenthesis closing the one at ``text[start]``."""
    depth = 0
    for k in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[k], 0)
        if depth == 0:
            return k
    raise ValueError(f"unbalanced HLO line: {text[:80]}")
