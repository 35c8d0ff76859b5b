"""A small convolutional classifier of attention-map types (Kovaleva et al. 2019, §3: "we
trained a convolutional neural network with 8 convolutional layers and ReLU activation ... on
400 manually annotated maps"; neither the network nor the labels were released).

Here: maps over real tokens resized to S × S (bilinear; rows kept as probabilities, then each
image divided by its maximum), two 3×3 conv + ReLU + 2×2 max-pool stages and a linear layer over
the flattened features, so a column at the left ([CLS]) or right ([SEP]) edge stays distinct
from a diagonal. Trained with optax Adam on the split NNX state.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jattn.analyses.patterns import TYPES

__all__ = ["predict", "to_image", "train"]

SIZE = 32


def _interpolation(n: int, size: int) -> np.ndarray:
    """(size, n) matrix of linear interpolation from n pixel centres to size pixel centres."""
    x = (np.arange(size) + 0.5) * n / size - 0.5  # (size,) source coordinates
    return np.stack([np.interp(x, np.arange(n), np.eye(n)[j]) for j in range(n)], axis=1)  # (size, n)


def to_image(A: np.ndarray, size: int = SIZE) -> np.ndarray:
    """One map over real tokens (n, n) -> (size, size) float32 image with maximum 1 (bilinear)."""
    W = _interpolation(A.shape[0], size)  # (S, n)
    img = W @ np.asarray(A, np.float64) @ W.T  # (S, S)
    return (img / max(float(img.max()), 1e-12)).astype(np.float32)


class PatternCNN(nnx.Module):
    def __init__(self, size: int = SIZE, channels: tuple = (8, 16), *, rngs: nnx.Rngs):
        c1, c2 = channels
        self.conv1 = nnx.Conv(1, c1, (3, 3), rngs=rngs)
        self.conv2 = nnx.Conv(c1, c2, (3, 3), rngs=rngs)
        self.out = nnx.Linear(c2 * (size // 4) ** 2, len(TYPES), rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        """x (b, S, S) -> logits (b, 5)."""
        h = nnx.max_pool(jax.nn.relu(self.conv1(x[..., None])), (2, 2), (2, 2))  # (b, S/2, S/2, c1)
        h = nnx.max_pool(jax.nn.relu(self.conv2(h)), (2, 2), (2, 2))  # (b, S/4, S/4, c2)
        return self.out(h.reshape(h.shape[0], -1))  # (b, 5)


@partial(jax.jit, static_argnames=("graphdef", "opt"))
def _step(graphdef, opt, params, opt_state, x, y):
    def loss(p):
        logits = nnx.merge(graphdef, p)(x)  # (b, 5)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    value, grads = jax.value_and_grad(loss)(params)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value


def train(images: np.ndarray, labels: np.ndarray, *, steps: int = 400, batch_size: int = 64,
          learning_rate: float = 3e-3, seed: int = 0) -> PatternCNN:
    """Fit the CNN on (N, S, S) images and (N,) type indices by cross-entropy (Adam); classes are
    sampled with equal probability so a rare type is not drowned by the frequent ones."""
    images, labels = np.asarray(images, np.float32), np.asarray(labels, np.int32)
    if len(images) == 0:
        raise ValueError("no training maps")
    model = PatternCNN(images.shape[-1], rngs=nnx.Rngs(seed))
    graphdef, params = nnx.split(model, nnx.Param)
    opt = optax.adam(learning_rate)
    opt_state = opt.init(params)
    rng = np.random.default_rng(seed)
    present = np.unique(labels)
    weight = np.zeros(len(labels))
    for k in present:
        weight[labels == k] = 1.0 / (labels == k).sum()
    weight /= weight.sum()
    for _ in range(steps):
        idx = rng.choice(len(labels), batch_size, p=weight)
        params, opt_state, _ = _step(graphdef, opt, params, opt_state, images[idx], labels[idx])
    return nnx.merge(graphdef, params)


def predict(model: PatternCNN, images: np.ndarray, batch_size: int = 512) -> np.ndarray:
    """Type indices (N,) for (N, S, S) images."""
    out = [np.asarray(_predict(model, jnp.asarray(images[i:i + batch_size], jnp.float32)))
           for i in range(0, len(images), batch_size)]
    return np.concatenate(out) if out else np.zeros(0, np.int32)


@nnx.jit
def _predict(model, x):
    return model(x).argmax(-1)
