"""Fine-tune the embedded MiniLM (all-MiniLM-L6-v2) on SST-2 and CoLA, the classifiers the
Kovaleva (disabling, patterns), Michel (importance, pruning) and Voita (L0 gates) experiments
analyse: the named artefacts ``minilm-sst2`` and ``minilm-cola`` (``jattn.io.artefacts``), made
into jattn's cache as ``jattn models make`` makes them. Protocol as Kovaleva et al. 2019 §3
(BERT's classification head, AdamW, 3 epochs) with a batch of 32, peak learning rate 5e-5, 10%
linear warm-up then linear decay. SST-2 runs 1 epoch instead of 3 (67,349 sentences, 2,105
updates; each epoch costs ~1 h on the 2 shared CPU cores this was run on).

    python experiments/finetune_glue.py [--tasks cola sst2]

Makes <cache>/models/minilm-<task>/ (HF BertForSequenceClassification folders with DONE when
finished; resumable) and writes experiments/results/finetune_glue.json (per task: dev_metric,
metric_name, train_seconds, per-epoch history, the majority-class baseline on dev, and the largest
|logit| difference between jattn and HF PyTorch reading the made folder, over the dev set).
Runtime on 2 shared AMD EPYC cores: see train_seconds in the results.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from jattn.io import glue
from jattn.models.artefacts import make

ROOT = Path(__file__).resolve().parents[1]


def majority_baseline(task: str) -> float:
    """The dev metric of always predicting the training set's majority label."""
    train = np.asarray([y for _, y in glue.read_task(task, "train")])
    gold = np.asarray([y for _, y in glue.read_task(task, "dev")])
    return glue.metric(task)(np.full_like(gold, np.bincount(train).argmax()), gold)


def hf_agreement(folder: Path, texts: list[str]) -> float | None:
    """Largest |logit difference| between jattn and HF PyTorch (the oracle, if torch is installed)
    on ``texts``, reading the exported folder."""
    try:
        import torch
        from transformers import AutoModelForSequenceClassification
    except ImportError:
        return None
    import jattn

    model = jattn.load(folder, use_cache=False)
    oracle = AutoModelForSequenceClassification.from_pretrained(str(folder), attn_implementation="eager").eval()
    worst = 0.0
    for s in range(0, len(texts), 64):
        batch = model.tokenize(texts[s: s + 64])
        with torch.no_grad():
            ref = oracle(input_ids=torch.tensor(batch.input_ids, dtype=torch.long),
                         attention_mask=torch.tensor(batch.attention_mask, dtype=torch.long),
                         token_type_ids=torch.tensor(batch.token_type_ids, dtype=torch.long)).logits.numpy()
        worst = max(worst, float(np.abs(np.asarray(model.forward(batch, internals=None).logits) - ref).max()))
    return worst


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", nargs="+", default=["cola", "sst2"], choices=sorted(glue.FILES))
    ap.add_argument("--results", type=Path, default=ROOT / "experiments" / "results" / "finetune_glue.json")
    args = ap.parse_args(argv)
    results = json.loads(args.results.read_text()) if args.results.is_file() else {}
    for task in args.tasks:
        folder = make(f"minilm-{task}")
        record = {"task": task, "artefact": folder.name, **json.loads((folder / "finetune.json").read_text())}
        record["majority_baseline"] = majority_baseline(task)
        record["hf_logits_max_abs_diff_dev"] = hf_agreement(folder, [t for t, _ in glue.read_task(task, "dev")])
        results[task] = record
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(results, indent=2) + "\n")
        print(f"{task}: dev {record['metric_name']} {record.get('dev_metric')} "
              f"(majority baseline {record['majority_baseline']:.4f}), {record['train_seconds']} s")


if __name__ == "__main__":
    main()
