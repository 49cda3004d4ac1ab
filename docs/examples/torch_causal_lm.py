"""A tiny causal language model in PyTorch whose attention uses peregistry's rotary encoder.

Run from the repository root (needs ``peregistry[torch]``; about 5 s of CPU time on one thread,
2 s of it importing torch)::

    python docs/examples/torch_causal_lm.py                # --steps 60 --threads 1 by default

The model makes ``tables = enc.tables(position_ids)`` once per forward and every layer rotates
its queries and keys with ``tables.rotate_all(q, k)`` (as Hugging Face models pass
``position_embeddings`` down). The script checks three things and exits 1 if one fails:

1. **Equal to a hand-written RoPE.** The same weights with Llama's ``q·cos + rotate_half(q)·sin``
   (inverse frequencies ``θ^(-2i/d)``) give the same logits at position ids with gaps, in
   float64, to a tolerance derived from float64's epsilon.
2. **It learns.** Trained with Adam on "repeat the previous token" (a task of the relative
   position -1), its loss falls from about ``ln(vocab)`` and it predicts held-out sequences
   (> 90%; the same model with no rotation reaches about two thirds in as many steps).
3. **Decoding with a KV cache at an offset** (one new token at position ``n``, its tables made
   for that position alone) gives the logits of running the whole sequence again, and the same
   greedy tokens.

Threads are set on purpose: a model this small gains nothing from many threads, and torch's
default (one per core) only contends with whatever else the machine runs.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn
from torch.nn import functional as F

import peregistry as per

KV = tuple[torch.Tensor, torch.Tensor]     # one layer's keys and values
Cache = list[KV]


class Rotation(Protocol):
    """What a layer asks of the tables: ``enc.tables(...)`` (a ``RotaryTables``) or the
    hand-written reference."""

    def rotate_all(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]: ...


@dataclass(frozen=True)
class Config:
    vocab: int = 16
    dim: int = 32          # model width
    heads: int = 2         # head_dim = dim // heads = 16, all of it rotated
    layers: int = 2
    theta: float = 10000.0


class HandRope:
    """The reference: Llama's RoPE written out (``transformers``' ``apply_rotary_pos_emb``)."""

    def __init__(self, head_dim: int, theta: float, position_ids: torch.Tensor,
                 dtype: torch.dtype) -> None:
        inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = position_ids[..., None].to(torch.float64) * inv_freq   # (b, 1, s, hd/2)
        angles = torch.cat((angles, angles), dim=-1)                    # half layout
        self.cos, self.sin = angles.cos().to(dtype), angles.sin().to(dtype)

    def rotate_all(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        def rotate_half(x: torch.Tensor) -> torch.Tensor:
            # x: [x0 x1 | x2 x3] -> [-x2 -x3 | x0 x1]
            x1, x2 = x.chunk(2, dim=-1)
            return torch.cat((-x2, x1), dim=-1)
        return tuple(x * self.cos + rotate_half(x) * self.sin for x in xs)


class Attention(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.out = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, tables: Rotation, past: KV | None
                ) -> tuple[torch.Tensor, KV]:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = tables.rotate_all(q, k)           # (b, heads, s, head_dim), this layer's q and k
        if past is not None:                     # decoding: keys and values of earlier tokens
            k, v = torch.cat((past[0], k), dim=2), torch.cat((past[1], v), dim=2)
        # a prefill is causal; a decoded token (s == 1, after every cached one) sees them all
        y = F.scaled_dot_product_attention(q, k, v, is_causal=past is None)
        return self.out(y.transpose(1, 2).reshape(b, s, d)), (k, v)


class Block(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.attn = Attention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(),
                                 nn.Linear(4 * cfg.dim, cfg.dim))

    def forward(self, x: torch.Tensor, tables: Rotation, past: KV | None
                ) -> tuple[torch.Tensor, KV]:
        a, kv = self.attn(self.norm1(x), tables, past)
        x = x + a
        return x + self.mlp(self.norm2(x)), kv


class TinyLM(nn.Module):
    """Embedding, pre-norm blocks with rotary attention, a linear head. No absolute positions:
    everything the model knows of order comes from the rotation of q and k."""

    def __init__(self, cfg: Config, *, rope: str = "peregistry") -> None:
        super().__init__()
        self.cfg, self.rope = cfg, rope
        self.head_dim = cfg.dim // cfg.heads
        self.enc = per.get_encoder("rotary", dim=self.head_dim, theta=cfg.theta)
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, ids: torch.Tensor, position_ids: torch.Tensor | None = None,
                cache: Cache | None = None) -> tuple[torch.Tensor, Cache]:
        """``ids`` (batch, seq) -> logits (batch, seq, vocab) and the keys and values of every
        layer; ``position_ids`` (batch, seq) default to ``past + arange(seq)``."""
        b, s = ids.shape
        if position_ids is None:
            past = 0 if cache is None else cache[0][0].shape[2]
            position_ids = torch.arange(past, past + s, device=ids.device).expand(b, s)
        x = self.embed(ids)
        pos = position_ids[:, None, :]           # (b, 1, s): one row for every head
        tables: Rotation
        if self.rope == "peregistry":
            tables = self.enc.tables(pos)        # once per forward ...
        else:
            tables = HandRope(self.head_dim, self.cfg.theta, pos, x.dtype)
        new: Cache = []
        for i, block in enumerate(self.blocks):  # ... used by every layer
            x, kv = block(x, tables, None if cache is None else cache[i])
            new.append(kv)
        return self.head(self.norm(x)), new


def batch(gen: torch.Generator, size: int, seq: int, vocab: int
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens; the target of each token after the first is the token before it."""
    ids = torch.randint(0, vocab, (size, seq), generator=gen)
    return ids, ids[:, :-1]


def loss_of(model: TinyLM, ids: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    logits, _ = model(ids)
    return F.cross_entropy(logits[:, 1:].reshape(-1, model.cfg.vocab), target.reshape(-1))


def gapped_positions(b: int, s: int) -> torch.Tensor:
    """Position ids that are not ``arange``: row ``r`` starts at ``3r``, with a gap of 5 in the
    middle (as packed or padded sequences have)."""
    p = torch.arange(s)
    return p + 5 * (p >= s // 2) + 3 * torch.arange(b)[:, None]


def check_reference(model: TinyLM, ids: torch.Tensor) -> float:
    """Largest |logits difference| between peregistry's RoPE and the hand-written one, in
    float64, at gapped positions, relative to the largest logit."""
    ours = copy.deepcopy(model).double()
    hand = copy.deepcopy(ours)
    hand.rope = "hand"
    pos = gapped_positions(*ids.shape)
    with torch.no_grad():
        a, _ = ours(ids, pos)
        b, _ = hand(ids, pos)
    return float((a - b).abs().max() / a.abs().max())


def generate(model: TinyLM, prompt: torch.Tensor, new: int, *, cached: bool
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy tokens and the logits that chose them: with a KV cache (each new token alone, at
    its offset) or by running the whole sequence again for every token."""
    ids, chosen = prompt, []
    with torch.no_grad():
        logits, cache = model(ids)
        for _ in range(new):
            last = logits[:, -1]
            chosen.append(last)
            token = last.argmax(-1, keepdim=True)
            ids = torch.cat((ids, token), dim=1)
            logits, cache = model(token, cache=cache) if cached else model(ids)
    return ids[:, prompt.shape[1]:], torch.stack(chosen, dim=1)


def run(*, steps: int = 60, seq: int = 16, batch_size: int = 32, seed: int = 0,
        cfg: Config = Config()) -> dict[str, float]:
    """Train and check; returns the figures ``main`` prints (see the module docstring)."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = TinyLM(cfg)
    held_out = batch(gen, 256, seq, cfg.vocab)
    out = {"reference_rel_diff": check_reference(model, held_out[0][:4])}
    with torch.no_grad():
        out["loss_start"] = float(loss_of(model, *held_out))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        loss = loss_of(model, *batch(gen, batch_size, seq, cfg.vocab))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        out["loss_end"] = float(loss_of(model, *held_out))
        logits, _ = model(held_out[0])
    out["accuracy"] = float((logits[:, 1:].argmax(-1) == held_out[1]).float().mean())
    prompt = held_out[0][:8, :seq // 2]
    tok_c, log_c = generate(model, prompt, seq // 2, cached=True)
    tok_f, log_f = generate(model, prompt, seq // 2, cached=False)
    out["decode_rel_diff"] = float((log_c - log_f).abs().max() / log_f.abs().max())
    out["decode_same_tokens"] = float(torch.equal(tok_c, tok_f))
    return out


def failures(out: dict[str, float], vocab: int) -> list[str]:
    """What the figures of ``run`` say is wrong (empty: all good). The tolerances are in units of
    each dtype's epsilon: the float64 comparison of two ways of one computation, the float32
    comparison of a cached and a full forward (different matrix shapes, summed in another
    order)."""
    wrong = []
    if not out["reference_rel_diff"] <= 256 * torch.finfo(torch.float64).eps:
        wrong.append(f"logits differ from the hand-written RoPE by {out['reference_rel_diff']:.3g}")
    if not out["loss_end"] < 0.25 * math.log(vocab) or not out["accuracy"] > 0.9:
        wrong.append(f"did not learn: loss {out['loss_start']:.3f} -> {out['loss_end']:.3f}, "
                     f"accuracy {out['accuracy']:.3f}")
    if not out["decode_rel_diff"] <= 256 * torch.finfo(torch.float32).eps:
        wrong.append(f"cached decoding differs from a full forward by {out['decode_rel_diff']:.3g}")
    if not out["decode_same_tokens"]:
        wrong.append("cached decoding chose other tokens than a full forward")
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60, help="training steps (default 60)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = run(steps=args.steps)
    print(f"threads {torch.get_num_threads()}, {args.steps} steps")
    print(f"logits vs hand-written RoPE (float64): {out['reference_rel_diff']:.2e} relative")
    print(f"loss {out['loss_start']:.3f} -> {out['loss_end']:.3f} (ln vocab = "
          f"{math.log(Config.vocab):.3f}), held-out accuracy {out['accuracy']:.3f}")
    print(f"KV-cache decoding vs full forward: {out['decode_rel_diff']:.2e} relative, same tokens: "
          f"{bool(out['decode_same_tokens'])}")
    wrong = failures(out, Config.vocab)
    for w in wrong:
        print("FAILED:", w)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
