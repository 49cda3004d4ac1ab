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
rest pass through. ``rotary_features="last"`` rotates the last ``rotary_dim`` features instead
(``[nope | rope]`` heads, DeepSeek-V4's ``apply_rotary_pos_emb`` on ``x[..., -rope_dim:]``,
transformers 5.23). ``direction="negative"`` turns each pair by ``-p·ω_i`` (nanochat, whose
``rotate_half`` returns ``[x2, -x1]``)::

    a_i' = a_i·cos(p·ω_i) + b_i·sin(p·ω_i),    b_i' = b_i·cos(p·ω_i) - a_i·sin(p·ω_i)

and :meth:`Rotary.cos_sin` then gives ``sin(-p·ω_i)``. ``scaling`` selects a context-extension
method from :mod:`peregistry.rope.scalings` (``linear``, ``dynamic``, ``yarn``, ``longrope``,
``llama3``, ``proportional`` (Gemma 4), or a plugin's), with Hugging Face ``rope_parameters``
names.

For dim = 4, θ = 10000, p = 1: ``cos_sin`` gives cos ``[0.5403, 0.99995, 0.5403, 0.99995]``
and sin ``[0.8415, 0.0100, 0.8415, 0.0100]`` (half layout).

This module is a plugin like any other: it is the ``rotary`` entry point of the ``peregistry``
distribution.
"""

from __future__ import annotations

from .._markers import hookimpl
from .._options import MAX_DIM, Option
from ..rope.encoder import RotaryEncoder
from ..rope.scaled import ScaledRotary

__all__ = ["Rotary", "ScaledRotary", "check_rotary_dim", "check_temperature"]


#: Options shared by the rotary encoders (``rotary``, ``mrope``): one declaration each.
HEAD_DIM = Option(int, allowed=f"a positive even integer <= {MAX_DIM}",
                  check=lambda d: 0 < d <= MAX_DIM and d % 2 == 0,
                  doc="head dimension: x.shape[-1]")
THETA = Option(float, 10000.0, allowed="a finite number > 0 (and != 1)",
               check=lambda t: t > 0 and t != 1.0,
               doc="frequency base θ (HF rope_theta; Llama 3: 500000)")
PAIR_LAYOUT = Option(str, "half", choices=("half", "interleaved"),
                     doc="'half': pairs (i, i+d/2), GPT-NeoX/Llama/Qwen; 'interleaved': (2i, 2i+1)")
SCALING = Option(dict, None, nullable=True,
                 allowed="None or a dict with 'type' and that type's parameters",
                 doc="context extension: {'type': 'yarn', 'factor': 4.0, ...}")
ROTARY_DIM = Option(int, None, nullable=True,
                    allowed="None (= dim) or a positive even integer <= dim",
                    check=lambda r: r > 0 and r % 2 == 0,
                    doc="features rotated (partial rotary; HF dim * partial_rotary_factor)")
ROTARY_FEATURES = Option(str, "first", choices=("first", "last"),
                         doc="which rotary_dim features rotate: 'first' ([rope | pass], "
                             "GPT-NeoX/Phi) or 'last' ([pass | rope], DeepSeek-V4)")
DIRECTION = Option(str, "positive", choices=("positive", "negative"),
                   doc="sign of the angle: 'positive' turns pairs by +p·ω (RoFormer), "
                       "'negative' by -p·ω (nanochat)")

#: Llama 4's attention temperature (:mod:`peregistry.rope._temperature`), read by
#: ``enc.query_scale``; shared so that a plugin's rotary family can declare the same options.
ATTN_TEMPERATURE_TUNING = Option(bool, False,
                                 doc="Llama 4: enc.query_scale(p) = log1p(floor((p+1)/"
                                     "floor_scale))·attn_scale + 1 (else 1); never in rotate")
FLOOR_SCALE = Option(float, 8192.0, allowed="a finite number > 0", check=lambda s: s > 0,
                     doc="positions per step of the temperature (Llama 4: 8192)")
ATTN_SCALE = Option(float, 0.1, allowed="a finite number",
                    doc="strength of the temperature (Llama 4: 0.1)")


def check_temperature(enc: RotaryEncoder) -> None:
    """``floor_scale`` and ``attn_scale`` are read only with ``attn_temperature_tuning=True``:
    other values without it are an error, never dropped."""
    if enc._values["attn_temperature_tuning"]:
        return
    for name, default in (("floor_scale", FLOOR_SCALE.default), ("attn_scale", ATTN_SCALE.default)):
        if enc._values[name] != default:
            raise enc._invalid(name, enc._values[name], f"{default!r} (the default) unless "
                               f"attn_temperature_tuning=True, which reads it")


def check_rotary_dim(enc: RotaryEncoder) -> None:
    """``rotary_dim`` must not exceed ``dim`` (an error naming both)."""
    dim, rd = enc._values["dim"], enc._values["rotary_dim"]
    if rd is not None and rd > dim:
        raise enc._invalid("rotary_dim", rd, f"None (= dim) or a positive even integer "
                           f"<= dim ({dim})")


class Rotary(ScaledRotary):
    """Rotary position embedding, RoFormer/GPT-NeoX/Llama RoPE with HF scaling types."""

    name = "rotary"
    properties = frozenset({"rope-layouts"})
    __slots__ = ()

    dim = HEAD_DIM
    theta = THETA
    rotary_dim = ROTARY_DIM
    layout = PAIR_LAYOUT
    scaling = SCALING
    rotary_features = ROTARY_FEATURES
    direction = DIRECTION
    attn_temperature_tuning = ATTN_TEMPERATURE_TUNING
    floor_scale = FLOOR_SCALE
    attn_scale = ATTN_SCALE

    def _validate(self) -> None:
        check_rotary_dim(self)
        check_temperature(self)
        super()._validate()


@hookimpl
def peregistry_encoders() -> list[type[RotaryEncoder]]:
    """This family's encoders, ``rotary`` (hook ``peregistry_encoders``)."""
    return [Rotary]
