"""Interactive attention viewer: ``jattn view --text "..." --out page.html`` writes one HTML page.

The page is self-contained (script and style inlined, no network) and shows, side by side:
  * a head view (as bertviz draws it): the tokens in two columns, a line from each query to
    each key with opacity = the value, for one layer and any set of heads (a colour per head);
  * a model view: the L × H grid of small maps (one canvas each, drawn only when scrolled into
    sight); clicking one opens that layer and head in the head view;
  * a measure switch for both: attention weights α; Kobayashi et al. (2020) per-head norms
    ‖α f_h(x_j)‖ and summed norms ‖Σ_h α f_h(x_j)‖; for encoders their 2021 AttnRes-N and
    AttnResLn-N maps (``jattn.norms(..., residual=True)``) and attention rollout (Abnar &
    Zuidema 2020), GlobEnc (Modarressi et al. 2022) and ALTI (Ferrando et al. 2022) rolled out
    to each layer (``jattn.attributions``); for translation models the same norms of encoder
    self-, decoder self- and cross-attention (AttnRes/AttnResLn for the two self types),
    with source and target tokens.
Hovering shows the values; the arrow keys change the layer (up/down) and the head (left/right).

Normalisation (so that all measures read alike): every query row is divided by its sum, so a
row is a distribution over keys (α is unchanged; a norm map becomes each key's share).
Head-view line opacity = that share. Model-view maps colour each row relative to its largest
share (so that every row's structure shows); hovering gives the share and the raw value.

Storage: a row's shares are quantised to 8 bits relative to the row's largest share m
(q = round(255 · share / m)); m and the row's raw sum are stored as float32. The decoded share
q·m/255 is within m/510 ≤ 1/510 of the exact one, the decoded raw value (share × sum) within
(largest raw value of the row)/510. Every number is computed in Python; the page's script
only decodes the stored codes and draws them.
The bytes are zlib-compressed and base64-encoded in a JSON block the page inflates with the
browser's ``DecompressionStream``; ``read_page`` decodes a page in Python the same way.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from importlib import resources

import numpy as np

FORMAT = "jattn-view/2"
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
PER_HEAD = ("alpha", "norm")
NORM_KEYS = {"norm": "weighted_norm", "summed": "summed_norm", "attnres": "attnres_norm",
             "attnresln": "attnresln_norm"}
ATTRIBUTION_KEYS = {"rollout": "rollout", "globenc": "globenc", "alti": "alti"}


# ---------------------------------------------------------------- arrays -> page data

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


# ---------------------------------------------------------------- model -> maps

def _check_text(name: str, text) -> str:
    if not isinstance(text, str):
        raise ValueError(f"{name} must be a string, got {type(text).__name__}")
    if not text.strip():
        raise ValueError(f"{name} is empty: there is nothing to look at. Fix: give a sentence, e.g. "
                         f"--text \"The cat sat on the mat.\"")
    return text


def _too_long(what: str, n: int, limit: int) -> ValueError:
    return ValueError(f"{what} has {n} tokens, more than the {limit} the model (or --max-length) allows. Fix: "
                      f"shorten it, or pass --truncate (truncate=True in Python) to keep the first {limit}")


def encoder_maps(model, text: str, pair: str | None, max_length: int, truncate: bool) -> tuple[dict, list]:
    """Every stored measure of an encoder on one text (or pair): ({key: (L, [H,] n, n)}, tokens)."""
    from jattn.analyses.attribution import attributions as attributions_of
    from jattn.analyses.norms import norms as norms_of
    from jattn.io.tokenize import SequenceTooLongError

    example = text if pair is None else (text, pair)
    try:
        batch = model.tokenize([example], max_length=max_length, truncate=truncate)
    except SequenceTooLongError:
        n = len(model.tokenizer(text, pair)["input_ids"])
        raise _too_long("the text" if pair is None else "the pair", n, max_length) from None
    n = int(batch.lengths[0])
    tokens = model.tokenizer.convert_ids_to_tokens(batch.input_ids[0, :n].tolist())
    alpha = np.asarray(model.forward(batch, internals=("weights",)).attentions)[:, 0, :, :n, :n]  # (L, H, n, n)
    norms = norms_of(model, batch, residual=True)
    maps = {"alpha": alpha}
    for key, name in NORM_KEYS.items():
        maps[key] = norms[name][:, 0, ..., :n, :n]  # (L, [H,] n, n)
    attributions = attributions_of(model, batch)
    for key, name in ATTRIBUTION_KEYS.items():
        maps[key] = attributions[name][:, 0, :n, :n]  # (L, n, n)
    return maps, tokens


def _id_to_token(model, side: str):
    """id -> token string for one side of a translation model's tokenizer (the family's spec
    knows where each side's vocabulary is)."""
    table = {i: token for token, i in model.family.side_vocab(model.tokenizer, side).items()}
    return lambda i: table.get(int(i), model.tokenizer.unk_token)


def _encode_side(model, text: str, side: str, limit: int, truncate: bool) -> list[int]:
    kw = {"text": [text]} if side == "source" else {"text_target": [text]}
    ids = model.tokenizer(**kw)["input_ids"][0]
    if len(ids) > limit:
        if not truncate:
            raise _too_long(f"the {side} text", len(ids), limit)
        ids = model.tokenizer(**kw, truncation=True, max_length=limit)["input_ids"][0]
    return list(ids)


def seq2seq_maps(model, text: str, target: str | None, max_length: int, truncate: bool,
                 num_beams: int) -> tuple[dict, dict, str]:
    """Encoder self, decoder self and cross-attention measures of a translation model:
    ({kind: {key: (L, [H,] q, k)}}, {"source": tokens, "target": tokens}, the target text).

    The decoder is teacher-forced on start token + the target's tokens (``target``, or the
    model's own beam search translation when None): row t is the position whose input is
    target token t (it predicts token t + 1)."""
    from jattn.analyses.norms import norms as norms_of

    c = model.config
    src = _encode_side(model, text, "source", max_length, truncate)
    if target is None:
        out = np.asarray(model.generate(np.asarray([src]), np.ones((1, len(src)), np.int32), num_beams=num_beams,
                                        max_length=min(max_length, c.max_length)))[0]
        ends = np.nonzero(out[1:] == c.eos_token_id)[0]
        dec = out[: ends[0] + 2] if len(ends) else out
        target = model.tokenizer.decode(dec, skip_special_tokens=True)
    else:
        dec = [c.decoder_start_token_id] + _encode_side(model, target, "target", max_length - 1, truncate)
    src, dec = np.asarray([src], np.int32), np.asarray([dec], np.int32)  # (1, s), (1, t)
    batch = {"input_ids": src, "attention_mask": np.ones_like(src), "decoder_input_ids": dec,
             "decoder_attention_mask": np.ones_like(dec)}
    out = model.forward(batch, internals=("weights",))
    norms = norms_of(model, batch, residual=True)
    maps = {}
    for kind, alpha in (("encoder", out.encoder_attentions), ("decoder", out.decoder_attentions),
                        ("cross", out.cross_attentions)):
        maps[kind] = {"alpha": np.asarray(alpha)[:, 0]}  # (L, H, q, k)
        for key, name in NORM_KEYS.items():
            if name in norms[kind]:
                maps[kind][key] = norms[kind][name][:, 0]  # (L, [H,] q, k)
    to_src, to_tgt = _id_to_token(model, "source"), _id_to_token(model, "target")
    tokens = {"source": [to_src(i) for i in src[0]], "target": [to_tgt(i) for i in dec[0]]}
    return maps, tokens, target


KINDS = {"encoder": ("encoder self-attention", "source", "source"),
         "decoder": ("decoder self-attention", "target", "target"),
         "cross": ("cross-attention (target → source)", "target", "source")}


def page_data(model, text: str, pair: str | None = None, target: str | None = None, *,
              max_length: int | None = None, truncate: bool = False, num_beams: int = 4) -> dict:
    """The JSON the page embeds (see the module docstring for its normalisation and storage)."""
    from jattn.nn.config import Seq2SeqConfig

    text = _check_text("the text", text)
    limit = model.config.max_length if max_length is None else int(max_length)
    if limit < 2 or limit > model.config.max_length:
        raise ValueError(f"max_length={max_length} must be in [2, {model.config.max_length}] for this model")
    name = getattr(model, "source", "") or type(model).__name__
    data = {"format": FORMAT, "model": str(name), "text": text, "error_bound": ERROR_BOUND,
            "normalisation": "rows divided by their sums; codes relative to each row's largest share", "views": []}
    if isinstance(model.config, Seq2SeqConfig):
        if pair is not None:
            raise ValueError("--pair is for encoders (sentence pairs); a translation model takes --text and "
                             "optionally --target")
        generated = target is None
        if not generated:
            target = _check_text("the target text", target)
        maps, tokens, target = seq2seq_maps(model, text, target, limit, truncate, num_beams)
        data.update(tokens=tokens, target=target, generated=generated)
        for kind, (label, queries, keys) in KINDS.items():
            data["views"].append({"name": kind, "label": label, "queries": queries, "keys": keys,
                                  "measures": encode_view(maps[kind])})
    else:
        if target is not None:
            raise ValueError("--target is for translation models; an encoder reads --text (and --pair)")
        if pair is not None:
            pair = _check_text("the pair's second text", pair)
        maps, tokens = encoder_maps(model, text, pair, limit, truncate)
        data.update(tokens={"input": tokens}, pair=pair)
        data["views"].append({"name": "encoder", "label": "self-attention", "queries": "input", "keys": "input",
                              "measures": encode_view(maps)})
    return data


# ---------------------------------------------------------------- page

def _asset(name: str) -> str:
    return resources.files("jattn.viz.viewer").joinpath(name).read_text(encoding="utf-8")


def render(data: dict) -> str:
    """Page data -> one self-contained HTML document."""
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    payload = payload.replace("</", "<\\/")  # tokens such as </s> must not close the script element
    title = f"jattn view: {data['text'][:60]}"
    html = _asset("page.html")
    for mark, value in (("/*CSS*/", _asset("view.css")), ("/*JS*/", _asset("view.js")),
                        ("__TITLE__", _escape(title)), ("__DATA__", payload)):
        head, sep, tail = html.partition(mark)
        html = head + value + tail  # partition: the data never goes through another replace
    return html


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def view(model, text: str, pair: str | None = None, target: str | None = None, *, max_length: int | None = None,
         truncate: bool = False, num_beams: int = 4) -> str:
    """The interactive attention page of ``model`` on ``text`` as an HTML string.

    ``pair``: the second segment of a sentence pair (encoders). ``target``: for translation
    models, the target text to teacher-force (default: the model's own translation, beam
    search with ``num_beams``). Texts longer than ``max_length`` tokens (default: the model's
    positions) raise a ValueError unless ``truncate``."""
    return render(page_data(model, text, pair, target, max_length=max_length, truncate=truncate,
                            num_beams=num_beams))


_DATA = re.compile(r'<script type="application/json" id="jattn-data">(.*?)</script>', re.S)


def read_page(html: str) -> dict:
    """A page written by ``view`` -> its data with every measure decoded (``decode_measure``):
    {"tokens", "views": {name: {"queries", "keys", "measures": {key: decoded}}}, ...}."""
    found = _DATA.search(html)
    if found is None:
        raise ValueError("not a jattn view page: no jattn-data script element")
    data = json.loads(found.group(1))
    if data.get("format") != FORMAT:
        raise ValueError(f"page format {data.get('format')!r}, expected {FORMAT!r}")
    views = {}
    for v in data["views"]:
        measures = {m["key"]: decode_measure(m) for m in v["measures"]}
        views[v["name"]] = dict(v, measures=measures)
    data["views"] = views
    return data


# ---------------------------------------------------------------- command line
