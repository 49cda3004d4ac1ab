"""Rotary position embedding (RoPE) of RoFormer (Su et al. 2021, arXiv:2104.09864, §3.4).

Each pair of features ``(a_i, b_i)`` of a query or key at position ``p`` is rotated by the angle
``p·ω_i``, ``ω_i = θ^(-2i/d)`` for ``i = 0 … d/2 - 1`` and ``d = rotary_dim``:

.. math::

    \\begin{pmatrix} a_i' \\\\ b_i' \\end{pmatrix} =
    \\begin{pmatrix} \\cos p\\omega_i & -\\sin p\\omega_i \\\\
                     \\sin p\\omega_i & \\cos p\\omega_i \\end{pmatrix}
    \\begin{pmatrix} a_i \\\\ b_i \\end{pmatrix}

so that ``<R(m)q, R(n)k>`` depends on ``m - n`` only. Layouts (which features pair up)::

    layout="half"         # GPT-NeoX, Llama:  pairs (i, i + d/2)
    # x: [x0 x1 | x2 x3] -> rotate_half(x) = [-x2 -x3 | x0 x1]
    layout="interleaved"  # RoFormer, GPT-J:  pairs (2i, 2i+1)
    # x: [x0 x1 x2 x3]   -> rotate_every_two(x) = [-x1 x0 -x3 x2]

and ``out = x·cos + rotate(x)·sin`` with ``cos``/``sin`` from :meth:`Rotary.cos_sin`. With
``rotary_dim < dim`` only the first ``rotary_dim`` features rotate (GPT-NeoX, GPT-J, Phi); the
rest pass through. ``scaling`` selects a context-extension method from
:mod:`peregistry.encoders.rope_scaling` (``linear``, ``dynamic``, ``yarn``, ``longrope``,
``llama3``, or a plugin's), with Hugging Face ``rope_parameters`` names.

For dim = 4, θ = 10000, p = 1: ``cos_sin`` gives cos ``[0.5403, 0.99995, 0.5403, 0.99995]``
and sin ``[0.8415, 0.0100, 0.8415, 0.0100]`` (half layout).

This module is a plugin like any other: it is the ``rotary`` entry point of the ``peregistry``
distribution.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .._hooks import hookimpl
from .._options import Option, freeze, thaw
from ._angles import Frequencies, cos_sin
from .base import Ctx, RotaryEncoder

if TYPE_CHECKING:
    from .rope_scaling import RopeScaling

__all__ = ["Rotary", "ScaledRotary"]


class ScaledRotary(RotaryEncoder):
    """Base of rotary encoders with RoFormer frequencies and a ``scaling`` option (``rotary``,
    ``mrope``): resolves and validates the scaling type, computes the host frequencies
    ``ω_i`` per sequence length (cached), the attention factor, and ``_half_cos_sin``.

    Subclasses declare the options ``dim``, ``theta`` and ``scaling`` (and ``rotary_dim`` if
    they have partial rotary) and call ``super()._validate()`` from their ``_validate``.
    """

    __slots__ = ()

    def _validate(self) -> None:
        from .rope_scaling import resolve_scaling

        raw = self._values["scaling"]
        obj, normalised = resolve_scaling(
            self.name, thaw(raw) if raw is not None else None,
            rotary_dim=self._rotary_dim(), theta=self._values["theta"],
        )
        self._values["scaling"] = freeze(normalised) if normalised is not None else None
        params = {k: v for k, v in (normalised or {}).items() if k != "type"}
        self._cache["scaling"] = obj
        self._cache["scaling_params"] = params
        self._cache["attention_factor"] = 1.0 if obj is None else float(
            obj.attention_factor(self._rotary_dim(), self._values["theta"], params))
        self._cache["freqs"] = {}
        # Host constants for every seq_len the traced code may ask for without a seq_len,
        # computed now (eagerly): torch.compile would otherwise trace the NumPy code.
        self._frequencies(None)
        for t in self._seq_len_dependence()[1]:
            self._frequencies(t + 1)

    # -- frequencies -----------------------------------------------------------------------------
    @property
    def _scaling(self) -> RopeScaling | None:
        return self._cache["scaling"]  # type: ignore[no-any-return]

    def _scaling_params(self) -> dict[str, Any]:
        return self._cache["scaling_params"]  # type: ignore[no-any-return]

    def inv_freq(self, seq_len: int | None = None) -> Any:
        """The ``rotary_dim/2`` angular frequencies ``ω_i`` (scaling applied) as a float64
        NumPy array, for sequence length ``seq_len`` where the scaling depends on it."""
        import numpy as np

        return np.asarray(self._frequencies(seq_len).omega, dtype=np.float64)

    def _frequencies(self, seq_len: int | None) -> Frequencies:
        from .rope_scaling import base_inv_freq

        sc = self._scaling
        params = self._scaling_params()
        key = None if sc is None else sc.seq_len_key(params, seq_len)
        cache: dict[Any, Frequencies] = self._cache["freqs"]
        freqs = cache.get(key)
        if freqs is None:
            import numpy as np

            rd, theta = self._rotary_dim(), float(self._values["theta"])
            if sc is None:
                omega = base_inv_freq(rd, theta)
            else:
                omega = np.asarray(sc.inv_freq(rd, theta, params, seq_len), dtype=np.float64)
                if omega.shape != (rd // 2,) or not np.all(np.isfinite(omega)):
                    raise ValueError(
                        f"{self.name}: scaling {sc.name!r} returned inv_freq of shape "
                        f"{omega.shape}, but should be ({rd // 2},) finite values"
                    )
            freqs = Frequencies.from_omega(omega)
            if len(cache) > 64:  # dynamic NTK: one entry per sequence length seen
                cache.pop(next(iter(cache)))
            cache[key] = freqs
        return freqs

    @property
    def attention_factor(self) -> float:
        """The factor Hugging Face calls ``attention_scaling``, applied to ``cos`` and ``sin``."""
        return float(self._cache["attention_factor"])

    def _seq_len_dependence(self) -> tuple[str, tuple[int, ...]]:
        sc = self._scaling
        if sc is None:
            return "none", ()
        dep = sc.seq_len_dependence
        return dep, (sc.seq_len_breakpoints(self._scaling_params()) if dep == "piecewise" else ())

    # -- the hook ----------------------------------------------------------------------------------
    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> tuple[Any, Any]:
        cos, sin = cos_sin(positions, self._frequencies(seq_len), ctx=ctx)
        af = self.attention_factor
        if af != 1.0 and math.isfinite(af):
            cos, sin = cos * af, sin * af
        return cos, sin


#: Options shared by the rotary encoders (``rotary``, ``mrope``): one declaration each.
HEAD_DIM = Option(int, allowed="a positive even integer", check=lambda d: d > 0 and d % 2 == 0,
                  doc="head dimension: x.shape[-1]")
THETA = Option(float, 10000.0, allowed="a finite number > 0 (and != 1)",
               check=lambda t: t > 0 and t != 1.0,
               doc="frequency base θ (HF rope_theta; Llama 3: 500000)")
PAIR_LAYOUT = Option(str, "half", choices=("half", "interleaved"),
                     doc="'half': pairs (i, i+d/2), GPT-NeoX/Llama/Qwen; 'interleaved': (2i, 2i+1)")
SCALING = Option(dict, None, nullable=True,
                 allowed="None or a dict with 'type' and that type's parameters",
                 doc="context extension: {'type': 'yarn', 'factor': 4.0, ...}")


class Rotary(ScaledRotary):
    """Rotary position embedding, RoFormer/GPT-NeoX/Llama RoPE with HF scaling types."""

    name = "rotary"
    properties = frozenset({"rope-layouts"})
    __slots__ = ()

    dim = HEAD_DIM
    theta = THETA
    rotary_dim = Option(int, None, nullable=True,
                        allowed="None (= dim) or a positive even integer <= dim",
                        check=lambda r: r > 0 and r % 2 == 0,
                        doc="features rotated (partial rotary; HF dim * partial_rotary_factor)")
    layout = PAIR_LAYOUT
    scaling = SCALING

    def _validate(self) -> None:
        dim, rd = self._values["dim"], self._values["rotary_dim"]
        if rd is not None and rd > dim:
            raise self._invalid("rotary_dim", rd, f"None (= dim) or a positive even integer "
                                f"<= dim ({dim})")
        super()._validate()


@hookimpl
def peregistry_encoders() -> list[type[RotaryEncoder]]:
    return [Rotary]
