"""Marian (Opus-MT; Junczys-Dowmunt et al. 2018): one embedding table for source, target and
output, positions 0..n-1 (Vaswani et al.'s table), a ``final_logits_bias``, and a default decoder
mask that attends everywhere (the start token is the pad id). jattn's ``inputs_embeds`` and
``decoder_inputs_embeds`` are the scaled token embeddings (``jattn.nn.seq2seq.word_embeddings``):
HF Marian's ``inputs_embeds`` are those, but it scales ``decoder_inputs_embeds`` by sqrt(d_model)
itself (pass HF the embeddings divided by sqrt(d_model))."""

from jattn.families.marian import convert
from jattn.families.config_table import SEQ2SEQ, ConfigKey, flag, reads, size, token, with_defaults
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import ConfigError, seq2seq_config

# MarianConfig's keys and defaults
CONFIG_KEYS = (
    *with_defaults(SEQ2SEQ, pad_token_id=token("pad_token_id", 58100, "the padding token", nullable=False),
                   eos_token_id=token("eos_token_id", 0, "the end-of-sentence token", nullable=False),
                   bos_token_id=None, decoder_start_token_id=58100),
    size("vocab_size", "rows of the source (and shared) token table"),
    ConfigKey("decoder_vocab_size", int, 1, None, None, "rows of the target table (null: vocab_size)", nullable=True),
    flag("share_encoder_decoder_embeddings", True, "one token table for source and target"),
)


@reads(CONFIG_KEYS)
def config_from_hf(hf: dict):
    shared = hf["share_encoder_decoder_embeddings"]
    src_v = hf["vocab_size"]
    tgt_v = src_v if shared else (hf["decoder_vocab_size"] or src_v)
    if not hf["tie_word_embeddings"]:
        raise ConfigError("Marian with tie_word_embeddings=False is not supported")
    return seq2seq_config(hf, default_activation="gelu", vocab_sizes=(src_v, tgt_v), positions="vaswani",
                          shared_embeddings=shared, tie_output=True,
                          scale_embedding=hf["scale_embedding"],
                          final_logits_bias=True, decoder_mask="all")


SPEC = register(FamilySpec(
    model_type="marian", shape="encoder-decoder", config_from_hf=config_from_hf,
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict, to_hf_config=convert.to_hf_config,
    tokenizer_files=(("source.spm", "target.spm", "vocab.json"),), special_tokens=("pad", "eos"),
))
