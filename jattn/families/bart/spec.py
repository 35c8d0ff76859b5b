"""BART (Lewis et al. 2020): post-LayerNorm blocks with GELU, one learned position table per side
with position p at row p + 2, a LayerNorm on each side's embeddings (``layernorm_embedding``), one
token table for source, target and output, a ``final_logits_bias``; token embeddings scaled by
sqrt(d_model) when config.json says ``scale_embedding``. Decoding starts from ``</s>``
(``decoder_start_token_id``) and may force ``<s>`` first (``forced_bos_token_id``); without a
decoder mask HF attends to every target position. ``inputs_embeds`` / ``decoder_inputs_embeds``
are HF's: the scaled token embeddings (``jattn.nn.seq2seq.word_embeddings``).

A "bart" config asking for pre-LayerNorm blocks or final LayerNorms (``normalize_before``,
``add_final_layer_norm``) is refused by ``seq2seq_config``; mBART's checkpoints (``model_type``
"mbart") are ``jattn.families.mbart``'s."""

from jattn.families.bart import convert
from jattn.families.layouts.seq2seq import POSITION_OFFSET
from jattn.families.config_table import SEQ2SEQ, reads, size
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import ConfigError, seq2seq_config

CONFIG_KEYS = (*SEQ2SEQ, size("vocab_size", "rows of the shared token table"))  # BartConfig's keys and defaults


@reads(CONFIG_KEYS)
def config_from_hf(hf: dict):
    if not hf["tie_word_embeddings"]:
        raise ConfigError("BART with tie_word_embeddings=False is not supported: jattn ties the output "
                          "projection to the shared token table, as BartForConditionalGeneration does by default")
    V = hf["vocab_size"]
    return seq2seq_config(hf, default_activation="gelu", vocab_sizes=(V, V), positions="learned",
                          position_offset=POSITION_OFFSET, embedding_ln=True, shared_embeddings=True,
                          tie_output=True, scale_embedding=hf["scale_embedding"],
                          final_logits_bias=True, decoder_mask="all")


SPEC = register(FamilySpec(
    model_type="bart", shape="encoder-decoder", config_from_hf=config_from_hf,
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict, to_hf_config=convert.to_hf_config,
    # byte-level BPE (GPT-2's, Radford et al. 2019): tokenizer.json, or vocab.json + merges.txt;
    # sentences are <s> … </s>
    tokenizer_files=(("tokenizer.json",), ("vocab.json", "merges.txt")), special_tokens=("pad", "eos", "bos"),
))
