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

from ._settings import HEADS

#: The model's default sizes (a study's :class:`Settings` choose ``width`` and ``layers``).
WIDTH, LAYERS = 64, 2
HEAD_DIM = WIDTH // HEADS


def _torch_nn() -> Any:
    """``torch.nn``, imported when this module is (the study needs torch; peregistry does not)."""
    import torch.nn

    return torch.nn


class Position(_torch_nn().Module):  # type: ignore[misc]
    """One encoder and its parameters, applied by kind (see the module docstring)."""

    def __init__(self, encoder: Any, seed: int, width: int = WIDTH) -> None:
        """``encoder``: a peregistry encoder, or None for NoPE; ``width``: the model's. A learned encoder's params are
        initialised with ``seed`` (``encoder.init``) and registered as module parameters; a
        relative embedding gets a bias ``v`` ``(heads, head_dim)`` added to the queries of its
        term (Transformer-XL's ``v``, Dai et al. 2019, section 3.3, term (d)) and, for a fixed
        sinusoid, its projection ``W_R``."""
        import torch

        super().__init__()
        self.encoder = encoder
        self.width, self.head_dim = width, width // HEADS
        self.kind = "none" if encoder is None else encoder.kind
        self.params = torch.nn.ParameterDict()
        if encoder is not None and encoder.learned:
            for key, value in encoder.init(torch, seed=seed, dtype=torch.float32).items():
                self.params[key] = torch.nn.Parameter(value)
        # Transformer-XL's projection of its fixed sinusoid, and its bias v
        self.project = (torch.nn.Linear(self.head_dim, width, bias=False)
                        if self.kind == "relative-embedding" and not self.params else None)
        self.v = (torch.nn.Parameter(torch.zeros(HEADS, self.head_dim))
                  if self.kind == "relative-embedding" else None)

    def _p(self) -> dict[str, Any] | None:
        """The learned params as the ``params=`` of the encoder's methods (None if it has none)."""
        return dict(self.params) or None

    def embeddings(self, h: Any, pos: Any) -> Any:
        """Token embeddings ``h`` ``(batch, T, width)`` plus an absolute encoder's
        ``encode(pos)`` (Vaswani et al. 2017, section 3.5); unchanged for the other kinds."""
        if self.kind == "absolute":
            return h + self.encoder.encode(pos, params=self._p())
        return h

    def rotate(self, q: Any, k: Any, pos: Any) -> tuple[Any, Any]:
        """Queries and keys ``(batch, heads, T, head_dim)`` rotated at ``pos`` by a rotary
        encoder (RoFormer, Su et al. 2021, eq. 34; xPos scales them oppositely, Sun et al.
        2022); unchanged for the other kinds."""
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
            r = self.project(e).reshape(*e.shape[:2], HEADS, self.head_dim)
            return torch.einsum("bhqd,qkhd->bhqk", qv, r)
        return 0.0


class Block(_torch_nn().Module):  # type: ignore[misc]
    """One pre-norm decoder block: causal multi-head attention whose logits take the
    position's terms, then a GELU MLP, each with a residual."""

    def __init__(self, width: int = WIDTH) -> None:
        """LayerNorms, the fused ``qkv`` projection, the output projection and the MLP
        (``width -> 4·width -> width``)."""
        import torch

        super().__init__()
        self.width, self.head_dim = width, width // HEADS
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                       torch.nn.Linear(4 * width, width))

    def forward(self, h: Any, pos: Any, position: Position) -> Any:
        """``h`` ``(batch, T, width)`` through the block: logits ``(q·k + content) / sqrt(d) +
        bias``, causally masked, where ``position`` rotates ``q``/``k`` and supplies the
        relative content term and the bias."""
        import torch

        b, t, _ = h.shape
        q, k, v = (self.qkv(self.norm1(h)).reshape(b, t, 3, HEADS, self.head_dim)
                   .permute(2, 0, 3, 1, 4))
        q, k = position.rotate(q, k, pos)
        scores = (q @ k.transpose(-1, -2) + position.content(q, pos)) / math.sqrt(self.head_dim)
        causal = torch.ones(t, t, dtype=torch.bool, device=h.device).tril()
        scores = (scores + position.bias(pos)).masked_fill(~causal, -math.inf)
        att = torch.softmax(scores, dim=-1) @ v
        h = h + self.out(att.transpose(1, 2).reshape(b, t, self.width))
        return h + self.mlp(self.norm2(h))


class TinyDecoder(_torch_nn().Module):  # type: ignore[misc]
    """Embedding, ``layers`` pre-norm blocks of ``HEADS`` causal heads, an output head."""

    def __init__(self, vocab: int, encoder: Any, seed: int, *, width: int = WIDTH,
                 layers: int = LAYERS) -> None:
        """A model of ``width`` and ``layers`` over ``vocab`` tokens whose positions come from
        ``encoder`` (None: NoPE), its learned params initialised with ``seed``."""
        import torch

        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.position = Position(encoder, seed, width)
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, ids: Any, pos: Any) -> Any:
        """Logits ``(batch, T, vocab)`` of token ``ids`` ``(batch, T)`` at positions ``pos``
        ``(T,)``."""
        h = self.position.embeddings(self.embed(ids), pos)
        for block in self.blocks:
            h = block(h, pos, self.position)
        return self.head(self.norm(h))
