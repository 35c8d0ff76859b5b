"""Small GPT-2 language models trained from scratch until induction heads appear, exported as
Hugging Face GPT-2 folders: what ``jattn models make`` runs for a recipe of kind
``language_model`` (``make``), and the induction study's recipes (``RECIPES``).

Data (Olsson et al. 2022 train on natural text, where induction heads form because text repeats):
each training sequence is BOS followed by either a window of English text or, with probability
``random_share``, a random segment of T ~ U[4, 32] tokens drawn uniformly from the vocabulary,
repeated to fill the context (``random_share=0``: natural text only, nothing planted). The text
is the documents of the data sets named in ``text`` (``TEXTS``: Multi30k's training captions;
LitBank's 100 novel openings of ~2,000 words; GAP's Wikipedia paragraphs; the UD English Web
Treebank's training documents), each followed by EOS and joined in that order. The vocabulary is
a byte-level BPE (Radford et al. 2019) trained on the same documents. The validation loss is read
on the Multi30k validation captions whatever ``text`` names.

An attention-only model (Elhage et al. 2021) is GPT-2 whose feed-forward blocks are one unit wide
and held at zero (weights and biases never trained): each block adds exactly 0 to the residual
stream, so the folder is a plain GPT-2 checkpoint that HF and ``jattn.load`` read.

The folder gets ``training.json``: settings, the curve (training loss; on 64 held-out repeated
sequences Olsson et al.'s in-context drop, the loss on the first copy minus the loss on the second;
the loss on the validation captions) and ``DONE``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import time
from pathlib import Path

import numpy as np

from jattn.artefacts.base import Recipe, seeded
from jattn.io.artefacts import DONE

__all__ = ["InductionLMConfig", "train_lm"]

BOS = "<|endoftext|>"  # GPT-2's one special token: BOS, EOS and the caption separator


@dataclasses.dataclass(frozen=True)
class InductionLMConfig:
    attention_only: bool = False
    layers: int = 2
    heads: int = 8
    d_model: int = 128
    ffn: int = 512  # ignored when attention_only
    context: int = 128  # tokens per training sequence, BOS included
    vocab_size: int = 2048
    random_share: float = 0.5  # the share of sequences that are a repeated random segment
    text: tuple[str, ...] = ("multi30k",)  # the data sets whose English documents are trained on (TEXTS)
    distinct: bool = False  # drop a document that repeats a run of SPAN words of an earlier one
    min_segment: int = 4
    max_segment: int = 32
    batch_size: int = 32
    steps: int = 2500
    warmup: int = 200
    peak_lr: float = 1e-3
    eval_every: int = 250  # steps between the curve's points
    seed: int = 0
    limit_text: int = 0  # only the first N documents of each data set (tests); 0 = all

    def __post_init__(self):
        unknown = [t for t in self.text if t not in TEXTS]
        if not self.text or unknown:
            problem = f"unknown data set(s) {', '.join(map(repr, unknown))}" if unknown else "no data set"
            raise ValueError(f"text={self.text!r}: {problem}. Fix: name one or more of {', '.join(TEXTS)}")


_DETOKENIZE = ((re.compile(r" ([,.;:!?”’)\]])"), r"\1"), (re.compile(r"([“(\[]) "), r"\1"))


def _words_to_text(words: list[str]) -> str:
    """LitBank's tokens joined as running text: no space before closing punctuation or after an opening one."""
    text = " ".join(words)
    for pattern, repl in _DETOKENIZE:
        text = pattern.sub(repl, text)
    return text


def _multi30k(root: Path) -> list[str]:
    return (root / "train.en").read_text(encoding="utf-8").splitlines()  # one caption a document


def _litbank(root: Path) -> list[str]:
    from jattn.io.labels import read_litbank

    return [_words_to_text([w for s in doc.sentences for w in s])
            for path in sorted((root / "coref").glob("*.conll")) for doc in read_litbank(path)]


def _gap(root: Path) -> list[str]:
    out = []
    for split in ("development", "validation", "test"):
        with open(root / f"gap-{split}.tsv", encoding="utf-8", newline="") as f:
            out += [row["Text"] for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]
    return out


def _ewt(root: Path) -> list[str]:
    """The training treebank's documents (``# newdoc``), each its sentences' ``# text`` lines joined."""
    docs: list[list[str]] = []
    for line in (root / "en_ewt-ud-train.conllu").read_text(encoding="utf-8").splitlines():
        if line.startswith("# newdoc") or not docs:
            docs.append([])
        if line.startswith("# text = "):
            docs[-1].append(line[len("# text = "):])
    return [" ".join(d) for d in docs if d]


TEXTS = {"multi30k": _multi30k, "litbank": _litbank, "gap": _gap, "ud-english-ewt": _ewt}  # data set -> its documents
SPAN = 12  # words: a longer run shared by two documents is a copy, not language (GAP quotes a page in several rows)


def _runs(words: list[str]) -> set[tuple[str, ...]]:
    """The document's runs of SPAN words (the whole document when it is shorter)."""
    return {tuple(words[i: i + SPAN]) for i in range(max(1, len(words) - SPAN + 1))}


def distinct_documents(docs: list[str]) -> list[str]:
    """``docs`` without each document that shares a run of SPAN words with an earlier kept one (on
    all four data sets: 9 Multi30k captions, 54 GAP paragraphs and 3 EWT documents of 34,094), so no
    training window holds a copy that the data's own duplication planted; repeats inside a document
    (a name, a phrase) stay: they are the natural text's."""
    seen: set[tuple[str, ...]] = set()
    out = []
    for d in docs:
        runs = _runs(d.split())
        if not runs & seen:
            seen |= runs
            out.append(d)
    return out


def documents(c: InductionLMConfig, data_dir=None) -> list[str]:
    """The training documents of ``c.text`` in that order, each normalised (NFKC, whitespace); with
    ``c.distinct`` only the first of documents that share a run of SPAN words."""
    from jattn.io.manifest import data_path
    from jattn.io.parallel import normalize

    out = []
    for name in c.text:
        docs = TEXTS[name](data_path(name, data_dir))
        out += [normalize(d, lowercase=False) for d in (docs[: c.limit_text] if c.limit_text else docs)]
    return distinct_documents(out) if c.distinct else out


def train_tokenizer(texts: list[str], folder: Path, vocab_size: int):
    """A byte-level BPE of ``vocab_size`` entries (``BOS`` included) saved as a GPT-2 tokenizer folder."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2TokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=vocab_size, special_tokens=[BOS], show_progress=False)
    tokenizer = GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, bos_token=BOS, eos_token=BOS, unk_token=BOS)
    tokenizer.save_pretrained(str(folder))
    return tokenizer


def model_config(c: InductionLMConfig, tokenizer):
    from jattn.families.gpt2.spec import config_from_hf

    return config_from_hf(hf_config(c, tokenizer))


def hf_config(c: InductionLMConfig, tokenizer) -> dict:
    bos = tokenizer.convert_tokens_to_ids(BOS)
    return {"model_type": "gpt2", "vocab_size": len(tokenizer), "n_embd": c.d_model, "n_layer": c.layers,
            "n_head": c.heads, "n_inner": 1 if c.attention_only else c.ffn, "n_positions": c.context,
            "activation_function": "gelu_new", "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
            "bos_token_id": bos, "eos_token_id": bos, "tie_word_embeddings": True}


class Sampler:
    """Batch ``step`` of the training mixture, a function of (seed, step) only. -> (b, context) int32."""

    def __init__(self, stream: np.ndarray, c: InductionLMConfig, bos: int, vocab: int):
        self.stream, self.c, self.bos, self.vocab = stream, c, bos, vocab

    def __call__(self, step: int) -> np.ndarray:
        c = self.c
        rng = np.random.default_rng([c.seed, step])
        n = c.context - 1
        rows = np.empty((c.batch_size, n), np.int64)
        for r in range(c.batch_size):
            if rng.random() < c.random_share:
                segment = rng.integers(0, self.vocab, int(rng.integers(c.min_segment, c.max_segment + 1)))  # (T,)
                rows[r] = np.resize(segment, n)  # the segment repeated to fill the row
            else:
                start = int(rng.integers(0, len(self.stream) - n))
                rows[r] = self.stream[start: start + n]
        return np.concatenate([np.full((c.batch_size, 1), self.bos), rows], 1).astype(np.int32)  # (b, context)


def _stream(tokenizer, texts: list[str], bos: int) -> np.ndarray:
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return np.concatenate([np.asarray(t + [bos], np.int64) for t in ids])  # documents joined by EOS


def train_lm(out, work, c: InductionLMConfig, data_dir=None, progress: bool = True) -> dict:
    """Train (or resume from ``work``) a ``c`` model, export it to ``out`` with ``training.json``
    and ``DONE``; return what ``training.json`` holds."""
    from safetensors.numpy import save_file
    from transformers import GPT2TokenizerFast

    from jattn.analyses.lm_heads import repeated_tokens
    from jattn.families.gpt2.convert import to_hf_state_dict
    from jattn.io.manifest import data_path
    from jattn.io.parallel import normalize
    from jattn.training.lm import LMTrainConfig, Trainer, repeat_losses, token_losses

    out, work = Path(out), Path(work)
    t_start = time.time()
    train_text = documents(c, data_dir)
    val_text = [normalize(line, lowercase=False) for line in (data_path("multi30k", data_dir) / "val.en").read_text(
        encoding="utf-8").splitlines()][: c.limit_text or None]
    tok_dir = work / "tokenizer"
    tokenizer = (GPT2TokenizerFast.from_pretrained(str(tok_dir)) if (tok_dir / "tokenizer.json").is_file()
                 else train_tokenizer(train_text, tok_dir, c.vocab_size))
    config = model_config(c, tokenizer)
    bos = config.bos_token_id
    stream, val_stream = _stream(tokenizer, train_text, bos), _stream(tokenizer, val_text, bos)
    val_ids = np.stack([np.concatenate([[bos], val_stream[i: i + c.context - 1]])
                        # (≤64, context)
                        for i in range(0, len(val_stream) - c.context, c.context)][:64]).astype(np.int32)
    length = (c.context - 1) // 2
    held_out = repeated_tokens(config.vocab_size, length, 64, seed=10_000 + c.seed, first=bos)  # (64, 1 + 2T)

    def evaluate(params) -> dict:
        drop = repeat_losses(params, config, held_out, length, offset=1)
        return {"repeat_first_loss": float(drop["first"].mean()), "repeat_second_loss": float(drop["second"].mean()),
                "in_context_drop": float(drop["drop"].mean()),
                "val_text_loss": float(np.asarray(token_losses(params, config, val_ids)).mean())}

    zeroed = ("ffn_in", "ffn_out") if c.attention_only else ()
    tc = LMTrainConfig(steps=c.steps, warmup_steps=c.warmup, peak_lr=c.peak_lr, seed=c.seed, frozen=zeroed,
                       eval_every=c.eval_every)
    trainer = Trainer(config, tc, work / "train", zeroed=zeroed)
    curve = trainer.fit(Sampler(stream, c, bos, config.vocab_size), evaluate, progress=progress)

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], **hf_config(c, tokenizer)},
                                                indent=2) + "\n")
    save_file(
        to_hf_state_dict(trainer.state["params"], config), str(out / "model.safetensors"), metadata={"format": "pt"}
    )
    tokenizer.save_pretrained(str(out))
    result = {
        "final": curve[-1],
        "steps": trainer.meta["step"],
        "train_time_min": round(trainer.meta["train_time_s"] / 60, 2),
        "wall_time_this_run_min": round((time.time() - t_start) / 60, 1),
        "train_tokens": int(len(stream)),
        "settings": dataclasses.asdict(c),
        "curve": curve,
    }
    (out / "training.json").write_text(json.dumps(result, indent=1))
    (out / DONE).write_text(
        f"in-context drop {curve[-1]['in_context_drop']:.3f} nats after {trainer.meta['step']} steps\n"
    )
    return result


def make(recipe: Recipe, out: Path, work: Path, progress: bool) -> dict:
    """The maker of ``kind="language_model"`` recipes: ``options`` are ``InductionLMConfig`` fields."""
    return train_lm(out, work, InductionLMConfig(**dict(recipe.options)), progress=progress)


# The induction study's models (Olsson et al. 2022 find induction heads in 2-layer attention-only models
# and in small models with MLPs alike): 2 layers x 8 heads, d 128, context 128, each with seeds 0-4
# (STATISTICS.md: >= 5 seeds where a seed costs minutes).
RECIPES = [
    *seeded("induction-attn-only", "a 2-layer attention-only GPT-2 (8 heads, d 128) trained on English captions and "
            "repeated random tokens", "about 5 min on 2 CPU cores (4.7 min of training measured; 5.2-9.0 min "
            "shared with other jobs)", kind="language_model", maker=make,
            options=(("attention_only", True),), needs=("multi30k",), seeds=5),
    *seeded("induction-gpt2", "a 2-layer GPT-2 with MLPs (8 heads, d 128, FFN 512) trained on English captions and "
            "repeated random tokens", "about 6 min on 2 CPU cores (5.6-6.0 min of training measured; 7.3 min "
            "shared with other jobs)", kind="language_model", maker=make,
            needs=("multi30k",), seeds=5),
]

# The same two shapes trained on natural text only, where the finding can fail (Olsson et al. 2022 see
# induction heads emerge on natural text; nothing here plants a repeat): random_share 0, every English
# running text the data manifest offers (Multi30k captions, LitBank's novels, GAP's Wikipedia paragraphs,
# the EWT web documents; 34,028 documents without copies, 1.88 M tokens), context 256, 3,000 steps of 32
# sequences (24 M tokens, about 13 passes over the text), the curve every 100 steps; seeds 0-4.
TEXT = ("multi30k", "litbank", "gap", "ud-english-ewt")
NATURAL = (("context", 256), ("distinct", True), ("eval_every", 100), ("random_share", 0.0), ("steps", 3000),
           ("text", TEXT))
RECIPES += [
    *seeded("induction-natural-attn-only", "a 2-layer attention-only GPT-2 (8 heads, d 128, context 256) trained on "
            "English natural text only (no repeated segments)", "about 45-75 min on 2 Intel Xeon cores shared with one "
            "other training (seeds 1-4: 44-74 min for 3,000 steps, 0.9-1.5 s a step; seed 0, run behind more jobs, "
            "180 min)", kind="language_model", maker=make,
            options=(("attention_only", True), *NATURAL), needs=TEXT, seeds=5),
    *seeded("induction-natural-gpt2", "a 2-layer GPT-2 with MLPs (8 heads, d 128, FFN 512, context 256) trained on "
            "English natural text only (no repeated segments)", "about 35-45 min on 2 AMD EPYC cores shared with one "
            "other training (seeds 1-4: 35, 36, 45 and 39 min for 3,000 steps, 0.7-0.9 s a step; seed 0, throttled "
            "behind other jobs, 147 min)", kind="language_model", maker=make,
            options=NATURAL, needs=TEXT, seeds=5),
]
