"""A tiny causal language model in Flax NNX whose attention uses peregistry's rotary encoder.

Run from the repository root (needs ``peregistry[flax]``)::

    python docs/examples/flax_causal_lm.py                 # --steps 60 by default

It takes about 15 s of CPU time, most of it XLA compiling five programs (9 s with
``XLA_FLAGS=--xla_backend_optimization_level=0``, as the tox env ``flax`` runs it); measured on
a 2-core machine under a load of 13-15.

The model makes ``tables = enc.tables(position_ids)`` from JAX arrays once per forward and
every layer rotates its queries and keys with ``tables.rotate_all(q, k)``; forward and training
step run under ``nnx.jit``, so the tables are made from traced positions inside the compiled
program. The script checks three things and exits 1 if one fails:

1. **Equal to a hand-written RoPE.** The same weights with Llama's ``q·cos + rotate_half(q)·sin``
   (``cos``, ``sin`` of ``p·θ^(-2i/d)`` in float64 NumPy, rounded to float32) give the same
   logits at position ids with gaps, in float32, to a tolerance derived from float32's epsilon.
2. **Only relative positions count.** Every position shifted by 7 gives the same logits.
3. **It learns.** Trained with Adam (optax) on "repeat the previous token", its loss falls from
   about ``ln(vocab)`` and it predicts held-out sequences (> 90%).

Threads are set on purpose, to one: a model this small gains nothing from more, and XLA's
default (as many as the machine has cores) only contends with whatever else the machine runs.
The script adds the flags JAX's issue tracker gives for it (jax-ml/jax#743; peregistry's
``bench`` uses them too) to ``XLA_FLAGS`` before it imports jax.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass
from functools import partial
from typing import Any

# one thread, asked of XLA before jax is imported (it reads its flags once)
THREADS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
if "xla_cpu_multi_thread_eigen" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), THREADS]).strip()

import jax  # noqa: E402  (after XLA_FLAGS)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

import peregistry as per  # noqa: E402


@dataclass(frozen=True)
class Config:
    vocab: int = 16
    dim: int = 32          # model width
    heads: int = 2         # head_dim = dim // heads = 16, all of it rotated
    layers: int = 2
    theta: float = 10000.0


def hand_tables(head_dim: int, theta: float, position_ids: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """The reference's full-width ``cos``, ``sin`` (half layout), in float64 on the host."""
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = position_ids[..., None].astype(np.float64) * inv_freq     # (b, 1, s, hd/2)
    angles = np.concatenate((angles, angles), axis=-1)                   # [a0 a1 | a0 a1]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


class HandRope:
    """The reference: Llama's RoPE written out (``transformers``' ``apply_rotary_pos_emb``)."""

    def __init__(self, cos: jax.Array, sin: jax.Array) -> None:
        self.cos, self.sin = cos, sin

    def rotate_all(self, *xs: jax.Array) -> tuple[jax.Array, ...]:
        def rotate_half(x: jax.Array) -> jax.Array:
            # x: [x0 x1 | x2 x3] -> [-x2 -x3 | x0 x1]
            x1, x2 = jnp.split(x, 2, axis=-1)
            return jnp.concatenate((-x2, x1), axis=-1)
        return tuple(x * self.cos + rotate_half(x) * self.sin for x in xs)


class Block(nnx.Module):
    def __init__(self, cfg: Config, rngs: nnx.Rngs) -> None:
        self.heads = cfg.heads
        self.norm1, self.norm2 = nnx.LayerNorm(cfg.dim, rngs=rngs), nnx.LayerNorm(cfg.dim, rngs=rngs)
        self.qkv = nnx.Linear(cfg.dim, 3 * cfg.dim, use_bias=False, rngs=rngs)
        self.out = nnx.Linear(cfg.dim, cfg.dim, use_bias=False, rngs=rngs)
        self.up = nnx.Linear(cfg.dim, 4 * cfg.dim, rngs=rngs)
        self.down = nnx.Linear(4 * cfg.dim, cfg.dim, rngs=rngs)

    def __call__(self, x: jax.Array, tables: Any) -> jax.Array:
        b, s, d = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, s, 3, self.heads, d // self.heads)
        q, k, v = jnp.transpose(qkv, (2, 0, 3, 1, 4))      # (b, heads, s, head_dim) each
        q, k = tables.rotate_all(q, k)                     # this layer's q and k
        scores = q @ jnp.swapaxes(k, -1, -2) / math.sqrt(d // self.heads)
        causal = jnp.tril(jnp.ones((s, s), dtype=bool))
        y = jax.nn.softmax(jnp.where(causal, scores, -jnp.inf), axis=-1) @ v
        x = x + self.out(jnp.swapaxes(y, 1, 2).reshape(b, s, d))
        return x + self.down(jax.nn.gelu(self.up(self.norm2(x))))


class TinyLM(nnx.Module):
    """Embedding, pre-norm blocks with rotary attention, a linear head. No absolute positions:
    everything the model knows of order comes from the rotation of q and k."""

    def __init__(self, cfg: Config, rngs: nnx.Rngs) -> None:
        self.cfg = cfg
        self.enc = per.get_encoder("rotary", dim=cfg.dim // cfg.heads, theta=cfg.theta)
        self.embed = nnx.Embed(cfg.vocab, cfg.dim, rngs=rngs)
        self.blocks = nnx.List([Block(cfg, rngs) for _ in range(cfg.layers)])
        self.norm = nnx.LayerNorm(cfg.dim, rngs=rngs)
        self.head = nnx.Linear(cfg.dim, cfg.vocab, use_bias=False, rngs=rngs)

    def __call__(self, ids: jax.Array, position_ids: jax.Array | None = None,
                 tables: Any = None) -> jax.Array:
        """``ids`` (batch, seq) -> logits (batch, seq, vocab); ``position_ids`` (batch, seq)
        default to ``arange(seq)``; ``tables`` replaces peregistry's (the reference)."""
        b, s = ids.shape
        if position_ids is None:
            position_ids = jnp.broadcast_to(jnp.arange(s), (b, s))
        if tables is None:
            tables = self.enc.tables(position_ids[:, None, :])   # once per forward, (b, 1, s)
        x = self.embed(ids)
        for block in self.blocks:                                 # used by every layer
            x = block(x, tables)
        return self.head(self.norm(x))


def gapped_positions(b: int, s: int) -> np.ndarray:
    """Position ids that are not ``arange``: row ``r`` starts at ``3r``, with a gap of 5 in the
    middle (as packed or padded sequences have)."""
    p = np.arange(s, dtype=np.int32)
    return p + 5 * (p >= s // 2) + 3 * np.arange(b, dtype=np.int32)[:, None]


@partial(nnx.jit, static_argnums=(0, 1))
def make_model(cfg: Config, seed: int) -> TinyLM:
    """The model's initial weights drawn in one compiled program (eagerly, JAX would compile
    each initializer's operations one by one)."""
    return TinyLM(cfg, nnx.Rngs(seed))


@nnx.jit
def make_optimizer(model: TinyLM) -> nnx.Optimizer:
    """Adam's state, made in one compiled program as well."""
    return nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)


@nnx.jit
def compare(model: TinyLM, ids: jax.Array, position_ids: jax.Array, cos: jax.Array,
            sin: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The logits with peregistry's tables, with the hand-written RoPE's ``cos``, ``sin``, and
    with peregistry's at every position + 7 (one program: one compilation)."""
    return (model(ids, position_ids), model(ids, tables=HandRope(cos, sin)),
            model(ids, position_ids + 7))


def loss_of(model: TinyLM, ids: jax.Array) -> jax.Array:
    """Cross-entropy of predicting, at each position after the first, the token before it."""
    logits = model(ids)[:, 1:]
    return optax.softmax_cross_entropy_with_integer_labels(logits, ids[:, :-1]).mean()


@nnx.jit
def train_step(model: TinyLM, opt: nnx.Optimizer, ids: jax.Array) -> jax.Array:
    loss, grads = nnx.value_and_grad(loss_of)(model, ids)
    opt.update(model, grads)
    return loss


@nnx.jit
def evaluate(model: TinyLM, ids: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The loss and the share of tokens after the first whose predecessor is predicted."""
    logits = model(ids)[:, 1:]
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, ids[:, :-1]).mean()
    return loss, (logits.argmax(-1) == ids[:, :-1]).mean()


def run(*, steps: int = 60, seq: int = 16, batch_size: int = 32, seed: int = 0,
        cfg: Config = Config()) -> dict[str, float]:
    """Check and train; returns the figures ``main`` prints (see the module docstring)."""
    model = make_model(cfg, seed)
    rng = np.random.default_rng(seed)
    def tokens(n: int) -> np.ndarray:
        return rng.integers(0, cfg.vocab, (n, seq), dtype=np.int32)

    held_out = tokens(256)
    ids = held_out[:4]
    pos = gapped_positions(*ids.shape)
    cos, sin = hand_tables(cfg.dim // cfg.heads, cfg.theta, pos[:, None, :])
    ours, ref, shifted = (np.asarray(a) for a in compare(model, ids, pos, cos, sin))
    scale = float(np.abs(ref).max())
    out = {"reference_rel_diff": float(np.abs(ours - ref).max()) / scale,
           "shift_rel_diff": float(np.abs(shifted - ours).max()) / scale,
           "loss_start": float(evaluate(model, held_out)[0])}
    opt = make_optimizer(model)
    for _ in range(steps):
        train_step(model, opt, tokens(batch_size))
    loss, accuracy = evaluate(model, held_out)
    return {**out, "loss_end": float(loss), "accuracy": float(accuracy)}


def failures(out: dict[str, float], vocab: int) -> list[str]:
    """What the figures of ``run`` say is wrong (empty: all good). Tolerances in units of
    float32's epsilon: two roundings of the same tables and the sums of two layers."""
    tol = 64 * float(jnp.finfo(jnp.float32).eps)
    wrong = []
    if not out["reference_rel_diff"] <= tol:
        wrong.append(f"logits differ from the hand-written RoPE by {out['reference_rel_diff']:.3g}")
    if not out["shift_rel_diff"] <= tol:
        wrong.append(f"shifting every position changed the logits by {out['shift_rel_diff']:.3g}")
    if not out["loss_end"] < 0.25 * math.log(vocab) or not out["accuracy"] > 0.9:
        wrong.append(f"did not learn: loss {out['loss_start']:.3f} -> {out['loss_end']:.3f}, "
                     f"accuracy {out['accuracy']:.3f}")
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60, help="training steps (default 60)")
    args = parser.parse_args(argv)
    out = run(steps=args.steps)
    print(f"{jax.devices()[0].platform}, {args.steps} steps under nnx.jit")
    print(f"logits vs hand-written RoPE (float32): {out['reference_rel_diff']:.2e} relative")
    print(f"positions shifted by 7: {out['shift_rel_diff']:.2e} relative")
    print(f"loss {out['loss_start']:.3f} -> {out['loss_end']:.3f} (ln vocab = "
          f"{math.log(Config.vocab):.3f}), held-out accuracy {out['accuracy']:.3f}")
    wrong = failures(out, Config.vocab)
    for w in wrong:
        print("FAILED:", w)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
