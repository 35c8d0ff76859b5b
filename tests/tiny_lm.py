"""A tiny random GPT-2 folder with a byte-level BPE tokenizer trained on the given texts: a complete
causal-LM model folder for the corpus runner and ``jattn analyze`` (``jattn.load(folder)``)."""

from __future__ import annotations

from pathlib import Path

TEXTS = ["the cat sat on the mat .", "alice met bob , then left .", "short .", "cat",
         "a dog saw the cat and the cat saw it , then the dog left the mat ."]


def save_tiny_gpt2(folder, texts=TEXTS, seed: int = 0, vocab_size: int = 300, positions: int = 64) -> Path:
    """Save a random 2-layer, 4-head GPT-2 (peaky attention: init 0.2) and its tokenizer of at most
    ``vocab_size`` entries (``<|endoftext|>`` as BOS, EOS and padding) to ``folder``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    folder = Path(folder)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                  pad_token="<|endoftext|>")
    tok.save_pretrained(folder)
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=2, n_head=4, n_positions=positions, n_inner=24,
                        bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id, initializer_range=0.2)
    GPT2LMHeadModel(config).save_pretrained(folder)
    return folder
