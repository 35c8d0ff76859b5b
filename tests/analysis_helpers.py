"""Shared helpers for the analysis tests: tiny random BERT folders and brute-force references.

The references are deliberately slow and obvious: one example at a time, unpadded, attention
from Hugging Face PyTorch (the oracle), then Python loops over layers, heads, rows and keys.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

SENTENCES = [
    "The cat sat on the mat.",
    ("Alice met Bob in Paris, then left.", "He stayed, of course."),
    "A much longer sentence, with commas, full stops. And a second sentence that goes on for a while.",
    "Short.",
    ("One", "two, three."),
    "Tokenization of unbelievably hyphenated-words and numbers like 3.14, ok?",
    "Padding must never change a statistic, whatever the batch.",
]
WORDS = [
    ["The", "unbelievable", "cat", "sat", "."],
    ["Bob", "'s", "car", ",", "a", "red", "one", ",", "broke", "down", "."],
    ["Hi", "."],
    ["Tokenization", "of", "hyphenated-words", "works", "."],
]
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def tiny_bert(folder, *, mlm: bool = False, seed: int = 0, layers: int = 2, heads: int = 4) -> Path:
    """Save a small random BERT (MiniLM's tokenizer) to ``folder``; peaky attention (init 0.3)."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertModel

    from jattn.models.load import default_model_path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(default_model_path() / name, folder / name)
    config = BertConfig(vocab_size=30522, hidden_size=8 * heads, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=32, max_position_embeddings=128, initializer_range=0.3)
    torch.manual_seed(seed)
    (BertForMaskedLM if mlm else BertModel)(config).eval().save_pretrained(folder)
    return folder


def torch_model(folder, mlm: bool = False):
    from transformers import BertForMaskedLM, BertModel

    cls = BertForMaskedLM if mlm else BertModel
    return cls.from_pretrained(str(folder), attn_implementation="eager").eval()


def reference_maps(model, tmodel, examples) -> list[dict]:
    """Per example, unpadded: ids (n,), maps (L, H, n, n) float64 from HF PyTorch, token classes."""
    import torch

    from jattn.runner import token_classes

    out = []
    for ex in examples:
        batch = model.tokenize([ex])
        ids = batch.input_ids[:, : int(batch.attention_mask.sum())]
        with torch.no_grad():
            res = tmodel(input_ids=torch.tensor(ids, dtype=torch.long),
                         token_type_ids=torch.tensor(batch.token_type_ids[:, : ids.shape[1]], dtype=torch.long),
                         output_attentions=True)
        maps = np.stack([a[0].double().numpy() for a in res.attentions])  # (L, H, n, n)
        word_ids = None if batch.word_ids is None else batch.word_ids[0, : ids.shape[1]]
        out.append({"ids": ids[0], "maps": maps, "classes": token_classes(model.tokenizer, ids, np.ones_like(ids))[0],
                    "word_ids": word_ids})
    return out


def brute_class_attention(refs) -> dict[str, np.ndarray]:
    """Clark's statistics by loops: per sequence the mean over rows, then over sequences."""
    names = ["attn_to_cls", "attn_to_sep", "attn_to_punct", "attn_to_other", "sep_to_sep", "nonsep_to_sep",
             "attn_prev", "attn_self", "attn_next"]
    L, H = refs[0]["maps"].shape[:2]
    per_seq = {k: [] for k in names}
    for r in refs:
        A, c = r["maps"], r["classes"]
        n = len(c)
        vals = {k: np.full((L, H), np.nan) for k in names}
        for l in range(L):
            for h in range(H):
                rows = {k: [] for k in names}
                for i in range(n):
                    to = [sum(A[l, h, i, j] for j in range(n) if c[j] == cl) for cl in range(4)]
                    for cl, k in enumerate(names[:4]):
                        rows[k].append(to[cl])
                    rows["sep_to_sep" if c[i] == 1 else "nonsep_to_sep"].append(to[1])
                    rows["attn_self"].append(A[l, h, i, i])
                    if i >= 1:
                        rows["attn_prev"].append(A[l, h, i, i - 1])
                    if i + 1 < n:
                        rows["attn_next"].append(A[l, h, i, i + 1])
                for k in names:
                    if rows[k]:
                        vals[k][l, h] = np.mean(rows[k])
        for k in names:
            per_seq[k].append(vals[k])
    return {k: np.nanmean(np.stack(v), axis=0) for k, v in per_seq.items()}


def brute_entropy(refs) -> dict[str, np.ndarray]:
    L, H = refs[0]["maps"].shape[:2]
    ent, ent_cls, uni = [], [], []
    for r in refs:
        A = r["maps"]
        n = A.shape[-1]
        e = np.zeros((L, H))
        e_cls = np.zeros((L, H))
        for l in range(L):
            for h in range(H):
                rows = []
                for i in range(n):
                    p = [0.9999 * A[l, h, i, j] + 0.0001 / n for j in range(n)]
                    rows.append(-sum(x * np.log(x) for x in p))
                e[l, h] = np.mean(rows)
                e_cls[l, h] = rows[0]
        ent.append(e)
        ent_cls.append(e_cls)
        uni.append(np.log(n))
    return {"entropy": np.mean(ent, 0), "entropy_cls": np.mean(ent_cls, 0), "entropy_uniform": np.mean(uni)}


def brute_js(refs) -> np.ndarray:
    L, H = refs[0]["maps"].shape[:2]
    K = L * H
    D = np.zeros((K, K))
    for r in refs:
        A = r["maps"].reshape(K, *r["maps"].shape[2:])
        n = A.shape[-1]
        S = 0.999 * A + 0.001 / n
        for a in range(K):
            for g in range(K):
                for i in range(n):
                    p, q = S[a, i], S[g, i]
                    m = (p + q) / 2
                    D[a, g] += 0.5 * (np.sum(p * np.log(p / m)) + np.sum(q * np.log(q / m)))
    return D


def word_maps(ref) -> tuple[np.ndarray, np.ndarray]:
    """Word-level map by loops: units = each special token alone, each word's subwords together.
    -> (maps (L, H, u, u), unit classes (u,))."""
    A, c, w = ref["maps"], ref["classes"], ref["word_ids"]
    units, prev = [], None
    for t in range(len(c)):
        if w[t] < 0 or w[t] != prev:
            units.append([t])
        else:
            units[-1].append(t)
        prev = w[t] if w[t] >= 0 else None
    L, H = A.shape[:2]
    U = len(units)
    W = np.zeros((L, H, U, U))
    for l in range(L):
        for h in range(H):
            for a, ra in enumerate(units):
                for b, cb in enumerate(units):
                    W[l, h, a, b] = np.mean([sum(A[l, h, i, j] for j in cb) for i in ra])
    return W, np.array([c[u[0]] for u in units])
