"""Statistic keys in words, for figure titles, colour bars and captions: the one map from the
names ``results.json`` uses (``attn_to_cls``, ``norm_share_to_sep``, ``word_entropy``) to what
a reader sees ("Attention to [CLS]", unit "mean attention weight").

The full definition of each statistic stays in its ``Statistic.description`` (written to
``results.json``); this is the short form. ``title(key)`` and ``unit(key)`` know the per-(layer,
head) statistics of the registered methods, the ``word_`` prefix (word-level maps) and the
``encoder_``/``decoder_``/``cross_`` prefixes (translation models); an unknown key falls back to
its words with the underscores spelled as spaces. ``labels`` ({"[CLS]": "<s>", "[SEP]": "</s>"}:
``special_names`` of a model's tokenizer) puts the names of [CLS] and [SEP] in a model's own terms.
"""

from __future__ import annotations

CLASSES = {"cls": "[CLS]", "sep": "[SEP]", "punct": 'punctuation ("." or ",")', "other": "other tokens"}
TOKENS = {"cls": "[CLS] tokens", "sep": "[SEP] tokens", "punct": 'punctuation tokens ("." or ",")',
          "other": "other tokens"}
SHARE = "mean attention weight (0-1)"

_TITLES: dict[str, tuple[str, str]] = {  # key -> (title, unit of the colour bar / y axis)
    **{f"attn_to_{c}": (f"Attention to {w}", SHARE) for c, w in CLASSES.items()},
    "sep_to_sep": ("Attention from [SEP] to [SEP]", SHARE),
    "nonsep_to_sep": ("Attention from other tokens to [SEP]", SHARE),
    "attn_prev": ("Attention to the previous token", SHARE),
    "attn_self": ("Attention to the token itself", SHARE),
    "attn_next": ("Attention to the next token", SHARE),
    "entropy": ("Attention entropy, mean over all rows", "mean row entropy (nats)"),
    "entropy_cls": ("Attention entropy of the [CLS] row", "row entropy (nats)"),
    **{f"weight_to_{c}": (f"Attention weight to {w} (Kobayashi et al. 2020)", "mean Σ α (0-1)")
       for c, w in CLASSES.items()},
    **{f"norm_to_{c}": (f"Weighted vector norm to {w}, ‖αf(x)‖", "mean Σ ‖α f(x)‖")
       for c, w in CLASSES.items()},
    **{f"norm_share_to_{c}": (f"Share of the vector norm ‖αf(x)‖ going to {w}", "share of Σ ‖α f(x)‖ (0-1)")
       for c, w in CLASSES.items()},
    **{f"fnorm_{c}": (f"Norm of the transformed vectors ‖f(x)‖ of {w}", "mean ‖f(x)‖")
       for c, w in TOKENS.items()},
    **{f"received_{c}": (f"Attention received by {w}", "mean α per receiving token") for c, w in TOKENS.items()},
    **{f"grad_to_{c}": (f"Gradient of the loss w.r.t. attention to {w}", "mean Σ |∂L/∂α|")
       for c, w in CLASSES.items()},
    "lm_first_token": ("Attention to the first token (sink)", SHARE),
    "lm_previous_token": ("Attention to the previous token", SHARE),
    "lm_self": ("Attention to the token itself", SHARE),
    "lm_other": ("Attention to other tokens", SHARE),
    "lm_entropy": ("Attention entropy, mean over rows", "mean row entropy (nats)"),
    "lm_entropy_normalised": ("Attention entropy relative to uniform", "entropy / log(i + 1) (1: uniform)"),
    "pattern_vertical": ("Vertical attention mass (Kovaleva et al. 2019)", "mean vertical mass"),
    "pattern_diagonal": ("Diagonal attention mass (Kovaleva et al. 2019)", "mean diagonal mass"),
}
_PREFIXES = {"word_": "word level", "encoder_": "encoder self-attention", "decoder_": "decoder self-attention",
             "cross_": "cross-attention"}

def special_names(tokenizer) -> dict[str, str]:
    """The model's own names of the classes [CLS] and [SEP]: its tokenizer's cls token (else its bos
    token) and sep token (else its eos token), e.g. {"[CLS]": "<s>", "[SEP]": "</s>"} for MPNet; a
    class without such a token keeps its name ({} without a tokenizer)."""
    names = {}
    for label, kinds in (("[CLS]", ("cls_token", "bos_token")), ("[SEP]", ("sep_token", "eos_token"))):
        found = [str(t) for t in (getattr(tokenizer, k, None) for k in kinds) if t]
        if found:
            names[label] = found[0]
    return names


def rename(text: str, labels: dict | None) -> str:
    """``text`` with each key of ``labels`` replaced by its value, in the dict's order."""
    for theirs, own in (labels or {}).items():
        text = text.replace(theirs, own)
    return text


def _split(key: str) -> tuple[list[str], str]:
    """The known prefixes of ``key`` in words, and the rest."""
    where = []
    changed = True
    while changed:
        changed = False
        for prefix, words in _PREFIXES.items():
            if key.startswith(prefix) and key != prefix:
                where.append(words)
                key, changed = key[len(prefix):], True
    return where, key


def title(key: str, labels: dict | None = None) -> str:
    """``key`` in words: "Attention to [CLS]"; "Attention entropy ... (word level)"; [CLS] and
    [SEP] renamed by ``labels`` ("Attention to <s>")."""
    where, rest = _split(key)
    text = _TITLES[rest][0] if rest in _TITLES else rest.replace("_", " ").capitalize()
    return rename(text, labels) + (f" ({', '.join(where)})" if where else "")


def unit(key: str) -> str:
    """What the values of ``key`` measure, for a colour bar or an axis ("mean row entropy (nats)")."""
    rest = _split(key)[1]
    return _TITLES[rest][1] if rest in _TITLES else "value"
