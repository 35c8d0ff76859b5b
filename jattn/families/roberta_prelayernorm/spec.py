"""RoBERTa-PreLayerNorm (Liu et al. 2019's RoBERTa with pre-LN blocks, Xiong et al. 2020; the
checkpoints of Wettig et al. 2023): RoBERTa's embeddings, positions and heads; each block
x -> h = x + Attn(LN(x)) -> h + FFN(LN(h)), and a LayerNorm on the last layer's output
(``final_norm``), which the pooler, the masked-LM and the classification heads read."""

from jattn.families.roberta_prelayernorm import convert
from jattn.families.config_table import ENCODER, reads, token, with_defaults
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import encoder_config

# RobertaPreLayerNormConfig's padding id 1, from which positions are numbered
CONFIG_KEYS = with_defaults(ENCODER, pad_token_id=token("pad_token_id", 1, "the padding token; positions are "
                                                        "numbered from it", nullable=False))

SPEC = register(FamilySpec(
    model_type="roberta-prelayernorm", shape="encoder",
    # HF's LM head applies exact GELU whatever hidden_act says (as RoBERTa's)
    config_from_hf=reads(CONFIG_KEYS)(lambda hf: encoder_config(hf, positions="after_padding", classifier="dense_tanh",
                                             mlm_activation="gelu", norm_position="pre", final_norm=True)),
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict, to_hf_config=convert.to_hf_config,
    tokenizer_files=(("tokenizer.json",), ("vocab.json", "merges.txt")), special_tokens=("cls", "sep", "pad"),
))
