"""Pure model math, family-agnostic: attention, stacked layers, the encoder, the encoder–decoder,
decoding, interventions. Importing the package registers both model modules with ``state``."""

from jattn.nn import encoder, seq2seq  # noqa: F401  (registers Encoder and Seq2Seq in state.MODULES)
