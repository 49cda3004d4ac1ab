"""The benchmarks: for each encoder, its call and the hand-written code on one backend's arrays.

A builder gets a :class:`Bench` (the backend adapter and the helpers every case needs) and the
``quick`` flag, and returns a :class:`Case` of three callables: ours, hand-written, and a copy of
the output's bytes. The shapes are a model's prefill (``quick``: small ones, for a smoke test).
Learned encoders take their params from ``enc.init(xp, seed=0, dtype=float32)`` of the
framework's own namespace, and the hand-written code looks up the very same arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ._hand import (
    hand_alibi,
    hand_dual_chunk,
    hand_fire,
    hand_fope,
    hand_kerple,
    hand_learned,
    hand_learned_2d,
    hand_mrope,
    hand_rotary,
    hand_rotary_decode,
    hand_rotary_interleaved,
    hand_shaw,
    hand_sinusoidal,
    hand_t5,
    hand_transformer_xl,
    hand_xpos,
    hf_apply_rotary,
)

if TYPE_CHECKING:
    from ..backends._base import Backend

__all__ = ["BENCHMARKS", "Bench", "BenchSkipped", "Case"]


@dataclass(frozen=True)
class Case:
    """One benchmark, built for a backend: the three callables and a shape label."""

    ours: Callable[[], Any]
    hand: Callable[[], Any]
    copy: Callable[[], Any]
    shape: str


class BenchSkipped(Exception):
    """A builder's way to say a pair (encoder, backend) cannot be timed fairly, and why."""


@dataclass(frozen=True)
class Bench:
    """A backend adapter as the builders use it: ``xp`` is the framework's own module."""

    backend: Backend

    # cached: the hand-written code reads ``xp`` on every call, as a module attribute
    @cached_property
    def xp(self) -> Any:
        return self.backend.native()

    @cached_property
    def float32(self) -> Any:
        return self.backend.float_dtypes()["float32"]

    @cached_property
    def default_float(self) -> Any:
        return self.backend.default_float_dtype()

    @cached_property
    def index_dtype(self) -> Any:
        """The framework's default integer dtype (int32 on JAX without x64)."""
        return self.xp.arange(1).dtype

    def arange(self, n: int, dtype: Any = None) -> Any:
        return self.xp.arange(n, dtype=dtype)

    def randn(self, shape: tuple[int, ...]) -> Any:
        import numpy as np

        return self.backend.from_numpy(np.random.default_rng(0).standard_normal(shape)
                                       .astype(np.float32))

    def compiled(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` as the framework's users run it: compiled where that is the norm (JAX)."""
        jitted = self.backend.jit(fn) if self.backend.runs_jitted else None
        return fn if jitted is None else jitted

    def copier(self, a: Any) -> Callable[[], Any]:
        """The cheapest full copy of ``a``: the array's own ``copy`` (NumPy, JAX) or ``clone``
        (PyTorch) method, else the standard's ``asarray(a, copy=True)``. ``a`` must hold
        written values, as the inputs of ours do: NumPy's ``zeros`` of a large array maps pages
        it never writes, whose copy reads one shared zero page from cache (0.81x the CPU time of
        copying written values: docs/benchmarks.md, issue 43)."""
        name = next((m for m in ("copy", "clone") if callable(getattr(a, m, None))), None)
        if name is not None and not self.backend.runs_jitted:
            return getattr(a, name)  # type: ignore[no-any-return]
        xp = self.backend.namespace()

        def copy(v: Any) -> Any:
            return getattr(v, name)() if name is not None else xp.asarray(v, copy=True)

        fn = self.compiled(copy)
        return lambda: fn(a)

    def require_table_indexing(self) -> None:
        """Skip unless the framework takes ``table[idx]`` (what hand-written lookups write)."""
        xp = self.xp
        try:
            xp.zeros((2, 1))[xp.asarray([1, 0])]
        except Exception:
            raise BenchSkipped(
                f"hand-written table[idx] is not standard: {self.backend.name} allows "
                "integer-array indices only on every axis of the table (take(..., axis=0) would "
                "be, but torch.take spells a flat gather, so no one text serves every framework)"
            ) from None

    def case(self, ours: Callable[..., Any], hand: Callable[..., Any], args: tuple[Any, ...],
             shape: str, hand_args: tuple[Any, ...] | None = None) -> Case:
        ready = self.backend.block_until_ready
        ours_c, hand_c = self.compiled(ours), self.compiled(hand)
        h_args = args if hand_args is None else hand_args
        out = ready(ours_c(*args))
        copy = self.copier(out)  # (ours' result: out's shape and dtype, written values)
        return Case(lambda: ready(ours_c(*args)), lambda: ready(hand_c(*h_args)),
                    lambda: ready(copy()), shape)


def _bench_sinusoidal(b: Bench, quick: bool) -> Case:
    import peregistry as per

    n, dim = (256, 64) if quick else (8192, 1024)
    enc = per.get_encoder("sinusoidal", dim=dim)
    dtype = b.default_float
    pos = b.arange(n, dtype=dtype)
    return b.case(lambda p: enc.encode(p, dtype=dtype),
                  lambda p: hand_sinusoidal(b.xp, p, dim), (pos,), f"{n}x{dim}")


def _bench_rope(name: str, hand: Callable[[Any, Any], Any],
                **options: Any) -> Callable[[Bench, bool], Case]:
    """The bench of a rotary encoder ``name`` (with ``options``) against the hand-written
    ``hand(xp, x)``."""

    def bench(b: Bench, quick: bool) -> Case:
        import peregistry as per

        n, h, s, d = (1, 4, 128, 64) if quick else (1, 32, 2048, 128)
        enc = per.get_encoder(name, dim=d, **options)
        x = b.randn((n, h, s, d))
        return b.case(lambda v: enc.rotate(v),  # type: ignore[attr-defined]
                      lambda v: hand(b.xp, v), (x,), f"{n}x{h}x{s}x{d} f32")

    return bench


def _bench_rotary_hf_apply(b: Bench, quick: bool) -> Case:
    """A prefill's rotation of ``x`` against Hugging Face's own rotation with its tables made
    beforehand (:func:`hf_apply_rotary`: the tables out of the timing, as a model reuses them in
    every layer); ours rotates with the tables its store keeps (made by the first call)."""
    import peregistry as per

    n, h, s, d = (1, 4, 128, 64) if quick else (1, 32, 2048, 128)
    enc = per.get_encoder("rotary", dim=d)
    x = b.randn((n, h, s, d))
    cos, sin = enc.cos_sin(b.arange(s), dtype=b.float32)
    return b.case(lambda v: enc.rotate(v),
                  lambda v, c, si: hf_apply_rotary(b.xp, v, c, si), (x,),
                  f"{n}x{h}x{s}x{d} f32, tables made", hand_args=(x, cos, sin))


def _bench_rotary_decode(b: Bench, quick: bool) -> Case:
    """One decoding step of every layer of a Llama-style model (32 query heads, 8 key heads,
    head dim 128): ``tables = enc.tables(position_ids)`` once, then ``tables.rotate_all(q, k)``
    in each layer, against Hugging Face's way (``cos``/``sin`` once, ``apply_rotary_pos_emb`` in
    each layer). Each layer has its own ``q`` and ``k``, as in a model."""
    import peregistry as per

    layers = 4 if quick else 32
    enc = per.get_encoder("rotary", dim=128)
    qs = [b.randn((1, 32, 1, 128)) * (i + 1) for i in range(layers)]
    ks = [b.randn((1, 8, 1, 128)) * (i + 1) for i in range(layers)]
    pos = b.xp.asarray([4095])  # integer ids for ours; the hand-written code takes float32 ones
    fpos = b.xp.asarray([4095.0], dtype=b.float32)
    xp = b.xp

    def ours(qs: list[Any], ks: list[Any], p: Any) -> list[tuple[Any, ...]]:
        tables = enc.tables(p)
        return [tables.rotate_all(q, k) for q, k in zip(qs, ks, strict=True)]

    def hand(qs: list[Any], ks: list[Any], p: Any) -> list[tuple[Any, Any]]:
        return hand_rotary_decode(xp, qs, ks, p)

    ready = b.backend.block_until_ready  # (one program per call where compiled: its last output)
    ours_c, hand_c = b.compiled(ours), b.compiled(hand)
    ready(ours_c(qs, ks, pos)[-1][-1])
    copy = b.copier(b.randn((layers, 1, 40, 1, 128)))
    return Case(lambda: ready(ours_c(qs, ks, pos)[-1][-1]),
                lambda: ready(hand_c(qs, ks, fpos)[-1][-1]), lambda: ready(copy()),
                f"{layers} layers x (1x32x1x128, 1x8x1x128) f32")


def _bench_alibi(b: Bench, quick: bool) -> Case:
    import peregistry as per

    heads, n = (4, 128) if quick else (16, 2048)
    enc = per.get_encoder("alibi", num_heads=heads)
    pos = b.arange(n)  # integer positions for ours; the hand-written code takes float32 ones
    fpos = b.arange(n, dtype=b.float32)
    return b.case(lambda q, k: enc.bias(q, k, dtype=b.float32),
                  lambda q, k: hand_alibi(b.xp, q, k, heads), (pos, pos),
                  f"{heads}x{n}x{n} f32", hand_args=(fpos, fpos))


def _bench_kerple(b: Bench, quick: bool) -> Case:
    import peregistry as per

    heads, n = (4, 128) if quick else (16, 2048)
    enc = per.get_encoder("kerple", num_heads=heads)
    params = enc.init(b.xp, seed=0, dtype=b.float32)
    pos = b.arange(n)  # integer positions for ours; the hand-written code takes float32 ones
    fpos = b.arange(n, dtype=b.float32)
    return b.case(lambda q, k, s, r: enc.bias(q, k, params={"scale": s, "rate": r},
                                              dtype=b.float32),
                  lambda q, k, s, r: hand_kerple(b.xp, q, k, s, r),
                  (pos, pos, params["scale"], params["rate"]), f"{heads}x{n}x{n} f32",
                  hand_args=(fpos, fpos, params["scale"], params["rate"]))


def _bench_fire(b: Bench, quick: bool) -> Case:
    import peregistry as per

    heads, n = (4, 128) if quick else (16, 1024)
    enc = per.get_encoder("fire", num_heads=heads)
    params = enc.init(b.xp, seed=0, dtype=b.float32)
    pos, fpos = b.arange(n), b.arange(n, dtype=b.float32)
    return b.case(lambda q, k, p: enc.bias(q, k, params=p, dtype=b.float32),
                  lambda q, k, p: hand_fire(b.xp, q, k, p, 512.0), (pos, pos, params),
                  f"{heads}x{n}x{n} f32, MLP 32", hand_args=(fpos, fpos, params))


def _bench_dual_chunk(b: Bench, quick: bool) -> Case:
    """A prefill's dual chunk attention rotations (32 query heads, 8 key heads of 128, four
    chunks): ``rotate_dual_chunk(q, k)``'s five query roles and the keys, against vLLM's way
    written plainly (:func:`hand_dual_chunk`)."""
    import peregistry as per

    h, kv, s, d = (4, 2, 128, 64) if quick else (32, 8, 2048, 128)
    chunk, local = (48, 16) if quick else (640, 128)  # chunk_len = s / 4
    enc = per.get_encoder("dual-chunk", dim=d, chunk_size=chunk, local_size=local)
    q, k = b.randn((1, h, s, d)), b.randn((1, kv, s, d))
    xp = b.xp

    def ours(q: Any, k: Any) -> tuple[Any, ...]:
        return tuple(enc.rotate_dual_chunk(q, k))

    def hand(q: Any, k: Any) -> tuple[Any, ...]:
        return hand_dual_chunk(xp, q, k, chunk, local)

    ready = b.backend.block_until_ready  # (one program per call where compiled: its last output)
    ours_c, hand_c = b.compiled(ours), b.compiled(hand)
    ready(ours_c(q, k)[-1])
    copy = b.copier(b.randn((5 * h + kv, s, d)))
    return Case(lambda: ready(ours_c(q, k)[-1]), lambda: ready(hand_c(q, k)[-1]),
                lambda: ready(copy()), f"q 1x{h}x{s}x{d}, k 1x{kv}x{s}x{d} f32")


def _bench_fope(b: Bench, quick: bool) -> Case:
    """Queries of a prefill (32 heads sharing 8 KV heads' Fourier series, as Intern-S1-Pro's
    ``fope_sep_head``) rotated by FoPE, against vLLM's way written plainly (:func:`hand_fope`)."""
    import peregistry as per

    n, h, kv, s, d = (1, 4, 2, 128, 64) if quick else (1, 32, 8, 2048, 128)
    enc = per.get_encoder("fope", dim=d, max_position_embeddings=4096, sep_head=True,
                          num_kv_heads=kv)
    params = enc.init(b.xp, seed=0, dtype=b.float32)
    x = b.randn((n, h, s, d))
    return b.case(lambda v, c, si: enc.rotate(v, params={"cos_coef": c,
                                                         "sin_coef": si}),
                  lambda v, c, si: hand_fope(b.xp, v, c, si),
                  (x, params["cos_coef"], params["sin_coef"]), f"{n}x{h}x{s}x{d} f32")


def _bench_mrope(b: Bench, quick: bool) -> Case:
    import peregistry as per

    sections = (16, 24, 24)  # Qwen2-VL: dim 128
    n, h, s, d = (1, 4, 128, 128) if quick else (1, 28, 2048, 128)
    enc = per.get_encoder("mrope", dim=d, sections=sections)
    x = b.randn((n, h, s, d))
    xp = b.xp
    i = b.arange(s)
    # an image-like grid of 8 columns: temporal steps every 64 tokens, rows of 8, columns
    pos = xp.stack((i // 64, (i // 8) % 8, i % 8), axis=0)
    fpos = xp.asarray(pos, dtype=b.float32)  # the hand-written code takes float32 positions
    return b.case(lambda v, p: enc.rotate(v, p),
                  lambda v, p: hand_mrope(b.xp, v, p, sections), (x, pos),
                  f"{n}x{h}x{s}x{d} f32", hand_args=(x, fpos))


def _bench_learned(b: Bench, quick: bool) -> Case:
    import peregistry as per

    b.require_table_indexing()
    n, dim = (256, 64) if quick else (4096, 1024)
    enc = per.get_encoder("learned", num_positions=n, dim=dim)
    table = enc.init(b.xp, seed=0, dtype=b.float32)["table"]
    pos = b.arange(n)
    return b.case(lambda p, t: enc.encode(p, params={"table": t}, dtype=b.float32),
                  lambda p, t: hand_learned(b.xp, p, t), (pos, table), f"{n}x{dim} f32")


def _bench_learned_2d(b: Bench, quick: bool) -> Case:
    import peregistry as per

    b.require_table_indexing()
    hw, dim = (16, 32) if quick else (64, 256)
    enc = per.get_encoder("learned-2d", height=hw, width=hw, dim=dim)
    params = enc.init(b.xp, seed=0, dtype=b.float32)
    i = b.arange(hw * hw)
    pos = b.xp.stack((i // hw, i % hw), axis=-1)  # every cell, (row, col)
    return b.case(lambda p, r, c: enc.encode(p, params={"row": r, "col": c},
                                             dtype=b.float32),
                  lambda p, r, c: hand_learned_2d(b.xp, p, r, c),
                  (pos, params["row"], params["col"]), f"{hw * hw}x{2 * dim} f32")


def _bench_t5(b: Bench, quick: bool) -> Case:
    import peregistry as per

    b.require_table_indexing()
    heads, n = (4, 128) if quick else (12, 1024)
    enc = per.get_encoder("t5", num_heads=heads)
    table = enc.init(b.xp, seed=0, dtype=b.float32)["table"]
    pos = b.arange(n)  # integer positions for ours; the hand-written code takes float32 ones
    fpos = b.arange(n, dtype=b.float32)
    idt = b.index_dtype
    return b.case(lambda q, k, t: enc.bias(q, k, params={"table": t},
                                           dtype=b.float32),
                  lambda q, k, t: hand_t5(b.xp, q, k, t, idt), (pos, pos, table),
                  f"{heads}x{n}x{n} f32", hand_args=(fpos, fpos, table))


def _bench_shaw(b: Bench, quick: bool) -> Case:
    import peregistry as per

    b.require_table_indexing()
    n, m, dim = (64, 16, 32) if quick else (256, 64, 128)
    enc = per.get_encoder("shaw", max_distance=m, dim=dim)
    table = enc.init(b.xp, seed=0, dtype=b.float32)["table"]
    pos = b.arange(n)
    return b.case(lambda q, k, t: enc.embed(q, k, params={"table": t},
                                            dtype=b.float32),
                  lambda q, k, t: hand_shaw(b.xp, q, k, t, m), (pos, pos, table),
                  f"{n}x{n}x{dim} f32")


def _bench_transformer_xl(b: Bench, quick: bool) -> Case:
    import peregistry as per

    n, dim = (64, 64) if quick else (256, 128)
    enc = per.get_encoder("transformer-xl", dim=dim)
    pos = b.arange(n)  # integer positions for ours; the hand-written code takes float32 ones
    fpos = b.arange(n, dtype=b.float32)
    return b.case(lambda q, k: enc.embed(q, k, dtype=b.float32),
                  lambda q, k: hand_transformer_xl(b.xp, q, k, dim), (pos, pos),
                  f"{n}x{n}x{dim} f32", hand_args=(fpos, fpos))


#: The benchmarked encoders: name → builder of the case on a backend (``quick`` shapes or not);
#: a builder raises :class:`BenchSkipped` for a backend it cannot time fairly. A plugin may add
#: its own: ``BENCHMARKS["my-rope"] = builder``.
BENCHMARKS: dict[str, Callable[[Bench, bool], Case]] = {
    "sinusoidal": _bench_sinusoidal,
    "rotary": _bench_rope("rotary", hand_rotary),
    "rotary-interleaved": _bench_rope("rotary", hand_rotary_interleaved, layout="interleaved"),
    "rotary-hf-apply": _bench_rotary_hf_apply,
    "rotary-decode": _bench_rotary_decode,
    "alibi": _bench_alibi,
    "kerple": _bench_kerple,
    "fire": _bench_fire,
    "fope": _bench_fope,
    "mrope": _bench_mrope,
    "dual-chunk": _bench_dual_chunk,
    "xpos": _bench_rope("xpos", hand_xpos),
    "learned": _bench_learned,
    "learned-2d": _bench_learned_2d,
    "t5": _bench_t5,
    "shaw": _bench_shaw,
    "transformer-xl": _bench_transformer_xl,
}
