"""The attention probing classifier (Clark et al. 2019, §5, Table 3), trained with optax.

Score of word i taking head j: s(i, j) = Σ_k w_k(i, j)·F_k[i, j] over feature maps F_k, with a
softmax over the candidates (ROOT and every other word) and cross-entropy to the gold head.

* "attn": F = the 2·L·H word-level maps and their transposes ([CLS]/[SEP] dropped); w_k a
  constant per map. ROOT: s(i, ROOT) = Σ_r c_r·R_r[i] + b with R = attention from word i to
  [CLS] and to [SEP] and, for the transposed maps, from [CLS]/[SEP] to word i (4·L·H features).
* "attn+emb": the same features; w(i, j) = Dense([e_i; e_j]) and c(i) = c + Dense(e_i) from
  frozen word embeddings e (the model's own input embeddings averaged over the word's
  subwords, Clark used GloVe).
* "dist+emb" (baseline): F = one-hot of the signed distance j − i clipped to ±10, the weights
  from embeddings as in "attn+emb", ROOT from a constant feature.
* right-branching (baseline, no training): word i's head is word i+1, the last word's is ROOT.

UAS counts words whose UPOS is not PUNCT. Features are written per sentence into npz shards
(``write_shards``) and streamed back in length-sorted, padded batches, so the training set
never has to fit in memory; maps are stored as L·H float16 maps, transposes made on the fly.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Iterable, Iterator

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from jattn.runner.protocol import HostBatch, Method, StepContext
from jattn.analyses.weights import word_level

__all__ = ["batches", "scores", "sentence_features", "train", "word_embedding_table", "word_embeddings",
           "write_shards"]

KINDS = ("attn", "attn+emb", "dist+emb")
MAX_DISTANCE = 10  # distance features: j - i clipped to [-10, 10]
PAD_MULTIPLE = 8  # padded word counts: one compile per multiple


def word_embedding_table(model) -> np.ndarray:
    """The (V, D) input word-embedding table of an encoder model: the only place that knows
    where it lives in the parameters."""
    table = np.asarray(model.module.embeddings.word[...])
    want = (model.config.vocab_size, model.config.hidden_size)
    if table.shape != want:
        raise ValueError(f"word-embedding table has shape {table.shape}, expected {want}")
    return table


def word_embeddings(table: np.ndarray, input_ids: np.ndarray, word_ids: np.ndarray, num_words: int) -> np.ndarray:
    """Mean of each word's subword input embeddings. input_ids, word_ids (n,) -> (w, D)."""
    out = np.zeros((num_words, table.shape[1]), np.float64)
    count = np.zeros(num_words)
    real = word_ids >= 0
    np.add.at(out, word_ids[real], table[input_ids[real]])
    np.add.at(count, word_ids[real], 1)
    return (out / count[:, None]).astype(np.float32)


def sentence_features(maps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Word-level maps (L, H, u, u) with [CLS] first and [SEP] last -> (pair (L·H, w, w), root
    (4·L·H, w)): words' attention to [CLS], to [SEP], from [CLS], from [SEP]."""
    L, H, u, _ = maps.shape
    m = maps.reshape(L * H, u, u)
    root = np.concatenate([m[:, 1:-1, 0], m[:, 1:-1, -1], m[:, 0, 1:-1], m[:, -1, 1:-1]])  # (4·L·H, w)
    return m[:, 1:-1, 1:-1], root


def write_shards(records: Iterable[dict], folder, shard_size: int = 1000) -> list[Path]:
    """Write per-sentence records {pair (K, w, w), root (R, w), emb (w, D), heads (w,) 0 = ROOT,
    punct (w,) bool} as npz shards of ``shard_size`` sentences (float16 features)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths, buf = [], []

    def flush():
        if not buf:
            return
        path = folder / f"shard_{len(paths):05d}.npz"
        np.savez(path, lengths=np.array([len(r["heads"]) for r in buf]),
                 pair=np.concatenate([r["pair"].reshape(r["pair"].shape[0], -1) for r in buf], 1).astype(np.float16),
                 root=np.concatenate([r["root"] for r in buf], 1).astype(np.float16),
                 emb=np.concatenate([r["emb"] for r in buf]).astype(np.float16),
                 heads=np.concatenate([r["heads"] for r in buf]).astype(np.int32),
                 punct=np.concatenate([r["punct"] for r in buf]).astype(bool))
        paths.append(path)
        buf.clear()

    for r in records:
        buf.append(r)
        if len(buf) == shard_size:
            flush()
    flush()
    return paths


def _sentences(path: Path) -> list[dict]:
    with np.load(path) as npz:  # each z[key] access re-reads the array: read each once
        z = {k: npz[k] for k in npz.files}
    out, p, q = [], 0, 0
    K = z["pair"].shape[0]
    for w in z["lengths"]:
        out.append({"pair": z["pair"][:, p:p + w * w].reshape(K, w, w), "root": z["root"][:, q:q + w],
                    "emb": z["emb"][q:q + w], "heads": z["heads"][q:q + w], "punct": z["punct"][q:q + w]})
        p, q = p + w * w, q + w
    return out


def batches(folder, batch_size: int, rng: np.random.Generator | None = None) -> Iterator[dict]:
    """Padded batches from the shards in ``folder`` (shuffled when ``rng`` is given): pair
    (B, K, W, W), root (B, R, W), emb (B, W, D), heads (B, W), mask (B, W) real words, score
    (B, W) real non-punctuation words."""
    paths = sorted(Path(folder).glob("shard_*.npz"))
    if not paths:
        raise FileNotFoundError(f"no feature shards (shard_*.npz) in {folder}. Fix: write them with write_shards")
    if rng is not None:
        paths = [paths[i] for i in rng.permutation(len(paths))]
    for path in paths:
        sents = sorted(_sentences(path), key=lambda s: len(s["heads"]))
        groups = [sents[i:i + batch_size] for i in range(0, len(sents), batch_size)]
        if rng is not None:
            groups = [groups[i] for i in rng.permutation(len(groups))]
        for g in groups:
            yield _pad(g)


def _pad(group: list[dict]) -> dict:
    B, W = len(group), -(-max(len(s["heads"]) for s in group) // PAD_MULTIPLE) * PAD_MULTIPLE
    K, R, D = group[0]["pair"].shape[0], group[0]["root"].shape[0], group[0]["emb"].shape[1]
    out = {"pair": np.zeros((B, K, W, W), np.float32), "root": np.zeros((B, R, W), np.float32),
           "emb": np.zeros((B, W, D), np.float32), "heads": np.zeros((B, W), np.int32),
           "mask": np.zeros((B, W), bool), "score": np.zeros((B, W), bool)}
    for b, s in enumerate(group):
        w = len(s["heads"])
        out["pair"][b, :, :w, :w] = s["pair"]
        out["root"][b, :, :w] = s["root"]
        out["emb"][b, :w] = s["emb"]
        out["heads"][b, :w] = s["heads"]
        out["mask"][b, :w] = True
        out["score"][b, :w] = ~s["punct"]
    return out


def _features(kind: str, batch: dict) -> tuple[jax.Array, jax.Array]:
    """-> (F (B, K, W, W), R (B, Kr, W)) for ``kind``."""
    if kind == "dist+emb":
        B, W = batch["heads"].shape
        d = jnp.clip(jnp.arange(W)[None, :] - jnp.arange(W)[:, None], -MAX_DISTANCE, MAX_DISTANCE)  # (W, W) j - i
        F = jax.nn.one_hot(d + MAX_DISTANCE, 2 * MAX_DISTANCE + 1).transpose(2, 0, 1)  # (K, W, W)
        return jnp.broadcast_to(F, (B, *F.shape)), jnp.ones((B, 1, W))
    A = batch["pair"]  # (B, L·H, W, W)
    return jnp.concatenate([A, jnp.swapaxes(A, -1, -2)], 1), batch["root"]  # (B, 2·L·H, W, W), (B, 4·L·H, W)


def init_params(kind: str, num_maps: int, num_root: int, dim: int, seed: int = 0) -> dict:
    """num_maps K pair features, num_root root features, dim D embedding size."""
    if kind not in KINDS:
        raise ValueError(f"unknown probe {kind!r}; choose one of {', '.join(KINDS)}")
    if kind == "dist+emb":
        num_maps, num_root = 2 * MAX_DISTANCE + 1, 1
    params = {"w": jnp.zeros(num_maps), "c": jnp.zeros(num_root), "b": jnp.zeros(())}
    if kind != "attn":
        k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
        std = 0.01
        params |= {"U": std * jax.random.normal(k1, (dim, num_maps)), "V": std * jax.random.normal(k2, (dim, num_maps)),
                   "Ur": std * jax.random.normal(k3, (dim, num_root))}
    return params


def scores(params: dict, kind: str, batch: dict) -> jax.Array:
    """Candidate scores (B, W, 1 + W): column 0 ROOT, column j + 1 word j; invalid
    candidates (the word itself, padding) at -inf."""
    F, R = _features(kind, batch)  # (B, K, W, W), (B, Kr, W)
    if kind == "attn":
        pair = jnp.einsum("k,bkij->bij", params["w"], F)  # (B, W, W)
        root = jnp.einsum("k,bki->bi", params["c"], R)  # (B, W)
    else:
        E = batch["emb"]  # (B, W, D)
        w = (E @ params["U"])[:, :, None, :] + (E @ params["V"])[:, None, :, :] + params["w"]  # (B, W, W, K)
        pair = jnp.einsum("bijk,bkij->bij", w, F)  # (B, W, W)
        root = jnp.einsum("bik,bki->bi", E @ params["Ur"] + params["c"], R)  # (B, W)
    s = jnp.concatenate([root[..., None] + params["b"], pair], -1)  # (B, W, 1 + W)
    mask = batch["mask"]  # (B, W)
    W = mask.shape[1]
    valid = jnp.concatenate([jnp.ones((*mask.shape, 1), bool),
                             mask[:, None, :] & ~jnp.eye(W, dtype=bool)[None]], -1)  # (B, W, 1 + W)
    return jnp.where(valid, s, -jnp.inf)


def loss_fn(params: dict, kind: str, batch: dict) -> jax.Array:
    """Mean cross-entropy to the gold head over real words."""
    logp = jax.nn.log_softmax(scores(params, kind, batch), -1)  # (B, W, 1 + W)
    gold = jnp.take_along_axis(logp, batch["heads"][..., None], -1)[..., 0]  # (B, W)
    m = batch["mask"]
    return -jnp.where(m, gold, 0.0).sum() / jnp.maximum(m.sum(), 1)


def uas(params: dict, kind: str, folder, batch_size: int = 64) -> float:
    """Unlabelled attachment score (percent, punctuation excluded) over the shards in ``folder``."""
    predict = jax.jit(lambda p, b: scores(p, kind, b).argmax(-1))
    right = total = 0
    for b in batches(folder, batch_size):
        pred = np.asarray(predict(params, {k: b[k] for k in ("pair", "root", "emb", "mask", "heads")}))
        right += int(((pred == b["heads"]) & b["score"]).sum())
        total += int(b["score"].sum())
    return 100.0 * right / max(total, 1)


def right_branching_uas(folder) -> float:
    """UAS of attaching each word to the next one and the last word to ROOT."""
    right = total = 0
    for b in batches(folder, 256):
        length = b["mask"].sum(1, keepdims=True)  # (B, 1)
        pos = np.arange(1, b["mask"].shape[1] + 1)[None]  # (1, W) 1-based
        pred = np.where(pos < length, pos + 1, 0)
        right += int(((pred == b["heads"]) & b["score"]).sum())
        total += int(b["score"].sum())
    return 100.0 * right / max(total, 1)


def train(kind: str, train_dir, dev_dir, *, epochs: int = 5, batch_size: int = 32, learning_rate: float = 0.002,
          seed: int = 0, checkpoint: Path | None = None, progress: bool = True,
          patience: int | None = None) -> tuple[dict, list[dict]]:
    """Train a probe with Adam; after every epoch measure dev UAS and keep the best params
    (saved with orbax to ``checkpoint`` when given). -> (best params, history).
    ``patience``: early stopping, training ends once dev UAS has not improved for that many
    epochs in a row (``epochs`` is then the most it may run); None runs all ``epochs``."""
    if patience is not None and patience < 1:
        raise ValueError(f"patience must be ≥ 1 epoch (or None for no early stopping), got {patience}")
    first = next(batches(train_dir, 1))
    params = init_params(kind, first["pair"].shape[1] * 2, first["root"].shape[1], first["emb"].shape[2], seed)
    opt = optax.adam(learning_rate)
    state = opt.init(params)

    @jax.jit
    def step(params, state, batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, kind, batch)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    rng = np.random.default_rng(seed)
    best, best_uas, best_epoch, history = params, -1.0, 0, []
    for epoch in range(epochs):
        losses = []
        for b in tqdm(batches(train_dir, batch_size, rng), desc=f"{kind} epoch {epoch + 1}/{epochs}",
                      disable=not progress, unit="batch", leave=False):
            params, state, loss = step(params, state, {k: b[k] for k in ("pair", "root", "emb", "mask", "heads")})
            losses.append(float(loss))
        dev = uas(params, kind, dev_dir)
        history.append({"epoch": epoch + 1, "train_loss": float(np.mean(losses)), "dev_uas": dev})
        if dev > best_uas:
            best, best_uas, best_epoch = params, dev, epoch
        if patience is not None and epoch - best_epoch >= patience:
            break
    if checkpoint is not None:
        save(best, checkpoint, {"kind": kind, "history": history})
    return best, history


def save(params: dict, path, meta: dict) -> Path:
    """Orbax checkpoint of the probe params, with a JSON of what it is beside it."""
    import orbax.checkpoint as ocp

    path = Path(path).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, jax.tree.map(np.asarray, params), force=True)
    checkpointer.wait_until_finished()
    (path.parent / f"{path.name}.json").write_text(json.dumps(meta, indent=1))
    return path


def restore(path, kind: str, num_maps: int, num_root: int, dim: int) -> dict:
    import orbax.checkpoint as ocp

    abstract = jax.tree.map(np.asarray, init_params(kind, num_maps, num_root, dim))
    return ocp.StandardCheckpointer().restore(Path(path).absolute(), abstract)


# ---------------------------------------------------------------- features through the runner

@dataclasses.dataclass(frozen=True, eq=False)
class ProbeFeatures(Method):
    """The probe's per-sentence inputs as the runner's per-example records (``jattn.io.records``):
    ``maps`` (L·H, u, u) word-level maps ([CLS], words, [SEP]), ``emb`` (u, D) the input
    embeddings averaged over each unit's subwords, ``heads`` and ``punct`` (u,) from the
    CoNLL-U labels (word k at index k). ``shards_from_records`` turns them into the training
    shards of ``write_shards``. ``table``: the (V, D) word-embedding table (``word_embedding_table``),
    so a random-init model can be probed with real embeddings, as Clark kept GloVe."""

    table: np.ndarray
    name = "probe-features"
    level = "word"
    record_axes = {"maps": (1, 2), "emb": (0,), "heads": (0,), "punct": (0,)}

    def prepare(self, batch: HostBatch) -> dict:
        if "heads" not in batch.labels or "upos" not in batch.label_lists:
            raise ValueError("method 'probe-features' needs gold trees (labels 'heads' and 'upos'). Fix: read the "
                             "treebank with --format conllu (jattn.io.readers)")
        punct = np.zeros(batch.labels["heads"].shape, bool)  # (b, n)
        for r, upos in enumerate(batch.label_lists["upos"]):
            if upos is not None:
                punct[r, :len(upos)] = [p == "PUNCT" for p in upos]
        return {"heads": batch.labels["heads"], "punct": punct}

    def reduce(self, ctx: StepContext) -> dict:
        return {"sentences": (ctx.batch["example"] >= 0).sum()}

    def records(self, ctx: StepContext) -> dict:
        L, b, H, n, _ = ctx.internals["weights"].shape
        maps = word_level(ctx.internals["weights"], ctx.batch["unit_ids"])  # (L, b, H, u, u)
        units = ctx.batch["unit_ids"]  # (b, n)
        member = (units[:, None, :] == jnp.arange(n)[None, :, None]).astype(jnp.float32)  # (b, u, n)
        emb = jnp.asarray(self.table)[ctx.batch["input_ids"]]  # (b, n, D)
        mean = jnp.einsum("bun,bnd->bud", member, emb) / jnp.maximum(member.sum(-1, keepdims=True), 1.0)  # (b, u, D)
        return {"maps": jnp.moveaxis(maps, 1, 0).reshape(b, L * H, n, n).astype(jnp.float16),  # as the shards
                "emb": mean.astype(jnp.float16),
                "heads": ctx.features["heads"], "punct": ctx.features["punct"]}

    def finalize(self, totals, meta):
        return {}


def shards_from_records(records: Iterable[dict], folder, shard_size: int = 1000) -> list[Path]:
    """``write_shards`` from ``ProbeFeatures`` records (``jattn.io.records.read_records``): the
    [CLS]/[SEP] units dropped from the embeddings, labels cut to the words."""
    def sentences():
        for r in records:
            maps = r["maps"]  # (L·H, u, u)
            w = maps.shape[-1] - 2
            pair, root = sentence_features(maps[None])
            yield {"pair": pair, "root": root, "emb": r["emb"][1:-1], "heads": r["heads"][:w],
                   "punct": r["punct"][:w].astype(bool)}

    return write_shards(sentences(), folder, shard_size)
