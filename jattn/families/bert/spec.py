"""BERT (Devlin et al. 2019): positions 0..n-1, token types, the pooler's classification head."""

from jattn.families.layouts import post_ln_encoder
from jattn.families.config_table import ENCODER, reads
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import encoder_config

SPEC = register(FamilySpec(
    model_type="bert", shape="encoder",
    config_from_hf=reads(ENCODER)(lambda hf: encoder_config(hf, positions="absolute", classifier="pooler")),
    convert=post_ln_encoder.convert, to_hf_state_dict=post_ln_encoder.to_hf_state_dict,
    to_hf_config=post_ln_encoder.to_hf_config,
    tokenizer_files=(("tokenizer.json",), ("vocab.txt",)), special_tokens=("cls", "sep", "pad"),
))
