"""peregistry: Transformer positional encoders written once against the Python Array API standard.

Find an encoder by name and call it on NumPy, PyTorch, JAX or array-api-strict arrays::

    import peregistry as per

    enc = per.get_encoder("sinusoidal", dim=8)
    enc.encode(np.arange(4))          # numpy in -> numpy out; torch in -> torch out

``import peregistry`` imports no array framework: each one is touched only when its arrays arrive.
Plugins (the built-in families included) load on the first registry question, not at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from . import rope  # (named: type checkers then see per.rope; RotaryEncoder loads it anyway)
from ._attention_mask import positions_from_attention_mask
from ._hooks import hookimpl, hookspec
from ._options import Option
from .errors import EncoderNotFoundError, PluginConflictError, PluginError
from .kinds import AbsoluteEncoder, BiasEncoder, Encoder, RelativeEmbedding
from .registry import EncoderInfo, PluginInfo, default_registry
from .rope.encoder import RotaryEncoder

if TYPE_CHECKING:  # the built-in families' classes, the types of their names below
    from .encoders.dual_chunk import DualChunkRotary
    from .encoders.fire import Fire
    from .encoders.fope import FoPE
    from .encoders.kerple import Kerple
    from .encoders.learned import Learned, Learned2D
    from .encoders.mrope import MRope
    from .encoders.relative import ALiBi, Shaw, T5Bias, TransformerXL
    from .encoders.rotary import Rotary
    from .encoders.sinusoidal import Sinusoidal
    from .encoders.xpos import XPos

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
    "rope",
    "unregister",
]


_E = TypeVar("_E", bound=Encoder)


# A built-in name gives its family's class, a kind (an Encoder subclass) that type.
@overload
def get_encoder(name: Literal["sinusoidal"], /, **options: Any) -> Sinusoidal: ...
@overload
def get_encoder(name: Literal["learned"], /, **options: Any) -> Learned: ...
@overload
def get_encoder(name: Literal["learned-2d"], /, **options: Any) -> Learned2D: ...
@overload
def get_encoder(name: Literal["rotary"], /, **options: Any) -> Rotary: ...
@overload
def get_encoder(name: Literal["mrope"], /, **options: Any) -> MRope: ...
@overload
def get_encoder(name: Literal["xpos"], /, **options: Any) -> XPos: ...
@overload
def get_encoder(name: Literal["fope"], /, **options: Any) -> FoPE: ...
@overload
def get_encoder(name: Literal["dual-chunk"], /,
                **options: Any) -> DualChunkRotary: ...
@overload
def get_encoder(name: Literal["t5"], /, **options: Any) -> T5Bias: ...
@overload
def get_encoder(name: Literal["alibi"], /, **options: Any) -> ALiBi: ...
@overload
def get_encoder(name: Literal["kerple"], /, **options: Any) -> Kerple: ...
@overload
def get_encoder(name: Literal["fire"], /, **options: Any) -> Fire: ...
@overload
def get_encoder(name: Literal["shaw"], /, **options: Any) -> Shaw: ...
@overload
def get_encoder(name: Literal["transformer-xl"], /,
                **options: Any) -> TransformerXL: ...
@overload
def get_encoder(name: str, kind: type[_E], /, **options: Any) -> _E: ...
@overload
def get_encoder(name: str, /, **options: Any) -> Encoder: ...
def get_encoder(name: str, kind: type[Encoder] | None = None, /, **options: Any) -> Encoder:
    """The encoder registered as ``name`` in the default registry, built with keyword-only
    ``options`` (validated now): :meth:`peregistry.registry.Registry.get_encoder`.

    ``kind``, a class (:class:`RotaryEncoder`, a plugin's own class), says what the encoder
    must be an instance of: another raises ``TypeError`` naming both, and a type checker gives
    the result that type (``get_encoder("my-rope", per.RotaryEncoder, dim=64)``). Without it,
    a built-in name has its family's type (``get_encoder("rotary")`` is a ``Rotary``, a
    :class:`RotaryEncoder`), any other name :class:`Encoder`.

    An unknown name raises :class:`~peregistry.EncoderNotFoundError` listing close matches
    and known names; a name claimed by two plugins raises
    :class:`~peregistry.PluginConflictError` naming both.

    >>> import numpy as np
    >>> import peregistry as per
    >>> enc = per.get_encoder("rotary", dim=8)
    >>> enc.name, enc.kind, enc.options["theta"]
    ('rotary', 'rotary', 10000.0)
    >>> per.get_encoder("sinusoidal", dim=8).encode(np.arange(4)).shape
    (4, 8)
    >>> per.get_encoder("alibi", per.RotaryEncoder, num_heads=8)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    TypeError: encoder 'alibi' is a ...ALiBi (kind 'bias'), not a ...RotaryEncoder as kind=RotaryEncoder asks
    """
    if kind is not None:  # (checked before the options are)
        from ._kind_check import check_kind

        check_kind(name, default_registry.encoder_class(name), kind)
    return default_registry.get_encoder(name, **options)


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


@overload
def from_hf_config(config: Any, *, layer_type: str | int | None = None, kind: type[_E],
                   engine: str = "transformers") -> _E: ...
@overload
def from_hf_config(config: Any, *, layer_type: str | int | None = None, kind: None = None,
                   engine: str = "transformers") -> Encoder: ...
def from_hf_config(config: Any, *, layer_type: str | int | None = None,
                   kind: type[Encoder] | None = None, engine: str = "transformers") -> Encoder:
    """The encoder that reproduces a Hugging Face model's positional encoding, from its
    ``PretrainedConfig`` or the dict of its ``config.json`` (transformers is not imported).

    ``layer_type`` names a layer type (``"sliding_attention"``; T5's ``"encoder"`` or
    ``"decoder"``) or a layer index, for models whose layers differ. See
    :mod:`peregistry.hf_config` and docs/porting.md. ``kind``, a class, is what the encoder
    must be an instance of, as in :func:`get_encoder`:
    ``from_hf_config(config, kind=per.RotaryEncoder)`` has the type :class:`RotaryEncoder`
    (most models) and raises ``TypeError`` for a T5 or ALiBi model. ``engine``
    (``"transformers"``, ``"vllm"``, ``"sglang"``) is whose reading of the config to reproduce
    where the serving engines and transformers differ (docs/porting.md, "Serving engines").

    >>> import peregistry as per
    >>> config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
    ...           "rope_theta": 500000.0, "max_position_embeddings": 128}
    >>> enc = per.from_hf_config(config)
    >>> enc.name, enc.options["dim"], enc.options["theta"], enc.options["layout"]
    ('rotary', 16, 500000.0, 'half')
    """
    from .hf_config import from_hf_config as _from_hf_config

    enc = _from_hf_config(config, layer_type=layer_type, engine=engine)
    if kind is not None:
        from ._kind_check import check_kind

        check_kind(enc.name, type(enc), kind)
    return enc
