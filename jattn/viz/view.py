"""Interactive attention viewer: ``jattn view --text "..." --out page.html`` writes one HTML page.

The page is self-contained (script and style inlined, no network). Two panels side by side, each
choosing a model (with ``compare``), a measure, a layer and heads, so that the left can show
attention weights and the right norms (Kobayashi et al. 2020's point), or the same head in a
pretrained and a fine-tuned model (Kovaleva et al. 2019), or two layers / heads. Each panel has
  * a head view (as bertviz draws it): the tokens in two columns, a line from each query to
    each key with opacity = the value, for one layer and any set of heads (a colour per head);
  * layer × head thumbnails of its measure (each drawn at its displayed size, a display pixel
    the largest code it covers, so one-token-wide structure stays visible); a click jumps there.
Beside them, the difference view: right − left of the two selected maps (one head or one layer
measure each), on a diverging colour scale centred at 0 with its range shown. Hovering a token
highlights it in both panels and the difference (row or column); the layer and head selections
are linked across the panels unless unlinked. The arrow keys change the layer (up/down) and
the head (left/right) of the last panel used.

Measures: attention weights α; Kobayashi et al. (2020) per-head norms ‖α f_h(x_j)‖ and summed
norms ‖Σ_h α f_h(x_j)‖; for encoders their 2021 AttnRes-N and AttnResLn-N maps
(``jattn.norms(..., residual=True)``) and attention rollout (Abnar & Zuidema 2020), GlobEnc
(Modarressi et al. 2022) and ALTI (Ferrando et al. 2022) rolled out to each layer
(``jattn.attributions``); for translation models the same norms of encoder self-, decoder self-
and cross-attention (AttnRes/AttnResLn for the two self types), with source and target tokens.

Every query row is divided by its sum (a row is each key's share) and stored as 8-bit codes
(``jattn.viz.view_codes``: error ≤ row max / 510). Every number is computed in Python; the page
only decodes, subtracts the two panels' decoded shares for the difference view, and draws.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import numpy as np

from jattn.viz.view_codes import ERROR_BOUND, FORMAT, decode_measure, encode_view

NORM_KEYS = {"norm": "weighted_norm", "summed": "summed_norm", "attnres": "attnres_norm",
             "attnresln": "attnresln_norm"}
ATTRIBUTION_KEYS = {"rollout": "rollout", "globenc": "globenc", "alti": "alti"}


# ---------------------------------------------------------------- model -> maps

def _check_text(name: str, text, argument: str = "text") -> str:
    """``text`` (the view's ``argument``) as a non-empty string, or an error naming that argument."""
    if not isinstance(text, str):
        raise ValueError(f"{name} ({argument}=) must be a string, got {type(text).__name__}")
    if not text.strip():
        raise ValueError(f"{name} is empty: there is nothing to look at. Fix: give a sentence, e.g. "
                         f"{argument}=\"The cat sat on the mat.\"")
    return text


def _too_long(what: str, n: int, limit: int) -> ValueError:
    return ValueError(f"{what} has {n} tokens, more than the {limit} the model (or max_length=) allows. Fix: "
                      f"shorten it, or pass truncate=True to keep the first {limit}")


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
    norms = norms_of(model, batch, residual=True)["encoder"]
    maps = {"alpha": alpha}
    attributions = attributions_of(model, batch)["encoder"]
    # a pre-LN model has no AttnResLn-N nor GlobEnc (undefined there: docs/METHODS.md): no panel for them
    for key, name in NORM_KEYS.items():
        if name in norms:
            maps[key] = norms[name][:, 0, ..., :n, :n]  # (L, [H,] n, n)
    for key, name in ATTRIBUTION_KEYS.items():
        if name in attributions:
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


def seq2seq_maps(model, text: str, target: str | None, max_length: int, truncate: bool, num_beams: int,
                 decoder_ids: list[int] | None = None) -> tuple[dict, dict, str, list[int]]:
    """Encoder self, decoder self and cross-attention measures of a translation model:
    ({kind: {key: (L, [H,] q, k)}}, {"source": tokens, "target": tokens}, the target text, the
    decoder's input ids).

    The decoder is teacher-forced on start token + the target's tokens (``decoder_ids`` when
    given, as another model read them; else ``target``'s, or the model's own beam search
    translation when None): row t is the position whose input is target token t (it predicts
    token t + 1)."""
    from jattn.analyses.norms import norms as norms_of

    c = model.config
    src = _encode_side(model, text, "source", max_length, truncate)
    if decoder_ids is not None:
        dec = list(decoder_ids)
    elif target is None:
        out = np.asarray(model.generate(np.asarray([src]), np.ones((1, len(src)), np.int32), num_beams=num_beams,
                                        max_length=min(max_length, c.max_length)).sequences)[0]
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
    return maps, tokens, target, [int(i) for i in dec[0]]


KINDS = {"encoder": ("encoder self-attention", "source", "source"),
         "decoder": ("decoder self-attention", "target", "target"),
         "cross": ("cross-attention (target → source)", "target", "source")}


def _name(model) -> str:
    """The model as the header names it: the embedded default by its name, a folder by its own
    name (a made artefact's is the artefact's), a hub id as it is."""
    source = str(getattr(model, "source", "") or "")
    if not source:
        return type(model).__name__
    from jattn.models.load import default_model_path

    path = Path(source)
    if path.is_dir():
        try:
            if path.resolve() == default_model_path().resolve():
                return "all-MiniLM-L6-v2 (the embedded default)"
        except ImportError:  # the default's package is not installed: this is another folder
            pass
        return path.name
    return source


def _limit(models: list, max_length: int | None) -> int:
    """--max-length checked against every model's positions (default: the fewest of them)."""
    most = min(m.config.max_length for m in models)
    limit = most if max_length is None else int(max_length)
    if limit < 2 or limit > most:
        which = "this model" if len(models) == 1 else "both models"
        raise ValueError(f"max_length={max_length} must be in [2, {most}] for {which}")
    return limit


def _views(model, text: str, pair: str | None, target: str | None, limit: int, truncate: bool,
           num_beams: int, seq2seq: bool, decoder_ids: list[int] | None = None) -> tuple[list[dict], dict, dict]:
    """One model's page views, its tokens per side and what the page says about the texts
    (for a translation model also the decoder's input ids, "decoder_ids")."""
    if seq2seq:
        generated = target is None
        maps, tokens, target, dec = seq2seq_maps(model, text, target, limit, truncate, num_beams, decoder_ids)
        views = [{"name": kind, "label": label, "queries": queries, "keys": keys,
                  "measures": encode_view(maps[kind])} for kind, (label, queries, keys) in KINDS.items()]
        return views, tokens, {"target": target, "generated": generated, "decoder_ids": dec}
    maps, tokens = encoder_maps(model, text, pair, limit, truncate)
    return ([{"name": "encoder", "label": "self-attention", "queries": "input", "keys": "input",
              "measures": encode_view(maps)}], {"input": tokens}, {"pair": pair})


def _same_tokens(first: dict, second: dict, names: tuple[str, str]) -> None:
    """The panels compare position by position: both models must read the same tokens."""
    for side, tokens in first.items():
        other = second[side]
        if tokens == other:
            continue
        at = next((i for i, (a, b) in enumerate(zip(tokens, other)) if a != b), min(len(tokens), len(other)))
        shown = lambda t: repr(t[at]) if at < len(t) else "the end"  # noqa: E731
        raise ValueError(f"compare: the two models tokenize the {side} text differently ({names[0]}: "
                         f"{len(tokens)} tokens, {names[1]}: {len(other)}; first difference at position {at}: "
                         f"{shown(tokens)} vs {shown(other)}). The panels compare maps position by position. Fix: "
                         "compare models that share a tokenizer (e.g. a model and its fine-tuned version)"
                         + (", or pass the target text (target=)" if side == "target" else ""))


def page_data(model, text: str, pair: str | None = None, target: str | None = None, *, compare=None,
              max_length: int | None = None, truncate: bool = False, num_beams: int = 4) -> dict:
    """The JSON the page embeds: ``views`` of ``model`` and, with ``compare``, ``compare.views``
    of the second model on the same tokens (a translation model's decoder is fed the first
    model's target ids in both: ``target``'s, else its own translation's; the second model
    must read them as the same tokens)."""
    from jattn.nn.config import Seq2SeqConfig

    text = _check_text("the text", text)
    models = [model] + ([] if compare is None else [compare])
    limit = _limit(models, max_length)
    seq2seq = isinstance(model.config, Seq2SeqConfig)
    if compare is not None and isinstance(compare.config, Seq2SeqConfig) != seq2seq:
        kinds = ["an encoder", "a translation model"]
        raise ValueError(f"compare: {_name(model)} is {kinds[seq2seq]} but {_name(compare)} is "
                         f"{kinds[not seq2seq]}. Fix: compare two models of the same shape")
    if seq2seq and pair is not None:
        raise ValueError("pair= is for encoders (sentence pairs); a translation model takes text= and "
                         "optionally target=")
    if not seq2seq and target is not None:
        raise ValueError("target= is for translation models; an encoder reads text= (and pair=)")
    if pair is not None:
        pair = _check_text("the pair's second text", pair, "pair")
    if target is not None:
        target = _check_text("the target text", target, "target")
    views, tokens, texts = _views(model, text, pair, target, limit, truncate, num_beams, seq2seq)
    decoder_ids = texts.pop("decoder_ids", None)
    data = {"format": FORMAT, "model": _name(model), "text": text, "error_bound": ERROR_BOUND,
            "normalisation": "rows divided by their sums; codes relative to each row's largest share",
            "tokens": tokens, "views": views, **texts}
    if compare is not None:
        second, second_tokens, _ = _views(compare, text, pair, texts.get("target"), limit, truncate, num_beams,
                                          seq2seq, decoder_ids)
        _same_tokens(tokens, second_tokens, (_name(model), _name(compare)))
        data["compare"] = {"model": _name(compare), "views": second}
    return data


# ---------------------------------------------------------------- page

SCRIPTS = ("data.js", "draw.js", "view.js")  # the page's script, in this order


def _asset(name: str) -> str:
    return resources.files("jattn.viz.viewer").joinpath(name).read_text(encoding="utf-8")


def render(data: dict) -> str:
    """Page data -> one self-contained HTML document."""
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    payload = payload.replace("</", "<\\/")  # tokens such as </s> must not close the script element
    title = f"jattn view: {data['text'][:60]}"
    html = _asset("page.html")
    script = "\n".join(_asset(name) for name in SCRIPTS)
    for mark, value in (("/*CSS*/", _asset("view.css")), ("/*JS*/", script),
                        ("__TITLE__", _escape(title)), ("__DATA__", payload)):
        head, sep, tail = html.partition(mark)
        html = head + value + tail  # partition: the data never goes through another replace
    return html


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def view(model, text: str, pair: str | None = None, target: str | None = None, *, compare=None,
         max_length: int | None = None, truncate: bool = False, num_beams: int = 4) -> str:
    """The interactive attention page of ``model`` on ``text`` as an HTML string.

    ``pair``: the second segment of a sentence pair (encoders). ``target``: for translation
    models, the target text to teacher-force (default: the model's own translation, beam
    search with ``num_beams``). ``compare``: a second model (e.g. the fine-tuned version of
    ``model``) on the same tokens, selectable in either panel; its tokenization must equal
    ``model``'s. Texts longer than ``max_length`` tokens (default: the models' positions)
    raise a ValueError unless ``truncate``."""
    return render(page_data(model, text, pair, target, compare=compare, max_length=max_length,
                            truncate=truncate, num_beams=num_beams))


_DATA = re.compile(r'<script type="application/json" id="jattn-data">(.*?)</script>', re.S)


def _decoded(views: list[dict]) -> dict:
    return {v["name"]: dict(v, measures={m["key"]: decode_measure(m) for m in v["measures"]}) for v in views}


def read_page(html: str) -> dict:
    """A page written by ``view`` -> its data with every measure decoded (``decode_measure``):
    {"tokens", "views": {name: {"queries", "keys", "measures": {key: decoded}}}, ...}, and
    with a second model {"compare": {"model", "views"}} decoded the same way."""
    found = _DATA.search(html)
    if found is None:
        raise ValueError("not a jattn view page: no jattn-data script element")
    data = json.loads(found.group(1))
    if data.get("format") != FORMAT:
        raise ValueError(f"page format {data.get('format')!r}, expected {FORMAT!r}")
    data["views"] = _decoded(data["views"])
    if "compare" in data:
        data["compare"] = dict(data["compare"], views=_decoded(data["compare"]["views"]))
    return data
