"""``peregistry.torch``: :class:`EncoderModule`, any encoder as a ``torch.nn.Module``, kept at
this import path; it lives in :mod:`peregistry.integrations.torch` with the other doors from a
framework's model code."""

from .integrations.torch import EncoderModule

__all__ = ["EncoderModule"]
