"""Where the experiment scripts find their data.

Every script takes ``--data-dir``: the folder laid out like ``../shared/data`` (its default when
it exists beside the repository). A missing file stops the script with the public source to
download it from and the path to put it at.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data"
SOURCES = {  # sub-folder -> where its public files come from (../shared/data/README.md)
    "gap": "https://github.com/google-research-datasets/gap-coreference (gap-development.tsv)",
    "multi30k": "https://github.com/multi30k/dataset (data/task1/raw: train, val, test_2016_flickr "
                "in .en/.fr/.de, uncompressed)",
    "alignment": "https://github.com/neulab/awesome-align (examples/enfr.src-tgt, examples/enfr.gold)",
    "frequency": "https://github.com/gorokoba560/norm-analysis-of-transformer (emnlp2020/exp1_bert/data: "
                 "token frequency ranks 'rank count vocab_id' for the bert-base-uncased vocabulary)",
}


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
                        help=f"folder laid out like ../shared/data (default: {DEFAULT})")


def data_file(data_dir: Path, relative: str) -> Path:
    """``data_dir / relative``, or a SystemExit naming what to download and where."""
    path = Path(data_dir) / relative
    if not path.is_file():
        source = SOURCES.get(Path(relative).parts[0], "../shared/data/README.md lists the sources")
        raise SystemExit(f"{path} not found. Download it from {source} into {path.parent}, "
                         "or point --data-dir at a folder laid out like ../shared/data")
    return path


def gap_study_arguments(description: str, out: Path, argv=None) -> argparse.Namespace:
    """Arguments of a study over GAP paragraphs: --model, --data-dir, --segments, --batch-size, --out."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", default=None, help="HF folder (default: the embedded MiniLM)")
    add_data_dir(p)
    p.add_argument("--segments", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--out", type=Path, default=out)
    return p.parse_args(argv)


def gap_paragraphs(data_dir: Path, n: int) -> list:
    """The first ``n`` GAP development paragraphs as [CLS] A [SEP] B [SEP] examples."""
    import itertools

    from jattn.io.readers import read

    return list(itertools.islice(read(data_file(data_dir, "gap/gap-development.tsv"), "gap"), n))


def write_table(result, text: str, out: Path) -> None:
    """Print a study's Markdown table and write it to ``out/table.md`` under a corpus-size line."""
    (Path(out) / "table.md").write_text(f"{result.meta['segments']} segments, {result.meta['tokens']} tokens\n\n"
                                        + text)
    print(text)


def write_study(result, out: Path, num_layers: int) -> None:
    """``jattn.io.results.write_results`` for a study's own folder, keeping its hand-written
    ``summary.md``: the results folder is swapped in whole, which would otherwise drop it."""
    from jattn.io.results import write_results

    summary = Path(out) / "summary.md"
    text = summary.read_bytes() if summary.is_file() else None
    write_results(result, out, num_layers)
    if text is not None:
        summary.write_bytes(text)
