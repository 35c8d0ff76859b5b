"""What every jattn trainer shares: a resume checkpoint with its run's arguments, and stopping on
Ctrl-C / SIGTERM at a step boundary with a checkpoint.

``Resumable(workdir, state, meta, arguments)`` keeps ``workdir/last`` (orbax): the training
state (a pytree: parameters, optimizer state, ...) and ``meta`` (JSON: step counters, curve)
with the run's ``arguments`` (a config dataclass). Constructing it on a work folder that holds
a checkpoint restores it, after checking that the recorded arguments equal the new ones (those
named ``extendable``, e.g. the number of epochs, may change: a finished run can be trained on).

``stop_requests()`` turns SIGINT and SIGTERM into a request the training loop sees between two
steps (``requested``): the loop saves and raises ``KeyboardInterrupt``, so the checkpoint is
always taken at a consistent point and a rerun of the same command resumes from it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
from pathlib import Path

import jax

from jattn.io.stops import Terminated


def _recorded(arguments, extendable: tuple[str, ...]) -> dict:
    fields = dataclasses.asdict(arguments) if dataclasses.is_dataclass(arguments) else dict(arguments)
    return {k: v for k, v in fields.items() if k not in extendable}


def _defaults(arguments, names) -> dict:
    """The declared defaults of the dataclass ``arguments``' fields among ``names``."""
    if not dataclasses.is_dataclass(arguments):
        return {}
    return {f.name: f.default for f in dataclasses.fields(arguments)
            if f.name in names and f.default is not dataclasses.MISSING}


class Resumable:
    def __init__(self, workdir, state, meta: dict, arguments, extendable: tuple[str, ...] = (),
                 saved_keys: tuple[str, ...] | None = None):
        """``state`` and ``meta``: a fresh run's; replaced by the checkpoint's when there is one.
        ``saved_keys``: the entries of ``state`` a checkpoint holds (default: all)."""
        import orbax.checkpoint as ocp

        self.workdir = Path(workdir).resolve()
        self.saved_keys = tuple(state) if saved_keys is None else saved_keys
        self.state, self.meta = state, dict(meta, arguments=_jsonable(_recorded(arguments, extendable)))
        self.manager = ocp.CheckpointManager(self.workdir / "last", options=ocp.CheckpointManagerOptions(
            max_to_keep=1, create=True))
        step = self.manager.latest_step()
        if step is None:
            return
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, self._saved())
        got = self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                                 meta=ocp.args.JsonRestore()))
        recorded = dict(got["meta"]).get("arguments")
        if recorded is not None:  # an argument added since the run was recorded counts at its default
            recorded = {**_jsonable(_defaults(arguments, self.meta["arguments"])), **recorded}
        if recorded is not None and recorded != self.meta["arguments"]:
            differ = sorted(k for k in set(recorded) | set(self.meta["arguments"])
                            if recorded.get(k) != self.meta["arguments"].get(k))
            said = ", ".join(f"{k}={recorded.get(k)!r} (now {self.meta['arguments'].get(k)!r})" for k in differ)
            raise ValueError(f"{self.workdir} holds a run with other arguments: {said}. Fix: rerun with the "
                             "recorded arguments to resume it, or use another work folder (or delete this one) "
                             "to start a new run")
        self.state = {**self.state, **got["state"]}
        self.meta = dict(got["meta"], arguments=self.meta["arguments"])

    def _saved(self) -> dict:
        return {k: self.state[k] for k in self.saved_keys}

    def save(self, step: int) -> None:
        """Checkpoint the state and meta as ``step`` (once per step; the previous one is dropped)."""
        import orbax.checkpoint as ocp

        if step in self.manager.all_steps():
            return
        self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(self._saved()),
                                                        meta=ocp.args.JsonSave(self.meta)), force=True)
        self.manager.wait_until_finished()


def _jsonable(value):
    """Tuples as lists (what a JSON round trip gives back), so recorded and new arguments compare equal."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


class StopRequests:
    requested = False
    signum = None  # the first stop signal received


@contextlib.contextmanager
def stop_requests():
    """SIGINT / SIGTERM set ``requested`` instead of interrupting (main thread only; elsewhere
    nothing changes). A second SIGINT interrupts at once. The loop's ``KeyboardInterrupt`` after a
    SIGTERM leaves as ``jattn.io.stops.Terminated`` (the command line's exit status 143)."""
    stop = StopRequests()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def request(signum, frame):
        if stop.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop.requested, stop.signum = True, stop.signum or signum

    old = {s: signal.signal(s, request) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    except KeyboardInterrupt as e:
        if stop.signum == signal.SIGTERM and not isinstance(e, Terminated):
            raise Terminated() from e
        raise
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


class Checkpointed:
    """Base of the trainers: ``state`` and ``meta`` live in ``self.run`` (a ``Resumable``)."""

    run: Resumable

    @property
    def state(self) -> dict:
        return self.run.state

    @state.setter
    def state(self, value: dict) -> None:
        self.run.state = value

    @property
    def meta(self) -> dict:
        return self.run.meta
