"""FSMT (fairseq WMT19; Ng et al. 2019): separate source and target tables, an untied output
projection, tensor2tensor's sinusoid table with real tokens numbered from ``pad_token_id + 1``.
jattn's ``inputs_embeds`` / ``decoder_inputs_embeds`` are the scaled token embeddings
(``jattn.nn.seq2seq.word_embeddings``), their positions counted from the masks; HF FSMT scales the
given embeddings by sqrt(d_model) itself and takes tokens whose first coordinate is 0 for padding."""

from jattn.families.fsmt import convert
from jattn.families.config_table import SEQ2SEQ, activation, reads, size, with_defaults
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import ConfigError, seq2seq_config

# FSMTConfig's keys and defaults
CONFIG_KEYS = (*with_defaults(SEQ2SEQ, activation_function=activation("activation_function", "relu"),
                              scale_embedding=True, tie_word_embeddings=False),
               size("src_vocab_size", "rows of the source table"), size("tgt_vocab_size", "rows of the target table"))


@reads(CONFIG_KEYS)
def config_from_hf(hf: dict):
    if hf["tie_word_embeddings"]:
        raise ConfigError("FSMT with tie_word_embeddings=True is not supported")
    return seq2seq_config(hf, default_activation="relu", vocab_sizes=(hf["src_vocab_size"], hf["tgt_vocab_size"]),
                          positions="tensor2tensor", shared_embeddings=False, tie_output=False,
                          scale_embedding=hf["scale_embedding"],
                          final_logits_bias=False, decoder_mask="pad")


def side_vocab(tokenizer, side: str) -> dict[str, int]:
    """FSMT's tokenizer keeps one table per side: ``encoder`` (token -> id, source) and
    ``decoder`` (id -> token, target)."""
    if side == "source":
        return dict(tokenizer.encoder)
    return {token: i for i, token in tokenizer.decoder.items()}


SPEC = register(FamilySpec(
    model_type="fsmt", shape="encoder-decoder", config_from_hf=config_from_hf,
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict,
    # the tokenizer ends sentences with its sep token "</s>" and may define no eos attribute; the
    # model's eos id comes from config.json
    tokenizer_files=(("vocab-src.json", "vocab-tgt.json", "merges.txt"),), special_tokens=("pad",),
    side_vocab=side_vocab,
))
