"""Moving a checkpoint's query/key projections between the two pair layouts.

A model trained with interleaved pairs ``(2i, 2i+1)`` (Meta's Llama, GPT-J) rotates the same
features as one with half pairs ``(i, i + d/2)`` (Hugging Face's Llama) once the rows of
``W_q`` and ``W_k`` that make each head are reordered: evens first, then odds. That is the
``permute`` of transformers' Llama weight conversion (``convert_llama_weights_to_hf.py``)::

    w.view(n_heads, head_dim // 2, 2, in_features).transpose(1, 2).reshape(out, in_features)

and its inverse goes back. The attention scores ``<R(m)q, R(n)k>`` are then equal.
"""

from __future__ import annotations

from math import prod
from typing import Any

from ..kinds._services import default_services
from ._funcs import LAYOUTS

__all__ = ["permute_for_layout"]


def permute_for_layout(w: Any, *, num_heads: int, source: str, target: str,
                       rotary_dim: int | None = None, axis: int = 0) -> Any:
    """``w`` (a q or k projection weight, or its bias) with the features of every head
    reordered from the ``source`` pair layout to the ``target`` one.

    :param w: an array whose ``axis`` holds ``num_heads * head_dim`` output features (a torch
        ``Linear.weight`` ``(out, in)``: ``axis=0``; a Keras/Flax kernel ``(in, out)``:
        ``axis=-1``; a bias ``(out,)``).
    :param num_heads: the heads of that projection (key/value heads for ``W_k`` under GQA).
    :param source: ``"interleaved"`` or ``"half"``; ``target`` likewise. Equal: ``w`` itself.
    :param rotary_dim: the rotated features of each head, its first ones (partial rotary);
        default: the whole head. The others keep their place.
    :returns: an array of ``w``'s namespace, dtype, device and shape.
    """
    owner = "permute_for_layout"
    for name, value in (("source", source), ("target", target)):
        if value not in LAYOUTS:
            raise ValueError(f"{owner}: {name} must be one of {LAYOUTS}, got {value!r}")
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"{owner}: num_heads must be a positive int, got {num_heads!r}")
    backend = default_services().backend_of(w)
    if backend is None:
        raise TypeError(f"{owner}: w must be an array of a registered backend, got "
                        f"{type(w).__module__}.{type(w).__qualname__}")
    xp = backend.namespace()
    ndim = len(w.shape)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{owner}: axis={axis} is out of range for w of shape {tuple(w.shape)}")
    features = int(w.shape[axis])
    if features % num_heads:
        raise ValueError(f"{owner}: w.shape[{axis}] = {features} is not num_heads={num_heads} "
                         f"heads of equal width")
    head_dim = features // num_heads
    rd = head_dim if rotary_dim is None else rotary_dim
    if isinstance(rd, bool) or not isinstance(rd, int) or not 0 < rd <= head_dim or rd % 2:
        raise ValueError(f"{owner}: rotary_dim must be an even int in (0, head_dim={head_dim}], "
                         f"got {rotary_dim!r}")
    if source == target:
        return w
    moved = xp.moveaxis(w, axis, 0)
    rest = tuple(int(d) for d in moved.shape[1:])
    heads = xp.reshape(moved, (num_heads, head_dim, prod(rest)))
    rot = heads[:, :rd, :]
    # interleaved rows (pair i at 2i, 2i+1) -> (i, 2): read as (2, i) gives the half layout
    pairs = (num_heads, rd // 2, 2, -1) if source == "interleaved" else (num_heads, 2, rd // 2, -1)
    rot = xp.reshape(xp.permute_dims(xp.reshape(rot, pairs), (0, 2, 1, 3)),
                     (num_heads, rd, prod(rest)))
    if rd < head_dim:
        rot = xp.concat((rot, heads[:, rd:, :]), axis=1)
    return xp.moveaxis(xp.reshape(rot, (features, *rest)), 0, axis)
