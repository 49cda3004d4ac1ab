"""Bit-for-bit outputs of every built-in encoder, kept from before the rope-engine refactor.

``tests/golden/<backend>.npz`` holds the outputs that the code of commit bb3aa8d (before the
house was rebuilt) gave on each backend; this test recomputes them and compares the bits. A
refactor must leave them unchanged; a deliberate change of numbers regenerates the files with
``python tests/test_golden.py`` (in an environment with every framework) and says why in its commit.
The pins are the code's own output: ``tests/test_golden_formulas.py`` holds every pinned value of
every file to the papers' formulas, written apart in float64 NumPy (the same cases, through
:func:`_cases` with a stand-in for the package), so a regenerated file cannot carry a wrong value.

Bit-for-bit pins hold only on the instruction set a file was made on: NumPy's ``sin``, ``cos``
and ``power`` and torch's vectorized ones take other code on AVX-512 than on AVX2 or on aarch64
(NEON/SVE), XLA compiles for the host's features, and those differ in the last place. Each file
records the platform it was made on (:func:`platform_key`: the architecture, the versions, and the
SIMD features in effect: the host's avx512f/avx2/fma or asimd/sve, the targets NumPy dispatches
to, which ``NPY_DISABLE_CPU_FEATURES`` turns off, torch's ATen capability, which
``ATEN_CPU_CAPABILITY`` lowers, and XLA's ``--xla_cpu_max_isa``). Where this machine's key equals
the file's, every output is compared bit for bit; elsewhere each output within :func:`bound`, a
tolerance derived from its dtype and the size of its angles:

* an output of dtype ``out`` and largest magnitude ``M`` is rounded once more or less on another
  machine, and a rotation's or cast's last rounding may fall on the other side: ``ULPS·eps(out)·M``;
* cos/sin are computed in the backend's wide dtype ``c`` (float64; float32 under JAX without
  x64). An angle ``θ = p·ω`` of size ``A`` is itself known only to ``A·eps(c)`` (its rounding, and
  an ulp of ``ω``), and implementations reduce it modulo 2π with that much error at most, then
  add a few ulps: cos/sin differ by at most ``(A + ULPS)·eps(c)``. A rotated pair
  ``(a·c - b·s, b·c + a·s)`` moves by ``|a| + |b| <= 2M`` times that (a rotation keeps the pair's
  norm, so ``|a|, |b| <= sqrt(2)·M``): ``2·(A + ULPS)·eps(c)·M``. ``A`` is the largest position
  (or sum of query and key positions) any call of the case passed, times the encoder's largest
  frequency, 1 for every built-in encoder (``base**0``; scalings only lower frequencies); under
  JAX without x64 the angle reaches cos/sin reduced to ``[-π, π]`` (:mod:`peregistry.rope._angles`),
  so ``A <= 2π`` there. The same bound covers xPos's ``ζ**(p/scale_base)`` (relative error
  ``|p/scale_base·ln ζ|·eps <= p·eps``) and the non-trigonometric encoders (ALiBi, T5, learned),
  whose outputs differ by roundings only.

Seen between this machine with AVX-512 and the same with AVX2 only (``NPY_DISABLE_CPU_FEATURES``,
``ATEN_CPU_CAPABILITY=avx2``): none since the inverse frequencies stopped using NumPy's
vectorized ``power`` (before: 5.8e-9 at ``p = 2**31``, an ulp of one ``ω_i`` times ``p``). The
test prints and records (``record_property``) which comparison it made.

Besides one call per encoder and layout, cases make sequences of calls as a model makes them
(a decoder's one-token steps across the position table's growth, the same positions twice, ids
written in place, sliding windows and decode steps of the pair encoders, ...), each output
stored: there the encoders' memos, kept rows and tables, decode-step slices and kept pair
operands serve the later calls, and a refactor of those must leave every output unchanged. On
JAX, where each new shape compiles, these cases keep fewer shapes and dtypes (:func:`_lean`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

GOLDEN = Path(__file__).parent / "golden"
PLATFORM = "__platform__"
#: Units in the last place an output (and a cos/sin in the compute dtype) may differ by between
#: machines of different instruction sets, besides the angle's own size (:func:`bound`).
ULPS = 8

Case = tuple[str, Callable[[Any, Any], Any]]


def _cases(per: Any = None) -> Iterator[Case]:
    """(key, fn(xp_native, asarray) -> array or tuple of arrays) for every encoder and layout.
    ``per``: the package (by default), or a stand-in with its ``get_encoder`` whose encoders
    compute the papers' formulas (``tests/test_golden_formulas.py``: the same cases, the same
    inputs, computed without the package)."""
    if per is None:
        import peregistry

        per = peregistry

    rng = np.random.default_rng(1234)
    x16 = rng.standard_normal((2, 3, 5, 16))
    ids = rng.integers(0, 4096, size=(2, 1, 5))
    mids = rng.integers(0, 300, size=(3, 2, 5))
    big = np.arange(2**20, 2**20 + 5)
    real = np.linspace(0.0, 37.5, 5)

    def scalings(half: int) -> list[dict[str, Any] | None]:
        return [
            None,
            {"type": "linear", "factor": 4.0},
            {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8},
            {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
            {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
             "original_max_position_embeddings": 64},
            {"type": "longrope", "short_factor": [1.0 + i / 8 for i in range(half)],
             "long_factor": [2.0 + i / 4 for i in range(half)], "original_max_position_embeddings": 4,
             "factor": 8.0},
        ]

    for layout in ("interleaved", "split"):
        enc = per.get_encoder("sinusoidal", dim=16, layout=layout)
        yield f"sinusoidal-{layout}-ids", lambda xp, a, e=enc: e.encode(a(ids))
        yield f"sinusoidal-{layout}-big", lambda xp, a, e=enc: e.encode(a(big))
        yield f"sinusoidal-{layout}-real", lambda xp, a, e=enc: e.encode(a(real))
        yield f"sinusoidal-{layout}-f16", lambda xp, a, e=enc: e.encode(a(ids), dtype="float16")
    for layout in ("half", "interleaved"):
        for rd in (None, 8):
            for si, scaling in enumerate(scalings((rd or 16) // 2)):
                enc = per.get_encoder("rotary", dim=16, rotary_dim=rd, layout=layout,
                                      scaling=scaling)
                tag = f"rotary-{layout}-rd{rd}-s{si}"
                for dt in ("float32", "bfloat16", "float16", "float64"):
                    yield (f"{tag}-{dt}-off",
                           lambda xp, a, e=enc, dt=dt: e.rotate(a(x16, dt), offset=7))
                    yield (f"{tag}-{dt}-ids",
                           lambda xp, a, e=enc, dt=dt: e.rotate(a(x16, dt), a(ids)))
                    # The same call again: served by the position table / caches.
                    yield (f"{tag}-{dt}-ids-again",
                           lambda xp, a, e=enc, dt=dt: (e.rotate(a(x16, dt), a(ids)),
                                                        e.rotate(a(x16, dt), a(ids)))[1])
                yield f"{tag}-cos_sin", lambda xp, a, e=enc: e.cos_sin(a(ids))
                yield f"{tag}-cos_sin-real", lambda xp, a, e=enc: e.cos_sin(a(real))
                yield (f"{tag}-big",
                       lambda xp, a, e=enc: e.rotate(a(x16[0, 0], "float32"), a(big)))
    for interleaved in (False, True):
        for layout in ("half", "interleaved"):
            enc = per.get_encoder("mrope", dim=16, sections=[3, 3, 2] if interleaved else [2, 3, 3], layout=layout,
                                  interleaved=interleaved)
            tag = f"mrope-{layout}-il{interleaved}"
            for dt in ("float32", "bfloat16"):
                yield (f"{tag}-{dt}",
                       lambda xp, a, e=enc, dt=dt: e.rotate(a(x16[:, 0], dt), a(mids)))
            yield f"{tag}-cos_sin", lambda xp, a, e=enc: e.cos_sin(a(mids))
            yield f"{tag}-offset", lambda xp, a, e=enc: e.rotate(a(x16[:, 0], "float32"), offset=3)
    learned = [
        ("learned", {"num_positions": 64, "dim": 8}, lambda e, p, a: e.encode(a(ids % 64), params=p)),
        ("learned-2d", {"height": 6, "width": 7, "dim": 4},
         lambda e, p, a: e.encode(a(np.stack((ids % 6, ids % 7), axis=-1)), params=p)),
        ("learned-2d", {"height": 6, "width": 7, "dim": 4},
         lambda e, p, a: e.grid(6, 7, params=p)),
        ("t5", {"num_heads": 3}, lambda e, p, a: e.bias(a(ids[0]), a(ids[1]), params=p)),
        ("t5", {"num_heads": 3, "bidirectional": False},
         lambda e, p, a: e.bias(a(ids[0]), a(ids[1]), params=p)),
        ("shaw", {"max_distance": 16, "dim": 4},
         lambda e, p, a: e.embed(a(ids[0]), a(ids[1]), params=p)),
    ]
    for i, (name, opts, call) in enumerate(learned):
        enc = per.get_encoder(name, **opts)
        yield (f"{name}-{i}",
               lambda xp, a, e=enc, c=call: c(e, e.init(xp, seed=3, dtype="float32"), a))
        yield (f"{name}-{i}-default-dtype",
               lambda xp, a, e=enc, c=call: c(e, e.init(xp, seed=5), a))
    for heads in (8, 6):
        enc = per.get_encoder("alibi", num_heads=heads)
        yield f"alibi-{heads}", lambda xp, a, e=enc: e.bias(a(ids[0]), a(ids[1]))
        yield f"alibi-{heads}-bf16", lambda xp, a, e=enc: e.bias(a(ids[0]), a(ids[1]),
                                                                 dtype="bfloat16")
    txl = per.get_encoder("transformer-xl", dim=8)
    yield "transformer-xl", lambda xp, a: txl.embed(a(ids[0]), a(ids[1]))
    yield "transformer-xl-f32", lambda xp, a: txl.embed(a(ids[0]), a(ids[1]), dtype="float32")
    # Calls in the order a model makes them, where today's memos, kept rows, decode-step slices
    # and kept pair operands serve the later ones (drawn after the inputs above: those stay).
    q1 = rng.standard_normal((2, 4, 1, 16))  # one decoded token: 4 query heads
    k1 = rng.standard_normal((2, 2, 1, 16))  # and 2 key heads (GQA)
    cids = rng.integers(0, 8192, size=(2, 5))
    bq, bk = rng.integers(0, 50, size=(2, 3)), rng.integers(0, 50, size=(1, 5))
    yield from _rotary_cases(per, q1, k1, x16, cids, real)
    yield from _mrope_cases(per, q1, k1, mids)
    yield from _xpos_cases(per, q1, k1, x16, cids)
    yield from _pair_cases(per, bq, bk, real)
    yield from _absolute_cases(per, ids, real)
    yield from _inference_cases(per, q1, k1, ids)


def _ints(values: Any, dtype: str = "int64") -> np.ndarray:
    """A fresh NumPy integer array (its own memory: a case may write into what it becomes)."""
    return np.array(values, dtype=dtype)


def _lean(xp: Any, *, keep: bool = False) -> bool:
    """Whether ``xp`` is JAX's namespace. Eager JAX compiles a program per new shape and dtype
    (~0.1 s each) and reads no position values on the host for one token or a pair encoder's
    positions (no kept rows, pair operands or step slices there): its cases keep the calls its
    memos, position tables and offset tables serve, in fewer shapes and dtypes. A case that is
    not ``keep`` is skipped on JAX."""
    lean = str(getattr(xp, "__name__", "")).startswith("jax")
    if lean and not keep:
        pytest.skip("fewer shapes and dtypes on eager JAX")
    return lean


def _overwrite(arr: Any, values: Any, a: Callable[..., Any]) -> Any:
    """``arr`` with ``values`` written into it in place (a torch tensor's version counter moves,
    NumPy's and array-api-strict's arrays change unseen); a new array where arrays are immutable
    (JAX)."""
    try:
        arr[...] = a(values)
    except TypeError:
        return a(values)
    return arr


#: Position ids of a decoded token at ``p``: shape (1,), (2, 1, 1) (a batch of two sequences at
#: ``p`` and ``p + 3``), (1, 1), and (1,) int32.
_IDS: tuple[Callable[[int], np.ndarray], ...] = (
    lambda p: _ints([p]), lambda p: _ints([[[p]], [[p + 3]]]), lambda p: _ints([[p]]),
    lambda p: _ints([p], "int32"))


def _decode_steps(e: Any, q: Any, k: Any, a: Callable[..., Any], *, offsets: range,
                  points: tuple[int, ...], ids: int = len(_IDS), **kw: Any) -> list[Any]:
    """A decoder's one-token rotations: q then k (fewer heads) at each offset, the last offset
    again; then at each of ``points``, for the first ``ids`` kinds of :data:`_IDS`: q, k and q
    at one ids object, then q at a new object of the same values; last (with ``ids``), ids
    written in place between two calls."""
    out = []
    for o in offsets:
        out += [e.rotate(q, offset=o, **kw), e.rotate(k, offset=o, **kw)]
    out += [e.rotate(q, offset=offsets[-1], **kw), e.rotate(k, offset=offsets[-1], **kw)]
    for p in points:
        for v in (make(p) for make in _IDS[:ids]):
            pid = a(v)
            out += [e.rotate(q, pid, **kw), e.rotate(k, pid, **kw), e.rotate(q, pid, **kw),
                    e.rotate(q, a(v.copy()), **kw)]
    if ids:
        pid = a(_ints([points[0]]))
        out.append(e.rotate(q, pid, **kw))
        pid = _overwrite(pid, _ints([points[-1] + 1]), a)
        out += [e.rotate(q, pid, **kw), e.rotate(k, pid, **kw)]
    return out


def _rotary_cases(per: Any, q1: np.ndarray, k1: np.ndarray, x16: np.ndarray, cids: np.ndarray,
                  real: np.ndarray) -> Iterator[Case]:
    """Rotary decode loops across the position table's growth at 4096 (and beyond its reach),
    cos_sin and tables at ids, and the sequence-length dependent scalings across
    original_max_position_embeddings."""
    llama3 = {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 64}
    yarn = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    encoders = {  # name: (encoder, the whole sequence in every dtype)
        "plain": (per.get_encoder("rotary", dim=16), True),
        "llama3": (per.get_encoder("rotary", dim=16, scaling=llama3), True),
        "yarn": (per.get_encoder("rotary", dim=16, scaling=yarn), True),
        "last": (per.get_encoder("rotary", dim=16, rotary_dim=8, rotary_features="last"), False),
        "negative": (per.get_encoder("rotary", dim=16, direction="negative"), False),
        "interleaved": (per.get_encoder("rotary", dim=16, layout="interleaved"), False),
    }
    for name, (enc, full) in encoders.items():
        tag = f"rotary-decode-{name}"
        for dt in ("float32", "bfloat16", "float64"):
            def decode(xp: Any, a: Callable[..., Any], e: Any = enc, dt: str = dt,
                       full: bool = full, name: str = name) -> tuple[Any, ...]:
                lean = _lean(xp, keep=dt == "float32" or name == "plain")
                whole = not lean or (name, dt) == ("plain", "float32")  # (on JAX, one case whole)
                q, k = a(q1, dt), a(k1, dt)
                points = (5, 4095, 4096, 9000, 5) if full else (4095, 4096)
                out = _decode_steps(e, q, k, a, offsets=range(4093, 4099) if full else range(4094, 4098),
                                    points=points if not lean else (4095, 4096),
                                    ids=len(_IDS) if not lean else 2 if whole else 1 if full else 0)
                x = a(x16, dt)
                if whole:  # a prompt across 4096, then one token; ids of rank 0
                    out += [e.rotate(x, offset=4094), e.rotate(q, offset=4099),
                            e.rotate(x, offset=4094), e.rotate(q, a(_ints(4097)))]
                if full:  # beyond the position table's reach
                    for o in (2**20 - 1, 2**20, 2**20 + 1, 2**20):
                        out += [e.rotate(q, offset=o), e.rotate(k, offset=o)]
                    if whole:
                        out.append(e.rotate(x, offset=2**20 - 2))
                if full and not lean:  # offsets as arrays (per sequence), Python lists, negatives,
                    # offsets past int32 (no memo serves them: each validated, tables computed)
                    for off in (_ints(4096), _ints([[[4095]], [[4097]]]), _ints(4096, "int32")):
                        o = a(off)
                        out += [e.rotate(q, offset=o), e.rotate(k, offset=o), e.rotate(q, offset=o)]
                    out += [e.rotate(q, offset=a(real[3])), e.rotate(q, [4096]), e.rotate(q, [4096]),
                            e.rotate(q, offset=-2), e.rotate(q, a(_ints([-3]))), e.rotate(q, a(_ints([-3]))),
                            e.rotate(q, a(_ints([[[-3]], [[5]]]))), e.rotate(q, offset=2**31 - 1),
                            e.rotate(k, offset=2**31 - 1), e.rotate(x, offset=2**31 - 3)]
                return tuple(out)

            yield f"{tag}-{dt}", decode
        for dt in ("float32", "float64", "bfloat16"):
            def cos_sin(xp: Any, a: Callable[..., Any], e: Any = enc, dt: str = dt,
                        name: str = name) -> tuple[Any, ...]:
                out = []
                lean = _lean(xp, keep=name == "plain" and dt == "float32")
                for idt in ("int64",) if lean else ("int64", "int32"):
                    pid = a(_ints(cids, idt))
                    out += [e.cos_sin(pid, dtype=dt), e.cos_sin(pid, dtype=dt)]
                    one = a(_ints([4096], idt))
                    out += [e.cos_sin(one, dtype=dt), e.cos_sin(one, dtype=dt),
                            e.cos_sin(a(_ints(4095, idt)), dtype=dt)]
                fp = a(real)
                out += [e.cos_sin(fp, dtype=dt), e.cos_sin(fp, dtype=dt),
                        e.cos_sin(a(real, "float32"), dtype=dt), e.cos_sin(a(cids + 0.5), dtype=dt)]
                if not lean:  # one token of rank 2, negative ids
                    out += [e.cos_sin(a(_ints([[4096]])), dtype=dt), e.cos_sin(a(_ints([-3])), dtype=dt),
                            e.cos_sin(a(_ints([[-3, 4096]])), dtype=dt)]
                return tuple(out)

            yield f"{tag}-cos_sin-{dt}", cos_sin
        for dt in ("float32", "bfloat16", "float64"):
            def tables(xp: Any, a: Callable[..., Any], e: Any = enc, dt: str = dt,
                       name: str = name) -> tuple[Any, ...]:
                _lean(xp, keep=name == "plain" and dt == "float32")
                q, k = a(q1, dt), a(k1, dt)
                out = []
                for v in (_ints([4096]), _ints([[[4095]], [[9001]]]), _ints([3], "int32")):
                    pid = a(v)
                    t = e.tables(pid)
                    out += [t.rotate(q), t.rotate_all(q, k), t.rotate(k), e.rotate(q, pid),
                            e.tables(pid).rotate_all(q, k)]
                t = e.tables(a(real))
                x = a(x16, dt)
                out += [t.rotate(x), t.rotate_all(x, x[:, :2, ...]), t.rotate(a(x16, "float32"))]
                return tuple(out)

            yield f"{tag}-tables-{dt}", tables
    for name, scaling in (
            ("dynamic", {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64}),
            ("longrope", {"type": "longrope", "short_factor": [1.0 + i / 8 for i in range(8)],
                          "long_factor": [2.0 + i / 4 for i in range(8)],
                          "original_max_position_embeddings": 64, "factor": 8.0})):
        enc = per.get_encoder("rotary", dim=16, scaling=scaling)
        for dt in ("float32", "bfloat16", "float64"):
            def scaled(xp: Any, a: Callable[..., Any], e: Any = enc, dt: str = dt) -> tuple[Any, ...]:
                lean = _lean(xp, keep=dt == "float32")  # (a program per seq_len on JAX)
                q, k = a(q1, dt), a(k1, dt)
                out = _decode_steps(e, q, k, a, offsets=range(63, 65) if lean else range(61, 67),
                                    points=(64,) if lean else (62, 63, 64, 100),
                                    ids=1 if lean else len(_IDS))
                x = a(x16, dt)
                out += [e.rotate(x, offset=61), e.rotate(x, offset=61),
                        e.rotate(q, offset=63, seq_len=64), e.rotate(q, offset=63, seq_len=65),
                        e.rotate(x, a(_ints([60, 61, 62, 63, 64]))), e.cos_sin(a(_ints([63]))),
                        e.cos_sin(a(_ints([64]))), e.tables(a(_ints([64]))).rotate_all(q, k)]
                if not lean:
                    out += [e.rotate(x, offset=59), e.cos_sin(a(_ints([[63], [64]])))]
                return tuple(out)

            yield f"rotary-decode-{name}-{dt}", scaled


def _mrope_cases(per: Any, q1: np.ndarray, k1: np.ndarray, mids: np.ndarray) -> Iterator[Case]:
    """M-RoPE decoding: text tokens (positions=None, or every axis at one position) and image
    tokens (axes apart), each twice, with bands, cycles, pair_axes and feature_axes."""
    split = (0,) * 4 + (1,) * 6 + (2,) * 6  # HunYuan-VL XD-RoPE: 2·sections[k] features per axis
    encoders = {
        "bands": per.get_encoder("mrope", dim=16, sections=(2, 3, 3)),
        "cycles": per.get_encoder("mrope", dim=16, sections=(3, 3, 2), interleaved=True),
        # Ernie-4.5-VL: height and width alternate, then time
        "pair_axes": per.get_encoder("mrope", dim=16, sections=(2, 3, 3),
                                     pair_axes=(1, 2, 1, 2, 1, 2, 0, 0)),
        "feature_axes": per.get_encoder("mrope", dim=16, sections=(2, 3, 3), feature_axes=split),
        "feature_axes-il": per.get_encoder("mrope", dim=16, sections=(2, 3, 3),
                                           layout="interleaved", feature_axes=split),
    }
    tokens = ([[4095]] * 3, [[4096]] * 3, [[4096], [4102], [4097]], [[7], [3], [5]], [[7], [3], [5]],
              [[[9000]]] * 3, [[[9000]], [[12]], [[4099]]], [[[[5]], [[6]]], [[[5]], [[9]]], [[[5]], [[2]]]])
    for name, enc in encoders.items():
        tag = f"mrope-decode-{name}"
        for dt in ("float32", "bfloat16", "float64") if name == "bands" else ("float32", "bfloat16"):
            def decode(xp: Any, a: Callable[..., Any], e: Any = enc, dt: str = dt,
                       name: str = name) -> tuple[Any, ...]:
                lean = _lean(xp, keep=name == "bands" or (dt == "float32" and name in (
                    "pair_axes", "feature_axes")))
                q, k = a(q1, dt), a(k1, dt)
                out = []
                for o in range(4094, 4098):
                    out += [e.rotate(q, offset=o), e.rotate(k, offset=o)]
                out += [e.rotate(q, offset=4097), e.rotate(k, offset=4097)]
                for v in tokens[1:3] if lean else tokens:
                    pid = a(_ints(v))
                    out += [e.rotate(q, pid), e.rotate(k, pid), e.rotate(q, pid),
                            e.rotate(q, a(_ints(v)))]
                pid = a(_ints([[8]] * 3))
                out.append(e.rotate(q, pid))
                pid = _overwrite(pid, _ints([[8], [9], [10]]), a)
                out += [e.rotate(q, pid), e.rotate(k, pid), e.rotate(q, offset=4098)]
                return tuple(out)

            yield f"{tag}-{dt}", decode

        def cos_sin(xp: Any, a: Callable[..., Any], e: Any = enc, name: str = name) -> tuple[Any, ...]:
            _lean(xp, keep=name in ("bands", "feature_axes"))
            out = []
            for v in ([[4096]] * 3, [[4096], [4102], [4097]], mids):
                pid = a(_ints(v))
                out += [e.cos_sin(pid), e.cos_sin(pid), e.cos_sin(pid, dtype="float32")]
            return tuple(out)

        yield f"{tag}-cos_sin", cos_sin
        for dt in ("float32", "bfloat16"):
            def tables(xp: Any, a: Callable[..., Any], e: Any = enc, dt: str = dt,
                       name: str = name) -> tuple[Any, ...]:
                _lean(xp, keep=dt == "float32" and name in ("bands", "feature_axes"))
                q, k = a(q1, dt), a(k1, dt)
                out = []
                for v in ([[4096]] * 3, [[4096], [4102], [4097]], [[[7]], [[3]], [[5]]]):
                    t = e.tables(a(_ints(v)))
                    out += [t.rotate(q), t.rotate_all(q, k), t.rotate(k)]
                return tuple(out)

            yield f"{tag}-tables-{dt}", tables


def _xpos_cases(per: Any, q1: np.ndarray, k1: np.ndarray, x16: np.ndarray,
                cids: np.ndarray) -> Iterator[Case]:
    """xPos (offset tables, no position table): queries and keys at offsets and ids."""
    for name, enc, dtypes in (
            ("default", per.get_encoder("xpos", dim=16), ("float32", "bfloat16", "float64")),
            ("half-rd8", per.get_encoder("xpos", dim=16, rotary_dim=8, layout="half",
                                         scale_origin=100.0), ("float32",))):
        for dt in dtypes:
            def decode(xp: Any, a: Callable[..., Any], e: Any = enc, dt: str = dt,
                       name: str = name) -> tuple[Any, ...]:
                # (xPos computes its tables operation by operation: on JAX a program each)
                lean = _lean(xp, keep=dt == "float32" and name == "default")
                q, k = a(q1, dt), a(k1, dt)
                out = []
                for role in ("query", "key"):
                    out += _decode_steps(e, q, k, a, offsets=range(4094, 4098),
                                         points=(4096,) if lean else (4095, 4096),
                                         ids=1 if lean else len(_IDS), role=role)
                for o in (4096, 4097, 4097):
                    out += [e.rotate_queries(q, offset=o), e.rotate_keys(k, offset=o)]
                pid = a(_ints([4100]))
                out += [e.rotate_queries(q, pid), e.rotate_keys(k, pid), e.rotate_keys(q, pid),
                        e.rotate(k, pid, role="key")]
                for role in ("query", "key"):
                    out += e.tables(pid, role=role).rotate_all(q, k)
                    if not lean:
                        out.append(e.tables(a(_ints(cids)), role=role).rotate(a(x16[:, :2], dt)))
                return tuple(out)

            yield f"xpos-decode-{name}-{dt}", decode

        def cos_sin(xp: Any, a: Callable[..., Any], e: Any = enc) -> tuple[Any, ...]:
            _lean(xp)
            out = []
            for role in ("query", "key"):
                for v in (_ints(cids), _ints(cids, "int32"), _ints([4096])):
                    pid = a(v)
                    out += [e.cos_sin(pid, role=role), e.cos_sin(pid, role=role, dtype="float32")]
                out.append(e.cos_sin(a(cids + 0.25), role=role))
            return tuple(out)

        yield f"xpos-{name}-cos_sin", cos_sin


def _pair_cases(per: Any, bq: np.ndarray, bk: np.ndarray, real: np.ndarray) -> Iterator[Case]:
    """T5 (both directions), ALiBi, Shaw and Transformer-XL on the positions a model gives them,
    each sequence in one case: repeated calls, sliding windows, decode steps, few and many
    pairs, distances beyond max_distance, batched positions, int32 and int64; float32 and
    bfloat16 outputs on a shorter sequence (on JAX, where they only cast, fewer still)."""
    encoders = [
        ("t5", per.get_encoder("t5", num_heads=3), "bias", True),
        ("t5-causal", per.get_encoder("t5", num_heads=3, bidirectional=False), "bias", True),
        ("alibi", per.get_encoder("alibi", num_heads=8), "bias", False),
        ("shaw", per.get_encoder("shaw", max_distance=16, dim=4), "embed", True),
        ("transformer-xl", per.get_encoder("transformer-xl", dim=8), "embed", False),
    ]
    for name, enc, method, learned in encoders:
        for dt in ("default", "float32", "bfloat16"):
            def calls(xp: Any, a: Callable[..., Any], e: Any = enc, method: str = method,
                      learned: bool = learned, dt: str = dt, name: str = name) -> tuple[Any, ...]:
                kw: dict[str, Any] = {} if dt == "default" else {"dtype": dt}
                if learned:
                    kw["params"] = e.init(xp, seed=7)
                fn = getattr(e, method)
                out = []

                def call(q: Any, k: Any, *, again: bool = False) -> None:
                    qa, ka = a(_ints(q)), a(_ints(k))
                    out.append(fn(qa, ka, **kw))
                    if again:  # the same objects, then new objects of the same values
                        out.extend([fn(qa, ka, **kw), fn(a(_ints(q)), a(_ints(k)), **kw)])

                q3, k5 = np.arange(2, 5), np.arange(5)
                lean = _lean(xp, keep=(dt, name) in (("default", "t5"), ("default", "alibi"), (
                    "float32", "alibi"), ("default", "shaw"), ("default", "transformer-xl")))
                if dt == "default" or not lean:
                    call(q3, k5, again=True)  # few pairs
                    for s in (100, 101, 5000):  # a sliding window: the same differences
                        call(q3 + s, k5 + s)
                for n in (8, 9) if dt == "default" and not lean else (9,):  # decode steps: the newest query
                    call([n - 1], np.arange(n))  # against every key
                call([8], np.arange(9), again=True)
                call([1008], np.arange(1000, 1009))
                call([4100], np.arange(9))  # a step beyond the steps' reach
                if dt != "default":
                    return tuple(out)
                call([8], np.arange(9) + 4000)
                call([0, 1, 2], np.arange(500, 505), again=True)  # beyond max_distance
                call(np.arange(40) + 260, np.arange(300), again=True)  # many pairs
                if not lean:  # (each a shape more on JAX, whose memos they do not reach)
                    call(np.arange(20) + 30, np.arange(40), again=True)  # read, many pairs
                    out.append(fn(a(_ints(bq)), a(_ints(bk)), **kw))  # batched (2, Q) vs (1, K)
                    out.append(fn(a(_ints(bq)), a(_ints(bk)), **kw))
                    for idt in ("int32", "int64"):
                        qa = a(_ints(q3, idt))
                        out += [fn(qa, a(_ints(k5, idt)), **kw), fn(qa, qa, **kw),  # (k is q)
                                fn(a(_ints([8], idt)), a(_ints(np.arange(9), idt)), **kw)]
                # New differences on every call: kept sets fill up unused, and the lookups pause
                for s in range(0, 8 if lean else 80, 2):  # (on JAX only the validation memo)
                    call(q3, k5 + s)
                call(q3, k5, again=True)
                call([8], np.arange(9), again=True)
                if learned and not lean:  # Python lists, of the params' namespace (validated each time)
                    out += [fn([8], list(range(9)), **kw), fn([8], list(range(9)), **kw)]
                if name == "transformer-xl":
                    if not lean:
                        rq = a(real)
                        out += [fn(rq, a(real[::-1].copy()), **kw), fn(rq, rq, **kw),
                                fn(a(real, "float32"), a(real, "float32"), **kw)]
                    call(np.arange(256), np.arange(256), again=True)  # one angle per distance
                    call(np.arange(40) + 300000, np.arange(40), again=True)  # (no table of rows)
                    if not lean:
                        call(np.arange(3) + 2**20, np.arange(5), again=True)
                return tuple(out)

            yield f"{name}-calls-{dt}", calls


def _absolute_cases(per: Any, ids: np.ndarray, real: np.ndarray) -> Iterator[Case]:
    """Sinusoidal rows kept across calls (repeated ids, int32, tables grown, beyond reach) and
    learned tables called repeatedly."""
    for layout in ("interleaved", "split"):
        enc = per.get_encoder("sinusoidal", dim=16, layout=layout)

        def calls(xp: Any, a: Callable[..., Any], e: Any = enc) -> tuple[Any, ...]:
            lean = _lean(xp, keep=True)  # (on JAX no rows are kept: the memos of constants)
            pid = a(_ints(ids))
            out = [e.encode(pid), e.encode(pid), e.encode(a(_ints(ids))), e.encode(pid, dtype="float32")]
            points = ([3], 7, np.arange(1000, 1030), np.arange(9000, 9004), [50000, 3],
                      np.arange(2**20, 2**20 + 3), [2**31 - 1, 0])
            for v in () if lean else points:
                out += [e.encode(a(_ints(v))), e.encode(a(_ints(v, "int32"))), e.encode(a(_ints(v)))]
            out += [e.encode(a(real)), e.encode(a(real))]
            if not lean:
                out += [e.encode(a(_ints(ids, "int32"))), e.encode(pid, dtype="float16"),
                        e.encode(a(_ints([-5, 3]))), e.encode(a(real, "float32"))]
            return tuple(out)

        yield f"sinusoidal-{layout}-calls", calls
    learned = per.get_encoder("learned", num_positions=64, dim=8)
    grid = per.get_encoder("learned-2d", height=6, width=7, dim=4)

    def learned_calls(xp: Any, a: Callable[..., Any]) -> tuple[Any, ...]:
        lean = _lean(xp, keep=True)
        p = learned.init(xp, seed=3)
        pid = a(_ints(ids % 64))
        out = [learned.encode(pid, params=p), learned.encode(pid, params=p),
               learned.encode(pid, params=p, dtype="float32")]
        g = grid.init(xp, seed=4)
        cells = a(_ints(np.stack((ids % 6, ids % 7), axis=-1)))
        out += [grid.encode(cells, params=g), grid.encode(cells, params=g),
                grid.grid(6, 7, params=g), grid.grid(6, 7, params=g)]
        if not lean:
            out += [learned.encode(a(_ints(ids % 64, "int32")), params=p), grid.grid(3, 2, params=g)]
        return tuple(out)

    yield "learned-calls", learned_calls


def _inference_cases(per: Any, q1: np.ndarray, k1: np.ndarray, ids: np.ndarray) -> Iterator[Case]:
    """torch.inference_mode: nothing made there is kept (inference tensors), and what was kept
    before serves it."""
    rotary = per.get_encoder("rotary", dim=16)
    mrope = per.get_encoder("mrope", dim=16, sections=(2, 3, 3))
    sinusoidal = per.get_encoder("sinusoidal", dim=16)
    pairs = [per.get_encoder("t5", num_heads=3), per.get_encoder("alibi", num_heads=8),
             per.get_encoder("shaw", max_distance=16, dim=4), per.get_encoder("transformer-xl", dim=8)]

    def calls(xp: Any, a: Callable[..., Any]) -> tuple[Any, ...]:
        if getattr(xp, "__name__", "") != "torch":
            pytest.skip("torch only")
        params = [e.init(xp, seed=9) if e.learned else None for e in pairs]
        out = []
        for inference in (True, False, True):
            with xp.inference_mode(inference):
                q, k = a(q1, "float32"), a(k1, "float32")
                for o in (5000, 5001, 5001):
                    out += [rotary.rotate(q, offset=o), rotary.rotate(k, offset=o)]
                pid = a(_ints([5002]))
                out += [rotary.rotate(q, pid), rotary.rotate(k, pid), rotary.cos_sin(a(_ints([[5003, 7]])))]
                t = rotary.tables(a(_ints([[[5004]], [[6]]])))
                out += [t.rotate_all(q, k), t.rotate(q)]
                tok = a(_ints([[5005], [5007], [5006]]))
                out += [mrope.rotate(q, tok), mrope.rotate(k, tok), mrope.rotate(q, offset=5008)]
                out += [sinusoidal.encode(a(_ints(ids + 20000))), sinusoidal.encode(a(_ints(ids)))]
                for e, p in zip(pairs, params, strict=True):
                    fn = e.bias if e.kind == "bias" else e.embed
                    for qv, kv in (([8], np.arange(9)), ([2, 3, 4], np.arange(5)), ([2, 3, 4], np.arange(5)),
                                   (np.arange(20), np.arange(40))):
                        out.append(fn(a(_ints(qv)), a(_ints(kv)), params=p))
        return tuple(out)

    yield "torch-inference-mode", calls


def _backend_setup(name: str) -> tuple[Any, Callable[..., Any], Callable[[Any], np.ndarray]]:
    """(native module, asarray(values, dtype=None), to_numpy) for one backend."""
    import importlib

    from peregistry.registry import default_registry

    importlib.import_module(name)
    backend = default_registry.backend(name)
    floats = backend.float_dtypes()

    def asarray(values: Any, dtype: str | None = None) -> Any:
        values = np.asarray(values)
        if dtype is None:
            return backend.from_numpy(values)
        if dtype not in floats:
            pytest.skip(f"{name} has no {dtype}")
        return backend.from_numpy(values, dtype=floats[dtype])

    def to_numpy(out: Any) -> np.ndarray:
        dt = backend.dtype_name(out.dtype)
        arr = backend.to_numpy(out)
        return np.asarray(arr), dt

    return backend.native(), asarray, to_numpy


def _flatten(out: Any) -> list[Any]:
    """The arrays of a case's output, nested tuples (cos_sin, rotate_all) in order."""
    if not isinstance(out, tuple):
        return [out]
    return [a for o in out for a in _flatten(o)]


def _simd_features(backend: str) -> str:
    """The SIMD features in effect that decide the bits (see the module docstring)."""
    import importlib

    try:  # private, but the one place NumPy says which SIMD code it dispatches to
        import numpy._core._multiarray_umath as umath
    except ImportError:
        umath = None
    baseline: list[str] = getattr(umath, "__cpu_baseline__", [])
    dispatch: list[str] = getattr(umath, "__cpu_dispatch__", [])
    features: dict[str, bool] = getattr(umath, "__cpu_features__", {})
    # The host's: x86_64 (AVX512F, AVX2, FMA3) or aarch64 (ASIMD, SVE), as NumPy detects them.
    host = [n.lower() for n in ("AVX512F", "AVX2", "FMA3", "ASIMD", "SVE") if features.get(n)]
    # NumPy's own targets: what it dispatches to here (NPY_DISABLE_CPU_FEATURES removes some).
    targets = [t for t in (*baseline, *dispatch) if features.get(t)]
    out = [",".join(host) or "-", "numpy " + (",".join(targets) or "-")]
    if backend == "torch":
        torch = importlib.import_module("torch")
        out.append(f"torch {torch.backends.cpu.get_cpu_capability().lower()}")
    elif backend == "jax":
        flags = os.environ.get("XLA_FLAGS", "").split()
        isa = [f.split("=", 1)[1] for f in flags if f.startswith("--xla_cpu_max_isa=")]
        out.append(f"xla {isa[-1].lower() if isa else 'host'}")
    return "; ".join(out)


def platform_key(backend: str) -> str:
    """Where a file's bits hold: the architecture, the versions of NumPy and of the backend's
    framework, and the SIMD features in effect (:func:`_simd_features`)."""
    import importlib
    import platform

    mod = importlib.import_module(backend)
    return (f"{platform.machine()}; numpy {np.__version__}; {backend} "
            f"{getattr(mod, '__version__', '?')}; simd {_simd_features(backend)}")


def _golden_name(backend: str) -> str:
    if backend == "jax":
        import jax

        return "jax-x64" if jax.config.read("jax_enable_x64") else "jax"
    return backend


class _Recording:
    """An encoder that notes the largest position (or offset + sequence length, or query +
    key position) each call passes: the size of the angles of a case (:func:`bound`)."""

    def __init__(self, enc: Any, seen: list[float], to_numpy: Callable[[Any], Any]) -> None:
        self._enc, self._seen, self._to_numpy = enc, seen, to_numpy

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._enc, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kw: Any) -> Any:
            total, length = 0.0, 0
            for a in (*args, *kw.values()):
                if isinstance(a, int | float) and not isinstance(a, bool):
                    total += abs(float(a))
                elif isinstance(a, list):
                    total += float(np.max(np.abs(np.asarray(a, dtype=np.float64))))
                elif hasattr(a, "shape") and not isinstance(a, ModuleType):  # (not xp)
                    values = np.asarray(self._to_numpy(a)[0], dtype=np.float64)
                    if values.size:
                        total += float(np.max(np.abs(values)))
                    length = max(length, *(int(n) for n in a.shape), 0)
            self._seen.append(total + length)
            out = attr(*args, **kw)
            # tables (RotaryTables) rotate later at these positions
            return _Recording(out, self._seen, self._to_numpy) if hasattr(out, "rotate") else out

        return call


def compute(backend: str, *, angles: dict[str, float] | None = None) -> dict[str, np.ndarray]:
    """Every case's outputs on ``backend``; ``angles``, if given, receives the size of each
    output's angles (see :func:`bound`)."""
    native, asarray, to_numpy = _backend_setup(backend)
    seen: list[float] = []

    class Package:  # the package, its encoders recording their calls' positions
        @staticmethod
        def get_encoder(*args: Any, **kw: Any) -> Any:
            import peregistry

            return _Recording(peregistry.get_encoder(*args, **kw), seen, to_numpy)

    floats: dict[str, np.ndarray] = {}
    for key, fn in _cases(Package if angles is not None else None):
        seen.clear()
        try:
            out = fn(native, asarray)
        except pytest.skip.Exception:
            continue
        except TypeError as e:  # a dtype this backend lacks (bfloat16 on NumPy)
            if "is not a real floating dtype" not in str(e):
                raise
            continue
        for j, o in enumerate(_flatten(out)):
            arr, dt = to_numpy(o)
            floats[f"{key}#{j}#{dt}"] = arr
            if angles is not None:
                angles[f"{key}#{j}#{dt}"] = max(seen, default=0.0)
    return floats


def bound(want: np.ndarray, angle: float, wide: Any) -> float:
    """How far an output may move on another instruction set (the module docstring derives it):
    ``M·(ULPS·eps(out) + 2·(A + ULPS)·eps(wide))``, ``M`` its largest magnitude, ``A`` the
    size of its angles (at most 2π where ``wide`` is float32: the angles reach cos/sin
    reduced)."""
    finite = np.abs(want[np.isfinite(want)].astype(np.float64))
    scale = float(finite.max()) if finite.size else 0.0
    eps_c = float(np.finfo(wide).eps)
    size = angle if wide == np.float64 else min(angle, 2 * np.pi)
    eps_out = float(np.finfo(want.dtype).eps) if want.dtype.kind == "f" else 0.0
    return scale * (ULPS * eps_out + 2 * (size + ULPS) * eps_c)


def compare(backend: str) -> tuple[str, list[str], int]:
    """``(how, differences, outputs)``: bit for bit where this machine's platform key is the
    file's, else within :func:`bound`."""
    name = _golden_name(backend)
    path = GOLDEN / f"{name}.npz"
    if not path.exists():
        pytest.fail(f"{path} is missing: generate it with python tests/test_golden.py")
    with np.load(path) as stored:
        expected = dict(stored)
    made_on, here = str(expected.pop(PLATFORM, "unrecorded")), platform_key(backend)
    bits = made_on == here
    angles: dict[str, float] = {}
    got = compute(backend, angles=None if bits else angles)
    assert sorted(got) == sorted(expected), (
        f"cases differ: new {sorted(set(got) - set(expected))[:5]}, "
        f"gone {sorted(set(expected) - set(got))[:5]}")
    wide = np.float64 if any(k.endswith("#float64") for k in got) else np.float32
    how = (f"bit for bit (made on this platform: {here})" if bits else
           f"within bounds from dtype and angle (made on: {made_on}; here: {here})")
    differ = []
    for key, want in expected.items():
        have = got[key]
        if have.shape != want.shape or have.dtype != want.dtype:
            differ.append(f"{key}: {have.dtype}{have.shape}, but should be {want.dtype}{want.shape}")
            continue
        # Bits, not values: -0.0 vs 0.0 and NaN payloads count too.
        width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[want.dtype.itemsize]
        if np.array_equal(have.view(width), want.view(width)):
            continue
        h64, w64 = have.astype(np.float64), want.astype(np.float64)
        same = np.isnan(h64) == np.isnan(w64)
        finite = np.isfinite(w64)
        same &= finite | (h64 == w64)  # infinities where they were
        diff = float(np.max(np.abs(h64 - w64)[finite], initial=0.0))
        if bits:
            differ.append(f"{key}: max |difference| {diff:.3g}")
            continue
        tol = bound(want, angles[key], wide)
        if same.all() and diff <= tol:
            continue
        limit = f" > {tol:.3g} (angles up to {angles[key]:.4g})"
        differ.append(f"{key}: max |difference| {diff:.3g}{limit}")
    return how, differ, len(expected)


def _selected() -> list[str]:
    from peregistry.testing._core import selected_backends

    return [b.name for b in selected_backends()]


@pytest.mark.parametrize("backend", _selected())
def test_outputs_bit_for_bit_as_before_the_refactor(backend: str) -> None:
    # (which comparison was made: in the captured output, and in the message of a failure;
    # record_property would warn under the JUnit reports' xunit2 format)
    how, differ, total = compare(backend)
    print(f"golden outputs on {_golden_name(backend)}: compared {how}")
    assert not differ, (f"{len(differ)} of {total} outputs changed on {_golden_name(backend)}, "
                        f"compared {how}:\n" + "\n".join(differ[:20]))


def main() -> None:
    GOLDEN.mkdir(exist_ok=True)
    backends = sys.argv[1:] or ["numpy", "torch", "jax", "array_api_strict"]
    for b in backends:
        if b == "jax-x64":
            os.environ["JAX_ENABLE_X64"] = "1"
            b = "jax"
        out = compute(b)
        name = _golden_name(b)
        np.savez_compressed(GOLDEN / f"{name}.npz", **out, **{PLATFORM: np.asarray(platform_key(b))})
        print(f"{name}: {len(out)} arrays")


if __name__ == "__main__":
    main()
