"""M2M100 (Fan et al. 2021, "Beyond English-Centric Multilingual Machine Translation") and the
dense NLLB-200 checkpoints (NLLB Team 2022), which Hugging Face stores as model_type "m2m_100":
pre-LayerNorm blocks (Xiong et al. 2020: h = x + Sublayer(LN(x)) for self-attention,
cross-attention and the FFN) with ReLU, a final LayerNorm on each stack's output
(``layer_norm``), token embeddings scaled by sqrt(d_model) (``scale_embedding``, true in every
released checkpoint), no embedding LayerNorm, one token table for source, target and output, no
``final_logits_bias``. Positions are fairseq's sinusoids computed from the padding (HF
``M2M100SinusoidalPositionalEmbedding``): real token i of a row (1-based count of non-pad tokens)
reads table row pad + i, padding the zero row ``pad`` — jattn's "tensor2tensor" scheme, whose
table HF builds with P + 2 rows (growing it on demand) and jattn with P + pad + 1: the rows are
the same; in cached decoding the position is pad + 1 + the tokens already decoded, as in HF.
Without a decoder mask HF attends to every target position.

Language codes are tokens: a source is ``src_lang X </s>``, a target ``tgt_lang X </s>``
(``M2M100Tokenizer``'s ``__xx__`` codes, ``NllbTokenizer``'s ``xxx_Latn``); decoding starts from
``</s>`` (``decoder_start_token_id``) and forces the target's code first (``forced_bos_token_id``:
config.json / generation_config.json, or per call, ``jattn.nn.decode.generate``, as HF's
``generate(forced_bos_token_id=...)``). ``inputs_embeds`` / ``decoder_inputs_embeds`` are HF's, the
scaled token embeddings (``jattn.nn.seq2seq.word_embeddings``); with them jattn counts the positions
of the tokens the masks mark real, HF numbers every position (pad + 1, pad + 2, …): the two agree
on right-padded rows' real tokens.

``encoder_layerdrop`` / ``decoder_layerdrop`` (LayerDrop, training only; M2M100Config's default
and some released config.json files say 0.05) are kept in ``Seq2SeqConfig.layerdrop``: evaluation
runs every layer, as HF's does; jattn's training forward refuses a non-zero rate."""

from jattn.families.m2m_100 import convert
from jattn.families.config_table import SEQ2SEQ, activation, rate, reads, size, with_defaults
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import ConfigError, seq2seq_config


# M2M100Config's keys and defaults
CONFIG_KEYS = (*with_defaults(SEQ2SEQ, activation_function=activation("activation_function", "relu"),
                              scale_embedding=True, attention_dropout=0.1,
                              encoder_layerdrop=rate("encoder_layerdrop", 0.05, "LayerDrop, training only"),
                              decoder_layerdrop=rate("decoder_layerdrop", 0.05, "LayerDrop, training only")),
               size("vocab_size", "rows of the shared token table"))


@reads(CONFIG_KEYS)
def config_from_hf(hf: dict):
    if not hf["tie_word_embeddings"]:
        raise ConfigError("M2M100 with tie_word_embeddings=False is not supported: jattn ties the output "
                          "projection to the shared token table, as M2M100ForConditionalGeneration does by default")
    V = hf["vocab_size"]
    return seq2seq_config(hf, default_activation="relu", vocab_sizes=(V, V), positions="tensor2tensor",
                          norm_position="pre", final_norm=True, shared_embeddings=True, tie_output=True,
                          scale_embedding=hf["scale_embedding"], final_logits_bias=False, decoder_mask="all")


SPEC = register(FamilySpec(
    model_type="m2m_100", shape="encoder-decoder", config_from_hf=config_from_hf,
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict, to_hf_config=convert.to_hf_config,
    # SentencePiece (Kudo & Richardson 2018): tokenizer.json (NLLB), or sentencepiece.bpe.model
    # (with vocab.json: M2M100Tokenizer)
    tokenizer_files=(("tokenizer.json",), ("sentencepiece.bpe.model",)), special_tokens=("pad", "eos"),
))
