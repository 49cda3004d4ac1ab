"""``peregistry.flax``: the Flax NNX module, kept at this import path; it lives in
:mod:`peregistry.integrations.flax` with the other doors from a framework's model code."""

from .integrations.flax import Encoder

__all__ = ["Encoder"]
