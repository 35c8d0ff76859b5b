"""Fine-tune an encoder as a sequence classifier and export it as a Hugging Face folder.

Besides the model files, --out holds report.md (the dev metric after each epoch, on one scale:
accuracy in %, MCC ×100), results.json (the same numbers and the run's settings) and
figures/training.png. --task reads the GLUE split from the data folder ($JATTN_DATA, else the user
cache; jattn data fetch sst2 cola puts it there) and prints the files it read. A stop (Ctrl-C or
SIGTERM) saves a checkpoint in OUT-work after the current batch; the same command run again
resumes there.
"""

from __future__ import annotations

from pathlib import Path

from jattn.io.readers import read_labelled
from jattn.training.finetune import FinetuneConfig, finetune, finetune_task


def add_arguments(parser) -> None:
    from jattn.cli.common import finite, positive_int

    parser.add_argument("--model", default=None, help="HF folder or hub id (default: embedded all-MiniLM-L6-v2)")
    parser.add_argument(
        "--task",
        choices=("sst2", "cola"),
        help="a GLUE task from the data folder (jattn data fetch; $JATTN_DATA); this or --train is required",
    )
    parser.add_argument(
        "--train", type=Path, help="instead of --task: 'text<TAB>label' training file (default: none, --task)"
    )
    parser.add_argument(
        "--dev", type=Path, help="with --train: 'text<TAB>label' dev file (default: none; required with --train)"
    )
    parser.add_argument("--metric", choices=("accuracy", "matthews_corr"), default="accuracy",
                        help="dev metric with --train (--task picks its own)")
    parser.add_argument("--out", required=True, type=Path, help="output HF folder (resume state in OUT-work)")
    parser.add_argument("--epochs", type=positive_int, default=3, help="passes over the training data")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="examples per micro-batch")
    parser.add_argument("--accumulation", type=positive_int, default=1, help="micro-batches per optimizer update")
    parser.add_argument("--lr", type=finite(low=0, low_open=True), default=5e-5, help="peak learning rate")
    parser.add_argument("--max-length", type=positive_int, default=128, help="longest text, in tokens")
    parser.add_argument("--seed", type=int, default=0, help="random seed (classifier head, data order, dropout)")


RESUME = "; run the same command again to resume from OUT-work"


def report(folder: Path, record: dict) -> None:
    """report.md, results.json (dev metric per epoch ×100, named) and figures/training.png."""
    import json

    from jattn.cli.reporting import SCALE, metric_name, table, write_report
    from jattn.viz.plots import plt, save

    name = metric_name(record["metric_name"])
    history = [{**h, "dev_metric": SCALE * h["dev_metric"]} for h in record["history"]]
    (folder / "results.json").write_text(json.dumps({"metric": name, "dev_metric": SCALE * record["dev_metric"],
                                                     "history": history, "meta": record["meta"]}, indent=1))
    (folder / "figures").mkdir(exist_ok=True)
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    epochs = [h["epoch"] for h in history]
    ax.plot(epochs, [h["dev_metric"] for h in history], "-o", label=f"dev {name}")
    ax.set(xlabel="epoch", ylabel=f"dev {name}", xticks=epochs, title="Fine-tuning")
    loss = ax.twinx()
    loss.plot(epochs, [h["train_loss"] for h in history], "--s", color="C1", label="training loss (smoothed)")
    loss.set_ylabel("training loss (cross-entropy, nats)")
    fig.legend(fontsize=8, loc="upper center")
    path = save(fig, folder / "figures" / "training.png")
    meta = record["meta"]
    rows = [[h["epoch"], h["micro_step"], float(h["train_loss"]), float(h["dev_metric"]), h["train_seconds"]]
            for h in history]
    write_report(folder, "Fine-tuning", [
        f"Base model: {meta['base']}. {meta['train_examples']} training and {meta['dev_examples']} dev examples; "
        f"settings {meta['arguments']}. Dev metric: {name}.", "",
        *table(["epoch", "micro-batches", "training loss", f"dev {name}", "training seconds"], rows)], [path])


def run(args) -> None:
    if (args.task is None) == (args.train is None):
        raise ValueError(
            "give either --task or --train (with --dev). Fix: e.g. --task sst2, or --train FILE --dev FILE"
        )
    if args.train is not None and args.dev is None:
        raise ValueError("--train needs --dev (the dev metric is reported per epoch). Fix: add --dev FILE "
                         "('text<TAB>label' lines)")
    fc = FinetuneConfig(epochs=args.epochs, batch_size=args.batch_size, accumulation=args.accumulation,
                        learning_rate=args.lr, max_length=args.max_length, seed=args.seed)
    if args.task:
        from jattn.io.manifest import data_path

        print(f"jattn finetune: reading {args.task} train and dev from {data_path(args.task)}")
        record = finetune_task(args.task, args.out, base=args.model, fc=fc, report=report)
    else:
        record = finetune(args.model, read_labelled(args.train), read_labelled(args.dev), args.out,
                          metric_name=args.metric, fc=fc, report=report)
    from jattn.cli.reporting import SCALE, metric_name

    print(f"jattn finetune: dev {metric_name(record['metric_name'])} {SCALE * record['dev_metric']:.2f} after "
          f"{len(record['history'])} epoch(s), {record['train_seconds']} s of training; model and report.md in "
          f"{args.out}")
