"""Peak host memory of ``run_corpus`` with a method that reads every layer (``alti``: ALTI rolled out
over the layers, Ferrando et al. 2022a; ``js``: Clark et al. 2019's Jensen–Shannon between every
pair of heads) on one long text of a small random encoder, or one long pair of a random translation
model (``--model marian``), above the loaded model, beside one layer's attention weights α
(b, H, n, n) float32.

    python benchmarks/bench_bounded_memory.py --tokens 2048
    python benchmarks/bench_bounded_memory.py --method js --tokens 1024
    python benchmarks/bench_bounded_memory.py --model marian --method entropy --tokens 1024

The model is a random BERT (hidden 384, 6 layers, 12 heads, FFN 1,536, 2,048 + 2 positions),
saved once under ``--cache`` by Hugging Face's ``save_pretrained`` and loaded by ``jattn.load``.
Each run is a fresh interpreter (``PROBE``): the imports, the load, the resident set as the
baseline, one text of ``--tokens`` random ids through ``run_corpus``; the peak (``VmHWM``)
minus the baseline is reported. ``PYTHONPATH`` decides which jattn runs: pointed at an older
checkout it measures that one (the ``before`` of ``docs/BENCHMARKS.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

SHAPE = dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536, vocab_size=1000,
             max_position_embeddings=2050)

PROBE = r"""
import json, resource, sys, time
import numpy as np
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()
folder, method, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
import jax, jattn
from jattn.analyses import registry
from jattn.runner import run_corpus
model = jattn.load(folder, tokenizer=False)
jax.block_until_ready(jax.tree.leaves(model.params))
c = model.config
translation = hasattr(c, "d_model")
vocab = c.src_vocab_size if translation else c.vocab_size
ids = np.random.default_rng(0).integers(5, vocab, (1, n)).astype(np.int32)
ids[0, 0], ids[0, -1] = 2, 3  # [CLS] ... [SEP]
batch = {"input_ids": ids, "attention_mask": np.ones((1, n), np.int32)}
if translation:  # a pair of n source and n target tokens, teacher-forced; the source ends in </s>
    ids[0, -1] = c.eos_token_id
    dec = np.random.default_rng(1).integers(5, c.tgt_vocab_size, (1, n)).astype(np.int32)
    dec[0, 0] = c.decoder_start_token_id
    batch.update(decoder_input_ids=dec, decoder_attention_mask=np.ones((1, n), np.int32))
methods = registry.make_methods(model, [method], registry.Options())
base = rss(); t0 = time.perf_counter()
result = run_corpus(model, batch, methods, batch_size=1, max_length=n, progress=False)
with open("/proc/self/status") as f:  # VmHWM, this program's peak
    peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
heads = c.encoder_heads if translation else c.num_heads
print(json.dumps({"seconds": time.perf_counter() - t0, "peak_above_model": peak - base,
                  "layer_weights_bytes": heads * n * n * 4, "loaded_bytes": base,
                  "statistics": {k: np.asarray(s.value).tolist() for k, s in result.statistics.items()}}))
"""


def make_checkpoint(cache: Path, kind: str = "bert") -> Path:
    """The random BERT (``SHAPE``) or Marian translation model of its shape, made once."""
    folder = cache / f"{kind}-bounded"
    if (folder / "DONE").is_file():
        return folder
    import torch
    import transformers as T

    torch.manual_seed(0)
    if kind == "marian":
        shape = dict(d_model=SHAPE["hidden_size"], encoder_layers=SHAPE["num_hidden_layers"],
                     decoder_layers=SHAPE["num_hidden_layers"], encoder_attention_heads=SHAPE["num_attention_heads"],
                     decoder_attention_heads=SHAPE["num_attention_heads"], encoder_ffn_dim=SHAPE["intermediate_size"],
                     decoder_ffn_dim=SHAPE["intermediate_size"], vocab_size=SHAPE["vocab_size"],
                     max_position_embeddings=SHAPE["max_position_embeddings"])
        T.MarianMTModel(T.MarianConfig(**shape, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
                        ).save_pretrained(folder)
    else:
        T.BertModel(T.BertConfig(**SHAPE, pad_token_id=0), add_pooling_layer=False).save_pretrained(folder)
    (folder / "DONE").write_text("made by benchmarks/bench_bounded_memory.py\n")
    return folder


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", default="alti")
    parser.add_argument("--tokens", type=int, default=2048, help="tokens of the text (of the source and the target)")
    parser.add_argument("--model", choices=("bert", "marian"), default="bert",
                        help="the random BERT, or a random Marian translation model of its shape (6 + 6 layers)")
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get("JATTN_CACHE", "~/.cache/jattn")).expanduser()
                        / "bench_scale")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    folder = make_checkpoint(args.cache, args.model)
    root = os.environ.get("PYTHONPATH", str(Path(__file__).resolve().parents[1])).split(os.pathsep)[0]
    out = subprocess.run([sys.executable, "-c", PROBE, str(folder), args.method, str(args.tokens)],  # cwd: -c's first
                         env={**os.environ, "PYTHONPATH": root}, cwd=root, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{args.method} at {args.tokens} tokens failed:\n{out.stderr[-3000:]}")
    r = {"method": args.method, "model": args.model, "tokens": args.tokens,
         **json.loads(out.stdout.strip().splitlines()[-1])}
    gib = 2**30
    print(f"{args.method} on {args.model} at {args.tokens} tokens: peak {r['peak_above_model'] / gib:.2f} GiB above "
          "the loaded model, "
          f"{r['seconds']:.0f} s; one layer's α {r['layer_weights_bytes'] / gib:.2f} GiB")
    if args.out:
        args.out.write_text(json.dumps(r, indent=1) + "\n")
    return r


if __name__ == "__main__":
    main()
