"""The cost of small calls, as ratios against hand-written code measured in one run.

Each ratio is median(time of ours) / median(time of the reference), the two timed in
interleaved repetitions so that drifts of the (shared) machine hit both alike. Sections
(``--only``, comma-separated; default all):

``decode``
    NumPy decode: ``rotate`` of (8, 32, 1, 128) float32 at positions 4095, 4096, ... (one per
    call, as in generation) vs a hand-written NumPy RoPE. Goal <= 1.2x.
``calls``
    The fixed cost of every public method on small inputs, eager, one thread: µs per call of
    ours and of the hand-written code, for NumPy, torch and JAX (not jitted). Goal: ours <= 2x
    the hand-written function (issue 29; no absolute µs goal). Nothing of a call is kept, so
    repeating one call costs what a new one does; ``t5`` is also given new positions arrays on
    every call (the same values, shifted, and new differences ``k - q``), and every pair kind a
    decoder's step, one query against one key more each step (the hand-written code at 1 x 8).
``llama``
    A tiny Llama (transformers; 2 layers, hidden 64, one thread) generating 32 tokens: ms/token
    with the model's own RoPE, with ``enc.tables`` made once per forward and applied in every
    layer (the model's own pattern), with ``enc.cos_sin`` feeding the model's apply function,
    and with ``enc.rotate`` in every layer. Goal: the ``tables`` route no slower than the
    model's own RoPE (1.0x).
``txl``
    ``transformer-xl`` 256x256x128 on NumPy and torch vs the hand-written version (goal <= 1.2x),
    and ``learned`` at the quick size 256x64 on NumPy (the per-call overhead).
``startup``
    ``import peregistry; get_encoder('rotary', dim=64)`` vs ``import numpy`` in fresh
    interpreters (goal <= 1.6x), and that ``import peregistry`` imports no array framework.
``load``
    The pure-torch path (``PEREGISTRY_NATIVE=0``, 2 threads) of ``rotate`` (1, 32, 2048, 128)
    vs a clone, and M-RoPE ``cos_sin`` from explicit positions, idle and with the other core
    busy (a spinning process per other core): loaded / idle, with 2 threads (a clone's own
    ratio beside it: with one core of two taken, ~2x is the bound) and with what
    ``docs/benchmarks.md`` says to set on a shared CPU, one torch thread per core not taken.
    Goal <= 2x idle. Run in a subprocess of its own, since the native kernel switch is read
    once per process.

Run: ``python benchmarks/bench_calls.py [--reps N] [--only decode,calls,...]``.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

import peregistry as per
from peregistry.bench._hand import hand_learned, hand_transformer_xl

SECTIONS = ("decode", "calls", "llama", "txl", "startup", "load")
#: A small call's fixed cost: at most this many times the hand-written function's.
CALL_GOAL = 2.0


def interleaved(fns: list[Callable[[], Any]], reps: int, inner: int = 1,
                sync: Callable[[Any], Any] = lambda r: r) -> list[float]:
    """Median seconds per call of each of ``fns`` (``inner`` calls per timing), interleaved,
    the order rotating every round."""
    for _ in range(3):
        for f in fns:
            sync(f())
    times: list[list[float]] = [[] for _ in fns]
    for r in range(reps):
        for j in range(len(fns)):
            i = (j + r) % len(fns)
            f = fns[i]
            t0 = time.perf_counter()
            for _ in range(inner):
                out = f()
            sync(out)
            times[i].append((time.perf_counter() - t0) / inner)
    return [statistics.median(t) for t in times]


def verdict(ok: bool | None) -> str:
    return "(for information)" if ok is None else ("ok" if ok else "MISSED")


def report(name: str, ours: float, base: float, goal: float | None, unit: str = "ms") -> None:
    scale = 1e3 if unit == "ms" else 1e6
    ratio = ours / base
    print(f"{name:<54} {ratio:6.2f}x  ours {ours * scale:8.2f} {unit}, ref {base * scale:8.2f} "
          f"{unit}  {verdict(None if goal is None else ratio <= goal)}"
          + (f" (goal <= {goal}x)" if goal is not None else ""), flush=True)


# -- 1. NumPy decode -------------------------------------------------------------------------------
def hand_numpy_rope(x: Any, pos: Any, inv: Any) -> Any:
    freqs = pos[:, None].astype(np.float64) * inv
    cos, sin = np.cos(freqs), np.sin(freqs)
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return np.concatenate((x1 * cos - x2 * sin, x2 * cos + x1 * sin), axis=-1).astype(x.dtype)


def section_decode(reps: int) -> None:
    enc: Any = per.get_encoder("rotary", dim=128)
    inv = np.asarray(enc.inv_freq())
    x = np.random.default_rng(0).standard_normal((8, 32, 1, 128)).astype(np.float32)
    ours_p, hand_p = itertools.count(4095), itertools.count(4095)
    o, h = interleaved([lambda: enc.rotate(x, offset=next(ours_p)),
                        lambda: hand_numpy_rope(x, np.arange(p := next(hand_p), p + 1), inv)],
                       reps * 20)
    report("numpy decode (8, 32, 1, 128) f32 from @4095", o, h, 1.2, "µs")
    ours_p, hand_p = itertools.count(4095), itertools.count(4095)
    o, h = interleaved([lambda: enc.rotate(x, np.asarray([next(ours_p)])),
                        lambda: hand_numpy_rope(x, np.asarray([next(hand_p)]), inv)], reps * 20)
    report("  same, given a position_ids array each step (both)", o, h, 1.2, "µs")


# -- 2. the fixed cost of each public method -------------------------------------------------------
def _small_cases(xp: Any, asarray: Callable[..., Any]) -> Iterator[tuple[str, Any, Any]]:
    """(label, ours, hand-written) on small inputs, in namespace ``xp`` (the framework's own)."""
    f32 = ((lambda a: a.float()) if xp.__name__ == "torch"
           else (lambda a: a.astype(xp.float32)))
    rot: Any = per.get_encoder("rotary", dim=16)
    inv = asarray(np.asarray(rot.inv_freq(), dtype=np.float32))
    x = asarray(np.random.default_rng(0).standard_normal((1, 4, 1, 16)).astype(np.float32))
    ids = asarray(np.asarray([[5]]))
    ids3 = asarray(np.asarray([[[5]]]))

    def hand_rope(x: Any, pos: Any) -> Any:
        freqs = f32(pos)[..., None] * inv
        cos, sin = xp.cos(freqs), xp.sin(freqs)
        x1, x2 = x[..., :8], x[..., 8:]
        return xp.concat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), axis=-1)

    def hand_cos_sin(pos: Any) -> Any:
        freqs = f32(pos)[..., None] * inv
        emb = xp.concat((freqs, freqs), axis=-1)
        return xp.cos(emb), xp.sin(emb)

    p5 = asarray(np.asarray([5]))
    yield "rotary.rotate(x, offset=5)", lambda: rot.rotate(x, offset=5), lambda: hand_rope(x, p5)
    yield "rotary.rotate(x, position_ids)", lambda: rot.rotate(x, ids3), lambda: hand_rope(x, ids3)
    yield "rotary.cos_sin(position_ids)", lambda: rot.cos_sin(ids), lambda: hand_cos_sin(ids)
    tables = rot.tables(ids3)
    yield ("rotary.tables(ids).rotate(x)", lambda: tables.rotate(x), lambda: hand_rope(x, ids3))
    mro: Any = per.get_encoder("mrope", dim=16, sections=(2, 3, 3))
    mids = asarray(np.full((3, 1, 1), 5))
    yield "mrope.rotate(x, position_ids)", lambda: mro.rotate(x, mids), lambda: hand_rope(x, ids3)
    # a decode step: a new position ids array every call (a new position, or the same one)
    steps = itertools.cycle([asarray(np.full((1, 1, 1), 100 + i)) for i in range(64)])
    yield ("rotary.rotate(x, new ids each call)", lambda: rot.rotate(x, next(steps)),
           lambda: hand_rope(x, ids3))
    text = itertools.cycle([asarray(np.full((3, 1, 1), 100 + i)) for i in range(64)])
    yield ("mrope.rotate(x, new text ids each)", lambda: mro.rotate(x, next(text)),
           lambda: hand_rope(x, ids3))
    image = itertools.cycle([asarray(np.array([100, 3 + i % 7, i % 5]).reshape(3, 1, 1))
                             for i in range(64)])
    yield ("mrope.rotate(x, new image ids each)", lambda: mro.rotate(x, next(image)),
           lambda: hand_rope(x, ids3))
    pos = asarray(np.arange(8))
    fpos = asarray(np.arange(8, dtype=np.float32))
    from peregistry.bench import _hand

    sin_: Any = per.get_encoder("sinusoidal", dim=16)
    yield ("sinusoidal.encode(8 positions)", lambda: sin_.encode(pos),
           lambda: _hand.hand_sinusoidal(xp, fpos, 16))
    lrn: Any = per.get_encoder("learned", num_positions=16, dim=16)
    lp = lrn.init(xp, dtype=xp.float32)
    yield ("learned.encode(8 positions)", lambda: lrn.encode(pos, params=lp),
           lambda: hand_learned(xp, pos, lp["table"]))
    ali: Any = per.get_encoder("alibi", num_heads=4)
    yield ("alibi.bias(8, 8)", lambda: ali.bias(pos, pos),
           lambda: _hand.hand_alibi(xp, fpos, fpos, 4))
    t5: Any = per.get_encoder("t5", num_heads=4)
    tp = t5.init(xp, dtype=xp.float32)
    idt = xp.arange(1).dtype
    yield ("t5.bias(8, 8)", lambda: t5.bias(pos, pos, params=tp),
           lambda: _hand.hand_t5(xp, fpos, fpos, tp["table"], idt))
    # new positions arrays each call: what the pair kinds remember never depends on values
    fresh = itertools.cycle([asarray(np.arange(8) + i) for i in range(16)])
    yield ("t5.bias(new 8, 8 each call)",
           lambda: t5.bias(next(fresh), next(fresh), params=tp),
           lambda: _hand.hand_t5(xp, fpos, fpos, tp["table"], idt))
    # a sliding window (new values, the same differences k - q each call), and positions of new
    # differences each call, which nothing kept by values serves
    moved = itertools.cycle([asarray(np.arange(8) + i) for i in range(256)])
    yield ("t5.bias(8, 8 sliding each call)",
           lambda: t5.bias(*itertools.repeat(next(moved), 2), params=tp),
           lambda: _hand.hand_t5(xp, fpos, fpos, tp["table"], idt))
    rng = np.random.default_rng(0)
    scattered = itertools.cycle([asarray(np.sort(rng.permutation(64)[:8])) for _ in range(256)])
    yield ("t5.bias(8, 8 new differences each)",
           lambda: t5.bias(*itertools.repeat(next(scattered), 2), params=tp),
           lambda: _hand.hand_t5(xp, fpos, fpos, tp["table"], idt))
    # a decoder's step: one query against one key more each step (HF T5's decoder, causal)
    t5c: Any = per.get_encoder("t5", num_heads=4, bidirectional=False)
    steps_qk = itertools.cycle([(asarray(np.array([t])), asarray(np.arange(t + 1)))
                                for t in range(8, 40)])
    yield ("t5.bias(1, K) decode, K + 1 each",
           lambda: t5c.bias(*next(steps_qk), params=tp),
           lambda: _hand.hand_t5(xp, fpos[:1], fpos, tp["table"], idt))
    shaw: Any = per.get_encoder("shaw", max_distance=4, dim=16)
    sp = shaw.init(xp, dtype=xp.float32)
    yield ("shaw.embed(8, 8)", lambda: shaw.embed(pos, pos, params=sp),
           lambda: _hand.hand_shaw(xp, pos, pos, sp["table"], 4))
    txl: Any = per.get_encoder("transformer-xl", dim=16)
    yield ("transformer-xl.embed(8, 8)", lambda: txl.embed(pos, pos),
           lambda: hand_transformer_xl(xp, fpos, fpos, 16))
    yield ("alibi.bias(1, K) decode, K + 1 each", lambda: ali.bias(*next(steps_qk)),
           lambda: _hand.hand_alibi(xp, fpos[:1], fpos, 4))
    yield ("shaw.embed(1, K) decode, K + 1 each",
           lambda: shaw.embed(*next(steps_qk), params=sp),
           lambda: _hand.hand_shaw(xp, pos[:1], pos, sp["table"], 4))
    yield ("transformer-xl.embed(1, K) decode", lambda: txl.embed(*next(steps_qk)),
           lambda: hand_transformer_xl(xp, fpos[:1], fpos, 16))


def section_calls(reps: int, only: tuple[str, ...] = ("numpy", "torch", "jax")) -> None:
    print("fixed cost per call, small inputs, eager, one thread (µs per call)")
    backends: list[tuple[str, Any, Callable[..., Any], Callable[[Any], Any]]] = [
        ("numpy", np, np.asarray, lambda r: r)]
    try:
        import torch

        torch.set_num_threads(1)
        backends.append(("torch", torch, torch.as_tensor, lambda r: r))
    except ImportError:
        print("torch not installed: skipped")
    try:
        import jax
        import jax.numpy as jnp

        backends.append(("jax", jnp, jnp.asarray, jax.block_until_ready))
    except ImportError:
        print("jax not installed: skipped")
    for name, xp, asarray, sync in backends:
        if name not in only:
            continue
        for label, ours, hand in _small_cases(xp, asarray):
            o, h = interleaved([ours, hand], reps, inner=200 if name != "jax" else 20, sync=sync)
            print(f"  {name:<6} {label:<34} ours {o * 1e6:7.1f} µs  hand {h * 1e6:7.1f} µs  "
                  f"{o / h:5.2f}x  {verdict(o <= CALL_GOAL * h)} (<= {CALL_GOAL}x)", flush=True)


# -- 2b. a tiny Llama ------------------------------------------------------------------------------
def section_llama(reps: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama import modeling_llama as ml

    torch.set_num_threads(1)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                         max_position_embeddings=512)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    enc: Any = per.from_hf_config(config)
    own_emb, own_apply = model.model.rotary_emb, ml.apply_rotary_pos_emb

    class CosSin(torch.nn.Module):
        def forward(self, x: Any, position_ids: Any) -> Any:
            return enc.cos_sin(position_ids, dtype=x.dtype)

    class Ids(torch.nn.Module):  # hands the position ids to the attention instead of cos/sin
        def forward(self, x: Any, position_ids: Any) -> Any:
            return position_ids[:, None], None

    class Tables(torch.nn.Module):  # the tables of the forward's positions, made once
        def forward(self, x: Any, position_ids: Any) -> Any:
            return enc.tables(position_ids[:, None]), "tables"

    def apply(q: Any, k: Any, cos: Any, sin: Any, unsqueeze_dim: int = 1) -> Any:
        if sin is None:  # the rotate route: ``cos`` holds the (batch, 1, seq) position ids
            return enc.rotate(q, cos), enc.rotate(k, cos)
        if sin == "tables":  # the tables route: every layer rotates with the forward's tables
            return cos.rotate_all(q, k)
        return own_apply(q, k, cos, sin, unsqueeze_dim)

    ml.apply_rotary_pos_emb = apply
    prompt = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(0))

    def generate(emb: Any, steps: int = 32) -> Any:
        model.model.rotary_emb = emb
        with torch.no_grad():
            out = model(prompt, use_cache=True)
            cache, tok, toks = out.past_key_values, out.logits[:, -1:].argmax(-1), []
            for _ in range(steps):
                out = model(tok, past_key_values=cache, use_cache=True)
                cache, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
                toks.append(tok)
        return torch.cat(toks, dim=-1)

    try:
        same = [generate(e) for e in (own_emb, CosSin(), Ids(), Tables())]
        print(f"tiny Llama, 2 layers, hidden 64, 1 thread; generated tokens equal: "
              f"{all(torch.equal(same[0], s) for s in same)}")
        own, cs, rot, tab = (t / 33 for t in interleaved(
            [lambda: generate(own_emb), lambda: generate(CosSin()), lambda: generate(Ids()),
             lambda: generate(Tables())], reps))
        report("llama decode: enc.tables route vs own RoPE", tab, own, 1.0)
        report("llama decode: enc.cos_sin route vs own RoPE", cs, own, None)
        report("llama decode: enc.rotate route vs own RoPE", rot, own, None)
    finally:
        ml.apply_rotary_pos_emb, model.model.rotary_emb = own_apply, own_emb


# -- 3. transformer-xl and learned -----------------------------------------------------------------
def section_txl(reps: int) -> None:
    enc: Any = per.get_encoder("transformer-xl", dim=128)
    backends: list[tuple[str, Any]] = [("numpy", np)]
    try:
        import torch

        backends.append(("torch", torch))
    except ImportError:
        print("torch not installed: skipped")
    for name, xp in backends:
        pos, fpos = xp.arange(256), xp.arange(256, dtype=xp.float32)
        o, h = interleaved([lambda p=pos, xp=xp: enc.embed(p, p, dtype=xp.float32),
                            lambda f=fpos, xp=xp: hand_transformer_xl(xp, f, f, 128)], reps)
        report(f"transformer-xl 256x256x128 {name} vs hand-written", o, h, 1.2)
    lrn: Any = per.get_encoder("learned", num_positions=256, dim=64)
    table = lrn.init(np, dtype=np.float32)["table"]
    pos = np.arange(256)
    o, h = interleaved([lambda: lrn.encode(pos, params={"table": table}, dtype=np.float32),
                        lambda: hand_learned(np, pos, table)], reps, inner=100)
    report("learned 256x64 numpy vs table[pos]", o, h, None, "µs")


# -- 4. startup ------------------------------------------------------------------------------------
def section_startup(reps: int) -> None:
    ours_s = "import peregistry; peregistry.get_encoder('rotary', dim=64)"
    base_s = "import numpy"
    check = ("import sys, peregistry; bad = sorted(m for m in ('numpy', 'torch', 'jax', "
             "'array_api_strict') if m in sys.modules); print(','.join(bad) or 'none')")
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                         check=True).stdout.strip()
    print(f"frameworks imported by `import peregistry`: {out}  {verdict(out == 'none')}")

    def run(snippet: str) -> Callable[[], None]:
        return lambda: subprocess.run([sys.executable, "-c", snippet], check=True)

    times: list[list[float]] = [[], []]
    for r in range(max(reps, 20)):  # interleaved, alternating which goes first
        for i in ((0, 1) if r % 2 == 0 else (1, 0)):
            t0 = time.perf_counter()
            run((ours_s, base_s)[i])()
            times[i].append(time.perf_counter() - t0)
    o, h = statistics.median(times[0]), statistics.median(times[1])
    report("import peregistry; get_encoder('rotary', dim=64)", o, h, 1.6)
    print(f"  (fastest runs: {min(times[0]) * 1e3:.1f} ms vs {min(times[1]) * 1e3:.1f} ms, "
          f"{min(times[0]) / min(times[1]):.2f}x)")


# -- 5. a shared CPU -------------------------------------------------------------------------------
def _spin() -> None:
    while True:
        pass


@contextmanager
def busy_cores(n: int) -> Iterator[None]:
    """``n`` processes spinning (other work on the machine's other cores)."""
    procs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    try:
        time.sleep(0.2)
        yield
    finally:
        for p in procs:
            p.terminate()
            p.join()


def _load_cases() -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    import torch

    rot: Any = per.get_encoder("rotary", dim=128)
    x = torch.randn(1, 32, 2048, 128)
    mro: Any = per.get_encoder("mrope", dim=128, sections=(16, 24, 24))
    i = torch.arange(4096)
    ids = torch.stack((i // 1024, (i // 32) % 32, i % 32)) + 0.5  # explicit, not a cached range
    return [("rotate (1, 32, 2048, 128), pure torch, vs clone", lambda: rot.rotate(x), x.clone),
            ("mrope.cos_sin(3 x 4096 explicit positions) vs clone",
             lambda: mro.cos_sin(ids), x.clone)]


def section_load(reps: int, threads: int) -> None:
    if os.environ.get("PEREGISTRY_NATIVE") != "0":  # the switch is read once per process
        env = {**os.environ, "PEREGISTRY_NATIVE": "0"}
        subprocess.run([sys.executable, __file__, "--only", "load", "--reps", str(reps),
                        "--threads", str(threads)], env=env, check=False)
        return
    import torch

    torch.set_num_threads(threads)
    others = max((os.cpu_count() or 2) - 1, 1)
    # What docs/benchmarks.md says to set on a shared CPU: one torch thread per core not taken
    # (the load takes all cores but one here, so one thread).
    mine = max(min(threads, (os.cpu_count() or 2) - others), 1)
    print(f"shared CPU: {threads} torch threads, PEREGISTRY_NATIVE=0, {others} spinning "
          f"process(es) for the load; then {mine} thread(s), what the docs say to set")
    for label, ours, base in _load_cases():
        idle_o, idle_b = interleaved([ours, base], reps)
        with busy_cores(others):
            load_o, load_b = interleaved([ours, base], reps)
            torch.set_num_threads(mine)
            try:
                (set_o,) = interleaved([ours], reps)
            finally:
                torch.set_num_threads(threads)
        print(f"  {label}\n    idle {idle_o * 1e3:7.2f} ms ({idle_o / idle_b:4.1f}x clone); "
              f"loaded, {threads} threads {load_o * 1e3:7.2f} ms: {load_o / idle_o:4.2f}x idle "
              f"(a clone: {load_b / idle_b:4.2f}x; for information)\n"
              f"    loaded, {mine} thread(s) {set_o * 1e3:7.2f} ms: {set_o / idle_o:4.2f}x idle  "
              f"{verdict(set_o / idle_o <= 2.0)} (goal <= 2x idle with what the docs say to "
              f"set)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"comma-separated sections of {', '.join(SECTIONS)}")
    parser.add_argument("--threads", type=int, default=2, help="torch threads for 'load'")
    parser.add_argument("--backends", default="numpy,torch,jax",
                        help="the frameworks of 'calls' (comma-separated)")
    args = parser.parse_args()
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    for s in chosen:
        if s not in SECTIONS:
            parser.error(f"--only: unknown section {s!r}; choose from {', '.join(SECTIONS)}")
    print(f"ratios = median(ours) / median(reference), {args.reps} interleaved repetitions")
    for s in chosen:
        if s == "load":
            section_load(args.reps, args.threads)
        elif s == "calls":
            section_calls(args.reps, tuple(args.backends.split(",")))
        else:
            globals()[f"section_{s}"](args.reps)


if __name__ == "__main__":
    main()
