"""Rotary tables whose pairs' two features turn by different angles: HunYuan-VL's XD-RoPE
(``mrope`` with ``feature_axes``; transformers 5.23 ``models/hunyuan_vl/modeling_hunyuan_vl.py``,
``HunYuanVLRotaryEmbedding.recomposition_frequencies`` and ``apply_rotary_pos_emb``).

The tables of such an encoder hold one entry per rotated feature, ``[first | second]``: entry
``i`` of the first half belongs to the first feature of pair ``i``, entry ``i`` of the second
half to its second feature (for ``layout="half"`` exactly Hugging Face's full-width
``cos``/``sin``). The rotation is Hugging Face's ``x·cos + rotate_half(x)·sin`` with them::

    a_i' = a_i·cos θ_i - b_i·sin θ_i      θ_i: the angle of pair i's first feature
    b_i' = b_i·cos φ_i + a_i·sin φ_i      φ_i: the angle of its second feature

computed as two ordinary rotations, by the first features' tables and by the second features'
tables (each through the framework fast paths, bit for bit the generic rotation), of which each
output feature takes the one of its own pair member. Where ``θ = φ`` (every axis at one
position: text tokens) that is the plain rotation, bit for bit; elsewhere it is not a rotation
(norms change).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..rope import RotaryTables, rotate_features

if TYPE_CHECKING:
    from ..backends._base import Ctx

__all__ = ["SplitRotaryTables", "feature_order", "merge_members", "rotate_split"]


def feature_order(first: Any, second: Any, *, interleaved: bool, xp: Any) -> Any:
    """The full-width table of the first and second members' tables ``(..., h)`` each, in the
    layout's feature order: ``[f0 f1 | s0 s1]`` (half), ``[f0 s0 f1 s1]`` (interleaved)."""
    if interleaved:
        return xp.reshape(xp.stack((first, second), axis=-1),
                          (*first.shape[:-1], 2 * first.shape[-1]))
    return xp.concat((first, second), axis=-1)


def merge_members(a: Any, b: Any, *, rotary_dim: int, interleaved: bool, last: bool,
                  xp: Any) -> Any:
    """Each pair's first feature from ``a``, its second from ``b`` (features that pass through
    are equal in both): ``a``, ``b`` are ``x`` rotated by the first and second members' tables."""
    dim = a.shape[-1]
    start = dim - rotary_dim if last else 0
    if not interleaved:
        # rotated features [a0 a1 | b0 b1]: the first half from a, the second from b
        cut = start + rotary_dim // 2
        return xp.concat((a[..., :cut], b[..., cut:]), axis=-1)
    end = start + rotary_dim
    # rotated features [a0 b0 a1 b1]: the even ones from a, the odd ones from b
    pairs = xp.reshape(xp.stack((a[..., start:end:2], b[..., start + 1:end:2]), axis=-1),
                       (*a.shape[:-1], rotary_dim))
    parts = [p for p in (a[..., :start], pairs, a[..., end:]) if p.shape[-1]]
    return xp.concat(parts, axis=-1) if len(parts) > 1 else pairs


def rotate_split(x: Any, cos: Any, sin: Any, *, rotary_dim: int, interleaved: bool, last: bool,
                 cdt: Any, xp: Any, native: bool = True, text: bool = False) -> Any:
    """``x`` rotated by ``[first | second]`` tables ``(..., rotary_dim)`` (see the module);
    ``native=False`` forces the generic rotation. ``text=True`` says every axis is at one
    position (``positions=None``): both halves of the tables are then the same angles
    ``p·ω_i``, bit for bit (computed element by element), and one rotation gives the result."""
    h = rotary_dim // 2
    kw = {"rotary_dim": rotary_dim, "interleaved": interleaved, "last": last, "cdt": cdt,
          "xp": xp, "native": native}
    a = rotate_features(x, cos[..., :h], sin[..., :h], **kw)
    if text:
        return a
    b = rotate_features(x, cos[..., h:], sin[..., h:], **kw)
    return merge_members(a, b, rotary_dim=rotary_dim, interleaved=interleaved, last=last, xp=xp)


class SplitRotaryTables(RotaryTables):
    """:class:`~peregistry.rope.RotaryTables` of an encoder whose pairs' two features turn by
    different angles (``mrope`` with ``feature_axes``, HunYuan-VL's XD-RoPE): ``cos``/``sin``
    are the tables of each pair's first feature, ``second`` the :class:`RotaryTables` of the
    second features; ``rotate(x)`` equals the encoder's ``rotate`` bit for bit."""

    __slots__ = ("second",)

    def __init__(self, cos: Any, sin: Any, *, layout: Any, head_dim: int, owner: str,
                 ctx: Ctx, rotary_features: str, constant: bool = False) -> None:
        h = int(cos.shape[-1]) // 2
        kw = {"layout": layout, "head_dim": head_dim, "owner": owner, "ctx": ctx,
              "rotary_features": rotary_features, "constant": constant}
        super().__init__(cos[..., :h], sin[..., :h], **kw)
        self.second = RotaryTables(cos[..., h:], sin[..., h:], **kw)

    def __repr__(self) -> str:
        return (f"SplitRotaryTables(shape={tuple(self.cos.shape)} x 2, dtype={self.cos.dtype}, "
                f"layout={self.layout!r}, owner={self.owner!r})")

    def rotate_all(self, *xs: Any) -> tuple[Any, ...]:
        """Each of ``xs`` rotated (``q, k = tables.rotate_all(q, k)``)."""
        return tuple(self.rotate(x) for x in xs)

    def rotate(self, x: Any) -> Any:
        """``x`` ``(..., head_dim)`` rotated: same shape, dtype, namespace and device."""
        a = super().rotate(x)
        b = self.second.rotate(x)
        return merge_members(a, b, rotary_dim=self.rotary_dim, interleaved=self.interleaved,
                             last=self.last, xp=self._ctx.xp)
