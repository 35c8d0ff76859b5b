"""The models users hold: ``load`` (a Hugging Face folder, a Hub name or a named artefact) returns an
``EncoderModel``, a ``Seq2SeqModel`` or a ``DecoderModel``; ``artefacts`` makes the named ones."""

from jattn.models.decoder import DecoderModel
from jattn.models.encoder import EncoderModel
from jattn.models.load import load as load
from jattn.models.seq2seq import Seq2SeqModel

__all__ = ["DecoderModel", "EncoderModel", "Seq2SeqModel"]
