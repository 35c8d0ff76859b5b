"""XLM-RoBERTa (Conneau et al. 2020, "Unsupervised Cross-lingual Representation Learning at
Scale"): RoBERTa's architecture (Liu et al. 2019) trained on 100 languages with a 250k-piece
SentencePiece vocabulary. BERT's post-LayerNorm blocks; positions numbered from ``pad_token_id +
1`` skipping padding; one token type; the dense–tanh classification head on h_<s>; the masked-LM
head with exact GELU. The checkpoints keep RoBERTa's keys (``roberta.``), so the key table is
RoBERTa's (``convert.py``)."""

from jattn.families.config_table import ENCODER, rate, reads, token, with_defaults
from jattn.families.spec import FamilySpec, register
from jattn.families.xlm_roberta import convert
from jattn.nn.config import encoder_config

# XLMRobertaConfig's padding id 1, from which positions are numbered; the classification head's dropout
CONFIG_KEYS = (*with_defaults(ENCODER, pad_token_id=token("pad_token_id", 1, "the padding token; positions are "
                                                          "numbered from it", nullable=False)),
               rate("classifier_dropout", None, "the classification head's dropout (null: hidden_dropout_prob)",
                    nullable=True))


@reads(CONFIG_KEYS)
def config_from_hf(hf: dict):
    # HF's XLMRobertaLMHead applies exact GELU whatever hidden_act says; the classification head's
    # dropout is classifier_dropout where set
    return encoder_config(hf, positions="after_padding", classifier="dense_tanh", mlm_activation="gelu",
                          classifier_dropout=hf.get("classifier_dropout"))


SPEC = register(FamilySpec(
    model_type="xlm-roberta", shape="encoder", config_from_hf=config_from_hf,
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict, to_hf_config=convert.to_hf_config,
    tokenizer_files=(("tokenizer.json",), ("sentencepiece.bpe.model",)), special_tokens=("cls", "sep", "pad"),
))
