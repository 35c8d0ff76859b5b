"""mBART (Liu et al. 2020, "Multilingual Denoising Pre-training for Neural Machine Translation"):
BART's embeddings and key names with pre-LayerNorm blocks (Xiong et al. 2020: h = x +
Sublayer(LN(x)) for self-attention, cross-attention and the FFN) and a final LayerNorm on each
stack's output (``layer_norm``; Liu et al. §2.2). One learned position table per side with position p at row
p + 2, a LayerNorm on each side's embeddings (``layernorm_embedding``), token embeddings scaled by
sqrt(d_model) when config.json says ``scale_embedding``, one token table for source, target and
output, a ``final_logits_bias``; without a decoder mask HF attends to every target position.

Language codes are tokens. mBART-cc25 style (``MBartTokenizer``): a source is ``X </s> src_lang``,
a target ``X </s> tgt_lang``, and decoding starts from the target's code
(``decoder_start_token_id``; a config without one starts from ``bos_token_id``, as HF's
``generate`` does). mBART-50 style (``MBart50Tokenizer``): ``lang X </s>`` on both sides,
decoding starts from ``</s>`` and forces the target's code first (``forced_bos_token_id``, from
config.json / generation_config.json or per call: ``jattn.nn.decode.generate``).
``inputs_embeds`` / ``decoder_inputs_embeds`` are HF's: the scaled token embeddings
(``jattn.nn.seq2seq.word_embeddings``)."""

from jattn.families.layouts.seq2seq import POSITION_OFFSET
from jattn.families.mbart import convert
from jattn.families.config_table import SEQ2SEQ, reads, size, with_defaults
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import ConfigError, seq2seq_config

# MBartConfig's keys and defaults: no decoder_start_token_id (decoding starts from bos_token_id)
CONFIG_KEYS = (*with_defaults(SEQ2SEQ, decoder_start_token_id=None),
               size("vocab_size", "rows of the shared token table"))


@reads(CONFIG_KEYS)
def config_from_hf(hf: dict):
    if not hf["tie_word_embeddings"]:
        raise ConfigError("mBART with tie_word_embeddings=False is not supported: jattn ties the output "
                          "projection to the shared token table, as MBartForConditionalGeneration does by default")
    V = hf["vocab_size"]
    return seq2seq_config(hf, default_activation="gelu", vocab_sizes=(V, V), positions="learned",
                          position_offset=POSITION_OFFSET, embedding_ln=True, norm_position="pre", final_norm=True,
                          shared_embeddings=True, tie_output=True,
                          scale_embedding=hf["scale_embedding"], final_logits_bias=True,
                          decoder_mask="all")


SPEC = register(FamilySpec(
    model_type="mbart", shape="encoder-decoder", config_from_hf=config_from_hf,
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict, to_hf_config=convert.to_hf_config,
    # SentencePiece (Kudo & Richardson 2018): tokenizer.json, or sentencepiece.bpe.model
    tokenizer_files=(("tokenizer.json",), ("sentencepiece.bpe.model",)), special_tokens=("pad", "eos"),
))
