"""``peregistry.keras``: the Keras 3 layers, kept at this import path; they live in
:mod:`peregistry.integrations.keras` with the other doors from a framework's model code."""

from .integrations.keras import PositionEmbedding, RelativeBias, RotaryEmbedding

__all__ = ["PositionEmbedding", "RelativeBias", "RotaryEmbedding"]
