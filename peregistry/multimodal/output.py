"""The public functions — :func:`position_ids`, :func:`batch_position_ids`, :func:`num_tokens`,
:func:`segment_spans` — and their output: the host ids of the rules, padded into a batch by an
attention mask or a padding side, converted once to the caller's namespace, device and integer
dtype through the backend adapter (of the current registry).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from ..kinds._services import current_services
from .rules import Convention, _checked, _row, _settings
from .segments import _SEGMENT_TYPES, Segment, SegmentBase, _describe, _int, _length

if TYPE_CHECKING:
    import numpy as np

    from ..backends._base import Backend

__all__ = ["BatchPositionIds", "PositionIds", "batch_position_ids", "num_tokens", "position_ids",
           "segment_spans"]


class PositionIds(NamedTuple):
    """What :func:`position_ids` returns (unpacks as ``ids, next_offset``)."""

    #: ``(3, seq)`` integer array (temporal, height, width) in the caller's namespace and device.
    ids: Any
    #: ``max(ids) + 1``: the id of the first generated token; each further token adds 1.
    #: (transformers' ``rope_deltas`` is ``next_offset - seq``.)
    next_offset: int


class BatchPositionIds(NamedTuple):
    """What :func:`batch_position_ids` returns (unpacks as ``ids, next_offsets``)."""

    #: ``(3, batch, seq)`` integer array; padded slots hold ``pad_value``.
    ids: Any
    #: Per row, ``max(row's ids) + 1``: where that row's generated tokens continue.
    next_offsets: tuple[int, ...]


# -- output ----------------------------------------------------------------------------------------
def _target(owner: str, xp: Any, like: Any, device: Any) -> tuple[Backend, Any]:
    """The backend and device of the output: ``like``'s, or ``xp``'s, or NumPy's."""
    registry = current_services()
    backend = None
    if like is not None:
        backend = registry.backend_of(like)
        if backend is None:
            raise TypeError(f"{owner}: like must be an array of a registered backend "
                            f"({', '.join(b.name for b in registry.backends())}), got "
                            f"{type(like).__module__}.{type(like).__qualname__}")
        if device is None:
            device = backend.device(like)
    if xp is not None:
        from_xp = registry.backend_of_namespace(xp)
        if backend is not None and from_xp is not backend:
            raise TypeError(f"{owner}: xp={getattr(xp, '__name__', xp)!r} ({from_xp.name}) and "
                            f"like (a {backend.name} array) disagree; give one of them")
        backend = from_xp
    if backend is None:
        backend = registry.backend("numpy")
    return backend, device


def _dtype_name(dtype: Any) -> str:
    name = getattr(dtype, "__name__", None)
    return name if isinstance(name, str) else str(dtype)


def _to_output(owner: str, host: np.ndarray[Any, Any], backend: Backend, device: Any,
               dtype: Any) -> Any:
    xp = backend.namespace()
    if dtype is None:
        dtype = xp.__array_namespace_info__().default_dtypes(device=device)["integral"]
    else:
        resolved = getattr(xp, dtype, None) if isinstance(dtype, str) else dtype
        try:
            ok = resolved is not None and bool(xp.isdtype(resolved, "integral"))
        except Exception:
            ok = False
        if not ok:
            names = ", ".join(n for n in ("int8", "int16", "int32", "int64", "uint8", "uint16",
                                          "uint32", "uint64") if hasattr(xp, n))
            raise TypeError(f"{owner}: dtype={_dtype_name(dtype)} is not an integer dtype of "
                            f"{backend.name}; allowed: None (the default integer dtype) or one "
                            f"of {names} (a dtype or its name)")
        dtype = resolved
    info = xp.iinfo(dtype)
    if host.size and (int(host.max()) > info.max or int(host.min()) < info.min):
        raise ValueError(f"{owner}: ids span [{int(host.min())}, {int(host.max())}], which "
                         f"{_dtype_name(dtype)} cannot hold (range [{info.min}, {info.max}]); "
                         f"pass a wider integer dtype (int64; JAX needs jax_enable_x64)")
    import numpy as np

    return backend.from_numpy(np.ascontiguousarray(host), dtype=dtype, device=device)


# -- public functions ------------------------------------------------------------------------------
def num_tokens(segments: Sequence[SegmentBase], *, convention: Convention = "qwen2-vl",
               spatial_merge_size: int = 2) -> int:
    """How many tokens ``segments`` occupy (the length of the ids :func:`position_ids` returns),
    e.g. to build ``input_ids`` or an attention mask."""
    s = _settings("num_tokens", convention, spatial_merge_size, None, None)
    return sum(_length(seg, s.merge) for seg in _checked("num_tokens", segments, s))


def segment_spans(segments: Sequence[SegmentBase], *, convention: Convention = "qwen2-vl",
                  spatial_merge_size: int = 2) -> list[tuple[str, int, int]]:
    """``(kind, start, stop)`` token spans of each segment (``kind`` is ``"text"``,
    ``"image"``, ...), in order: which tokens of the ids belong to which segment."""
    s = _settings("segment_spans", convention, spatial_merge_size, None, None)
    spans, start = [], 0
    for seg in _checked("segment_spans", segments, s):
        stop = start + _length(seg, s.merge)
        spans.append((type(seg).__name__.lower(), start, stop))
        start = stop
    return spans


def position_ids(
    segments: Sequence[SegmentBase],
    *,
    convention: Convention = "qwen2-vl",
    spatial_merge_size: int = 2,
    tokens_per_second: float | Fraction | None = None,
    seconds_per_chunk: float | Fraction | None = None,
    offset: int = 0,
    num_tokens: int | None = None,
    xp: Any = None,
    like: Any = None,
    device: Any = None,
    dtype: Any = None,
) -> PositionIds:
    """M-RoPE ids ``(3, seq)`` of one sequence described by ``segments``, and the offset that
    generated tokens continue from (the rules and their sources are in the module docstring).

    :param segments: :class:`Text`, :class:`Image`, :class:`Video`, :class:`Audio` and
        :class:`AudioVisual` segments in sequence order.
    :param convention: ``"qwen2-vl"``, ``"qwen2.5-vl"`` (time-aligned video ids),
        ``"qwen2.5-omni"`` (TMRoPE, audio) or ``"qwen3-vl"`` (per-frame timestamps).
    :param spatial_merge_size: patches merged per side into one token (2 in every Qwen model).
    :param tokens_per_second: temporal ids per second of video/audio; only for ``qwen2.5-vl``
        (default 2) and ``qwen2.5-omni`` (default 25).
    :param seconds_per_chunk: ``qwen2.5-omni`` only: length of the audio/video interleaving
        chunks (default 2).
    :param offset: the id of the first token (0; e.g. the previous turn's ``next_offset``).
    :param num_tokens: if given, the token count the segments must add up to (say
        ``input_ids.shape[-1]``): a mismatch is an error listing the segments' lengths.
    :param xp: the output namespace (``numpy``, ``torch``, ``jax.numpy``, ``array_api_strict``,
        or a backend name); default: ``like``'s, else NumPy.
    :param like: an array whose namespace and device the output takes.
    :param device: the output device (default: ``like``'s, else the namespace's default).
    :param dtype: an integer dtype or its name (default: the namespace's default integer dtype).
    :returns: ``(ids, next_offset)``, a :class:`PositionIds`.
    """
    owner = "position_ids"
    s = _settings(owner, convention, spatial_merge_size, tokens_per_second, seconds_per_chunk)
    segs = _checked(owner, segments, s)
    start = _int(owner, "offset", offset, minimum=0)
    if num_tokens is not None:
        expected = _int(owner, "num_tokens", num_tokens, minimum=0)
        got = sum(_length(seg, s.merge) for seg in segs)
        if got != expected:
            raise ValueError(f"{owner}: the segments hold {got} tokens ({_describe(segs, s.merge)}, "
                             f"with spatial_merge_size={s.merge}) but num_tokens={expected}")
    backend, dev = _target(owner, xp, like, device)
    host, nxt = _row(segs, s, start)
    return PositionIds(_to_output(owner, host, backend, dev, dtype), nxt)


def _masked_slots(owner: str, attention_mask: Any, rows: list[list[Segment]], lengths: list[int],
                  merge: int) -> tuple[np.ndarray[Any, Any], bool]:
    """The ``(batch, seq)`` boolean slots of real tokens of ``attention_mask`` (nonzero), each
    row's count checked against its segments; and whether the mask is a backend's array."""
    import numpy as np

    owner_backend = current_services().backend_of(attention_mask)  # None: nested lists
    host = attention_mask if owner_backend is None else owner_backend.to_numpy(attention_mask)
    mask = np.asarray(host)
    if mask.ndim != 2 or mask.shape[0] != len(rows):
        raise ValueError(f"{owner}: attention_mask must have shape (batch, seq) = "
                         f"({len(rows)}, seq), got {mask.shape}")
    if mask.dtype.kind not in "biuf":
        raise TypeError(f"{owner}: attention_mask must hold 0/1 values, got dtype {mask.dtype}")
    valid = mask != 0
    for b, n in enumerate(lengths):
        count = int(valid[b].sum())
        if count != n:
            raise ValueError(f"{owner}: row {b} has {count} unmasked tokens in "
                             f"attention_mask, but its segments hold {n} "
                             f"({_describe(rows[b], merge)}, with "
                             f"spatial_merge_size={merge})")
    return valid, owner_backend is not None


def _padded_slots(owner: str, lengths: list[int], length: Any,
                  padding_side: Any) -> np.ndarray[Any, Any]:
    """The ``(batch, width)`` boolean slots of real tokens, each row padded on ``padding_side``
    to ``length`` (default: the longest row)."""
    import numpy as np

    if padding_side not in ("right", "left"):
        raise ValueError(f"{owner}: padding_side must be 'right' or 'left', got "
                         f"{padding_side!r}")
    longest = max(lengths, default=0)
    width = longest if length is None else _int(owner, "length", length, minimum=0)
    if width < longest:
        raise ValueError(f"{owner}: length={width} is shorter than row "
                         f"{lengths.index(longest)}, whose segments "
                         f"hold {longest} tokens")
    valid = np.zeros((len(lengths), width), dtype=bool)
    for b, n in enumerate(lengths):
        if padding_side == "right":
            valid[b, :n] = True
        else:
            valid[b, width - n:] = True
    return valid


def batch_position_ids(
    batch: Sequence[Sequence[SegmentBase]],
    *,
    convention: Convention = "qwen2-vl",
    attention_mask: Any = None,
    padding_side: Literal["right", "left"] = "right",
    length: int | None = None,
    pad_value: int = 1,
    spatial_merge_size: int = 2,
    tokens_per_second: float | Fraction | None = None,
    seconds_per_chunk: float | Fraction | None = None,
    xp: Any = None,
    like: Any = None,
    device: Any = None,
    dtype: Any = None,
) -> BatchPositionIds:
    """M-RoPE ids ``(3, batch, seq)`` of padded rows, one segment list per row.

    With ``attention_mask`` (``(batch, seq)``, any namespace or nested lists; nonzero = a real
    token), each row's ids fill its unmasked slots in order, so left, right or mixed padding all
    work, and every row's unmasked count must equal its segments' token count. The output then
    takes the mask's namespace and device unless ``xp``/``like``/``device`` say otherwise.
    Without it, rows are padded on ``padding_side`` to ``length`` (default: the longest row).

    Padded slots hold ``pad_value`` (1, as Qwen's reference code; transformers 5.23's
    Qwen2-VL/2.5-VL/3-VL use 0). The other parameters are those of :func:`position_ids`.

    :returns: ``(ids, next_offsets)``, a :class:`BatchPositionIds`; ``next_offsets[b]`` is
        ``max`` of row ``b``'s ids ``+ 1``.
    """
    import numpy as np

    owner = "batch_position_ids"
    s = _settings(owner, convention, spatial_merge_size, tokens_per_second, seconds_per_chunk)
    if isinstance(batch, str | bytes) or not isinstance(batch, Sequence):
        raise TypeError(f"{owner}: batch must be a sequence of segment lists (one per row), got "
                        f"{batch!r}")
    if batch and isinstance(batch[0], _SEGMENT_TYPES):
        raise TypeError(f"{owner}: batch must be a list of segment lists, one per row; got a "
                        f"list of segments (use position_ids for one sequence, or wrap it: "
                        f"[segments])")
    rows = [_checked(owner, segs, s, where=f"batch[{b}]") for b, segs in enumerate(batch)]
    lengths = [sum(_length(seg, s.merge) for seg in row) for row in rows]
    pad = _int(owner, "pad_value", pad_value, minimum=-(2**63))
    if attention_mask is not None:
        if length is not None:
            raise ValueError(f"{owner}: give attention_mask or length, not both (the mask's "
                             f"width is the length); got length={length!r}")
        if padding_side != "right":
            raise ValueError(f"{owner}: padding_side={padding_side!r} has no meaning with an "
                             f"attention_mask (the mask says where the padding is); leave it")
        valid, mask_is_array = _masked_slots(owner, attention_mask, rows, lengths, s.merge)
        if mask_is_array and like is None and xp is None:
            like = attention_mask
    else:
        valid = _padded_slots(owner, lengths, length, padding_side)

    out = np.full((3, *valid.shape), pad, dtype=np.int64)
    offsets = []
    for b, row in enumerate(rows):
        host, nxt = _row(row, s, 0)
        out[:, b, valid[b]] = host
        offsets.append(nxt)
    backend, dev = _target(owner, xp, like, device)
    return BatchPositionIds(_to_output(owner, out, backend, dev, dtype), tuple(offsets))
