"""Every number the project quotes from a paper, tied to its page, table or figure, in one place.

``QUOTES`` holds the "paper" cells of the REPORT: what the paper printed (``values``, the numerals
exactly as printed), where (``where``: table, figure or section), the cell's text and how the
numbers were verified (``checked``). ``tests/test_papers.py`` keeps each text in step with its
numbers and locator. Papers: Devlin et al. 2019 (BERT, GLUE test), Clark et al. 2019 ("What Does
BERT Look At?"), Kobayashi et al. 2020 ("Attention is Not Only a Weight") and 2021 ("Incorporating
Residual and Normalization Layers ..."), Kovaleva et al. 2019 ("Revealing the Dark Secrets of
BERT"), Michel et al. 2019 ("Are Sixteen Heads Really Better than One?"), Voita et al. 2019
("Analyzing Multi-Head Self-Attention"), Olsson et al. 2022 and Elhage et al. 2021 (induction heads).

Sources of the checks: the arXiv PDFs of Devlin (1810.04805v2), Clark (1906.04341), Kovaleva
(1908.08593v2), Michel (1905.10650v3) and Voita (1905.09418v2), as copied into the public GitHub
repository viktor-shcherb/msc_thesis (references/*/<arXiv id>.pdf) and read as text; a full-text
transcription of Kobayashi et al. 2021 in the public GitHub index; the authors' code and notebook
outputs for Kobayashi et al. (github.com/gorokoba560/norm-analysis-of-transformer).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Paper:
    citation: str
    venue_url: str


@dataclass(frozen=True)
class Quote:
    paper: str  # a key of PAPERS
    where: str  # the table, figure or section, e.g. "Table 1, row 'All'"
    values: dict[str, str]  # named numerals exactly as the paper prints them
    text: str  # the REPORT's "paper" cell: names every value and the locator
    checked: str  # "checked against <source, table>" or "not retrievable offline: quoted from <where>"


PAPERS: dict[str, Paper] = {
    "devlin2019": Paper("Devlin, Chang, Lee, Toutanova 2019. BERT: Pre-training of Deep Bidirectional "
                        "Transformers for Language Understanding. NAACL-HLT 2019",
                        "https://aclanthology.org/N19-1423/"),
    "clark2019": Paper("Clark, Khandelwal, Levy, Manning 2019. What Does BERT Look At? An Analysis of "
                       "BERT's Attention. BlackboxNLP 2019", "https://aclanthology.org/W19-4828/"),
    "kobayashi2020": Paper("Kobayashi, Kuribayashi, Yokoi, Inui 2020. Attention is Not Only a Weight: "
                           "Analyzing Transformers with Vector Norms. EMNLP 2020",
                           "https://aclanthology.org/2020.emnlp-main.574/"),
    "kobayashi2021": Paper("Kobayashi, Kuribayashi, Yokoi, Inui 2021. Incorporating Residual and "
                           "Normalization Layers into Analysis of Masked Language Models. EMNLP 2021",
                           "https://arxiv.org/abs/2109.07152"),
    "kovaleva2019": Paper("Kovaleva, Romanov, Rogers, Rumshisky 2019. Revealing the Dark Secrets of BERT. "
                          "EMNLP-IJCNLP 2019", "https://aclanthology.org/D19-1445/"),
    "michel2019": Paper("Michel, Levy, Neubig 2019. Are Sixteen Heads Really Better than One? NeurIPS 2019",
                        "https://proceedings.neurips.cc/paper/2019/hash/"
                        "2c601ad9d2ff9bc8b282670cdd54f69f-Abstract.html"),
    "voita2019": Paper("Voita, Talbot, Moiseev, Sennrich, Titov 2019. Analyzing Multi-Head Self-Attention: "
                       "Specialized Heads Do the Heavy Lifting, the Rest Can Be Pruned. ACL 2019",
                       "https://aclanthology.org/P19-1580/"),
    "olsson2022": Paper("Olsson, Elhage, Nanda et al. 2022. In-context Learning and Induction Heads. "
                        "Transformer Circuits Thread",
                        "https://transformer-circuits.pub/2022/in-context-learning-and-induction-heads/index.html"),
    "elhage2021": Paper("Elhage, Nanda, Olsson et al. 2021. A Mathematical Framework for Transformer Circuits. "
                        "Transformer Circuits Thread", "https://transformer-circuits.pub/2021/framework/index.html"),
}

# how a check was done, per source (one phrase each, reused below)
_CLARK = "checked against arXiv:1906.04341 PDF"
_DEVLIN = "checked against arXiv:1810.04805v2 PDF"
_KOVALEVA = "checked against arXiv:1908.08593v2 PDF (EMNLP 2019 version's figure numbering)"
_MICHEL = "checked against arXiv:1905.10650v3 PDF (the NeurIPS 2019 camera-ready)"
_VOITA = "checked against arXiv:1905.09418v2 PDF"
_KOBAYASHI2020 = ("not retrievable offline: quoted from Kobayashi et al. 2020 {where} as the project had it; "
                  "the paper's text could not be read here")


def _syntax(relation: str, head: str, offset: str, label: str) -> Quote:
    """A row of Clark et al.'s Table 1: the best head's accuracy and the best fixed offset's."""
    return Quote("clark2019", f"Table 1, row '{relation}'", {"head": head, "offset": offset},
                 f"bert-base {label}: head {head} % vs offset {offset} % (Table 1, chosen and reported on one set)",
                 f"{_CLARK}, Table 1 (p. 6)")


def _coref(kind: str, head: str, nearest: str, match: str, rules: str) -> Quote:
    """A column of Clark et al.'s Table 2: antecedent selection accuracy on CoNLL-2012."""
    return Quote("clark2019", f"Table 2, column '{kind}'",
                 {"head": head, "head_match": match, "nearest": nearest, "rule_based": rules},
                 f"bert-base, CoNLL-2012, {kind} mentions: best head (5-4, 1-based) {head} % vs same head word "
                 f"{match} %, nearest {nearest} %, rule-based {rules} % (Table 2)",
                 f"{_CLARK}, Table 2 (p. 7)")


_VOITA_PRUNE = ("Voita et al. 2019: Transformer-base (6+6 x 8 heads, App. B.2) on WMT en-ru; 38 of 48 encoder "
                "heads pruned for -0.15 BLEU (§6.2.1, Fig. 7); gates added to the converged model and trained "
                "with it (§6.1)")

QUOTES: dict[str, Quote] = {
    # Devlin et al. 2019, Table 1 (GLUE test server), BERT-BASE row
    "devlin2019.glue.sst2": Quote(
        "devlin2019", "Table 1, row 'BERT-BASE', column 'SST-2'; §4.1", {"sst2": "93.5", "epochs": "3", "batch": "32"},
        "BERT-base SST-2 93.5 accuracy (Devlin et al. 2019 Table 1, GLUE test); fine-tuned 3 epochs, batch 32 (§4.1)",
        f"{_DEVLIN}, Table 1 and §4.1 (p. 6)"),
    "devlin2019.glue.cola": Quote(
        "devlin2019", "Table 1, row 'BERT-BASE', column 'CoLA'; §4.1", {"cola": "52.1", "epochs": "3", "batch": "32"},
        "BERT-base CoLA 52.1 (Devlin et al. 2019 Table 1, GLUE test server score, Matthews corr.); "
        "fine-tuned 3 epochs, batch 32 (§4.1)",
        f"{_DEVLIN}, Table 1 and §4.1 (p. 6); the caption files CoLA under 'accuracy', GLUE scores it by MCC"),
    # Clark et al. 2019
    "clark2019.sep-middle": Quote(
        "clark2019", "§3.2, Fig. 2", {"layer_first": "6", "layer_last": "10"},
        "bert-base: over half of the attention in layers 6-10 (1-based) goes to [SEP] (§3.2, Fig. 2)",
        f"{_CLARK}, §3.2 (p. 3)"),
    "clark2019.cls-early": Quote(
        "clark2019", "Fig. 2", {}, "bert-base: early heads attend to [CLS] (Fig. 2; no number stated)",
        f"{_CLARK}, Fig. 2 caption"),
    "clark2019.punct-deep": Quote(
        "clark2019", "Fig. 2", {}, "bert-base: deep heads attend to periods and commas (Fig. 2; no number stated)",
        f"{_CLARK}, Fig. 2 caption"),
    "clark2019.syntax.all": _syntax("All", "34.5", "26.3", "all relations"),
    "clark2019.syntax.det": _syntax("det", "94.3", "51.7", "det"),
    "clark2019.syntax.dobj": _syntax("dobj", "86.8", "40.0", "dobj"),
    "clark2019.syntax.pobj": _syntax("pobj", "76.3", "34.6", "pobj, arc reversed"),
    "clark2019.syntax.poss": _syntax("poss", "80.5", "47.7", "poss"),
    "clark2019.syntax.nsubj": _syntax("nsubj", "58.5", "45.5", "nsubj"),
    "clark2019.syntax.aux": _syntax("aux", "81.1", "71.5", "aux"),
    "clark2019.syntax.pooled": Quote(
        "clark2019", "Table 1; §4.2", {"common": "10", "others": "5"},
        "bert-base: on the 10 most common relations and 5 others the best head beats the best fixed offset, "
        "on many only slightly (Table 1, §4.2)",
        f"{_CLARK}, Table 1 caption and §4.2 (p. 6)"),
    "clark2019.probe.attn-glove": Quote(
        "clark2019", "Table 3", {"attn_glove": "77", "distances_glove": "58"},
        "bert-base: Attn + GloVe 77 UAS vs Distances + GloVe 58 (Table 3, PTB dev)", f"{_CLARK}, Table 3 (p. 8)"),
    "clark2019.probe.attn": Quote(
        "clark2019", "Table 3", {"attn": "61", "right_branching": "26"},
        "bert-base: Attn 61 UAS vs right-branching 26 (Table 3, PTB dev)", f"{_CLARK}, Table 3 (p. 8)"),
    "clark2019.coref.all": _coref("All", "65", "27", "52", "69"),
    "clark2019.coref.pronoun": _coref("Pronoun", "64", "29", "47", "70"),
    "clark2019.coref.proper": _coref("Proper", "73", "29", "67", "77"),
    "clark2019.coref.nominal": _coref("Nominal", "58", "19", "40", "60"),
    "clark2019.coref.weights-only": Quote(
        "clark2019", "§4.3, Table 2", {"heads": "144", "head": "65", "nearest": "27"},
        "Clark et al. 2019 §4.3, Table 2 (their 144-head base model, CoNLL-2012): the best attention head picks "
        "an antecedent 65 % of the time vs 27 % for the nearest mention; read from attention weights, "
        "no intervention", f"{_CLARK}, §1 (144 heads), §4.3 and Table 2 (p. 6-7)"),
    "clark2019.coref.untested-cause": Quote(
        "clark2019", "§4.3", {},
        "Clark et al. 2019 §4.3 name coreference heads by their attention weights only; whether those heads "
        "cause the behaviour is not tested there (activation patching: Vig et al. 2020, Wang et al. 2022)",
        f"{_CLARK}, §4.3 (no intervention in the paper)"),
    # Kobayashi et al. 2020 (text not retrievable here; see checked)
    "kobayashi2020.weight-special": Quote(
        "kobayashi2020", "Fig. 2", {"segments": "992"},
        "BERT-base, 992 Wikipedia segments: [CLS], [SEP] and punctuation get large α (Kobayashi et al. 2020 "
        "Fig. 2, weight-based; Clark et al. 2019)",
        _KOBAYASHI2020.format(where="Fig. 2") + "; 992 confirmed by Kobayashi et al. 2021 Table 1 (the same "
        "Wikipedia data of Clark et al.) and the authors' notebook (992 sequences)"),
    "kobayashi2020.norm-special": Quote(
        "kobayashi2020", "Fig. 2-3", {},
        "BERT-base: ‖αf(x)‖ to [CLS], [SEP] and punctuation far below their α; α and ‖f(x)‖ cancel (Fig. 2-3)",
        _KOBAYASHI2020.format(where="Fig. 2-3") + "; Kobayashi et al. 2021 §4.4 restates the cancellation"),
    "kobayashi2020.weight-other": Quote(
        "kobayashi2020", "Fig. 2", {}, "BERT-base: the other tokens get the rest of α (Fig. 2)",
        _KOBAYASHI2020.format(where="Fig. 2")),
    "kobayashi2020.norm-other": Quote(
        "kobayashi2020", "Fig. 2", {}, "BERT-base: the other tokens' share grows from α to ‖αf(x)‖ (Fig. 2)",
        _KOBAYASHI2020.format(where="Fig. 2")),
    "kobayashi2020.frequency": Quote(
        "kobayashi2020", "§4.3", {"rho": "0.75"},
        "BERT-base: ρ(‖f(x)‖, frequency rank) ≈ 0.75 over occurrences: rarer tokens, larger ‖f(x)‖ (§4.3)",
        _KOBAYASHI2020.format(where="§4.3")),
    "kobayashi2020.align.awo": Quote(
        "kobayashi2020", "Table 4, AWO", {"norm": "41.4", "weight": "47.7", "layers": "6", "heads": "4", "seeds": "5"},
        "de-en Transformer 6+6 × 4 heads, 5 seeds, human gold: best-layer AER 41.4 (‖Σαf‖) vs 47.7 (α) (Table 4)",
        _KOBAYASHI2020.format(where="Table 4") + "; the authors' notebook (emnlp2020/exp2_nmt/run.ipynb, "
        "fairseq transformer_iwslt_de_en, 5 seeds) averages to 41.36 vs 47.74"),
    "kobayashi2020.align.awi": Quote(
        "kobayashi2020", "Table 4, AWI", {"norm": "25.0", "weight": "29.8", "layers": "6", "heads": "4", "seeds": "5"},
        "de-en Transformer 6+6 × 4 heads, 5 seeds, human gold: best-layer AER 25.0 (‖Σαf‖) vs 29.8 (α) (Table 4)",
        _KOBAYASHI2020.format(where="Table 4") + "; the authors' notebook averages to 24.98 vs 29.77"),
    "kobayashi2020.align.vs-trivial": Quote(
        "kobayashi2020", "Table 4", {"low": "25", "high": "48"},
        "norm- and weight-based alignments far better than trivial (best-layer AER 25-48, Table 4)",
        _KOBAYASHI2020.format(where="Table 4") + "; 25-48 spans the four best-layer AERs above"),
    # Kobayashi et al. 2021
    "kobayashi2021.mixing": Quote(
        "kobayashi2021", "Table 2, BERT-base rows 'ATTN-W' and 'ATTNRESLN-N' (column 'Mean'); §4.1",
        {"attnresln_n": "18.8", "attn_w": "97.1", "masked": "15", "of_which": "80"},
        "BERT-base mean mixing ratio: AttnResLn-N 18.8 % vs Attn-W 97.1 % (2021 Table 2; §4.1: 15 % of tokens "
        "masked 80 % of the time)",
        "checked against a full-text transcription of the EMNLP 2021 paper (Table 1 = data sets, Table 2 = "
        "mixing ratios) in the public GitHub index; not compared with arXiv:2109.07152v1 or the ACL Anthology "
        "PDF, which could not be read here. The old 96.41 / 18.75 are the authors' notebook output "
        "(gorokoba560/norm-analysis-of-transformer, emnlp2021/run.ipynb, cell 'Statistics of the mixing ratio "
        "(Table 1)'), not the paper's numbers"),
    # Kovaleva et al. 2019
    "kovaleva2019.disable-head": Quote(
        "kovaleva2019", "§4.6, Fig. 8", {"min_gain": "0.1", "max_gain": "1.2"},
        "BERT-base fine-tuned per GLUE task (MRPC, STS-B, SST-2, QQP, RTE, QNLI, MNLI), dev sets: disabling a "
        "single head raises dev performance in every task, at best by 0.1 (STS-B) to 1.2 points (MRPC) (§4.6, "
        "Fig. 8), heads chosen and reported on the same dev set, no test",
        f"{_KOVALEVA}, §4.6 (p. 8) and Fig. 8"),
    "kovaleva2019.disable-layer": Quote(
        "kovaleva2019", "§4.6, Fig. 9", {"rte_layer": "1", "rte_gain": "3.2", "max_drop": "0.2"},
        "BERT-base fine-tuned per GLUE task (MRPC, STS-B, SST-2, QQP, RTE, QNLI, MNLI), dev sets: disabling a "
        "whole layer can also raise dev performance, by 3.2 points for layer 1 on RTE, while QNLI and MNLI drop "
        "up to 0.2 (§4.6, Fig. 9), against the fine-tuned model, no test",
        f"{_KOVALEVA}, §4.6 (p. 8) and Fig. 9; the paper has no Fig. 10"),
    "kovaleva2019.no-rules": Quote(
        "kovaleva2019", "§4.1", {}, "the paper uses no rules (hand labels and a CNN, §4.1)",
        f"{_KOVALEVA}, §4.1 (p. 3)"),
    "kovaleva2019.cnn": Quote(
        "kovaleva2019", "§4.1, Fig. 2", {"maps": "400", "conv_layers": "8", "f1": "0.86"},
        "a CNN (8 convolutional layers, F1 0.86) trained on about 400 hand-labelled maps of fine-tuned BERT-base "
        "labels the five types (§4.1, Fig. 2)", f"{_KOVALEVA}, §4.1 (p. 3)"),
    "kovaleva2019.structured-share": Quote(
        "kovaleva2019", "§4.1, Fig. 2", {"maps": "400", "vertical": "30", "het_min": "32", "het_max": "61"},
        "BERT-base, GLUE tasks: about 400 maps labelled by hand into five types and a CNN for the rest (§4.1, "
        "Fig. 2): heterogeneous maps are at most 32 % (MRPC) to 61 % (QQP), the four structured types (vertical, "
        "diagonal, vertical+diagonal, block) the rest; 30 % of the hand-labelled maps vertical",
        f"{_KOVALEVA}, §4.1 (p. 3)"),
    "kovaleva2019.finetune-change": Quote(
        "kovaleva2019", "§4.3, Fig. 5", {},
        "BERT-base, GLUE tasks except QQP (§4.3, Fig. 5): the last two layers' maps change most under fine-tuning",
        f"{_KOVALEVA}, §4.3 (p. 5)"),
    # Michel et al. 2019
    "michel2019.prune40": Quote(
        "michel2019", "§4.2, Fig. 3b", {"pruned": "40"},
        "BERT-base on MNLI-matched (dev accuracy, §4.2, Fig. 3b): about 40 % of heads prunable by importance "
        "without noticeable loss", f"{_MICHEL}, §4.2 (p. 6) and Fig. 3b"),
    "michel2019.vs-random": Quote(
        "michel2019", "Fig. 3b", {},
        "BERT-base on MNLI-matched (dev accuracy, Fig. 3b): pruning by importance (random orders are not in the "
        "paper; STATISTICS §4's baseline)", f"{_MICHEL}, Fig. 3 (importance vs oracle order, no random order)"),
    "michel2019.wmt": Quote(
        "michel2019", "§4.2, Fig. 3a", {"pruned": "20", "layers": "6", "heads": "16"},
        "Michel et al. 2019, Fig. 3a: BLEU vs heads pruned (WMT en-fr, 6+6 x 16 heads); up to 20 % of heads "
        "prunable without noticeable loss (§4.2)", f"{_MICHEL}, §3.1, §4.2 and Fig. 3a"),
    # Voita et al. 2019
    "voita2019.prune38": Quote(
        "voita2019", "§6.2.1, Fig. 7; App. B.2", {"pruned": "38", "heads": "48", "bleu_drop": "0.15"},
        _VOITA_PRUNE, f"{_VOITA}, abstract, §6.1, §6.2.1 and App. B.2"),
    "voita2019.prune38.vs-importance": Quote(
        "voita2019", "§6.2.1, Fig. 7; App. B.2", {"pruned": "38", "heads": "48", "bleu_drop": "0.15"},
        _VOITA_PRUNE + "; Michel et al. 2019 (importance pruning)", f"{_VOITA}, abstract, §6.1, §6.2.1 and App. B.2"),
    "voita2019.confidence-lrp": Quote(
        "voita2019", "§4, Fig. 1", {},
        "Voita et al. 2019, §4 and Fig. 1 (OpenSubtitles en-ru encoder): the heads LRP finds most relevant are "
        "mostly the most confident ones (shown per head, no statistic)",
        f"{_VOITA}, §4 and Fig. 1 caption (the model is OpenSubtitles en-ru, not WMT)"),
    "voita2019.kept-heads": Quote(
        "voita2019", "§6.2.2, Fig. 8", {},
        "Voita et al. 2019, §6.2.2, Fig. 8 (OpenSubtitles en-ru): the heads left by L0 pruning are the specialised "
        "(positional, syntactic, rare-word) ones, which §5.1 finds the most confident",
        f"{_VOITA}, §5.1, §6.2.2 and Fig. 8 caption"),
    # Olsson et al. 2022, Elhage et al. 2021: no number quoted
    "olsson2022.icl": Quote(
        "olsson2022", "§2 'Key Concepts'", {},
        "Olsson et al. 2022 §2 'Key Concepts': models with induction heads predict the second copy of a repeated "
        "random sequence far better than the first (the in-context learning they measure as a loss drop along "
        "the context); models without them cannot",
        "checked against a third-party section transcription (viktor-shcherb/msc_thesis, "
        "2022-03-in-context-learning-induction-heads/sections/02_key-concepts.md); qualitative, no number"),
    "olsson2022.induction-head": Quote(
        "olsson2022", "§2 'Key Concepts'", {},
        "Olsson et al. 2022 §2 'Key Concepts', Elhage et al. 2021: 2-layer attention-only models form induction "
        "heads (in the second layer), attending from a token to the one after its earlier occurrence",
        "checked against the same transcription (02_key-concepts.md); qualitative, no number"),
    "elhage2021.previous-token-head": Quote(
        "elhage2021", "section 'Induction Heads'", {},
        "Elhage et al. 2021, section 'Induction Heads': the induction heads' keys are written by previous-token "
        "heads of the layer below, which attend from each token to the one before it",
        "checked against a third-party transcription (viktor-shcherb/msc_thesis, 2021-12-transformer-circuits-"
        "framework/sources/01_main-article.md); qualitative, no number"),
    "elhage2021.k-composition": Quote(
        "elhage2021", "section 'Induction Heads'", {},
        "Elhage et al. 2021 (section 'Induction Heads': K-composition, read from the weights), Olsson et al. "
        "2022 (ablations): the induction head finds its target through the previous-token head's output in its keys",
        "checked against the same transcription (K-composition, previous-token head); qualitative, no number"),
}


def quote(key: str) -> str:
    """The REPORT's "paper" cell for ``key``: the quote's text, naming its table, figure or section."""
    return QUOTES[key].text


# claim id pattern (fnmatch) -> quote key, the first match wins; GAP came after the paper, so its claim
# quotes the CoNLL-2012 number as the nearest one. A claim no pattern names quotes no paper number (a
# reference point of this project's: eflomal, the patching corruption, attribution patching): its
# stage's text stands.
BY_CLAIM: tuple[tuple[str, str], ...] = (
    ("finetune-*-sst2", "devlin2019.glue.sst2"), ("finetune-*-cola", "devlin2019.glue.cola"),
    ("clark-*-sep-middle", "clark2019.sep-middle"), ("clark-*-cls-early", "clark2019.cls-early"),
    ("clark-*-punct-deep", "clark2019.punct-deep"),
    *((f"clark-*-syntax-{ours}", f"clark2019.syntax.{theirs}") for ours, theirs in (
        ("det", "det"), ("obj", "dobj"), ("case", "pobj"), ("nmod-poss", "poss"), ("nsubj", "nsubj"),
        ("aux", "aux"), ("all", "all"), ("pooled", "pooled"))),
    ("clark-*-probe-attn-emb", "clark2019.probe.attn-glove"), ("clark-*-probe-attn", "clark2019.probe.attn"),
    ("clark-*-coref-litbank", "clark2019.coref.all"), ("clark-*-coref-litbank-pronoun", "clark2019.coref.pronoun"),
    ("clark-*-coref-litbank-proper", "clark2019.coref.proper"),
    ("clark-*-coref-litbank-nominal", "clark2019.coref.nominal"), ("clark-*-coref-gap", "clark2019.coref.all"),
    ("kobayashi-align*-AWO-norms-vs-weights", "kobayashi2020.align.awo"),
    ("kobayashi-align*-AWI-norms-vs-weights", "kobayashi2020.align.awi"),
    ("kobayashi-align*-norms-vs-diagonal", "kobayashi2020.align.vs-trivial"),
    ("kobayashi-*-weight-other", "kobayashi2020.weight-other"), ("kobayashi-*-norm-other", "kobayashi2020.norm-other"),
    ("kobayashi-*-weight-*", "kobayashi2020.weight-special"), ("kobayashi-*-norm-*", "kobayashi2020.norm-special"),
    ("kobayashi-*-frequency", "kobayashi2020.frequency"), ("kobayashi-*-mixing", "kobayashi2021.mixing"),
    ("kovaleva-*-layers-holm", "kovaleva2019.disable-layer"),
    ("kovaleva-*-best-head-*", "kovaleva2019.disable-head"), ("kovaleva-*-heads-holm", "kovaleva2019.disable-head"),
    ("kovaleva-rules-held-out", "kovaleva2019.no-rules"), ("kovaleva-cnn-held-out", "kovaleva2019.cnn"),
    ("kovaleva-*-structured-share", "kovaleva2019.structured-share"),
    ("kovaleva-*-finetune-change", "kovaleva2019.finetune-change"),
    ("michel-*-prune40", "michel2019.prune40"), ("michel-*-vs-random50", "michel2019.vs-random"),
    ("voita-michel-*", "michel2019.wmt"), ("voita-*-vs-importance*", "voita2019.prune38.vs-importance"),
    ("voita-confidence-lrp", "voita2019.confidence-lrp"), ("voita-kept-confidence-*", "voita2019.kept-heads"),
    ("voita-synthetic-kept-confidence", "voita2019.kept-heads"),
    ("voita-*", "voita2019.prune38"),
    ("patching-minilm-behaviour", "clark2019.coref.weights-only"),
    ("patching-mpnet-behaviour", "clark2019.coref.weights-only"),
    ("patching-*-clark", "clark2019.coref.untested-cause"),
    ("induction-*-icl", "olsson2022.icl"), ("induction-*-induction-head", "olsson2022.induction-head"),
    ("induction-*-previous-token-head", "elhage2021.previous-token-head"),
    ("induction-*-path", "elhage2021.k-composition"),
)


# quote key -> the paper's effect in the units of the claim's test (a proportion, ρ), from its printed values
_EFFECTS = {
    "syntax": lambda v: (float(v["head"]) - float(v["offset"])) / 100,  # head − offset accuracy
    "coref": lambda v: (float(v["head"]) - float(v["head_match"])) / 100,  # head − same head word
    "kovaleva2019.disable-head": lambda v: float(v["max_gain"]) / 100,  # the largest single-head gain
    "kovaleva2019.disable-layer": lambda v: float(v["rte_gain"]) / 100,
    "kobayashi2020.frequency": lambda v: float(v["rho"]),
    "kobayashi2020.align.awo": lambda v: (float(v["norm"]) - float(v["weight"])) / 100,
    "kobayashi2020.align.awi": lambda v: (float(v["norm"]) - float(v["weight"])) / 100,
    "kobayashi2021.mixing": lambda v: (float(v["attnresln_n"]) - float(v["attn_w"])) / 100,
    "clark2019.probe.attn-glove": lambda v: (float(v["attn_glove"]) - float(v["distances_glove"])) / 100,
    "clark2019.probe.attn": lambda v: (float(v["attn"]) - float(v["right_branching"])) / 100,
}


def _key(claim_id: str) -> str | None:
    from fnmatch import fnmatchcase

    return next((key for pattern, key in BY_CLAIM if fnmatchcase(claim_id, pattern)), None)


def effect(claim_id: str) -> float | None:
    """The paper's effect in the units of the claim's test (e.g. Table 1's head − offset accuracy
    as a proportion), from the printed numerals of its quote; None where the paper prints none."""
    key = _key(claim_id)
    if key is None:
        return None
    kind = "syntax" if key.startswith("clark2019.syntax.") and "head" in QUOTES[key].values else (
        "coref" if key.startswith("clark2019.coref.") and "head_match" in QUOTES[key].values else key)
    return _EFFECTS[kind](QUOTES[key].values) if kind in _EFFECTS else None


NO_NUMBER = "no paper number (this project's own check, no table, figure or section to cite): "


def for_claim(claim: dict) -> str:
    """The REPORT's "paper" cell of ``claim``: its quote (``BY_CLAIM``), else the claim's own text
    marked as having no paper number (``NO_NUMBER``) unless it says so itself."""
    key = _key(claim["id"])
    if key is not None:
        gap = claim["id"].startswith("clark-") and claim["id"].endswith("-coref-gap")
        return ("not in the paper (GAP came later); the nearest: " if gap else "") + quote(key)
    text = claim["paper"]
    return text if text.lower().startswith(("no paper number", "not in the paper")) else NO_NUMBER + text
