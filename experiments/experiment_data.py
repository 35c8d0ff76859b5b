"""Where ``train_nmt_multi30k.py`` (the script that made the committed translation model) finds its data.

It takes ``--data-dir``: the data folder, one sub-folder per data set, as ``jattn data
fetch`` fills it (default: ``$JATTN_DATA``, else the user cache; ``jattn data path`` prints it). A
missing file stops it with the command that fetches it and its public source.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from jattn.io import manifest

DEFAULT = manifest.data_dir()


@contextlib.contextmanager
def compilation_cache(folder: Path):
    """JAX's persistent compilation cache in ``folder`` while the block runs (a resumed run skips
    its compiles), then the process's previous setting again: a script called from a test must not
    leave every later compile of that process writing into the test's temporary folder."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache as cc

    previous = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", str(folder))
    cc.reset_cache()  # JAX opens its cache once per process: the new folder counts only after a reset
    try:
        yield
    finally:
        jax.config.update("jax_compilation_cache_dir", previous)
        cc.reset_cache()


def add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=DEFAULT,
                        help=f"the data folder, laid out as `jattn data fetch` fills it (default: {DEFAULT}: "
                             "$JATTN_DATA, else the user cache)")


def data_file(data_dir: Path, relative: str) -> Path:
    """``data_dir / relative``, or a SystemExit naming the command that fetches it and its source."""
    path = Path(data_dir) / relative
    if not path.is_file():
        name, _, inside = relative.partition("/")
        known = {(e.dataset, e.path): e for e in manifest.files()}
        entry = known.get((name, inside))
        if entry is None:
            raise SystemExit(f"{path} not found, and {relative} is no file of the data manifest "
                             "(jattn data list shows the data sets). Fix: point --data-dir at a folder that has it")
        source = manifest.datasets()[name]["repository"]
        raise SystemExit(f"{path} not found. Fix: run `jattn data fetch {name} --data-dir {data_dir}` ({name} from "
                         f"{source}, into {Path(data_dir) / name}), or point --data-dir at a folder that has it")
    return path
