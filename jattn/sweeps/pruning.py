"""Physical head pruning: attention heads removed from the weight matrices, as Michel et al. (2019)
prune for efficiency and as Voita et al. (2019) keep only the heads their L0 gates leave open.

Removing head h of a layer deletes its d_h columns of the query, key and value projections
(and of their biases) and its d_h rows of the output projection W_O; the output bias b_O stays.
The layer's output is then y_i = Σ_{h kept} Σ_j α[h,i,j] f_h(x_j) + b_O, exactly what masking
the removed heads gives (Michel et al.'s ξ_h = 0, ``Interventions.head_gates`` = the keep mask
as floats). A layer may keep no head at all: its attention sublayer adds only b_O.

A keep mask is a bool (L, H) array for an encoder, and for a translation model a dict
{"encoder": (L_enc, H_enc), "decoder": (L_dec, H_dec), "cross": (L_dec, H_dec)} (a missing
type keeps all its heads). H is ``config.num_heads`` / ``encoder_heads`` / ``decoder_heads``: the
heads of the model at hand, so an already pruned model is pruned further with a mask over its
own head slots.

In memory (``remove_heads``): the L layers of a stack are stacked and run by ``lax.scan``, which needs
one shape for every layer, so each stack holds H' = max(1, max_l k_l) head slots, k_l the heads
layer l keeps. Layer l's heads fill slots 0..k_l-1 in their original order; the slots after them
have zero query/key/value kernels and biases and zero W_O rows. Such a slot's values are 0, so its
context Σ_j α v_j and its contribution to y are exactly 0 (its α, from zero scores, is uniform:
internals of padding slots are not heads; ``real_heads`` marks them, ``original_heads`` maps each
slot to the head it was before pruning). Interventions are (L, H') arrays. The config records
the pruning (``jattn.nn.config.PrunedHeads``); with H' = H the module is the unpruned one's shape.
A translation model's decoder self- and cross-attention share one slot count (the larger).
The alternative, H slots everywhere with the removed ones zero, keeps head indices but never
saves a flop; H' slots save compute whenever every layer loses heads.

On disk (``export_pruned``): each layer's matrices hold only its k_l heads, so the file is
smaller. BERT/RoBERTa use Hugging Face's convention: config.json ``pruned_heads`` {layer: removed
heads} with ``num_attention_heads`` unchanged and q/k/v (k_l d_h, D), output dense (D, k_l d_h), as
transformers 4.x's ``prune_heads`` wrote and read them (transformers 5 dropped head pruning and
refuses such a checkpoint with a size-mismatch error). Marian/FSMT use ``jattn_pruned_heads``
{"encoder"|"decoder"|"cross": {layer: removed heads}} beside the unchanged head counts.
``jattn.load`` reads both.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np

from jattn.nn.config import EncoderConfig, PrunedHeads, Seq2SeqConfig

__all__ = ["export_pruned"]

KINDS = ("encoder", "decoder", "cross")
# Where each attention stack's {query, key, value, out} params live.
ENCODER_PATH = ("layers", "attention")
SEQ2SEQ_PATHS = {"encoder": ("encoder", "layers", "self_attn"), "decoder": ("decoder", "layers", "self_attn"),
                 "cross": ("decoder", "layers", "cross_attn")}
# Files of a model folder that export_pruned copies as they are (tokenizers, generation settings).
COPIED = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.txt",
          "vocab.json", "merges.txt", "source.spm", "target.spm", "vocab-src.json", "vocab-tgt.json",
          "generation_config.json")


def stacks(config) -> dict[str, PrunedHeads]:
    """Each attention stack of ``config``'s model and the heads it holds: {"encoder": …} for an
    encoder; {"encoder", "decoder", "cross"} for a translation model. Unpruned stacks keep all."""
    if isinstance(config, EncoderConfig):
        return {"encoder": config.pruned or PrunedHeads.full(config.num_layers, config.num_heads)}
    if isinstance(config, Seq2SeqConfig):
        if config.pruned is not None:
            return dict(zip(KINDS, config.pruned))
        return {"encoder": PrunedHeads.full(config.encoder_layers, config.encoder_heads),
                "decoder": PrunedHeads.full(config.decoder_layers, config.decoder_heads),
                "cross": PrunedHeads.full(config.decoder_layers, config.decoder_heads)}
    raise TypeError(f"no attention stacks for config type {type(config).__name__}")


def slots(config) -> dict[str, int]:
    """Head slots per layer of each stack in the module (the H of its interventions)."""
    if isinstance(config, EncoderConfig):
        return {"encoder": config.num_heads}
    return {"encoder": config.encoder_heads, "decoder": config.decoder_heads, "cross": config.decoder_heads}


def original_heads(config) -> dict[str, np.ndarray]:
    """Per stack, (L, H') int: the index each head slot had before any pruning; -1 on padding."""
    out = {}
    for kind, p in stacks(config).items():
        table = np.full((len(p.kept), slots(config)[kind]), -1, np.int64)  # (L, H')
        for layer, kept in enumerate(p.kept):
            table[layer, : len(kept)] = kept
        out[kind] = table
    return out


def real_heads(config) -> dict[str, np.ndarray]:
    """Per stack, (L, H') bool: True where a slot holds a head (False on padding slots)."""
    return {kind: table >= 0 for kind, table in original_heads(config).items()}


def by_original_head(config, mask: dict) -> dict[str, list]:
    """A per-slot mask {type: (L, H')} as the heads it names before any pruning: {type: (L, H)
    nested lists}, 1.0 / 0.0 where the slot's head is kept / masked, None for a head removed
    earlier (no slot holds it). The form a report gives a mask of an already pruned model in."""
    out = {}
    for kind, table in original_heads(config).items():
        heads = stacks(config)[kind].heads
        named = [[None] * heads for _ in range(len(table))]  # (L, H)
        for layer, slot in np.argwhere(table >= 0):
            named[layer][table[layer, slot]] = float(np.asarray(mask[kind])[layer, slot])
        out[kind] = named
    return out


def _per_stack(config, value, name: str, what: str) -> dict[str, np.ndarray]:
    """A per-head (L, H) array for an encoder, or a dict of them per attention type for a
    translation model, as {stack: array} with shapes checked (missing types left out). ``name``:
    the argument's name, ``what``: what it holds (plural), for errors."""
    shapes = {kind: (len(p.kept), slots(config)[kind]) for kind, p in stacks(config).items()}
    if isinstance(config, EncoderConfig):
        if isinstance(value, dict):
            raise ValueError(f"an encoder takes one (L, H) array of {what}, not a dict; the dict "
                             "{'encoder', 'decoder', 'cross'} is for translation models")
        given = {"encoder": value}
    else:
        if not isinstance(value, dict):
            raise ValueError(f"a translation model takes a dict of {what} per attention type, "
                             "{'encoder': (L_enc, H), 'decoder': (L_dec, H), 'cross': (L_dec, H)} (a missing type "
                             "keeps every head)")
        if unknown := sorted(set(value) - set(KINDS)):
            raise ValueError(f"{name} is for attention types {KINDS}; got unknown {unknown}")
        given = value
    out = {}
    for kind, array in given.items():
        label = name if isinstance(config, EncoderConfig) else f"{name}[{kind!r}]"
        array = np.asarray(array)
        if array.shape != shapes[kind]:
            raise ValueError(f"{label} must have shape (layers, heads) = {shapes[kind]}, got {array.shape}")
        out[kind] = array
    return out


def check_keep(config, keep) -> dict[str, np.ndarray]:
    """Validate a keep mask for ``config``'s model; return it per stack as (L, H') bool arrays
    (a type missing from a translation model's dict keeps all its heads).

    Raises ``ValueError`` naming the problem and the fix: a dict for an encoder or an array for a
    translation model, unknown attention types, wrong shapes, values other than 0/1, or True on a
    padding slot of an already pruned model (not a head)."""
    real = real_heads(config)
    out = dict(real)
    for kind, mask in _per_stack(config, keep, "keep", "keep masks").items():
        name = "keep" if isinstance(config, EncoderConfig) else f"keep[{kind!r}]"
        if mask.dtype != bool:
            if mask.dtype.kind not in "iuf" or not np.isin(mask, (0, 1)).all():
                raise ValueError(f"{name} must be a bool mask (True = keep the head); got values "
                                 f"{np.unique(mask)[:5].tolist()}. Fix: threshold it, e.g. importance > t")
            mask = mask.astype(bool)
        if padding := [tuple(map(int, lh)) for lh in np.argwhere(mask & ~real[kind])]:
            raise ValueError(f"{name} keeps (layer, slot) {padding[:5]}, padding slots of an already pruned "
                             "model that hold no head. Fix: keep only slots where "
                             "jattn.sweeps.pruning.real_heads(model.config) is True")
        out[kind] = mask
    return out


def _take_heads(attn: dict, keep: np.ndarray, n_slots: int) -> dict:
    """One stack's attention params with layer l's kept slots moved to slots 0..k_l-1 and zeros
    after them. attn: {query, key, value: {kernel (L, D, H, d_h), bias (L, H, d_h)}, out:
    {kernel (L, H, d_h, D), bias (L, D)}}; keep (L, H) bool."""
    def gather(x, axis):  # x (L, ..., H, ...) with the head axis at ``axis`` -> H = n_slots
        shape = list(x.shape)
        shape[axis] = n_slots
        y = np.zeros(shape, x.dtype)
        for layer, row in enumerate(keep):
            idx = np.flatnonzero(row)  # (k_l,)
            dst = [layer] + [slice(None)] * (axis - 1) + [slice(0, len(idx))]
            y[tuple(dst)] = np.take(x[layer], idx, axis=axis - 1)
        return y

    out = {name: {"kernel": gather(np.asarray(attn[name]["kernel"]), 2),  # (L, D, H', d_h)
                  "bias": gather(np.asarray(attn[name]["bias"]), 1)}  # (L, H', d_h)
           for name in ("query", "key", "value")}
    out["out"] = {"kernel": gather(np.asarray(attn["out"]["kernel"]), 1),  # (L, H', d_h, D)
                  "bias": np.asarray(attn["out"]["bias"])}  # (L, D)
    return out


def _replace(tree: dict, path: tuple, value) -> dict:
    """A copy of the nested dict ``tree`` with ``tree[path]`` set to ``value``."""
    if not path:
        return value
    return {**tree, path[0]: _replace(tree[path[0]], path[1:], value)}


def pruned_config(config, keep: dict[str, np.ndarray]):
    """The config of ``config``'s model after removing the heads ``keep`` (checked) drops."""
    before = stacks(config)
    after = {kind: PrunedHeads(p.heads, tuple(tuple(kept[s] for s in np.flatnonzero(keep[kind][layer]))
                                              for layer, kept in enumerate(p.kept)))
             for kind, p in before.items()}
    if isinstance(config, EncoderConfig):
        p = after["encoder"]
        return dataclasses.replace(config, num_heads=p.slots, pruned=p)
    dec_slots = max(after["decoder"].slots, after["cross"].slots)  # decoder self and cross share the slots
    return dataclasses.replace(config, encoder_heads=after["encoder"].slots, decoder_heads=dec_slots,
                               pruned=tuple(after[k] for k in KINDS))


def prune_params(params, config, keep) -> tuple[dict, object]:
    """Physically prune ``params`` (an ``nnx.State`` or nested dict of arrays) of ``config``'s
    model: returns (params as a nested dict of numpy arrays, the pruned config)."""
    from jattn.nn.state import to_arrays

    if isinstance(config, EncoderConfig) and config.kv_heads != config.num_heads:
        raise ValueError(f"physical pruning removes a head's query, key and value slices; under grouped-query "
                         f"attention ({config.num_heads} query heads read {config.kv_heads} key/value heads) a "
                         "key/value head serves several query heads, so it is not implemented. Fix: gate the heads "
                         "instead (Interventions(head_gates=keep)), which computes the same outputs")
    if getattr(config, "relative_attention_num_buckets", 0):  # its (buckets, H) table would keep every column
        raise ValueError("physical pruning moves each layer's kept heads into slots, but a relative-position bias "
                         "(relative_attention_num_buckets > 0) is one table for all layers, with a column per head: "
                         "not implemented. Fix: gate the heads instead (Interventions(head_gates=keep))")
    keep = check_keep(config, keep)
    new_config = pruned_config(config, keep)
    arrays = to_arrays(params) if not isinstance(params, dict) else params
    paths = {"encoder": ENCODER_PATH} if isinstance(config, EncoderConfig) else SEQ2SEQ_PATHS
    n_slots = slots(new_config)
    for kind, path in paths.items():
        node = arrays
        for k in path:
            node = node[k]
        arrays = _replace(arrays, path, _take_heads(node, keep[kind], n_slots[kind]))
    return arrays, new_config


def remove_heads(model, keep):
    """A copy of ``model`` (``EncoderModel`` or ``Seq2SeqModel``) with the heads ``keep`` drops
    physically removed (see the module docstring for the in-memory layout). Gates that are open
    but not exactly 1 (L0 gates at evaluation) are folded into W_O first: ``jattn.training.l0.fold_gates``."""
    keep = model.per_type(keep, "keep")  # {type: (L, H) bool}; an encoder's bare (L, H) too
    params, config = prune_params(model.params, model.config, keep["encoder"] if len(keep) == 1 else keep)
    return type(model)(config, params, model.tokenizer, model.source)


def hf_config(config, base: dict) -> dict:
    """``base`` (the source folder's config.json) with the pruning of ``config`` recorded:
    Hugging Face's ``pruned_heads`` for BERT/RoBERTa, ``jattn_pruned_heads`` for Marian/FSMT."""
    out = {k: v for k, v in base.items() if k not in ("pruned_heads", "jattn_pruned_heads")}
    if isinstance(config, EncoderConfig):
        if config.pruned is not None:
            out["pruned_heads"] = config.pruned.removed()
        return out
    if config.pruned is not None:
        out["jattn_pruned_heads"] = {kind: p.removed() for kind, p in zip(KINDS, config.pruned)}
    return out


def hf_state_dict(params, config) -> dict[str, np.ndarray]:
    """The model's tensors in its Hugging Face layout (each layer's heads only, no padding)."""
    from jattn import families

    return families.get(config.model_type).to_hf_state_dict(params, config)


def export_pruned(model, keep, folder) -> Path:
    """Write ``model`` with the heads ``keep`` drops removed as a Hugging Face folder that
    ``jattn.load`` reads: config.json (the source's, with the pruned heads recorded),
    model.safetensors (each layer's matrices hold only its kept heads) and the tokenizer files
    (and generation_config.json) copied from the model's folder. Returns the folder.

    Every other parameter jattn holds (embeddings, FFNs, LayerNorms, an encoder's pooler,
    masked-LM and classification heads) is written unchanged; tensors jattn does not read
    (position-id buffers, an NSP head) are not written. ``folder`` must not be the model's own."""
    from safetensors.numpy import save_file

    source = Path(model.source) if model.source else None
    if source is None or not (source / "config.json").is_file():
        raise ValueError("export_pruned copies config.json and the tokenizer files from the model's folder, "
                         f"but this model has none (source={model.source!r}). Fix: save the model as a Hugging "
                         "Face folder and load it with jattn.load(folder) first")
    folder = Path(folder)
    if folder.exists() and folder.resolve() == source.resolve():
        raise ValueError(f"export_pruned would overwrite the model's own folder {folder}; choose another folder")
    keep = model.per_type(keep, "keep")  # {type: (L, H) bool}; an encoder's bare (L, H) too
    params, config = prune_params(model.params, model.config, keep["encoder"] if len(keep) == 1 else keep)
    state = hf_state_dict(params, config)
    base = json.loads((source / "config.json").read_text(encoding="utf-8"))
    folder.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        if (source / name).is_file():
            shutil.copy(source / name, folder / name)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(hf_config(config, base), indent=2) + "\n", encoding="utf-8")
    return folder
