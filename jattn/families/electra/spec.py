"""ELECTRA (Clark et al. 2020), the discriminator and the generator: BERT's blocks, positions
0..n-1 and token types, embedding tables of width ``embedding_size`` projected to the model width
when they differ (``embeddings_project``); no pooler. The converted checkpoints are
``ElectraModel``, ``ElectraForPreTraining`` (its replaced-token detection head converted) and the
generator ``ElectraForMaskedLM`` (its masked-LM head D -> E -> V converted; HF's generator head
applies exact GELU whatever ``hidden_act`` says)."""

from jattn.families.electra import convert
from jattn.families.config_table import ENCODER, ConfigKey, reads
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import encoder_config

CONFIG_KEYS = (*ENCODER, ConfigKey("embedding_size", int, 1, None, 128, "the embedding tables' width E, projected to "
                                   "hidden_size where they differ"))


@reads(CONFIG_KEYS)
def config_from_hf(hf: dict):
    size = hf["embedding_size"]
    return encoder_config(hf, positions="absolute", classifier="dense_tanh", mlm_activation="gelu",
                          embedding_size=None if size == hf["hidden_size"] else size)


SPEC = register(FamilySpec(
    model_type="electra", shape="encoder", config_from_hf=config_from_hf,
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict, to_hf_config=convert.to_hf_config,
    tokenizer_files=(("tokenizer.json",), ("vocab.txt",)), special_tokens=("cls", "sep", "pad"),
))
