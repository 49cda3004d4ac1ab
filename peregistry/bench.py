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
  framework directly (the functions ``hand_*`` below; the same text serves NumPy, PyTorch and
  ``jax.numpy``, which spell these calls alike; ``jax.jit``-ed on JAX);
* **copy** — copying an array of the output's size and dtype: the floor of any function that
  must write that many bytes.

The table shows the medians and the ratios ``ours / hand-written`` and ``ours / copy``. The
shapes are those of a model's prefill (``--quick``: small shapes and few repetitions, for a
smoke test). Timing values depend on the machine: compare ratios, not milliseconds.
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

__all__ = ["BENCHMARKS", "FRAMEWORKS", "BenchRow", "format_bench_table", "run_bench"]

#: The frameworks ``bench`` knows, by ``--backend`` name.
FRAMEWORKS = ("numpy", "torch", "jax")


# -- plain hand-written implementations -----------------------------------------------------------
# ``xp`` is the framework's own module: numpy, torch or jax.numpy. Only calls these three spell
# alike are used, so one text is the hand-written code of each.
def hand_sinusoidal(xp: Any, pos: Any, dim: int, base: float = 10000.0) -> Any:
    """Vaswani et al. 2017, interleaved: ``[sin(p ω_0), cos(p ω_0), sin(p ω_1), ...]``."""
    inv_freq = base ** (-xp.arange(0, dim, 2, dtype=xp.float32) / dim)
    angle = pos[:, None] * inv_freq[None, :]
    return xp.stack((xp.sin(angle), xp.cos(angle)), axis=-1).reshape(pos.shape[0], dim)


def hand_rotary(xp: Any, x: Any, theta: float = 10000.0) -> Any:
    """GPT-NeoX/Llama RoPE (``rotate_half``) of ``x: (..., seq, dim)`` at positions ``0..seq-1``."""
    seq, dim = x.shape[-2], x.shape[-1]
    inv_freq = theta ** (-xp.arange(0, dim, 2, dtype=xp.float32) / dim)
    freqs = xp.arange(seq, dtype=xp.float32)[:, None] * inv_freq[None, :]
    emb = xp.concatenate((freqs, freqs), axis=-1)
    cos, sin = xp.cos(emb), xp.sin(emb)
    half = dim // 2
    rotated = xp.concatenate((-x[..., half:], x[..., :half]), axis=-1)
    return x * cos + rotated * sin


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
        return lambda: a.copy()

    def sync(self, out: Any) -> Any:
        if self.name == "jax":
            return out.block_until_ready()
        return out

    def zeros_like(self, out: Any) -> Any:
        return self.xp.zeros(tuple(out.shape), dtype=out.dtype)


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


#: The benchmarked encoders: name → builder of the case for a framework (``quick`` shapes or not).
BENCHMARKS: dict[str, Callable[[_Framework, bool], Case]] = {
    "sinusoidal": _bench_sinusoidal,
    "rotary": _bench_rotary,
    "alibi": _bench_alibi,
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
            case = BENCHMARKS[n](fw, quick)
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
    body = [(r.encoder, r.backend, r.shape, _ms(r.ours), _ms(r.hand), _ms(r.copy),
             f"{r.vs_hand:.2f}x", f"{r.vs_copy:.2f}x" if math.isfinite(r.vs_copy) else "-")
            for r in rows]
    widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h)
              for i, h in enumerate(header)]
    right = {3, 4, 5, 6, 7}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in body)])


def stderr_if_tty(force: bool) -> TextIO | None:
    """``sys.stderr`` when it is a terminal (or ``force``), else None (no progress bar)."""
    return sys.stderr if force or sys.stderr.isatty() else None
