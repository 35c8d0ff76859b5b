"""Pure model math, family-agnostic: attention, stacked layers, the encoder, the encoder–decoder,
decoding, interventions. Importing the package imports nothing else (no JAX): the model modules
register themselves with ``state`` when imported, and ``state.module_class`` imports them on first
use."""
