"""peregistry: Transformer positional encoders written once against the Python Array API standard.

Find an encoder by name and call it on NumPy, PyTorch, JAX or array-api-strict arrays::

    import peregistry as per

    enc = per.get_encoder("sinusoidal", dim=8)
    enc.encode(np.arange(4))          # numpy in -> numpy out; torch in -> torch out

``import peregistry`` imports no array framework: each one is touched only when its arrays arrive.
Plugins (the built-in families included) load on the first registry question, not at import.
"""

from __future__ import annotations

from typing import Any

from ._attention_mask import positions_from_attention_mask
from ._hooks import hookimpl, hookspec
from ._options import Option
from .encoders.base import AbsoluteEncoder, BiasEncoder, Encoder, RelativeEmbedding
from .errors import EncoderNotFoundError, PluginConflictError, PluginError
from .registry import EncoderInfo, PluginInfo, default_registry
from .rope.encoder import RotaryEncoder

__version__ = "0.2.0"

__all__ = [
    "AbsoluteEncoder",
    "BiasEncoder",
    "Encoder",
    "EncoderInfo",
    "EncoderNotFoundError",
    "Option",
    "PluginConflictError",
    "PluginError",
    "PluginInfo",
    "RelativeEmbedding",
    "RotaryEncoder",
    "__version__",
    "convert",
    "from_hf_config",
    "get_encoder",
    "hookimpl",
    "hookspec",
    "list_encoders",
    "positions_from_attention_mask",
    "register",
    "unregister",
]


#: ``get_encoder(name, /, **options)``: the encoder registered as ``name`` in the default
#: registry (:meth:`peregistry.registry.Registry.get_encoder`).
get_encoder = default_registry.get_encoder


def list_encoders() -> list[EncoderInfo]:
    """Every registered encoder (name, kind, family, plugin, summary, status), and every plugin
    that failed to load, with its error.

    >>> import peregistry as per
    >>> info = {i.name: i for i in per.list_encoders()}
    >>> info["rotary"].kind, info["alibi"].kind, info["transformer-xl"].kind
    ('rotary', 'bias', 'relative-embedding')
    >>> info["sinusoidal"].plugin.distribution, info["sinusoidal"].status
    ('peregistry', 'ok')
    """
    return default_registry.list_encoders()


def register(plugin: object, name: str | None = None) -> str:
    """Register a plugin (a module or object with :data:`hookimpl` functions) in-process,
    without an entry point; an encoder class (a subclass of :class:`Encoder`) registers that
    encoder. Returns the name to :func:`unregister` it by. Anything with no hookimpl is a
    ``TypeError`` saying what to pass."""
    return default_registry.register(plugin, name)


def unregister(name: str) -> None:
    """Remove a plugin registered with :func:`register` (or loaded from an entry point)."""
    default_registry.unregister(name)


def convert(params: Any, xp: Any, device: Any = None) -> Any:
    """Move arrays (a dict of params, a list, or one array) to namespace ``xp`` (a module such
    as ``numpy``, ``torch``, ``jax.numpy``, or a backend name), on ``device``.

    DLPack is used where both frameworks support the dtype and device (zero-copy on CPU);
    otherwise the values go through NumPy. Dtypes are preserved (bfloat16 included);
    torch tensors are detached first (conversion does not carry autograd history).
    """
    from ._convert import convert as _convert

    return _convert(params, xp, device)


def from_hf_config(config: Any, *, layer_type: str | int | None = None) -> Encoder:
    """The encoder that reproduces a Hugging Face model's positional encoding, from its
    ``PretrainedConfig`` or the dict of its ``config.json`` (transformers is not imported).

    ``layer_type`` names a layer type (``"sliding_attention"``; T5's ``"encoder"`` or
    ``"decoder"``) or a layer index, for models whose layers differ. See
    :mod:`peregistry.hf_config` and docs/porting.md.

    >>> import peregistry as per
    >>> config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
    ...           "rope_theta": 500000.0, "max_position_embeddings": 128}
    >>> enc = per.from_hf_config(config)
    >>> enc.name, enc.options["dim"], enc.options["theta"], enc.options["layout"]
    ('rotary', 16, 500000.0, 'half')
    """
    from .hf_config import from_hf_config as _from_hf_config

    return _from_hf_config(config, layer_type=layer_type)
