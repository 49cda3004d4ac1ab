"""A tiny decoder-only transformer (PyTorch) whose positions come from one peregistry encoder,
entering the model the one way its kind's public methods define:

* absolute (``encode``): added to the token embeddings;
* rotary (``rotate``, with the params of a learned one; xPos's ``rotate_queries``/
  ``rotate_keys``): on the queries and keys;
* bias (``bias``): added to the attention logits, ``(heads, T, T)``;
* relative embedding (``embed``, ``(T, T, d)``): Shaw et al.'s ``q_i · a_ij`` for a learned
  table, Transformer-XL's ``(q_i + v) · W_R r_ij`` for a fixed sinusoid;
* none: NoPE (Kazemnejad et al. 2023), the causal mask alone.

A learned encoder's parameters (``enc.init(torch, seed=...)``) are the module's parameters and
train with the rest. The encoder may be swapped after training (``model.position.encoder``),
which is how inference-time scalings are evaluated on a RoPE-trained model.
"""

from __future__ import annotations

import math
from typing import Any

WIDTH, HEADS, LAYERS = 64, 4, 2
HEAD_DIM = WIDTH // HEADS


def _torch_nn() -> Any:
    import torch.nn

    return torch.nn


class Position(_torch_nn().Module):  # type: ignore[misc]
    """One encoder and its parameters, applied by kind (see the module docstring)."""

    def __init__(self, encoder: Any, seed: int) -> None:
        import torch

        super().__init__()
        self.encoder = encoder
        self.kind = "none" if encoder is None else encoder.kind
        self.params = torch.nn.ParameterDict()
        if encoder is not None and encoder.learned:
            for key, value in encoder.init(torch, seed=seed, dtype=torch.float32).items():
                self.params[key] = torch.nn.Parameter(value)
        # Transformer-XL's projection of its fixed sinusoid, and its bias v
        self.project = (torch.nn.Linear(HEAD_DIM, WIDTH, bias=False)
                        if self.kind == "relative-embedding" and not self.params else None)
        self.v = (torch.nn.Parameter(torch.zeros(HEADS, HEAD_DIM))
                  if self.kind == "relative-embedding" else None)

    def _p(self) -> dict[str, Any] | None:
        return dict(self.params) or None

    def embeddings(self, h: Any, pos: Any) -> Any:
        if self.kind == "absolute":
            return h + self.encoder.encode(pos, params=self._p())
        return h

    def rotate(self, q: Any, k: Any, pos: Any) -> tuple[Any, Any]:
        if self.kind != "rotary":
            return q, k
        enc = self.encoder
        if hasattr(enc, "rotate_queries"):  # xPos scales queries and keys oppositely
            return enc.rotate_queries(q, pos), enc.rotate_keys(k, pos)
        params = self._p()  # a learned rotary encoder's (FoPE's coefficients), else None
        return enc.rotate(q, pos, params=params), enc.rotate(k, pos, params=params)

    def bias(self, pos: Any) -> Any:
        """A bias encoder's ``(heads, T, T)``, added to the scaled logits (or 0)."""
        if self.kind == "bias":
            return self.encoder.bias(pos, pos, params=self._p())
        return 0.0

    def content(self, q: Any, pos: Any) -> Any:
        """A relative embedding's ``q · a`` term of the logits, scaled with ``q · k`` (or 0)."""
        import torch

        if self.kind == "relative-embedding":
            e = self.encoder.embed(pos, pos, params=self._p())  # (T, T, d)
            qv = q + self.v[:, None]  # type: ignore[index]  # set for this kind
            if self.project is None:  # Shaw: one table for every head
                return torch.einsum("bhqd,qkd->bhqk", qv, e)
            r = self.project(e).reshape(*e.shape[:2], HEADS, HEAD_DIM)
            return torch.einsum("bhqd,qkhd->bhqk", qv, r)
        return 0.0


class Block(_torch_nn().Module):  # type: ignore[misc]
    def __init__(self) -> None:
        import torch

        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(WIDTH), torch.nn.LayerNorm(WIDTH)
        self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH)
        self.out = torch.nn.Linear(WIDTH, WIDTH)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(),
                                       torch.nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, h: Any, pos: Any, position: Position) -> Any:
        import torch

        b, t, _ = h.shape
        q, k, v = self.qkv(self.norm1(h)).reshape(b, t, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        q, k = position.rotate(q, k, pos)
        scores = (q @ k.transpose(-1, -2) + position.content(q, pos)) / math.sqrt(HEAD_DIM)
        causal = torch.ones(t, t, dtype=torch.bool, device=h.device).tril()
        scores = (scores + position.bias(pos)).masked_fill(~causal, -math.inf)
        att = torch.softmax(scores, dim=-1) @ v
        h = h + self.out(att.transpose(1, 2).reshape(b, t, WIDTH))
        return h + self.mlp(self.norm2(h))


class TinyDecoder(_torch_nn().Module):  # type: ignore[misc]
    """Embedding, ``LAYERS`` pre-norm blocks of ``HEADS`` causal heads, an output head."""

    def __init__(self, vocab: int, encoder: Any, seed: int) -> None:
        import torch

        super().__init__()
        self.embed = torch.nn.Embedding(vocab, WIDTH)
        self.position = Position(encoder, seed)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.head = torch.nn.Linear(WIDTH, vocab)

    def forward(self, ids: Any, pos: Any) -> Any:
        h = self.position.embeddings(self.embed(ids), pos)
        for block in self.blocks:
            h = block(h, pos, self.position)
        return self.head(self.norm(h))
