"""Keras 3 layers over peregistry encoders (extra ``peregistry[keras]``), on the jax and torch
Keras backends (no TensorFlow), with keras-hub's call conventions:

* :class:`RotaryEmbedding` (``call(inputs, start_index=0, positions=None)``, ``sequence_axis``,
  ``feature_axis``: keras-hub's ``RotaryEmbedding``) rotates with a rotary encoder;
* :class:`PositionEmbedding` (``call(inputs, start_index=0, positions=None)``: keras-hub's
  ``SinePositionEncoding``/``PositionEmbedding``) gives an absolute encoder's encoding,
  broadcast to ``inputs``; a learned table is a trainable Keras weight;
* :class:`RelativeBias` (``call(q_positions, k_positions)``) gives a bias encoder's
  ``(..., heads, Q, K)`` (ALiBi, T5's learned buckets as a trainable weight).

Each takes an encoder name with its options, or an encoder object; ``get_config`` stores the
name and options, so models holding them save with ``model.save`` and load with
``keras.saving.load_model`` (the classes are registered serializable, package ``peregistry``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras

from .._resolve import encoder_from

__all__ = ["PositionEmbedding", "RelativeBias", "RotaryEmbedding"]


class _EncoderLayer(keras.layers.Layer):  # type: ignore[misc,unused-ignore]  # Any without keras
    """The encoder, its serializable config, and a learned encoder's weights."""

    _kind = ""

    def __init__(self, encoder: Any, options: Mapping[str, Any], **kwargs: Any) -> None:
        """Resolve ``encoder`` (a name with ``options``, or an encoder object, of this layer's
        kind) and add a trainable weight per learned parameter, initialised as the encoder's own
        (normal, ``init_std``); ``kwargs`` are Keras's (``name``, ``dtype``, ...)."""
        super().__init__(**kwargs)
        self.encoder = encoder_from(type(self).__name__, encoder, options, self._kind)
        shapes = self.encoder.param_shapes() if self.encoder.learned else {}
        self._tables = {
            key: self.add_weight(shape=shape, name=key, initializer=keras.initializers.RandomNormal(
                stddev=self.encoder.init_std(key)))
            for key, shape in shapes.items()}

    def _params(self) -> dict[str, Any] | None:
        """The weights as the encoder's ``params=`` (None for a parameter-free encoder)."""
        return {k: v.value for k, v in self._tables.items()} or None

    def get_config(self) -> dict[str, Any]:
        """Keras's config plus the encoder's name and options (what ``model.save`` stores)."""
        return {**super().get_config(), "encoder": self.encoder.name,
                **dict(self.encoder.options)}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        """The layer :meth:`get_config` describes (``keras.saving.load_model``)."""
        return cls(**config)


def _split(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Keras's own layer arguments apart from the encoder's options."""
    own = {"name", "dtype", "trainable", "autocast", "input_dim", "input_shape", "batch_size"}
    return ({k: v for k, v in kwargs.items() if k not in own},
            {k: v for k, v in kwargs.items() if k in own})


@keras.saving.register_keras_serializable(package="peregistry")  # type: ignore[misc,unused-ignore]
class RotaryEmbedding(_EncoderLayer):
    """keras-hub's ``RotaryEmbedding`` call convention over a rotary encoder: ``inputs`` of any
    rank, its ``sequence_axis`` (default 1) and ``feature_axis`` (default -1); positions are
    ``start_index + arange(seq)`` unless ``positions`` (``(seq,)`` or ``(batch, seq)``) are
    given. ``RotaryEmbedding("rotary", dim=64, theta=10000.0)``.

    >>> import numpy as np
    >>> import peregistry as per
    >>> from peregistry.integrations.keras import RotaryEmbedding
    >>> layer = RotaryEmbedding("rotary", dim=8)
    >>> x = np.random.default_rng(0).standard_normal((2, 5, 4, 8)).astype("float32")
    >>> y = layer(x)  # (batch, seq, heads, head_dim), keras-hub's layout
    >>> tuple(y.shape)
    (2, 5, 4, 8)
    >>> ref = per.get_encoder("rotary", dim=8).rotate(np.moveaxis(x, 1, 2))  # seq next to last
    >>> bool(np.allclose(np.asarray(y), np.moveaxis(ref, 2, 1), atol=1e-6))
    True
    >>> layer.get_config()["encoder"], layer.get_config()["dim"]
    ('rotary', 8)
    """

    _kind = "rotary"

    def __init__(self, encoder: Any = "rotary", *, sequence_axis: int = 1,
                 feature_axis: int = -1, **kwargs: Any) -> None:
        """``kwargs``: the encoder's options and Keras's layer arguments."""
        options, own = _split(kwargs)
        super().__init__(encoder, options, **own)
        self.sequence_axis = sequence_axis
        self.feature_axis = feature_axis

    def call(self, inputs: Any, start_index: Any = 0, positions: Any = None) -> Any:
        """``inputs`` rotated at ``start_index + arange(seq)`` (``start_index``: the cached
        length while decoding) or at ``positions``; same shape and dtype."""
        rank = len(inputs.shape)
        seq_axis, feat_axis = self.sequence_axis % rank, self.feature_axis % rank
        if seq_axis == feat_axis:
            raise ValueError("RotaryEmbedding: sequence_axis and feature_axis must differ")
        x = keras.ops.moveaxis(inputs, (seq_axis, feat_axis), (-2, -1))
        enc: Any = self.encoder
        if positions is None:
            out = enc.rotate(x, offset=keras.ops.cast(start_index, "int32")
                             if not isinstance(start_index, int) else start_index)
        else:
            if len(positions.shape) == 2 and rank > 3:  # (batch, seq) against (batch, ..., seq)
                positions = keras.ops.reshape(
                    positions, (positions.shape[0], *([1] * (rank - 3)), positions.shape[1]))
            out = enc.rotate(x, positions)
        return keras.ops.moveaxis(out, (-2, -1), (seq_axis, feat_axis))

    def compute_output_shape(self, input_shape: Any) -> Any:
        """The input's shape."""
        return input_shape

    def get_config(self) -> dict[str, Any]:
        """The encoder's config plus the sequence and feature axes."""
        return {**super().get_config(), "sequence_axis": self.sequence_axis,
                "feature_axis": self.feature_axis}


@keras.saving.register_keras_serializable(package="peregistry")  # type: ignore[misc,unused-ignore]
class PositionEmbedding(_EncoderLayer):
    """keras-hub's ``SinePositionEncoding``/``PositionEmbedding`` call convention over an
    absolute encoder: the encoding of ``start_index + arange(seq)`` (or of ``positions``) for
    ``inputs`` ``(..., seq, dim)``, broadcast to ``inputs``' shape (add it to them). A learned
    table is a trainable weight. ``PositionEmbedding("sinusoidal", dim=64)``.

    >>> import numpy as np
    >>> import peregistry as per
    >>> from peregistry.integrations.keras import PositionEmbedding
    >>> layer = PositionEmbedding("sinusoidal", dim=8)
    >>> h = np.zeros((2, 5, 8), "float32")  # token embeddings (batch, seq, dim)
    >>> e = layer(h)  # broadcast to h: add it to them
    >>> tuple(e.shape)
    (2, 5, 8)
    >>> bool(np.allclose(np.asarray(e)[1], per.get_encoder("sinusoidal", dim=8).encode(np.arange(5)),
    ...                  atol=1e-6))
    True
    >>> [tuple(w.shape) for w in PositionEmbedding("learned", num_positions=16, dim=8).weights]
    [(16, 8)]
    """

    _kind = "absolute"

    def __init__(self, encoder: Any = "sinusoidal", **kwargs: Any) -> None:
        """``kwargs``: the encoder's options and Keras's layer arguments."""
        options, own = _split(kwargs)
        super().__init__(encoder, options, **own)

    def call(self, inputs: Any, start_index: Any = 0, positions: Any = None) -> Any:
        """The encoding of ``start_index + arange(seq)`` (or of ``positions``), in the layer's
        compute dtype, broadcast to ``inputs``' shape."""
        pos = positions if positions is not None else (
            keras.ops.arange(inputs.shape[-2], dtype="int32") + keras.ops.cast(start_index, "int32"))
        out = self.encoder.encode(pos, params=self._params())  # type: ignore[attr-defined]
        return keras.ops.broadcast_to(keras.ops.cast(out, self.compute_dtype), inputs.shape)

    def compute_output_shape(self, input_shape: Any) -> Any:
        """The input's shape."""
        return input_shape


@keras.saving.register_keras_serializable(package="peregistry")  # type: ignore[misc,unused-ignore]
class RelativeBias(_EncoderLayer):
    """A bias encoder as a layer: ``call(q_positions, k_positions)`` is ``enc.bias``,
    ``(..., heads, Q, K)``, to add to the attention scores; a learned table (T5's buckets) is a
    trainable weight. ``RelativeBias("alibi", num_heads=8)``.

    >>> import numpy as np
    >>> from peregistry.integrations.keras import RelativeBias
    >>> layer = RelativeBias("alibi", num_heads=4)
    >>> b = layer(np.arange(3), np.arange(3))  # (heads, Q, K)
    >>> tuple(b.shape)
    (4, 3, 3)
    >>> print(np.round(np.asarray(b)[1], 4))  # head 1: -m_1·|i - j|, m_1 = 2**-4
    [[ 0.     -0.0625 -0.125 ]
     [-0.0625  0.     -0.0625]
     [-0.125  -0.0625  0.    ]]
    >>> [tuple(w.shape) for w in RelativeBias("t5", num_heads=2, num_buckets=8).weights]
    [(8, 2)]
    """

    _kind = "bias"

    def __init__(self, encoder: Any = "alibi", **kwargs: Any) -> None:
        """``kwargs``: the encoder's options and Keras's layer arguments."""
        options, own = _split(kwargs)
        super().__init__(encoder, options, **own)

    def call(self, q_positions: Any, k_positions: Any) -> Any:
        """``enc.bias(q_positions, k_positions)`` with the layer's weights, in its compute
        dtype."""
        out = self.encoder.bias(q_positions, k_positions,  # type: ignore[attr-defined]
                                params=self._params())
        return keras.ops.cast(out, self.compute_dtype)

    def compute_output_shape(self, q_shape: Any, k_shape: Any) -> Any:
        """``(*q_shape[:-1], num_heads, Q, K)``."""
        heads = self.encoder.options.get("num_heads")
        return (*q_shape[:-1], heads, q_shape[-1], k_shape[-1])
