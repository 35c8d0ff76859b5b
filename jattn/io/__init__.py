"""Input and output: data sets (manifest, fetch), readers, tokenization, checkpoints and result writing."""
