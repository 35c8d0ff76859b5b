"""BERT (Devlin et al. 2019): positions 0..n-1, token types, the pooler's classification head."""

from jattn.families.bert import convert
from jattn.families.config_table import ENCODER, reads
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import encoder_config

SPEC = register(FamilySpec(
    model_type="bert", shape="encoder",
    config_from_hf=reads(ENCODER)(lambda hf: encoder_config(hf, positions="absolute", classifier="pooler")),
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict, to_hf_config=convert.to_hf_config,
    tokenizer_files=(("tokenizer.json",), ("vocab.txt",)), special_tokens=("cls", "sep", "pad"),
))
