"""Fine-tune an encoder as a sequence classifier and export it as a Hugging Face folder."""

from __future__ import annotations

from pathlib import Path

from jattn.io.readers import read_labelled
from jattn.training.finetune import FinetuneConfig, finetune, finetune_task


def add_arguments(parser) -> None:
    from jattn.cli.common import finite, positive_int

    parser.description = ("Fine-tune an encoder as a sequence classifier (the family's head, AdamW, linear warm-up "
                          "and decay) and export it as a Hugging Face folder. Stop with Ctrl-C and run the same "
                          "command again to resume.")
    parser.add_argument("--model", default=None, help="HF folder or hub id (default: embedded all-MiniLM-L6-v2)")
    parser.add_argument("--task", choices=("sst2", "cola"), help="a GLUE task from the data folder (jattn data fetch; $JATTN_DATA); this or --train is required")
    parser.add_argument("--train", type=Path, help="instead of --task: 'text<TAB>label' training file (default: none, --task)")
    parser.add_argument("--dev", type=Path, help="with --train: 'text<TAB>label' dev file (default: none; required with --train)")
    parser.add_argument("--metric", choices=("accuracy", "matthews_corr"), default="accuracy",
                        help="dev metric with --train (--task picks its own)")
    parser.add_argument("--out", required=True, type=Path, help="output HF folder (resume state in OUT-work)")
    parser.add_argument("--epochs", type=positive_int, default=3, help="passes over the training data")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="examples per micro-batch")
    parser.add_argument("--accumulation", type=positive_int, default=1, help="micro-batches per optimizer update")
    parser.add_argument("--lr", type=finite(low=0, low_open=True), default=5e-5, help="peak learning rate")
    parser.add_argument("--max-length", type=positive_int, default=128, help="longest text, in tokens")
    parser.add_argument("--seed", type=int, default=0, help="random seed (classifier head, data order, dropout)")


def run(args) -> None:
    if (args.task is None) == (args.train is None):
        raise ValueError("give either --task or --train (with --dev). Fix: e.g. --task sst2, or --train FILE --dev FILE")
    if args.train is not None and args.dev is None:
        raise ValueError("--train needs --dev (the dev metric is reported per epoch). Fix: add --dev FILE "
                         "('text<TAB>label' lines)")
    fc = FinetuneConfig(epochs=args.epochs, batch_size=args.batch_size, accumulation=args.accumulation,
                        learning_rate=args.lr, max_length=args.max_length, seed=args.seed)
    if args.task:
        record = finetune_task(args.task, args.out, base=args.model, fc=fc)
    else:
        record = finetune(args.model, read_labelled(args.train), read_labelled(args.dev), args.out,
                          metric_name=args.metric, fc=fc)
    print(f"dev {record['metric_name']}: {record['dev_metric']:.4f} after {len(record['history'])} epoch(s), "
          f"{record['train_seconds']} s of training; model in {args.out}")
