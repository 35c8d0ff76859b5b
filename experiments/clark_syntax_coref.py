"""Clark et al. 2019 §4-5 on all-MiniLM-L6-v2: syntax heads, coreference heads, attention probe.

Command (from the repo root):

    nice .venv/bin/python experiments/clark_syntax_coref.py    # data: `jattn data fetch ud-english-ewt gap litbank`

Runtime on this shared 2-core CPU: ~12 min writing the EWT feature shards (pretrained and
random-init MiniLM, 2.4 GB in ``--work``), ~4 min GAP + LitBank, ~4 min for the four probes
(3 epochs each). The committed results came from a second run with ``--reuse-shards`` (9 min)
after the first was killed by a loader bug at the probe stage (fixed; shards unchanged).

Numbers (EWT test, heads chosen on dev; percent): det 78.7 (head 2-8) vs offset 57.6; obj 74.0
(2-0) vs 35.0; case 68.6 (2-8) vs 38.6; nsubj 59.0 vs 34.5; all 43.2 vs 31.5. GAP best head
73.3 (3-1) vs nearest 51.3 / first 48.6; LitBank 71.2 (1-1) vs nearest 45.7 / same head word
71.8. Probe UAS: right-branching 31.8, Attn 53.2, Attn + emb 73.5, dist + emb 64.3,
random-init Attn + emb 25.8. ``summary.md`` beside the results has the tables.

1. Dependency heads (Table 1): word-level maps of UD English EWT; best head and best fixed
   offset chosen on dev, accuracies on test (Clark chose and reported on one set).
2. Coreference heads: GAP development (pronoun -> the right name, rows with one coreferent
   name) and LitBank (antecedent selection, mentions' last word as head, documents cut into
   segments of whole sentences ≤ ``--litbank-budget`` tokens); best head chosen in-sample, as
   Clark did.
3. Attention probe (Table 3): trained on EWT train (``--train-sentences`` to subsample),
   selected on dev, UAS on test (punctuation excluded); "Attn + emb" uses MiniLM's own input
   embeddings (Clark used GloVe); the random-init model is MiniLM's architecture with random
   parameters (``jattn.nn.state.init``, seed 0) and MiniLM's real input embeddings for the
   probe's weights (as Clark kept GloVe for his random-init row).

Writes ``experiments/results/clark_syntax_coref/`` (results.json, summary.md, dependency.md/json,
figures/); feature shards and probe checkpoints go to ``--work`` (not committed).

The command line computes parts 1 and 2 through the streaming runner (labels carried in the
examples; ``jattn.analyses.syntax.DependencyHeads``, ``jattn.analyses.coref.GapCoreference``) and
gives the same numbers: ``jattn analyze --format conllu --input .../en_ewt-ud-test.conllu
--methods syntax --skip-too-long --out OUT`` has this run's counts for all 31 relations and,
at the heads chosen here on dev, the same test accuracies (its own Table 1 picks the best head
in-sample, as Clark did); ``jattn analyze --format gap --input .../gap-development.tsv --methods
coref --max-length 256 --skip-too-long --out OUT`` gives 1,797 examples, head 3-1 73.3, nearest
51.3, first 48.6. The dependency counts and probe features come from one runner pass per split
(``ProbeFeatures`` records -> probe shards); the committed numbers were produced by the earlier
per-sentence path (``word_attention``), which gives the same counts (shown above) and the same
shards up to float16 rounding (``tests/test_probe.py``).
"""

from __future__ import annotations

import argparse
import glob
import json
import shutil
import time
from pathlib import Path

import numpy as np

import jattn
from jattn.io import labels
from jattn.io.readers import Example
from jattn.analyses import coref, probe, syntax
from jattn.analyses.word_attention import word_attention
from jattn.io.records import read_records
from jattn.runner import run_corpus

from experiment_data import add_data_dir, data_file

OUT = Path(__file__).parent / "results" / "clark_syntax_coref"
WORK = Path(__file__).resolve().parents[1] / "checkpoints" / "clark_syntax_coref"
MAX_LENGTH = 128  # EWT sentences, as Clark's ≤ 128-token segments
CLARK_TABLE1 = {  # bert-base, PTB / Stanford Dependencies (METHODS.md §1): (UD name, Clark's name, head, offset)
    "det": ("det", 94.3, 51.7), "obj": ("dobj", 86.8, 40.0), "case": ("pobj (the same arc reversed)", 76.3, 34.6),
    "nmod:poss": ("poss", 80.5, 47.7), "nsubj": ("nsubj", 58.5, 45.5), "aux": ("aux", 81.1, 71.5),
    "all": ("all", 34.7, 26.7)}
CLARK_UAS = {"right-branching": 26, "dist+emb": 58, "attn": 61, "attn+emb": 77, "random-init attn+emb": 30}


def random_model(model):
    """MiniLM's architecture and tokenizer with random parameters (seed 0)."""
    from jattn.models.encoder import EncoderModel
    from jattn.nn import state

    return EncoderModel(model.config, state.init(model.config, seed=0), model.tokenizer, "random init")


def ewt(args, split: str, tokenizer):
    trees = list(labels.read_conllu_trees(data_file(args.data_dir, f"ud-english-ewt/en_ewt-ud-{split}.conllu")))
    if split == "train" and args.train_sentences:
        rng = np.random.default_rng(0)
        trees = [trees[i] for i in sorted(rng.choice(len(trees), min(args.train_sentences, len(trees)), replace=False))]
    if split != "train" and args.eval_sentences:
        trees = trees[:args.eval_sentences]
    kept, skipped = labels.fit_words(tokenizer, [t.words for t in trees], MAX_LENGTH)
    return [trees[i] for i in kept], skipped


def features(model, trees, folder: Path, table: np.ndarray, relations, count: bool):
    """Probe shards of the trees through the runner (records -> shards); their dependency
    counts (Table 1) from the same pass when ``count``."""
    examples = [Example(t.words, None, t.source, {"heads": t.heads, "relations": t.relations, "upos": t.upos})
                for t in trees]
    methods = [probe.ProbeFeatures(table)] + ([syntax.DependencyHeads(relations)] if count else [])
    records = folder.parent / f".{folder.name}_records"
    shutil.rmtree(records, ignore_errors=True)
    result = run_corpus(model, examples, methods, batch_size=32, max_length=MAX_LENGTH, records=records)
    probe.shards_from_records(read_records(records / methods[0].name), folder, shard_size=500)
    shutil.rmtree(records)
    return methods[1].counts(result.totals["syntax"]) if count else None


def run_gap(model, args) -> dict:
    exs = [x for x in labels.read_gap(data_file(args.data_dir, "gap/gap-development.tsv")) if x.gold]
    if args.gap_rows:
        exs = exs[:args.gap_rows]
    kept, skipped = labels.fit_words(model.tokenizer, [x.words for x in exs], args.gap_max_length)
    total = None
    for r in word_attention(model, [exs[i].words for i in kept], max_length=args.gap_max_length, batch_size=8,
                            progress="GAP"):
        c = coref.gap_counts(r.maps, exs[kept[r.index]])
        total = c if total is None else total + c
    return {**total.summary(), "skipped": skipped, "rows": "gap-development, exactly one coreferent name"}


def run_litbank(model, args) -> dict:
    files = sorted(glob.glob(str(args.data_dir / "litbank" / "coref" / "*.conll")))
    if not files:
        data_file(args.data_dir, "litbank/coref/1023_bleak_house_brat.conll")  # exits naming the source
    docs = [d for f in files[:args.litbank_docs or None] for d in labels.read_litbank(f)]
    segs, dropped = [], {}
    for d in docs:
        s, drop = labels.segments(d, model.tokenizer, args.litbank_budget)
        segs += s
        dropped = {k: dropped.get(k, 0) + v for k, v in drop.items()}
    kept, skipped = labels.fit_words(model.tokenizer, [s.words for s in segs], args.litbank_budget)
    total = None
    for r in word_attention(model, [segs[i].words for i in kept], max_length=args.litbank_budget, batch_size=8,
                            progress="LitBank"):
        s = segs[kept[r.index]]
        c = coref.litbank_counts(r.maps, s.mentions, s.words)
        total = c if total is None else total + c
    return {**total.summary(), "documents": len(docs), "segments": len(kept), "dropped": dropped,
            "skipped": skipped, "head_rule": "last word of the mention", "queries": litbank_profile(segs, kept)}


def litbank_profile(segs, kept) -> dict:
    """``coref.litbank_query_profile`` summed over the scored segments."""
    out: dict = {}
    for i in kept:
        for k, v in coref.litbank_query_profile(segs[i].mentions, segs[i].words).items():
            out[k] = out.get(k, 0) + v
    return out


def run_probes(args, work: Path) -> tuple[dict, dict]:
    uas, history = {"right-branching": probe.right_branching_uas(work / "pretrained" / "test")}, {}
    for name, kind, which in (("attn", "attn", "pretrained"), ("attn+emb", "attn+emb", "pretrained"),
                              ("dist+emb", "dist+emb", "pretrained"), ("random-init attn+emb", "attn+emb", "random")):
        t0 = time.time()
        params, hist = probe.train(kind, work / which / "train", work / which / "dev", epochs=args.epochs,
                                   checkpoint=work / "probes" / name.replace(" ", "_").replace("+", "_"))
        uas[name] = probe.uas(params, kind, work / which / "test")
        history[name] = {"epochs": hist, "seconds": round(time.time() - t0, 1)}
        print(f"probe {name}: test UAS {uas[name]:.1f} ({history[name]['seconds']} s)", flush=True)
    return uas, history


def summary(res: dict, args, seconds: float) -> str:
    dep = res["dependency"]
    lines = ["# Clark et al. 2019 §4-5 on all-MiniLM-L6-v2 (6 layers × 12 heads)", "",
             f"Run: `{res['command']}`, {seconds / 60:.0f} min on this 2-core CPU (shared). "
             f"EWT sentences: {res['data']['ewt']}.", "",
             "## Dependency heads (Clark Table 1), EWT test; best head and offset chosen on EWT dev", "",
             "Heads are (layer-head, 0-based); the full table of every relation with ≥ 100 test words is "
             "`dependency.md`. Clark: bert-base on PTB (Stanford Dependencies).", "",
             "| UD relation | count | MiniLM best head | acc | best offset | acc | gain "
             "| Clark (bert-base) head / offset |",
             "|---|---:|---|---:|---:|---:|---:|---|"]
    for rel, (clark_name, ch, co) in CLARK_TABLE1.items():
        if rel not in dep:
            continue
        r = dep[rel]
        l, h, d = r["best_head"]
        lines.append(f"| {rel} | {r['count']} | {l}-{h} {d} | {r['head_accuracy']:.1f} | {r['best_offset']:+d} | "
                     f"{r['offset_accuracy']:.1f} | {r['head_accuracy'] - r['offset_accuracy']:+.1f} | "
                     f"{clark_name}: {ch} / {co} |")
    big = [k for k, r in dep.items() if k != "all" and r["head_accuracy"] - r["offset_accuracy"] >= 20]
    lines += ["", f"Relations where the best head beats the best offset by ≥ 20 points: {len(big)} "
              f"({', '.join(big)}).", "",
              f"Head roles (Voita et al. 2019, on EWT test): {res['head_roles']['counts']}; "
              "map in `figures/head_roles.png`.", "",
              "## Coreference heads", "", "| data | count | best head | accuracy | baselines |",
              "|---|---:|---|---:|---|"]
    for key, base in (("coref_gap", ("nearest", "first")), ("coref_litbank", ("nearest", "same_head_word"))):
        c = res[key]
        lines.append(f"| {key} | {c['count']} | {c['best_head'][0]}-{c['best_head'][1]} | {c['accuracy']:.1f} | "
                     + ", ".join(f"{b} {c[b]:.1f}" for b in base) + " |")
    lit = res["coref_litbank"]
    if lit["accuracy"] < lit["same_head_word"] and "queries" in lit:
        q = lit["queries"]
        lines += ["", f"On LitBank the best head ({lit['accuracy']:.1f}) stays below the same-head-word baseline "
                  f"({lit['same_head_word']:.1f}): of the {q['queries']} scored mentions {100 * q['pronoun'] / q['queries']:.0f} % "
                  f"are pronouns and {100 * q['same_word_candidate'] / q['queries']:.0f} % have an earlier candidate "
                  "with the same head word, which is a right antecedent in "
                  f"{100 * q['same_word_right'] / max(q['same_word_candidate'], 1):.0f} % of those cases — fiction "
                  "repeats its pronouns and names (he … he), so string matching is a much stronger baseline than on "
                  "Clark's CoNLL-2012 (≈ 52). The head still beats the nearest mention by "
                  f"{lit['accuracy'] - lit['nearest']:.1f} points without seeing the strings."]
    lines += ["", "Clark (bert-base, CoNLL-2012): best head ≈ 65, nearest ≈ 27, same head word ≈ 52, "
              "rule-based ≈ 69. "
              "LitBank's head word is the mention's last word; GAP counts a head right when the coreferent name "
              "gets strictly more attention from the pronoun than the other name.", "",
              "## Attention probe (Clark Table 3), UAS on EWT test, punctuation excluded", "",
              f"Trained on {res['data']['probe_train']} EWT train sentences, {args.epochs} epochs, Adam 0.002, "
              "batch 32, the epoch with the best dev UAS kept. Embeddings: MiniLM's input word embeddings "
              "(mean over subwords); Clark used GloVe.", "",
              "| probe | MiniLM | Clark (bert-base) |", "|---|---:|---:|"]
    for k, v in res["probe_uas"].items():
        lines.append(f"| {k} | {v:.1f} | {CLARK_UAS.get(k, '')} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_data_dir(p)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--work", type=Path, default=WORK, help="feature shards and probe checkpoints")
    p.add_argument("--train-sentences", type=int, default=0, help="random EWT train subsample (0: all)")
    p.add_argument("--eval-sentences", type=int, default=0, help="first N of EWT dev/test (0: all; smoke runs)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--gap-rows", type=int, default=0, help="first N usable GAP rows (0: all)")
    p.add_argument("--gap-max-length", type=int, default=256)
    p.add_argument("--litbank-docs", type=int, default=0, help="first N LitBank files (0: all 100)")
    p.add_argument("--litbank-budget", type=int, default=256, help="subword tokens per LitBank segment")
    p.add_argument("--min-count", type=int, default=syntax.MIN_COUNT)
    p.add_argument("--reuse-shards", action="store_true",
                   help="keep the train/random feature shards already in --work (same arguments only)")
    args = p.parse_args(argv)
    start = time.time()
    model = jattn.load()
    model.source = "MiniLM"
    rand = random_model(model)
    table = probe.word_embedding_table(model)
    data = {s: ewt(args, s, model.tokenizer) for s in ("train", "dev", "test")}
    relations = tuple(sorted({r for trees, _ in data.values() for t in trees for r in t.relations}))
    counts = {}
    for which, m in (("pretrained", model), ("random", rand)):  # real embeddings for both, as Clark's GloVe
        for split, (trees, _) in data.items():
            folder = args.work / which / split
            if args.reuse_shards and any(folder.glob("shard_*.npz")) and (which, split) not in (
                    ("pretrained", "dev"), ("pretrained", "test")):  # those two also give the dependency counts
                continue
            c = features(m, trees, args.work / which / split, table, relations, count=which == "pretrained")
            if which == "pretrained":
                counts[split] = c
    dep = syntax.table(counts["test"], args.min_count, select=counts["dev"])
    args.out.mkdir(parents=True, exist_ok=True)
    syntax.write_table(dep, args.out)
    syntax.figures(counts["test"], args.out / "figures", args.min_count)
    roles = syntax.head_roles(counts["test"], args.min_count)
    res = {"command": "python experiments/clark_syntax_coref.py " + " ".join(argv if argv is not None else
                                                                             __import__("sys").argv[1:]),
           "data": {"ewt": {s: {"sentences": len(t), "skipped": sk} for s, (t, sk) in data.items()},
                    "probe_train": len(data["train"][0])},
           "dependency": dep,
           "head_roles": {"counts": {k: int((roles["role"] == k).sum()) for k in
                                     ("positional", "syntactic", "positional+syntactic", "other")},
                          "role": roles["role"].tolist(), "relation": roles["relation"].tolist()},
           }
    for key, fn in (("coref_gap", run_gap), ("coref_litbank", run_litbank)):
        res[key] = fn(model, args)
        (args.out / "results.json").write_text(json.dumps(res, indent=1))  # partial results as they come
    res["probe_uas"], res["probe_history"] = run_probes(args, args.work)
    seconds = time.time() - start
    res["seconds"] = round(seconds)
    (args.out / "results.json").write_text(json.dumps(res, indent=1))
    (args.out / "summary.md").write_text(summary(res, args, seconds))
    print((args.out / "summary.md").read_text())


if __name__ == "__main__":
    main()
