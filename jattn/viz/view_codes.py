"""The attention viewer's storage: every number the page shows, as 8-bit codes (``jattn.viz.view``).

Normalisation (so that all measures read alike): every query row is divided by its sum, so a
row is a distribution over keys (α is unchanged; a norm map becomes each key's share).

Storage: a row's shares are quantised to 8 bits relative to the row's largest share m
(q = round(255 · share / m)); m and the row's raw sum are stored as float32. The decoded share
q·m/255 is within m/510 ≤ 1/510 of the exact one, the decoded raw value (share × sum) within
(largest raw value of the row)/510. The bytes are zlib-compressed and base64-encoded in the
page's JSON block, which the page inflates with the browser's ``DecompressionStream``;
``decode_measure`` decodes them in Python the same way.
"""

from __future__ import annotations

import base64
import zlib

import numpy as np

FORMAT = "jattn-view/3"  # 3: an optional second model ("compare")
LEVELS = 255  # 8-bit codes 0..255
ERROR_BOUND = 0.5 / LEVELS  # |decoded share − share| ≤ ERROR_BOUND · row max

# key -> (label, what it is); per-head measures are (L, H, q, k), the others (L, q, k)
MEASURES = {
    "alpha": ("α (weights)", "attention weights α[h,i,j]"),
    "norm": ("‖αf‖ per head", "Kobayashi et al. 2020: ‖α[h,i,j] f_h(x_j)‖, share of the row"),
    "summed": ("‖Σ_h αf‖ (layer)", "Kobayashi et al. 2020: ‖Σ_h α[h,i,j] f_h(x_j)‖, share of the row"),
    "attnres": ("AttnRes-N (layer)", "Kobayashi et al. 2021: ‖Σ_h αf + δ_ij x_i‖, share of the row"),
    "attnresln": ("AttnResLn-N (layer)", "Kobayashi et al. 2021: the AttnRes vectors through the "
                  "attention LayerNorm (β, b_O dropped), share of the row"),
    "rollout": ("rollout", "Abnar & Zuidema 2020: ½ᾱ + ½I rolled out from the embeddings to this layer"),
    "globenc": ("GlobEnc (rollout)", "Modarressi et al. 2022: ‖N_ij‖ through both LayerNorms, rolled out"),
    "alti": ("ALTI (rollout)", "Ferrando et al. 2022: L1-based contributions, rolled out"),
}


def row_shares(maps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows divided by their sums (all-zero rows stay 0). (..., q, k) -> shares, sums (..., q)."""
    maps = np.asarray(maps, np.float64)
    if (maps < 0).any() or not np.isfinite(maps).all():
        raise ValueError("a map to view has negative or non-finite values; every measure must be ≥ 0")
    sums = maps.sum(-1)  # (..., q)
    shares = np.divide(maps, sums[..., None], out=np.zeros_like(maps), where=sums[..., None] > 0)
    return shares, sums


def quantize(shares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """8-bit codes relative to each row's largest share. (..., q, k) -> codes uint8, row max (..., q)."""
    top = shares.max(-1)  # (..., q)
    scaled = np.divide(shares, top[..., None], out=np.zeros_like(shares), where=top[..., None] > 0)
    return np.rint(scaled * LEVELS).astype(np.uint8), top


def dequantize(codes: np.ndarray, top: np.ndarray) -> np.ndarray:
    """Inverse of ``quantize`` up to ERROR_BOUND · row max. -> shares (..., q, k) float64."""
    return codes.astype(np.float64) * (top.astype(np.float64)[..., None] / LEVELS)


def _pack(a: np.ndarray) -> str:
    return base64.b64encode(zlib.compress(np.ascontiguousarray(a).tobytes(), 9)).decode("ascii")


def _unpack(text: str, dtype, shape) -> np.ndarray:
    return np.frombuffer(zlib.decompress(base64.b64decode(text)), dtype=dtype).reshape(shape)


def encode_measure(key: str, maps: np.ndarray) -> dict:
    """One measure's maps (L, H, q, k) or (L, q, k) as page data: shape, codes, row max, row sum."""
    maps = np.asarray(maps)
    shares, sums = row_shares(maps)
    codes, top = quantize(shares)
    label, help_ = MEASURES[key]
    return {"key": key, "label": label, "help": help_, "per_head": maps.ndim == 4, "shape": list(maps.shape),
            "codes": _pack(codes), "row_max": _pack(top.astype("<f4")), "row_sum": _pack(sums.astype("<f4"))}


def _stored(entry: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    shape = tuple(entry["shape"])
    return (_unpack(entry["codes"], np.uint8, shape), _unpack(entry["row_max"], "<f4", shape[:-1]),
            _unpack(entry["row_sum"], "<f4", shape[:-1]))


def decode_measure(entry: dict) -> dict:
    """Page data of one measure -> ``share`` (rows sum to 1, within ERROR_BOUND · row max of
    the exact share), ``raw`` (share × row sum), ``row_max``, ``row_sum``, ``codes``; numpy
    arrays of the stored shape."""
    codes, top, sums = _stored(entry)
    share = dequantize(codes, top)
    return {"share": share, "raw": share * sums[..., None], "row_max": top, "row_sum": sums, "codes": codes}


def encode_view(maps: dict) -> list[dict]:
    """A view's measures in page order ("alpha", "norm", then the others): every number the page
    shows is computed here, in Python; the page only decodes and draws."""
    order = ["alpha", "norm"] + [k for k in maps if k not in ("alpha", "norm")]
    return [encode_measure(k, maps[k]) for k in order]
