"""xPos: RoPE with an exponential scale, the query's the inverse of the key's (Sun et al. 2022,
"A Length-Extrapolatable Transformer", arXiv:2212.10554, §3; its code in torchscale
``XPOS``; rotary-embedding-torch ``RotaryEmbedding(use_xpos=True)``; x-transformers).

Every feature pair ``i`` of a query at position ``m`` is rotated by ``m·ω_i`` as in RoPE and
scaled by ``ζ_i^((m - o)/B)``; a key at position ``n`` is rotated by ``n·ω_i`` and scaled by
``ζ_i^(-(n - o)/B)``, with

.. math::

    ω_i = θ^{-2i/d}, \\qquad ζ_i = \\frac{2i/d + γ}{1 + γ} \\in (0, 1),
    \\qquad i = 0 … d/2 - 1,\\ d = \\text{rotary\\_dim}

``B = scale_base`` (512 in the paper's code and rotary-embedding-torch), ``γ = gamma`` (0.4) and
``o = scale_origin`` (0). The logit of the pair then carries ``ζ_i^((m - n)/B)``: it depends on
``m - n`` only, and decays with the distance where ``m > n`` (causal attention), which is what
makes attention resolution better when extrapolating. The origin ``o`` cancels in every
query·key product; it only decides where each vector's scale is 1 (rotary-embedding-torch and
x-transformers center it on the sequence: ``o = seq_len // 2``).

The rotation cannot tell a query from a key, so the role is a keyword: ``enc.rotate(x, p,
role="query")`` (the default of :meth:`XPos.rotate`, :meth:`XPos.cos_sin` and
:meth:`XPos.tables`) or ``role="key"``, also spelled :meth:`XPos.rotate_queries` and
:meth:`XPos.rotate_keys`. Rotating keys with the query role is what plain RoPE code does: the
dot product then carries ``ζ_i^((m + n - 2o)/B)`` and is no longer relative.

xPos is not norm-preserving: it declares the rotary laws it breaks in ``exempt_checks``.

This module is a plugin like any other: it is the ``xpos`` entry point of the ``peregistry``
distribution.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from .._markers import hookimpl
from .._options import Option
from ..kinds._services import use_services
from ..rope import Frequencies, RotaryEncoder, cos_sin, inv_freq
from .rotary import HEAD_DIM, PAIR_LAYOUT, THETA

if TYPE_CHECKING:
    from ..backends._base import Ctx
    from ..rope import RotaryTables

__all__ = ["XPos", "xpos_zeta"]

Role = Literal["query", "key"]


def xpos_zeta(rotary_dim: int, gamma: float = 0.4) -> list[float]:
    """xPos's per-pair bases ``ζ_i = (2i/d + γ)/(1 + γ)``, ``i = 0 … d/2 - 1`` (Sun et al.
    2022, §3; torchscale and rotary-embedding-torch compute ``(2i + 0.4·d)/(1.4·d)``)."""
    d = int(rotary_dim)
    return [(2.0 * i / d + gamma) / (1.0 + gamma) for i in range(d // 2)]


class XPos(RotaryEncoder):
    """xPos: RoPE times ζ^(position/scale_base) on queries, its inverse on keys (Sun et al. 2022)."""

    name = "xpos"
    properties = frozenset({"rope-layouts"})
    exempt_checks: ClassVar[Mapping[str, str]] = MappingProxyType({
        "check_rotary_norm_preserved":
            "xPos scales each query pair by ζ_i^((p - scale_origin)/scale_base) (keys by the "
            "inverse): norms change with the position by design",
        "check_rotary_relative":
            "the check rotates keys with the query role; <rotate(q, m), rotate(k, n, role='key')> "
            "depends on m - n only (tests/test_xpos.py)",
    })
    __slots__ = ("_keys",)
    _keys: XPos
    #: +1: the query's scale ζ^(+(p - o)/B); the key twin has -1.
    _scale_sign: ClassVar[float] = 1.0
    # The shared position table would extend to the next power of two past the positions asked
    # for, where the key scale overflows first (float32: |p - o| beyond ~36000 for B = 512);
    # the tables of the positions asked for are still cached per (offset, length).
    _POSITION_TABLE_BYTES: ClassVar[int] = 0

    dim = HEAD_DIM
    theta = THETA
    rotary_dim = Option(int, None, nullable=True,
                        allowed="None (= dim) or a positive even integer <= dim",
                        check=lambda r: r > 0 and r % 2 == 0,
                        doc="features rotated and scaled (rotary-embedding-torch's dim); the "
                            "rest pass through")
    layout = Option(str, "interleaved", choices=PAIR_LAYOUT.choices,
                    doc="'interleaved': pairs (2i, 2i+1), torchscale/rotary-embedding-torch/"
                        "x-transformers; 'half': (i, i+d/2)")
    scale_base = Option(float, 512.0, allowed="a finite number > 0", check=lambda b: b > 0,
                        doc="B in ζ^(p/B) (rotary-embedding-torch xpos_scale_base)")
    gamma = Option(float, 0.4, allowed="a finite number > 0", check=lambda g: g > 0,
                   doc="γ in ζ_i = (2i/d + γ)/(1 + γ)")
    scale_origin = Option(float, 0.0, allowed="a finite number",
                          doc="position o where the scale is 1: ζ^((p - o)/B); cancels in q·k")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        if self._scale_sign > 0:  # the key twin: same options, inverse scale, own caches
            with use_services(self._services):
                object.__setattr__(self, "_keys", _XPosKeys(**self.options))

    def _validate(self) -> None:
        dim, rd = self._values["dim"], self._values["rotary_dim"]
        if rd is not None and rd > dim:
            raise self._invalid("rotary_dim", rd, f"None (= dim) or a positive even integer "
                                f"<= dim ({dim})")
        # Host constants, computed now: a trace (torch.compile) must not run the NumPy code.
        rd = self._rotary_dim()
        self._cache["freqs"] = Frequencies.from_omega(inv_freq(rd, float(self._values["theta"])))
        base = float(self._values["scale_base"])
        self._cache["log_scale"] = [self._scale_sign * math.log(z) / base
                                    for z in xpos_zeta(rd, float(self._values["gamma"]))]

    def _interleaved(self) -> bool:
        return bool(self._values["layout"] == "interleaved")

    def zeta(self) -> Any:
        """The ``rotary_dim/2`` bases ``ζ_i`` as a float64 NumPy array."""
        import numpy as np

        return np.asarray(xpos_zeta(self._rotary_dim(), float(self._values["gamma"])),
                          dtype=np.float64)

    def _role(self, role: str) -> XPos:
        if role == "query":
            return self
        if role == "key":
            return self._keys
        raise ValueError(f"{self.name}: role must be 'query' or 'key', got {role!r}")

    # -- the hook ------------------------------------------------------------------------------
    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> tuple[Any, Any]:
        """RoPE's ``cos(p·ω_i)``, ``sin(p·ω_i)`` times ``ζ_i^(±(p - o)/B) = exp((p - o)·c_i)``,
        ``c_i = ±ln(ζ_i)/B`` (a host constant), all in ``ctx.wide``."""
        xp = ctx.xp
        cos, sin = cos_sin(positions, self._cache["freqs"], ctx=ctx)
        p = xp.astype(positions, ctx.wide)[..., None]
        origin = float(self._values["scale_origin"])
        if origin != 0.0:
            p = p - origin
        scale = xp.exp(p * ctx.constant(self._cache["log_scale"]))
        return cos * scale, sin * scale

    # -- public methods: the role of the rotated tensor ------------------------------------------
    def rotate(self, x: Any, positions: Any = None, *, offset: Any = 0,
               params: Mapping[str, Any] | None = None, seq_len: int | None = None,
               role: Role = "query") -> Any:
        """``x`` rotated and scaled at ``positions`` as a query (``role="query"``, the default:
        ``ζ^(+(p - o)/B)``) or as a key (``role="key"``: ``ζ^(-(p - o)/B)``). Same shape, dtype,
        namespace and device as ``x``; the other arguments as for
        :meth:`peregistry.RotaryEncoder.rotate` (``seq_len`` is accepted and unused)."""
        return RotaryEncoder.rotate(self._role(role), x, positions, offset=offset,
                                    params=params, seq_len=seq_len)

    def rotate_queries(self, q: Any, positions: Any = None, *, offset: Any = 0,
                       params: Mapping[str, Any] | None = None) -> Any:
        """``rotate(q, positions, offset=offset, role="query")``."""
        return self.rotate(q, positions, offset=offset, params=params, role="query")

    def rotate_keys(self, k: Any, positions: Any = None, *, offset: Any = 0,
                    params: Mapping[str, Any] | None = None) -> Any:
        """``rotate(k, positions, offset=offset, role="key")``."""
        return self.rotate(k, positions, offset=offset, params=params, role="key")

    def cos_sin(self, positions: Any, *, dtype: Any = None, seq_len: int | None = None,
                role: Role = "query") -> tuple[Any, Any]:
        """``(cos, sin)`` of ``role`` in the encoder's layout, each ``(*positions.shape,
        rotary_dim)``, the scale ``ζ^(±(p - o)/B)`` included: ``rotate(x, p, role=role)`` is
        ``x·cos + rotate_pairs(x)·sin``."""
        return RotaryEncoder.cos_sin(self._role(role), positions, dtype=dtype, seq_len=seq_len)

    def tables(self, positions: Any, *, seq_len: int | None = None,
               role: Role = "query") -> RotaryTables:
        """The tables of ``role`` (see :meth:`peregistry.RotaryEncoder.tables`): queries and
        keys need one each, ``enc.tables(p).rotate(q)`` and ``enc.tables(p,
        role="key").rotate(k)``."""
        return RotaryEncoder.tables(self._role(role), positions, seq_len=seq_len)


class _XPosKeys(XPos):
    """The key role of an :class:`XPos` (its ``_keys``): the inverse scale, own table caches."""

    __slots__ = ()
    _scale_sign: ClassVar[float] = -1.0


@hookimpl
def peregistry_encoders() -> list[type[RotaryEncoder]]:
    """This family's encoders, ``xpos`` (hook ``peregistry_encoders``)."""
    return [XPos]
