"""Interactive attention viewer: ``jattn view --text \"...\" --out page.html`` writes one HTML page
(two panels side by side, their difference, layer × head thumbnails; ``jattn.viz.view``).
``--compare-model B`` adds a second model on the same tokens (e.g. before and after fine-tuning)."""

from __future__ import annotations

from pathlib import Path

from jattn.cli.common import positive_int
from jattn.io import atomic
from jattn.viz.view import read_page, view


def add_arguments(parser) -> None:
    parser.add_argument("--model", default=None, help="HF folder or hub id (default: embedded all-MiniLM-L6-v2)")
    parser.add_argument("--compare-model", default=None,
                        help="a second model (HF folder, made artefact or hub id) to compare with --model, e.g. its "
                             "fine-tuned version; it must tokenize the text the same way (default: none)")
    parser.add_argument("--text", required=True, help="the sentence to look at (the source, for a translation model)")
    parser.add_argument(
        "--pair", default=None, help="second segment of a sentence pair, for encoders (default: none, a single text)"
    )
    parser.add_argument("--target", default=None,
                        help="translation models: the target text to teacher-force (default: the model's own "
                             "translation)")
    parser.add_argument("--out", required=True, help="the HTML file to write")
    parser.add_argument("--max-length", type=positive_int, default=None,
                        help="most tokens per side, specials included (default: the model's positions)")
    parser.add_argument("--truncate", action="store_true", help="cut an over-long text instead of failing")
    parser.add_argument("--num-beams", type=positive_int, default=4,
                        help="beam size of the model's own translation (default: 4)")


def check_out(out) -> Path:
    """--out as a writable file path, or a clear error (checked before any work): an existing file
    is replaced only when it is a page this command wrote."""
    out = Path(out)
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder. Fix: give a file name, e.g. {out / 'attention.html'}")
    if not out.parent.is_dir():
        raise ValueError(f"--out {out}: folder {out.parent} does not exist. Fix: create it first")
    if out.exists() and not _is_view_page(out):
        raise ValueError(f"--out {out} exists and is not a page jattn view wrote; writing would replace it. Fix: "
                         "choose another file name, or move that file away")
    return out


def _is_view_page(path: Path) -> bool:
    from jattn.viz.view import read_page

    try:
        read_page(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, OSError):
        return False
    return True


def write(html: str, out) -> Path:
    """Write the page whole (``jattn.io.atomic.replace``: a new temporary file beside ``out``,
    never opened through a link, renamed over it). An OS error (a full disk) is one line naming
    ``out`` and the fix, with the temporary file removed and ``out`` as it was."""
    out = check_out(out)
    atomic.replace(out, html, instead="choose another --out")
    return out


def run(args) -> None:
    from jattn.models import load

    check_out(args.out)  # before loading anything
    model = load(args.model)
    compare = None if args.compare_model is None else load(args.compare_model)
    html = view(model, args.text, args.pair, args.target, compare=compare, max_length=args.max_length,
                truncate=args.truncate, num_beams=args.num_beams)
    out = write(html, args.out)
    data = read_page(html)
    shape = ", ".join(f"{v['name']} {len(data['tokens'][v['queries']])}×{len(data['tokens'][v['keys']])}"
                      for v in data["views"].values())
    models = f"; models {data['model']} and {data['compare']['model']}" if "compare" in data else ""
    print(f"jattn view: wrote {out} ({out.stat().st_size / 1e6:.2f} MB; {shape} tokens{models})")
