"""What the tiny random checkpoints of the families with BART's layout share
(``tests/tiny_{bart,mbart,m2m_100}.py``): weights larger than HF's init, a random
``final_logits_bias`` with EOS's logit raised, the saved folder with the first token generation forces."""

from __future__ import annotations

import json
from pathlib import Path

# The two shapes of the cases of every family with BART's layout (each case adds its activation and embedding
# scaling): the main one (encoder 2 x 4 heads, decoder 3 x 2) and a second with other head and layer counts.
MAIN = dict(d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=2,
            encoder_ffn_dim=40, decoder_ffn_dim=48)
SECOND = dict(d_model=24, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=4,
              encoder_ffn_dim=36, decoder_ffn_dim=28)


def randomize(model) -> None:
    """Weights larger than HF's init (matrices N(0, 0.3²): attention not uniform), biases and LayerNorm
    parameters random (vectors N(0, 0.2²), LayerNorm scales around 1: every tensor matters); in place,
    drawn from torch's generator."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3)
            elif p.dim() == 1:
                p.normal_(0, 0.2)
                if ("layer_norm" in name or "layernorm" in name) and name.endswith("weight"):
                    p.add_(1.0)


def boost_eos(model, eos_id: int, eos_boost: float) -> None:
    """``final_logits_bias`` (zero at HF's init) random, EOS's entry raised by ``eos_boost``, so that
    generated sequences end at different lengths."""
    import torch

    with torch.no_grad():
        model.final_logits_bias.normal_()
        model.final_logits_bias[0, eos_id] += eos_boost


def save(model, folder: Path, forced_bos: int | None) -> Path:
    """``model.save_pretrained(folder)``, with generation_config.json's ``forced_bos_token_id`` set to
    ``forced_bos`` unless it is None. -> ``folder``."""
    model.save_pretrained(str(folder))
    if forced_bos is not None:
        gen = json.loads((folder / "generation_config.json").read_text())
        (folder / "generation_config.json").write_text(json.dumps(dict(gen, forced_bos_token_id=forced_bos)))
    return folder
