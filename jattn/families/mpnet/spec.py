"""MPNet (Song et al. 2020): BERT's post-LN blocks without token types; positions numbered from
``padding_idx + 1`` skipping padding (padding_idx is 1, as Hugging Face fixes it); one learned
relative-position score bias over 32 buckets of j − i (distances up to 128), shared by all layers
and added to every layer's scores (``jattn.nn.relative``); a dense–tanh classification head on
h_<s>. Given ``inputs_embeds``, positions count the tokens ``attention_mask`` marks real (HF
numbers every position then: the same on a right-padded batch's real tokens)."""

import dataclasses

from jattn.families.config_table import ENCODER, ConfigKey, reads, token, with_defaults
from jattn.families.mpnet import convert
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import ConfigError, encoder_config

PADDING_IDX = 1  # Hugging Face's MPNetEmbeddings number positions after id 1 whatever the config says
BUCKETS, MAX_DISTANCE = 32, 128  # MPNetEncoder.compute_position_bias's num_buckets and max_distance
# MPNetConfig has no token types; its padding id 1
CONFIG_KEYS = (*(k for k in with_defaults(ENCODER, pad_token_id=token("pad_token_id", PADDING_IDX, "the padding "
                                          "token", nullable=False)) if k.name != "type_vocab_size"),
               ConfigKey("relative_attention_num_buckets", int, 1, None, BUCKETS, "relative-position buckets"))


@reads(CONFIG_KEYS)
def config_from_hf(hf: dict):
    for key, want in (("pad_token_id", PADDING_IDX), ("relative_attention_num_buckets", BUCKETS)):
        if hf[key] != want:
            raise ConfigError(f"config.json {key}={hf[key]!r} is not supported: Hugging Face's MPNet computes "
                              f"with {key} {want} whatever the config says, so the weights were trained with "
                              f"{want}. Fix: set {key} to {want}")
    config = encoder_config({**hf, "pad_token_id": PADDING_IDX}, positions="after_padding", classifier="dense_tanh",
                            relative_position_buckets=BUCKETS, relative_position_max_distance=MAX_DISTANCE,
                            mlm_activation="gelu")  # HF's MPNetLMHead: exact GELU whatever hidden_act says
    return dataclasses.replace(config, type_vocab_size=0)


SPEC = register(FamilySpec(
    model_type="mpnet", shape="encoder", config_from_hf=config_from_hf,
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict, to_hf_config=convert.to_hf_config,
    tokenizer_files=(("tokenizer.json",), ("vocab.txt",)), special_tokens=("cls", "sep", "pad"),
))
