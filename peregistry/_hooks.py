"""Hook specifications of the ``peregistry`` plugin system.

A plugin is any module or object with functions marked :data:`hookimpl` whose names are the
hooks below. Distributions announce theirs through the ``peregistry`` entry point group; the
built-in families take the same path. See :mod:`peregistry.plugin` for a plugin author's tutorial.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._markers import PROJECT, hookimpl, hookspec

if TYPE_CHECKING:
    from .backends._base import Backend
    from .kinds.base import Encoder

__all__ = ["PROJECT", "hookimpl", "hookspec"]


@hookspec
def peregistry_encoders() -> Sequence[type[Encoder]]:  # type: ignore[empty-body]
    """Return the encoder classes this plugin provides.

    Each must be a subclass of one of :class:`~peregistry.AbsoluteEncoder`,
    :class:`~peregistry.RotaryEncoder`, :class:`~peregistry.BiasEncoder` or
    :class:`~peregistry.RelativeEmbedding` with a unique ``name``. A name claimed by two plugins
    is an error that names both distributions; neither wins.

    .. versionadded:: 0.1
    """


@hookspec
def peregistry_backends() -> Sequence[Backend]:  # type: ignore[empty-body]
    """Return backend adapter instances (:class:`~peregistry.backends.Backend`) for array frameworks.

    An adapter's ``name`` is the framework's ``sys.modules`` key; it is consulted only for arrays
    of frameworks that are already imported.

    .. versionadded:: 0.1
    """


@hookspec
def peregistry_rope_scalings() -> Sequence[Any]:  # type: ignore[empty-body]
    """Return rotary scaling types (see :mod:`peregistry.rope.scalings`) by name.

    A scaling returned here becomes usable as ``get_encoder("rotary", scaling={"type": NAME})``.

    .. versionadded:: 0.1
    """


@hookspec
def peregistry_rotation_kernels() -> Sequence[Any]:  # type: ignore[empty-body]
    """Return rotation kernels: fast paths of the rotary rotation (see
    :mod:`peregistry.rope.kernels`).

    A kernel has a unique ``name`` and ``rotate(x, cos, sin, *, layout)``, which returns a new
    array equal to :func:`peregistry.rope.apply_rotation` on the same arguments, or ``None`` to
    decline (another framework, device, dtype, strides, a tracer, or a derivative that may be
    asked for). Optional: ``status()`` (``"active"`` or why not), ``priority`` (higher is tried
    first) and ``ulps`` (a declared tolerance; 0, bit for bit, by default). The core tries the
    active kernels in turn, then its own paths, so a kernel changes speed, never a result;
    :func:`peregistry.testing.check_rotation_kernel` holds a kernel to that.

    .. versionadded:: 0.2
    """
