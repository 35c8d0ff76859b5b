"""RoBERTa (Liu et al. 2019): BERT's blocks; positions numbered from ``pad_token_id + 1`` skipping
padding, a dense–tanh classification head on h_<s>. Keys as BERT's under ``roberta.``. Given
``inputs_embeds``, positions count the tokens ``attention_mask`` marks real (HF numbers every
position then: the same on a right-padded batch's real tokens)."""

from jattn.families.layouts import post_ln_encoder
from jattn.families.config_table import ENCODER, reads, token, with_defaults
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import encoder_config

# RobertaConfig's padding id 1, from which positions are numbered
CONFIG_KEYS = with_defaults(ENCODER, pad_token_id=token("pad_token_id", 1, "the padding token; positions are "
                                                        "numbered from it", nullable=False))

SPEC = register(FamilySpec(
    model_type="roberta", shape="encoder",
    # HF's RobertaLMHead applies exact GELU whatever hidden_act says
    config_from_hf=reads(CONFIG_KEYS)(lambda hf: encoder_config(hf, positions="after_padding", classifier="dense_tanh",
                                             mlm_activation="gelu")),
    convert=post_ln_encoder.convert, to_hf_state_dict=post_ln_encoder.to_hf_state_dict,
    to_hf_config=post_ln_encoder.to_hf_config,
    tokenizer_files=(("tokenizer.json",), ("vocab.json", "merges.txt")), special_tokens=("cls", "sep", "pad"),
))
