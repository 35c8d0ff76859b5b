"""Training: one resumable optax + orbax trainer and its tasks (translation, classification, L0 gates)."""
