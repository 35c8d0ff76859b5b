"""Train a small Transformer NMT model (Vaswani et al. 2017) French→English on Multi30k
(Elliott et al. 2016) on CPU, and export it as a Hugging Face Marian folder.

Command (run from the repository root; the same command resumes after an interruption from
the latest checkpoint, which is written at least every 10 minutes of training):

    mkdir -p checkpoints/nmt_multi30k
    nohup nice python experiments/train_nmt_multi30k.py --max-tokens 2048 --warmup 300 \
        --time-budget-min 95 >> checkpoints/nmt_multi30k/train.log 2>&1 &

Settings: 3+3 layers, 4 heads, d=256, FFN 1024, ReLU, joint 8k unigram SentencePiece, tied
embeddings (Marian layout), dropout 0.1, label smoothing 0.1, Adam(0.9, 0.98), peak lr 1e-3
with inverse-sqrt warm-up, ~2k-token batches, greedy validation BLEU on 400 val pairs every 200
updates (best checkpoint kept), training stopped after ``--time-budget-min`` minutes of step
time. Text is NFKC-normalised and lowercased on both sides unless ``--cased``; BLEU is sacreBLEU
(13a) against the (lowercased) references of test_2016_flickr, beam 4.

This command made the committed ``checkpoints/multi30k-fr-en`` (lowercased): its settings, the
training curve and its BLEU are in experiments/results/nmt_multi30k.json. The translation
studies use the larger, cased model of the recipe ``jattn models make multi30k-fr-en-6x8``
(``jattn.families.marian.train``). To train longer, rerun the same command with a larger
``--time-budget-min``: it resumes and re-evaluates. On a GPU/TPU run unchanged with larger
settings, e.g. ``--layers 6 --d-model 512 --ffn 2048 --heads 8 --max-tokens 8192 --warmup 4000
--time-budget-min 600 --epochs 40``.

Outputs: checkpoints/nmt_multi30k/{tokenizer,train/{last,best},model} — ``model/`` is a Marian
folder loadable by ``jattn.load`` and ``transformers.MarianMTModel`` — and
experiments/results/nmt_multi30k.json (BLEU, settings, training curve).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from experiment_data import add_data_dir, compilation_cache, data_file

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_dir(p)
    p.add_argument("--workdir", type=Path, default=REPO / "checkpoints" / "nmt_multi30k")
    p.add_argument("--results", type=Path, default=REPO / "experiments" / "results" / "nmt_multi30k.json")
    p.add_argument("--src", default="fr")
    p.add_argument("--tgt", default="en")
    p.add_argument("--cased", action="store_true", help="keep case (default: lowercase both sides)")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--ffn", type=int, default=1024)
    p.add_argument("--activation", default="relu")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--max-len", type=int, default=64, help="truncate sentences to this many tokens")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--peak-lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=800)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--time-budget-min", type=float, default=75.0)
    p.add_argument("--eval-every", type=int, default=200, help="updates between validations (0: each epoch)")
    p.add_argument("--val-during-training", type=int, default=400,
                   help="validate on the first N val pairs during training (all of val at the end)")
    p.add_argument("--test-beams", type=int, default=4)
    p.add_argument("--limit-train", type=int, default=0, help="use only the first N training pairs (smoke test)")
    p.add_argument("--limit-eval", type=int, default=0, help="use only the first N val/test pairs (smoke test)")
    p.add_argument("--compute-dtype", default="float32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    with compilation_cache(args.workdir / "jax_cache"):
        return train(args)


def train(args) -> dict:
    """Train (or resume), export the Marian folder, decode val/test and write the results JSON."""
    from transformers import MarianTokenizer

    import jattn
    from jattn.nn.config import Seq2SeqConfig
    from jattn.families.marian.convert import save_marian_folder
    from jattn.families.marian.tokenizer import train_sentencepiece
    from jattn.io.parallel import encode, read_parallel
    from jattn.models import record_normalization
    from jattn.training.nmt import Trainer, TrainConfig, bleu, translate_ids

    t_start = time.time()
    lower = not args.cased
    split = lambda name: read_parallel(*(data_file(args.data_dir, f"multi30k/{name}.{lang}") for lang in (args.src, args.tgt)),
                                       lower)
    (tr_s, tr_t), (va_s, va_t), (te_s, te_t) = split("train"), split("val"), split("test_2016_flickr")
    if args.limit_train:
        tr_s, tr_t = tr_s[: args.limit_train], tr_t[: args.limit_train]
    if args.limit_eval:
        va_s, va_t, te_s, te_t = va_s[: args.limit_eval], va_t[: args.limit_eval], te_s[: args.limit_eval], te_t[: args.limit_eval]

    tok_dir = args.workdir / "tokenizer"
    if (tok_dir / "vocab.json").is_file():
        tokenizer = MarianTokenizer.from_pretrained(str(tok_dir))
    else:
        tokenizer = train_sentencepiece(tr_s + tr_t, tok_dir, args.vocab_size, seed=args.seed)
    V = len(tokenizer)
    print(f"vocabulary: {V} tokens (joint unigram SentencePiece) in {tok_dir}", flush=True)

    enc = lambda texts, target=False: encode(tokenizer, texts, args.max_len, target, truncate=True)
    train_src, train_tgt = enc(tr_s), enc(tr_t, True)
    val_src, test_src = enc(va_s), enc(te_s)
    print(f"train pairs {len(train_src)}, target tokens {sum(map(len, train_tgt))}", flush=True)

    config = Seq2SeqConfig(
        model_type="marian", src_vocab_size=V, tgt_vocab_size=V, d_model=args.d_model,
        encoder_layers=args.layers, decoder_layers=args.layers, encoder_heads=args.heads,
        decoder_heads=args.heads, encoder_ffn_dim=args.ffn, decoder_ffn_dim=args.ffn,
        activation=args.activation, max_position_embeddings=256, scale_embedding=True,
        shared_embeddings=True, tie_output=True, positions="vaswani", final_logits_bias=True, decoder_mask="all", pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.pad_token_id,
        forced_eos_token_id=tokenizer.eos_token_id, bad_token_ids=(tokenizer.pad_token_id,),
        dropout=args.dropout, attention_dropout=0.0, activation_dropout=0.0)
    tc = TrainConfig(peak_lr=args.peak_lr, warmup_steps=args.warmup, max_tokens=args.max_tokens,
                     accumulate=args.accumulate, epochs=args.epochs, time_budget_s=args.time_budget_min * 60,
                     eval_every=args.eval_every, seed=args.seed, compute_dtype=args.compute_dtype,
                     max_decode_length=args.max_len + 16)
    trainer = Trainer(config, tc, args.workdir / "train", tokenizer)
    if trainer.meta["step"]:
        print(f"resuming at update {trainer.meta['step']} (epoch {trainer.meta['epoch']}, "
              f"{trainer.meta['train_time_s'] / 60:.1f} min trained)", flush=True)
    n_val = args.val_during_training or len(val_src)
    curve = trainer.fit(train_src, train_tgt, val_src[:n_val], va_t[:n_val], progress=not args.no_progress)

    print("final evaluation with the best checkpoint", flush=True)
    params = trainer.best_params()
    t0 = time.time()
    hyps = translate_ids(params, config, test_src, num_beams=args.test_beams, max_length=tc.max_decode_length)
    test_bleu, test_hyps = bleu(tokenizer, hyps, te_t)
    test_time = time.time() - t0
    greedy_bleu = bleu(tokenizer, translate_ids(params, config, test_src, num_beams=1,
                                                max_length=tc.max_decode_length), te_t)[0]
    val_bleu = bleu(tokenizer, translate_ids(params, config, val_src, num_beams=args.test_beams,
                                             max_length=tc.max_decode_length), va_t)[0]
    model_dir = args.workdir / "model"
    save_marian_folder(model_dir, params, config, tok_dir, generation={"num_beams": args.test_beams,
                                                                       "max_length": tc.max_decode_length})
    record_normalization(model_dir, lowercase=lower)  # translate() and the runner then apply it to new text
    model = jattn.load(model_dir, use_cache=False)
    check = model.translate(te_s[:2], num_beams=args.test_beams, max_length=tc.max_decode_length)
    if check != test_hyps[:2]:
        print(f"warning: translate() of the exported model differs: {check} vs {test_hyps[:2]}", flush=True)
    results = {
        "bleu_test_2016_flickr": round(test_bleu, 2),
        "bleu_test_2016_flickr_greedy": round(greedy_bleu, 2),
        "bleu_val_beam": round(val_bleu, 2),
        "best_val_bleu_greedy_during_training": trainer.meta["best_bleu"],
        "val_pairs_during_training": n_val,
        "bleu": "sacreBLEU 13a on lowercased NFKC references" if lower else "sacreBLEU 13a, cased",
        "direction": f"{args.src}->{args.tgt}", "test_beams": args.test_beams, "test_decode_time_s": round(test_time, 1),
        "updates": trainer.meta["step"], "epochs_completed": trainer.meta["epoch"],
        "train_time_min": round(trainer.meta["train_time_s"] / 60, 1),
        "wall_time_this_run_min": round((time.time() - t_start) / 60, 1),
        "model_dir": str(model_dir.relative_to(REPO)) if model_dir.is_relative_to(REPO) else str(model_dir),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "examples": [{"src": s, "ref": r, "hyp": h} for s, r, h in zip(te_s[:5], te_t[:5], test_hyps[:5])],
        "curve": curve,
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=1, ensure_ascii=False))
    print(f"test_2016_flickr BLEU (beam {args.test_beams}) = {test_bleu:.2f}; greedy {greedy_bleu:.2f}; "
          f"wrote {args.results}", flush=True)
    return results


if __name__ == "__main__":
    main()
