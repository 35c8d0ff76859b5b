"""Word alignment from a translation model's cross-attention as per-sentence counts (Kobayashi
et al. 2020, §5; definitions in ``jattn.analyses.alignment``).

Each (French, English) pair of pre-split words is teacher-forced through the model (its recorded
text normalisation applied to every word, each word tokenized on its own); every decoder layer's
cross-attention gives three word-level maps (sum over source subwords, mean over target
subwords), each turned into links (argmax source word per target word, none when the argmax is
the source EOS):

- ``weights``: α averaged over heads (the weight-based alignment);
- ``norms``: ‖α_h f_h(x_j)‖ averaged over heads;
- ``summed``: ‖Σ_h α_h f_h(x_j)‖ (the paper's norm-based alignment);

in two readings of the decoder rows, AWO (row t outputs target word t) and AWI (row t takes
target word t as input). Systems are named ``<setting>/<map>/<layer>``, beside ``diagonal``
(target word t → the source word at the same relative position) and ``eflomal`` (the
statistical aligner, both directions symmetrised by grow-diag-final-and). A row holds one pair's
|S|, |P| and per system |A|, |A∩S|, |A∩P|: the pooled AER (``claims`` statistic ``aer``) of any
set of pairs is recomputed from them.
"""

from __future__ import annotations

import numpy as np

from jattn.analyses import alignment as AL

SETTINGS = ("AWO", "AWI")
MAPS = ("weights", "norms", "summed")


def read_pairs(src_tgt, gold, limit: int = 0) -> tuple[list, list]:
    """The Hansards files (``english ||| french`` words, 1-based talp gold) as French→English:
    ([(French words, English words)], [(sure, possible)] with (French, English) links)."""
    pairs = [(fr, en) for en, fr in AL.read_tokenized_pairs(src_tgt)]
    links = [(AL.swap(s), AL.swap(p)) for s, p in AL.read_gold(gold, one_based=True)]
    if len(pairs) != len(links):
        raise ValueError(f"{src_tgt} has {len(pairs)} pairs but {gold} {len(links)} gold lines")
    return (pairs[:limit], links[:limit]) if limit else (pairs, links)


def normalised(model, pairs: list) -> list:
    """Every word as the model's training text was normalised (its recorded NFKC/lowercasing)."""
    return [(model.prepare_texts(fr), model.prepare_texts(en)) for fr, en in pairs]


def encode(model, pairs: list) -> list[dict]:
    """(French words, English words) -> source/target ids (EOS last) and each token's word (-1: EOS)."""
    tok = model.tokenizer
    src = lambda w: tok(w, add_special_tokens=False)["input_ids"]
    tgt = lambda w: tok(text_target=w, add_special_tokens=False)["input_ids"]
    items = []
    for fr, en in pairs:
        s_ids, s_word = AL.subword_words(src, fr)
        t_ids, t_word = AL.subword_words(tgt, en)
        items.append({"src": s_ids + [tok.eos_token_id], "src_word": s_word + [-1],
                      "tgt": t_ids + [tok.eos_token_id], "tgt_word": t_word + [-1]})
    return items


def _batch(model, items: list[dict]) -> dict:
    """Teacher-forcing inputs: decoder input = start token + target[:-1]; lengths rounded up to 8."""
    from jattn.runner import pad_rows, round_up

    pad, start = model.tokenizer.pad_token_id, model.config.decoder_start_token_id
    b = len(items)
    s, t = round_up(max(len(x["src"]) for x in items)), round_up(max(len(x["tgt"]) for x in items))
    ids, mask = pad_rows([x["src"] for x in items], b, s, pad)  # (b, s)
    dec, dec_mask = pad_rows([[start] + x["tgt"][:-1] for x in items], b, t, pad)  # (b, t)
    return {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec, "decoder_attention_mask": dec_mask}


def model_links(model, items: list[dict], batch_size: int = 32) -> dict[str, list]:
    """{``<setting>/<map>/<layer>``: links per pair, in ``items`` order} from ``jattn.norms``'
    cross-attention of every decoder layer."""
    import jattn

    out: dict[str, list] = {}
    order = sorted(range(len(items)), key=lambda k: (len(items[k]["src"]) + len(items[k]["tgt"]), k))
    for begin in range(0, len(order), batch_size):
        idx = order[begin:begin + batch_size]
        cross = jattn.norms(model, _batch(model, [items[k] for k in idx]))["cross"]
        maps = {"weights": cross["weights"].mean(2), "norms": cross["weighted_norm"].mean(2),  # (L, b, t, s)
                "summed": cross["summed_norm"]}  # (L, b, t, s)
        for r, k in enumerate(idx):
            x = items[k]
            s, t, src_word = len(x["src"]), len(x["tgt"]), np.asarray(x["src_word"])
            for setting in SETTINGS:
                rows = AL.decoder_rows(x["tgt_word"], setting, t)  # (t,) target word per decoder row
                for name, m in maps.items():
                    for layer in range(m.shape[0]):
                        links = AL.hard_alignment(AL.word_map(m[layer, r, :t, :s], rows, src_word))
                        out.setdefault(f"{setting}/{name}/{layer}", [None] * len(items))[k] = links
    return out


def diagonal_links(pairs: list) -> list:
    return [AL.diagonal_alignment(len(fr), len(en)) for fr, en in pairs]


def eflomal_links(pairs: list, extra: list = ()) -> list:
    """eflomal trained on ``extra`` + ``pairs`` (unsupervised), symmetrised; links of ``pairs``."""
    from jattn.analyses.eflomal_align import eflomal_align

    corpus = list(extra) + list(pairs)
    _, _, sym = eflomal_align([fr for fr, _ in corpus], [en for _, en in corpus])
    return sym[len(extra):]


def rows(gold: list, systems: dict[str, list]) -> list[dict]:
    """One row per pair: ``sure``, ``possible`` and per system ``<name>:predicted``,
    ``<name>:sure_hits``, ``<name>:possible_hits``."""
    out = []
    for k, (sure, possible) in enumerate(gold):
        possible = possible | sure
        row = {"index": k, "sure": len(sure), "possible": len(possible)}
        for name, links in systems.items():
            a = links[k]
            row |= {f"{name}:predicted": len(a), f"{name}:sure_hits": len(a & sure),
                    f"{name}:possible_hits": len(a & possible)}
        out.append(row)
    return out


def columns(system: str) -> dict:
    """The ``aer`` statistic's columns for ``system``."""
    return {"sure": "sure", "possible": "possible", "predicted": f"{system}:predicted",
            "sure_hits": f"{system}:sure_hits", "possible_hits": f"{system}:possible_hits"}


def pooled_aer(table: list[dict], system: str) -> float:
    """Pooled AER (Och & Ney 2003) of ``system`` over the rows of ``table``."""
    a = sum(r[f"{system}:predicted"] for r in table)
    s = sum(r["sure"] for r in table)
    hits = sum(r[f"{system}:sure_hits"] + r[f"{system}:possible_hits"] for r in table)
    return 1.0 - hits / (a + s)


def best_layer(table: list[dict], setting: str, name: str, layers: int) -> tuple[int, list[float]]:
    """The layer of lowest pooled AER on ``table`` and every layer's AER."""
    per_layer = [pooled_aer(table, f"{setting}/{name}/{layer}") for layer in range(layers)]
    return int(np.argmin(per_layer)), per_layer


def moses_pairs(model, fr_lines: list[str], en_lines: list[str]) -> list:
    """Parallel sentences as (French words, English words), normalised as the model's training
    text and split by the Moses tokenizer (sacremoses); pairs with an empty side dropped."""
    from sacremoses import MosesTokenizer

    fr_tok, en_tok = MosesTokenizer(lang="fr"), MosesTokenizer(lang="en")
    out = []
    for f, e in zip(model.prepare_texts(fr_lines), model.prepare_texts(en_lines)):
        fr, en = fr_tok.tokenize(f, escape=False), en_tok.tokenize(e, escape=False)
        if fr and en:
            out.append((fr, en))
    return out


def fit(model, items: list[dict], batch_size: int = 32) -> dict:
    """How familiar the model is with a set of pairs: subwords per word on each side, and the
    teacher-forced next-token accuracy (the argmax of the logits at decoder row t is target token t,
    EOS included) pooled over the pairs."""
    hits = total = 0
    for begin in range(0, len(items), batch_size):
        chunk = items[begin:begin + batch_size]
        logits = np.asarray(model.forward(_batch(model, chunk), internals=None).logits)  # (b, t, V)
        for r, x in enumerate(chunk):
            t = len(x["tgt"])
            hits += int((logits[r, :t].argmax(-1) == np.asarray(x["tgt"])).sum())
            total += t
    words = lambda side: sum(max(x[f"{side}_word"]) + 1 for x in items)
    return {"pairs": len(items), "next_token_accuracy": hits / total,
            "source_subwords_per_word": sum(len(x["src"]) - 1 for x in items) / words("src"),
            "target_subwords_per_word": sum(len(x["tgt"]) - 1 for x in items) / words("tgt")}
