"""jattn: attention internals of Transformer encoders, translation models and causal LMs.

Run ``jattn COMMAND --help`` for what a command reads and writes. A bad argument or an unusable
file or model prints one message and exits with status 1 (--debug, or JATTN_DEBUG=1, shows the
traceback instead). Ctrl-C stops a command and leaves --out as it was; the long commands
(finetune, prune, gates, disable) keep a checkpoint that the same command run again resumes
from. The exit status of a stopped command is 130 (Ctrl-C) or 143 (SIGTERM).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import signal
import sys
import time

from jattn.io import stops
from jattn.io.stops import Terminated

# sub-command -> module defining ``add_arguments(parser)`` and ``run(args)``
COMMANDS = {
    "demo": "jattn.cli.demo",
    "analyze": "jattn.cli.analyze",
    "view": "jattn.cli.view",
    "finetune": "jattn.cli.finetune",
    "importance": "jattn.cli.importance",
    "prune": "jattn.cli.prune",
    "gates": "jattn.cli.gates",
    "disable": "jattn.cli.disable",
    "patterns": "jattn.cli.patterns",
    "data": "jattn.cli.data",
    "models": "jattn.cli.models",
    "reproduce": "jattn.cli.reproduce",
}

# what a user can cause by what they pass; anything else is a bug and keeps its traceback
USER_ERRORS = (ValueError, OSError, ImportError)
FLAGS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._StoreConstAction, argparse._HelpAction,
         argparse._VersionAction, argparse._CountAction)


def plain(text: str) -> str:
    """Docstring markup as plain text: ``code`` and `code` lose their backticks, '* ' bullets become '- '."""
    text = re.sub(r"`{1,2}([^`]*)`{1,2}", r"\1", text)
    return re.sub(r"(?m)^(\s*)\* ", r"\1- ", text)


def summary(doc: str | None) -> str:
    """A command's one-line description for ``jattn --help``: the first sentence of its
    docstring, whole (a usage example after a colon is left to the command's own help)."""
    first = " ".join((doc or "").strip().split("\n\n")[0].split())
    first = re.split(r"(?<=[.)])\s+(?=[A-Z])", first)[0]  # the first sentence
    first = re.split(r":\s*``jattn ", first)[0]  # 'What it does: ``jattn x --input FILE``' -> 'What it does'
    first = plain(first).rstrip(" .:")
    return (first[:1].upper() + first[1:] + ".") if first else ""


def shown(value) -> str:
    if isinstance(value, (list, tuple)):
        return " ".join(map(str, value)) if value else "none"
    return str(value)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default ('(default: 32)'), 'required', or nothing for
    a flag; an option whose default is None says what None means in its own help (a test
    checks). Descriptions keep their layout, without reST markup."""

    def _fill_text(self, text, width, indent):
        """Plain paragraphs are wrapped to the terminal; those with indented lines (tables, lists) kept."""
        import textwrap

        out = []
        for para in plain(text).strip("\n").split("\n\n"):
            if any(line[:1].isspace() for line in para.splitlines()):
                out.append(textwrap.indent(para, indent))
            else:
                out.append(textwrap.fill(" ".join(para.split()), width, initial_indent=indent,
                                         subsequent_indent=indent))
        return "\n\n".join(out)

    def _get_help_string(self, action):
        text = plain(action.help or "")
        if action.help is argparse.SUPPRESS or "default" in text.lower() or isinstance(action, FLAGS):
            return text
        if action.required:
            return text + " (required)"
        if action.default is None or action.default is argparse.SUPPRESS:
            return text
        return text + f" (default: {shown(action.default)})".replace("%", "%%")


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line (status 2) instead of the usage block, and the
    ``HelpFormatter``."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def debugging(args=None) -> bool:
    return bool(getattr(args, "debug", False)) or os.environ.get("JATTN_DEBUG", "") not in ("", "0")


def docstring(command: str) -> str:
    """Command ``command``'s description: its module's docstring, read from the source without
    importing the module (whose imports load JAX), so that ``jattn --help`` lists every command at once."""
    import ast
    from importlib.util import find_spec
    from pathlib import Path

    source = Path(find_spec(COMMANDS[command]).origin).read_text(encoding="utf-8")
    return ast.get_docstring(ast.parse(source), clean=False) or ""


def build_parser(arguments=tuple(COMMANDS)) -> tuple[Parser, dict]:
    """The ``jattn`` parser, listing every sub-command with its summary, and {command: module}
    for the commands in ``arguments``, whose modules are imported and add their options (``main``
    passes the command being run alone: the others' modules are never imported)."""
    common = Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks (also JATTN_DEBUG=1)")
    parser = Parser(prog="jattn", description=__doc__, parents=[common])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    modules = {}
    for name in COMMANDS:
        doc = docstring(name)  # a help string: argparse %-formats it; a description it prints as it is
        command = sub.add_parser(name, help=summary(doc).replace("%", "%%"), description=doc.strip(),
                                 parents=[common])
        if name in arguments:
            modules[name] = importlib.import_module(COMMANDS[name])
            modules[name].add_arguments(command)
    parser.commands = dict(sub.choices)  # {command: its parser}, for ``in_flags``
    return parser, modules


def options(parser: argparse.ArgumentParser) -> list:
    """The parser's actions, with those of its sub-commands' parsers (``jattn models make``)."""
    found = []
    for action in parser._actions:
        found.append(action)
        if isinstance(action, argparse._SubParsersAction):
            found += [a for sub in action.choices.values() for a in options(sub)]
    return found


def in_flags(message: str, parser: argparse.ArgumentParser) -> str:
    """A library error in the command line's terms. The Python API names its arguments as
    ``name=`` (``max_length=64``, ``truncate=True``); each name that is one of this command's
    options (by its ``dest``) becomes the option's flag: ``--max-length 64``, ``--truncate``."""
    for action in options(parser):
        flags = [s for s in action.option_strings if s.startswith("--")]
        if not flags:
            continue
        name, flag = re.escape(action.dest), flags[0]
        if isinstance(action, FLAGS):
            message = re.sub(rf"(?<![\w.]){name}={action.const!r}(?!\w)", flag, message)
        message = re.sub(rf"(?<![\w.]){name}=(?=[\s,.;:)]|$)", flag, message)  # the name alone
        message = re.sub(rf"(?<![\w.]){name}=(?=\S)", flag + " ", message)  # with a value
    return message


GRACE_S = 2.0  # a signal this soon after the stop's exception was raised lets its clean-up run
REDELIVER_S = 0.02  # a dropped stop is sent again this much later, when the callback is over
_redelivery: list = []  # the pending redelivery's timer


_deferring = [False]  # while JAX's native libraries load: a stop is recorded, raised once they are loaded


@contextlib.contextmanager
def _deferred():
    """A stop is only recorded while this is open (``check_stop`` raises it after): JAX's import runs
    Python code from inside its C++ extensions' initialisation, and an exception raised there by the
    handler escapes into C++, which aborts the process (SIGABRT)."""
    _deferring[0] = True
    try:
        yield
    finally:
        _deferring[0] = False


def _stop(signum, frame):
    """SIGINT/SIGTERM while a command runs: recorded, and raised unless one is on its way (or JAX
    is loading)."""
    stops.record_stop(signum)
    if _deferring[0]:
        return
    raised = stops.STOP["raised"]
    if raised is not None and time.monotonic() - raised < GRACE_S:
        return
    stops.STOP["raised"] = time.monotonic()
    raise stops.stop_error(stops.STOP["signal"])


def _dropped(unraisable, previous=None):
    """``sys.unraisablehook`` while a command runs: a recorded stop's exception that Python
    dropped is not printed; the signal is sent to the main thread again shortly."""
    signum = stops.STOP["signal"]
    if signum is None or not isinstance(unraisable.exc_value, KeyboardInterrupt):
        return (previous or sys.__unraisablehook__)(unraisable)
    stops.STOP["raised"] = None
    if not _redelivery:
        import threading

        timer = threading.Timer(REDELIVER_S, _redeliver, (threading.main_thread().ident, signum))
        timer.daemon = True
        _redelivery.append(timer)
        timer.start()


def _redeliver(thread: int, signum: int) -> None:
    _redelivery.clear()
    if stops.STOP["raised"] is None:  # no check point raised it again meanwhile
        signal.pthread_kill(thread, signum)


KEPT = "; --out was left as it was"  # what a stop says of a command writing --out


def _stopped(command: str, tail: str, e: KeyboardInterrupt, program: bool):
    """The end of a stopped command: one line on stderr, exit status 130 or 143. ``tail``: what
    follows the stop in the line (``KEPT`` and the command's ``RESUME``); a stop the command
    raised again with its own ``resume`` attribute (``jattn models make``: which artefact resumes
    from where) says that instead of ``RESUME``."""
    for sig in (signal.SIGINT, signal.SIGTERM):  # nothing more to stop: a second signal is not a crash
        signal.signal(sig, signal.SIG_IGN)
    what, status = ("terminated", 143) if isinstance(e, Terminated) else ("interrupted", 130)
    print(f"{' '.join(filter(None, ('jattn', command)))}: {what}" + tail, file=sys.stderr)
    if program:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(status)
    raise SystemExit(status) from None


def main(argv=None) -> None:
    """Run the command ``argv`` names (default: the program's arguments). Only that command's
    module is imported, after parsing (``build_parser``), and JAX only for a command that computes
    (a module's ``USES_JAX``, default True, or a function of the parsed arguments): ``jattn --help``,
    ``jattn data path`` and ``jattn models list|path`` stay fast.

    How a stop is handled: the handler (``_stop``) records the signal (``jattn.io.stops.record_stop``)
    and raises KeyboardInterrupt (``Terminated`` for SIGTERM) wherever the main thread is, so the
    commands' checkpoint and clean-up paths run. Python drops an exception raised inside a
    garbage-collection callback (XLA's ``_xla_gc_callback``) or a finalizer ("Exception ignored
    in ..."); three things make such a stop still end the run: ``_dropped`` (the
    ``sys.unraisablehook`` while a command runs) prints nothing for it and sends the signal again a
    moment later, when the callback is over; ``check_stop`` raises it again at every batch of the
    corpus runner and every stage of ``jattn reproduce``; and ``jattn.io.results.Output`` never
    publishes after a recorded stop. A signal that arrives while the stop's exception is on its way
    (within ``GRACE_S`` of its raise) is not raised again, so that it cannot cut the clean-up short
    (the temporary folder's and the lock's removal). Once stopped, the command prints its one line
    and, run as the program (``argv`` None), leaves with ``os._exit``: its clean-up is done, and the
    interpreter's teardown of XLA's threads and callbacks in the middle of their work could crash
    (a segmentation fault after the message)."""
    from jattn.host_memory import keep_freed_memory

    stops.record_stop(None)
    previous, hook = {}, sys.unraisablehook
    if _main_thread():  # an ignored SIGINT (a background job's) stays ignored
        previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGINT, signal.SIGTERM)
                    if sig == signal.SIGTERM or signal.getsignal(sig) is signal.default_int_handler}
        sys.unraisablehook = lambda unraisable: _dropped(unraisable, hook)
    command, kept, resume = "", KEPT, ""
    try:
        # no transformers notice that PyTorch is absent (jattn reads its tokenizers and configs only)
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
        words = sys.argv[1:] if argv is None else argv
        chosen = next((w for w in words if not w.startswith("-")), None)  # jattn's own options are flags
        with _deferred():  # the command's module and its options' imports may load JAX
            parser, modules = build_parser([chosen] if chosen in COMMANDS else [])
        stops.check_stop()
        args = parser.parse_args(argv)
        module = modules[args.command]
        command, resume = args.command, getattr(module, "RESUME", "")
        kept = KEPT if hasattr(args, "out") else ""  # jattn models and data write no --out
        uses_jax = getattr(module, "USES_JAX", True)  # a flag, or a function of the parsed arguments
        # the command owns its process: freed memory kept for XLA
        if uses_jax(args) if callable(uses_jax) else uses_jax:
            with _deferred():
                import jax  # noqa: F401

                keep_freed_memory()
            stops.check_stop()
        module.run(args)
        stops.check_stop()  # a stop whose exception was dropped after the last check point
        if argv is None:  # the program's work is done and published: a stop from now on changes nothing
            for sig in previous:
                signal.signal(sig, signal.SIG_IGN)
    except KeyboardInterrupt as e:
        if debugging(args if command else None):
            raise
        _stopped(command, kept + getattr(e, "resume", resume), e, program=argv is None)
    except BrokenPipeError:  # the reader stopped reading (`jattn data list | head`): done, as Unix tools are
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes stdout
    except USER_ERRORS as e:
        if not command or debugging(args):
            raise
        message = in_flags(str(e) or e.__class__.__name__, parser.commands[args.command])
        raise SystemExit(f"jattn {args.command}: error: {message}") from None
    finally:
        for sig, handler in previous.items():  # the program ends ignoring them: no stop in its teardown
            signal.signal(sig, handler if argv is not None else signal.SIG_IGN)
        sys.unraisablehook = hook
        for timer in _redelivery:  # a caller of main in-process goes on: no late signal, no stop left
            timer.cancel()
        _redelivery.clear()
        stops.record_stop(None)


def overview() -> str:
    """The README's table of commands, from the commands' own descriptions (a test keeps it equal)."""
    rows = ["| command | what it does |", "|---|---|"]
    for name in COMMANDS:
        doc = summary(docstring(name)).replace("|", r"\|")
        rows.append(f"| `jattn {name}` | {doc} |")
    return "\n".join(rows)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
