"""The error a configuration jattn cannot represent raises (re-exported by ``jattn.nn.config``)."""


class ConfigError(ValueError):
    """A Hugging Face config that jattn cannot represent faithfully."""
