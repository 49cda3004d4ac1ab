"""``peregistry bench``: each encoder against plain hand-written code in the same framework.

::

    peregistry bench                                  # every benchmarked encoder, every installed framework
    peregistry bench rotary alibi --backend torch     # some of them
    peregistry bench sinusoidal --backend numpy --quick

For each encoder and framework three things are timed *in one run, interleaved* (ours,
hand-written, copy, ours, hand-written, copy, ... in a rotating order, so that drifts of the
machine hit all three alike), and the medians are compared:

* **ours** — the peregistry encoder on the framework's arrays (``jax.jit``-ed on JAX);
* **hand-written** — the plain, obvious code a user would write in that framework, calling the
  framework directly (the functions ``hand_*`` below; the same text serves NumPy, PyTorch,
  ``jax.numpy`` and ``array_api_strict``, which spell these calls alike; ``jax.jit``-ed on JAX);
* **copy** — copying an array of the output's size and dtype: the floor of any function that
  must write that many bytes.

The table shows the medians and the ratios ``ours / hand-written`` and ``ours / copy``. The
shapes are those of a model's prefill (``--quick``: small shapes and few repetitions, for a
smoke test). Timing values depend on the machine: compare ratios, not milliseconds.

Every built-in encoder has a benchmark. Learned encoders take their params from
``enc.init(xp, seed=0, dtype=float32)`` of the framework's own namespace, and the hand-written
code looks up the very same arrays. On ``array_api_strict`` (which holds code to the standard)
a pair whose hand-written code needs a spelling outside the standard is not timed: the table
shows it as skipped and a note below the table says why.
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

__all__ = ["BENCHMARKS", "FRAMEWORKS", "BenchRow", "BenchSkipped", "format_bench_table", "run_bench"]

#: The frameworks ``bench`` knows, by ``--backend`` name.
FRAMEWORKS = ("numpy", "torch", "jax", "array_api_strict")


# -- plain hand-written implementations -----------------------------------------------------------
# ``xp`` is the framework's own module: numpy, torch, jax.numpy or array_api_strict. Only calls
# these spell alike are used (the standard's spellings: ``concat``, ``reshape(x, shape)``), so one
# text is the hand-written code of each. One exception: ``table[idx]`` (an integer array indexing
# the first axis of a 2-D table) is what everyone writes, but the standard allows integer-array
# indices only when every axis is indexed, so the lookup encoders do not run on array_api_strict.
def hand_sinusoidal(xp: Any, pos: Any, dim: int, base: float = 10000.0) -> Any:
    """Vaswani et al. 2017, interleaved: ``[sin(p ω_0), cos(p ω_0), sin(p ω_1), ...]``."""
    inv_freq = base ** (-xp.arange(0, dim, 2, dtype=xp.float32) / dim)
    angle = pos[:, None] * inv_freq[None, :]
    return xp.reshape(xp.stack((xp.sin(angle), xp.cos(angle)), axis=-1), (pos.shape[0], dim))


def hand_rotary(xp: Any, x: Any, theta: float = 10000.0) -> Any:
    """GPT-NeoX/Llama RoPE (``rotate_half``) of ``x: (..., seq, dim)`` at positions ``0..seq-1``."""
    seq, dim = x.shape[-2], x.shape[-1]
    inv_freq = theta ** (-xp.arange(0, dim, 2, dtype=xp.float32) / dim)
    freqs = xp.arange(seq, dtype=xp.float32)[:, None] * inv_freq[None, :]
    emb = xp.concat((freqs, freqs), axis=-1)
    cos, sin = xp.cos(emb), xp.sin(emb)
    half = dim // 2
    rotated = xp.concat((-x[..., half:], x[..., :half]), axis=-1)
    return x * cos + rotated * sin


def hand_mrope(xp: Any, x: Any, pos: Any, sections: Sequence[int], theta: float = 10000.0) -> Any:
    """Qwen2-VL M-RoPE (``apply_multimodal_rotary_pos_emb``) of ``x: (..., seq, dim)`` at float
    ``pos: (len(sections), seq)``: frequency pair ``i`` of band ``a`` turns with ``pos[a]``."""
    dim = x.shape[-1]
    inv_freq = theta ** (-xp.arange(0, dim, 2, dtype=xp.float32) / dim)
    freqs = pos[:, :, None] * inv_freq[None, None, :]          # (axes, seq, dim/2)
    bands, start = [], 0
    for axis, n in enumerate(sections):
        bands.append(freqs[axis, :, start:start + n])
        start += n
    freqs = xp.concat(tuple(bands), axis=-1)                    # (seq, dim/2)
    emb = xp.concat((freqs, freqs), axis=-1)
    cos, sin = xp.cos(emb), xp.sin(emb)
    half = dim // 2
    rotated = xp.concat((-x[..., half:], x[..., :half]), axis=-1)
    return x * cos + rotated * sin


def hand_learned(xp: Any, pos: Any, table: Any) -> Any:
    """Learned absolute positions (BERT, GPT-2): ``table[pos]``."""
    return table[pos]


def hand_learned_2d(xp: Any, pos: Any, row: Any, col: Any) -> Any:
    """DETR-style learned 2-D positions ``pos: (n, 2)`` as (row, col): ``concat(col[c], row[r])``."""
    return xp.concat((col[pos[:, 1]], row[pos[:, 0]]), axis=-1)


def hand_t5(xp: Any, q: Any, k: Any, table: Any, index_dtype: Any, num_buckets: int = 32,
            max_distance: int = 128) -> Any:
    """T5 bidirectional relative bias (Hugging Face ``T5Attention._relative_position_bucket``, then
    ``compute_bias``) at float positions: ``(heads, Q, K)``."""
    rel = k[None, :] - q[:, None]                               # memory - query
    nb = num_buckets // 2
    n = xp.abs(rel)
    max_exact = nb // 2
    is_small = n < max_exact
    large = max_exact + xp.floor(xp.log(xp.clip(n, max_exact, None) / max_exact)
                                 / math.log(max_distance / max_exact) * (nb - max_exact))
    large = xp.clip(large, None, nb - 1)
    bucket = xp.where(is_small, n, large)
    bucket = xp.where(rel > 0, bucket + nb, bucket)
    values = table[xp.asarray(bucket, dtype=index_dtype)]      # (Q, K, heads)
    return xp.moveaxis(values, -1, 0)


def hand_shaw(xp: Any, q: Any, k: Any, table: Any, max_distance: int) -> Any:
    """Shaw et al. 2018: ``table[clip(k - q, -m, m) + m]`` → ``(Q, K, dim)``."""
    rel = k[None, :] - q[:, None]
    return table[xp.clip(rel, -max_distance, max_distance) + max_distance]


def hand_transformer_xl(xp: Any, q: Any, k: Any, dim: int, base: float = 10000.0) -> Any:
    """Transformer-XL relative sinusoid of ``q - k``, sines then cosines → ``(Q, K, dim)``."""
    inv_freq = base ** (-xp.arange(0, dim, 2, dtype=xp.float32) / dim)
    angle = (q[:, None] - k[None, :])[:, :, None] * inv_freq[None, None, :]
    return xp.concat((xp.sin(angle), xp.cos(angle)), axis=-1)


def hand_alibi(xp: Any, q: Any, k: Any, num_heads: int) -> Any:
    """ALiBi (Press et al. 2022) for a power-of-two head count: ``-slope_h · |q - k|``."""
    slopes = 2.0 ** (-8.0 * xp.arange(1, num_heads + 1, dtype=xp.float32) / num_heads)
    dist = xp.abs(k[None, :] - q[:, None])
    return -slopes[:, None, None] * dist[None, :, :]


# -- frameworks -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Framework:
    name: str
    xp: Any
    float32: Any
    default_float: Any

    def arange(self, n: int, dtype: Any = None) -> Any:
        return self.xp.arange(n, dtype=dtype)

    def randn(self, shape: tuple[int, ...]) -> Any:
        import numpy as np

        a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        return self.xp.asarray(a)

    def jit(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        if self.name == "jax":
            import jax

            return jax.jit(fn)
        return fn

    def copy(self, a: Any) -> Callable[[], Any]:
        if self.name == "torch":
            return lambda: a.clone()
        if self.name == "jax":
            import jax
            import jax.numpy as jnp

            jcopy = jax.jit(jnp.copy)
            return lambda: jcopy(a)
        if self.name == "array_api_strict":
            return lambda: self.xp.asarray(a, copy=True)
        return lambda: a.copy()

    def sync(self, out: Any) -> Any:
        if self.name == "jax":
            return out.block_until_ready()
        return out

    def zeros_like(self, out: Any) -> Any:
        return self.xp.zeros(tuple(out.shape), dtype=out.dtype)

    @property
    def index_dtype(self) -> Any:
        """The framework's default integer dtype (int32 on JAX without x64)."""
        return self.xp.arange(1).dtype


def _framework(name: str) -> _Framework:
    if name == "numpy":
        import numpy as np

        return _Framework("numpy", np, np.float32, np.float64)
    if name == "torch":
        import torch

        return _Framework("torch", torch, torch.float32, torch.get_default_dtype())
    if name == "jax":
        import jax.numpy as jnp

        return _Framework("jax", jnp, jnp.float32, jnp.zeros(()).dtype)
    if name == "array_api_strict":
        import array_api_strict as xps

        return _Framework("array_api_strict", xps, xps.float32, xps.float64)
    raise ValueError(f"bench backend must be one of {', '.join(FRAMEWORKS)}, got {name!r}")


def installed_frameworks() -> list[str]:
    """The frameworks of :data:`FRAMEWORKS` that can be imported."""
    return [n for n in FRAMEWORKS if importlib.util.find_spec(n) is not None]


# -- the benchmarks -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One benchmark, built for a framework: the three callables and a shape label."""

    ours: Callable[[], Any]
    hand: Callable[[], Any]
    copy: Callable[[], Any]
    shape: str


class BenchSkipped(Exception):
    """A builder's way to say a pair (encoder, framework) cannot be timed fairly, and why."""


#: Why the table-lookup encoders have no hand-written code on array_api_strict.
_STRICT_NO_LOOKUP = ("hand-written table[idx] is not standard: array_api_strict allows integer-array "
                     "indices only on every axis of the table (take(..., axis=0) would be, but "
                     "torch.take spells a flat gather, so no one text serves every framework)")


def _no_strict_lookup(fw: _Framework) -> None:
    if fw.name == "array_api_strict":
        raise BenchSkipped(_STRICT_NO_LOOKUP)


def _case(fw: _Framework, ours: Callable[..., Any], hand: Callable[..., Any],
          args: tuple[Any, ...], shape: str, hand_args: tuple[Any, ...] | None = None) -> Case:
    ours_j, hand_j = fw.jit(ours), fw.jit(hand)
    h_args = args if hand_args is None else hand_args
    out = fw.sync(ours_j(*args))
    buffer = fw.zeros_like(out)
    copy = fw.copy(buffer)
    return Case(lambda: fw.sync(ours_j(*args)), lambda: fw.sync(hand_j(*h_args)),
                lambda: fw.sync(copy()), shape)


def _bench_sinusoidal(fw: _Framework, quick: bool) -> Case:
    import peregistry as per

    n, dim = (256, 64) if quick else (8192, 1024)
    enc = per.get_encoder("sinusoidal", dim=dim)
    dtype = fw.default_float
    pos = fw.arange(n, dtype=dtype)
    return _case(fw, lambda p: enc.encode(p, dtype=dtype),  # type: ignore[attr-defined]
                 lambda p: hand_sinusoidal(fw.xp, p, dim), (pos,), f"{n}x{dim}")


def _bench_rotary(fw: _Framework, quick: bool) -> Case:
    import peregistry as per

    b, h, s, d = (1, 4, 128, 64) if quick else (1, 32, 2048, 128)
    enc = per.get_encoder("rotary", dim=d)
    x = fw.randn((b, h, s, d))
    return _case(fw, lambda v: enc.rotate(v),  # type: ignore[attr-defined]
                 lambda v: hand_rotary(fw.xp, v), (x,), f"{b}x{h}x{s}x{d} f32")


def _bench_alibi(fw: _Framework, quick: bool) -> Case:
    import peregistry as per

    heads, n = (4, 128) if quick else (16, 2048)
    enc = per.get_encoder("alibi", num_heads=heads)
    pos = fw.arange(n)  # integer positions for ours; the hand-written code takes float32 ones
    fpos = fw.arange(n, dtype=fw.float32)
    return _case(fw, lambda q, k: enc.bias(q, k, dtype=fw.float32),  # type: ignore[attr-defined]
                 lambda q, k: hand_alibi(fw.xp, q, k, heads), (pos, pos),
                 f"{heads}x{n}x{n} f32", hand_args=(fpos, fpos))


def _bench_mrope(fw: _Framework, quick: bool) -> Case:
    import peregistry as per

    sections = (16, 24, 24)  # Qwen2-VL: dim 128
    b, h, s, d = (1, 4, 128, 128) if quick else (1, 28, 2048, 128)
    enc = per.get_encoder("mrope", dim=d, sections=sections)
    x = fw.randn((b, h, s, d))
    xp = fw.xp
    i = fw.arange(s)
    # an image-like grid of 8 columns: temporal steps every 64 tokens, rows of 8, columns
    pos = xp.stack((i // 64, (i // 8) % 8, i % 8), axis=0)
    fpos = xp.asarray(pos, dtype=fw.float32)  # the hand-written code takes float32 positions
    return _case(fw, lambda v, p: enc.rotate(v, p),  # type: ignore[attr-defined]
                 lambda v, p: hand_mrope(fw.xp, v, p, sections), (x, pos),
                 f"{b}x{h}x{s}x{d} f32", hand_args=(x, fpos))


def _bench_learned(fw: _Framework, quick: bool) -> Case:
    import peregistry as per

    _no_strict_lookup(fw)
    n, dim = (256, 64) if quick else (4096, 1024)
    enc = per.get_encoder("learned", num_positions=n, dim=dim)
    table = enc.init(fw.xp, seed=0, dtype=fw.float32)["table"]
    pos = fw.arange(n)
    return _case(fw, lambda p, t: enc.encode(p, params={"table": t}, dtype=fw.float32),  # type: ignore[attr-defined]
                 lambda p, t: hand_learned(fw.xp, p, t), (pos, table), f"{n}x{dim} f32")


def _bench_learned_2d(fw: _Framework, quick: bool) -> Case:
    import peregistry as per

    _no_strict_lookup(fw)
    hw, dim = (16, 32) if quick else (64, 256)
    enc = per.get_encoder("learned-2d", height=hw, width=hw, dim=dim)
    params = enc.init(fw.xp, seed=0, dtype=fw.float32)
    i = fw.arange(hw * hw)
    pos = fw.xp.stack((i // hw, i % hw), axis=-1)  # every cell, (row, col)
    return _case(fw, lambda p, r, c: enc.encode(p, params={"row": r, "col": c},  # type: ignore[attr-defined]
                                                dtype=fw.float32),
                 lambda p, r, c: hand_learned_2d(fw.xp, p, r, c), (pos, params["row"], params["col"]),
                 f"{hw * hw}x{2 * dim} f32")


def _bench_t5(fw: _Framework, quick: bool) -> Case:
    import peregistry as per

    _no_strict_lookup(fw)
    heads, n = (4, 128) if quick else (12, 1024)
    enc = per.get_encoder("t5", num_heads=heads)
    table = enc.init(fw.xp, seed=0, dtype=fw.float32)["table"]
    pos = fw.arange(n)  # integer positions for ours; the hand-written code takes float32 ones
    fpos = fw.arange(n, dtype=fw.float32)
    idt = fw.index_dtype
    return _case(fw, lambda q, k, t: enc.bias(q, k, params={"table": t},  # type: ignore[attr-defined]
                                              dtype=fw.float32),
                 lambda q, k, t: hand_t5(fw.xp, q, k, t, idt), (pos, pos, table),
                 f"{heads}x{n}x{n} f32", hand_args=(fpos, fpos, table))


def _bench_shaw(fw: _Framework, quick: bool) -> Case:
    import peregistry as per

    _no_strict_lookup(fw)
    n, m, dim = (64, 16, 32) if quick else (256, 64, 128)
    enc = per.get_encoder("shaw", max_distance=m, dim=dim)
    table = enc.init(fw.xp, seed=0, dtype=fw.float32)["table"]
    pos = fw.arange(n)
    return _case(fw, lambda q, k, t: enc.embed(q, k, params={"table": t},  # type: ignore[attr-defined]
                                               dtype=fw.float32),
                 lambda q, k, t: hand_shaw(fw.xp, q, k, t, m), (pos, pos, table), f"{n}x{n}x{dim} f32")


def _bench_transformer_xl(fw: _Framework, quick: bool) -> Case:
    import peregistry as per

    n, dim = (64, 64) if quick else (256, 128)
    enc = per.get_encoder("transformer-xl", dim=dim)
    pos = fw.arange(n)  # integer positions for ours; the hand-written code takes float32 ones
    fpos = fw.arange(n, dtype=fw.float32)
    return _case(fw, lambda q, k: enc.embed(q, k, dtype=fw.float32),  # type: ignore[attr-defined]
                 lambda q, k: hand_transformer_xl(fw.xp, q, k, dim), (pos, pos),
                 f"{n}x{n}x{dim} f32", hand_args=(fpos, fpos))


#: The benchmarked encoders: name → builder of the case for a framework (``quick`` shapes or not);
#: a builder raises :class:`BenchSkipped` for a framework it cannot time fairly.
BENCHMARKS: dict[str, Callable[[_Framework, bool], Case]] = {
    "sinusoidal": _bench_sinusoidal,
    "rotary": _bench_rotary,
    "alibi": _bench_alibi,
    "mrope": _bench_mrope,
    "learned": _bench_learned,
    "learned-2d": _bench_learned_2d,
    "t5": _bench_t5,
    "shaw": _bench_shaw,
    "transformer-xl": _bench_transformer_xl,
}


# -- timing ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BenchRow:
    """One line of the table: medians in seconds and the two ratios."""

    encoder: str
    backend: str
    shape: str
    ours: float
    hand: float
    copy: float
    #: why the pair was not timed (the medians are then NaN), or "".
    skipped: str = ""

    @property
    def vs_hand(self) -> float:
        return self.ours / self.hand

    @property
    def vs_copy(self) -> float:
        return self.ours / self.copy


def time_interleaved(fns: Sequence[Callable[[], Any]], reps: int, *, warmup: int = 2,
                     tick: Callable[[], None] | None = None) -> list[float]:
    """Median seconds of each of ``fns``, timed in ``reps`` interleaved rounds (the order
    rotates each round so no function always runs first)."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for r in range(reps):
        for j in range(len(fns)):
            i = (j + r) % len(fns)
            t0 = time.perf_counter()
            fns[i]()
            times[i].append(time.perf_counter() - t0)
        if tick is not None:
            tick()
    return [statistics.median(t) for t in times]


class Progress:
    """A plain-text progress bar on a stream (``[#####.....] 5/10 what``), redrawn in place."""

    def __init__(self, total: int, stream: TextIO | None, width: int = 30) -> None:
        self.total, self.stream, self.width, self.done, self.label = total, stream, width, 0, ""

    def step(self, label: str | None = None) -> None:
        if label is not None:
            self.label = label
        else:
            self.done += 1
        if self.stream is None:
            return
        filled = self.width * self.done // max(self.total, 1)
        self.stream.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] "
                          f"{self.done}/{self.total} {self.label:<24}")
        self.stream.flush()

    def close(self) -> None:
        if self.stream is not None:
            self.stream.write("\r" + " " * (self.width + 40) + "\r")
            self.stream.flush()


def run_bench(names: Sequence[str] | None = None, backends: Sequence[str] | None = None, *,
              quick: bool = False, reps: int | None = None,
              progress: TextIO | None = None) -> list[BenchRow]:
    """Time each encoder of ``names`` (default: all of :data:`BENCHMARKS`) on each framework
    of ``backends`` (default: the installed ones); a progress bar goes to ``progress``.

    :raises ValueError: for an encoder without a benchmark or an unknown framework.
    :raises ImportError: for a framework that is not installed.
    """
    names = list(dict.fromkeys(names or BENCHMARKS))
    for n in names:
        if n not in BENCHMARKS:
            raise ValueError(f"no benchmark for encoder {n!r}; benchmarked: {', '.join(BENCHMARKS)}")
    backends = list(dict.fromkeys(backends or installed_frameworks()))
    for b in backends:
        if b not in FRAMEWORKS:
            raise ValueError(f"bench backend must be one of {', '.join(FRAMEWORKS)}, got {b!r}")
        if importlib.util.find_spec(b) is None:
            raise ImportError(f"bench backend {b!r} is not installed")
    reps = reps or (5 if quick else 25)
    bar = Progress(len(names) * len(backends) * reps, progress)
    rows = []
    for b in backends:
        fw = _framework(b)
        for n in names:
            bar.step(f"{n} on {b}")
            try:
                case = BENCHMARKS[n](fw, quick)
            except BenchSkipped as exc:
                nan = math.nan
                rows.append(BenchRow(n, b, "-", nan, nan, nan, skipped=str(exc)))
                for _ in range(reps):
                    bar.step()
                continue
            ours, hand, copy = time_interleaved((case.ours, case.hand, case.copy), reps,
                                                tick=bar.step)
            rows.append(BenchRow(n, b, case.shape, ours, hand, copy))
    bar.close()
    return rows


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds < 1 else f"{seconds:.2f} s"


def format_bench_table(rows: Sequence[BenchRow]) -> str:
    """The rows as an aligned text table: medians and ratios (``x`` = times as long)."""
    header = ("encoder", "backend", "shape", "ours", "hand-written", "copy", "vs hand", "vs copy")
    notes: dict[str, list[str]] = {}  # reason → the pairs skipped for it (numbered in order)
    body = []
    for r in rows:
        if r.skipped:
            pairs = notes.setdefault(r.skipped, [])
            pairs.append(f"{r.encoder} on {r.backend}")
            number = list(notes).index(r.skipped) + 1
            body.append((r.encoder, r.backend, r.shape, f"skipped [{number}]", "-", "-", "-", "-"))
            continue
        body.append((r.encoder, r.backend, r.shape, _ms(r.ours), _ms(r.hand), _ms(r.copy),
                     f"{r.vs_hand:.2f}x", f"{r.vs_copy:.2f}x" if math.isfinite(r.vs_copy) else "-"))
    widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h)
              for i, h in enumerate(header)]
    right = {3, 4, 5, 6, 7}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    lines = [line(header), line(["-" * w for w in widths]), *(line(r) for r in body)]
    if notes:
        lines += ["", "notes:", *(f"[{i}] skipped {', '.join(pairs)}: {reason}"
                                 for i, (reason, pairs) in enumerate(notes.items(), 1))]
    return "\n".join(lines)


def stderr_if_tty(force: bool) -> TextIO | None:
    """``sys.stderr`` when it is a terminal (or ``force``), else None (no progress bar)."""
    return sys.stderr if force or sys.stderr.isatty() else None
