"""The stop a SIGINT or SIGTERM asks for, recorded by the command line's handler (``jattn.cli``).

``check_stop`` raises a recorded stop again at the check points of long loops (every batch of
``jattn.runner.loop``, every stage of ``jattn.reproduce.pipeline``, ``jattn.io.results.Output``
before it publishes), so that a stop whose exception Python dropped (raised inside a
garbage-collection callback or a finalizer) still ends the run. Standard library only: the
command line imports it before anything else, so a stop is handled from its first moment.
"""

from __future__ import annotations

import signal
import time

# the stop the command line's handler recorded (``record_stop``): its signal, and when its
# exception was last raised (time.monotonic(); None: not raised, or raised and dropped since)
STOP = {"signal": None, "raised": None}


class Terminated(KeyboardInterrupt):
    """A SIGTERM, raised where a SIGINT's KeyboardInterrupt would be."""


def record_stop(signum: int | None) -> None:
    """Remember a stop signal (SIGINT or SIGTERM) for ``check_stop``, the first one kept; None
    forgets it (a new command)."""
    if signum is None:
        STOP.update(signal=None, raised=None)
    elif STOP["signal"] is None:
        STOP["signal"] = signum


def stop_error(signum: int) -> KeyboardInterrupt:
    """The exception a stop signal raises: ``Terminated`` for SIGTERM, else KeyboardInterrupt."""
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def check_stop() -> None:
    """A check point: raise the recorded stop again (its first exception may have been dropped)."""
    if STOP["signal"] is not None:
        STOP["raised"] = time.monotonic()
        raise stop_error(STOP["signal"])
