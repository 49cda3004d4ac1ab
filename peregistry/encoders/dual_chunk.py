"""Dual chunk attention (DCA) positions for RoPE (An et al. 2024, "Training-Free Long-Context
Scaling of Large Language Models", arXiv:2402.17463, §3; used by Qwen2.5-1M), as vLLM's
``DualChunkRotaryEmbedding`` (``vllm/model_executor/layers/rotary_embedding/dual_chunk_rope.py``)
computes them: tokens are cut into chunks of ``chunk_len = chunk_size - local_size``, keys and
the queries of a key's own chunk turn by RoPE at ``p mod chunk_len``, and the queries that attend
to the previous chunk or to older ones turn at shifted, clamped positions, so that no
query-key distance exceeds ``chunk_size``; this module is the ``dual_chunk`` entry point of the
``peregistry`` distribution.
"""

from __future__ import annotations

import math
import operator
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from .._markers import hookimpl
from .._options import Option
from ..kinds._services import use_services
from ..rope import RotaryEncoder
from ..rope._delegation import wide_int
from .rotary import HEAD_DIM, PAIR_LAYOUT, ROTARY_DIM, THETA, Rotary, check_rotary_dim

if TYPE_CHECKING:
    from ..backends._base import Ctx

__all__ = ["DualChunk", "DualChunkRotary", "chunk_offsets", "dual_chunk_positions"]

#: The largest ``chunk_size``: every DCA position (at most ``chunk_len + chunk_size - 1``) then
#: fits in int32, the widest integer of JAX without x64.
MAX_CHUNK = 1 << 30


class DualChunk(NamedTuple):
    """One entry per role of DCA: the five query rotations vLLM's ``forward_native`` makes, in
    its order, and the keys'. :meth:`DualChunkRotary.dual_chunk_positions` fills it with
    positions, :meth:`~DualChunkRotary.dual_chunk_cos_sin` with ``(cos, sin)`` pairs and
    :meth:`~DualChunkRotary.rotate_dual_chunk` with rotated queries and keys."""

    q_intra: Any  # queries against the keys of their own chunk (causal)
    q_succ: Any  # queries against the keys of the chunk before theirs
    q_inter: Any  # queries against the keys of every older chunk
    q_succ_critical: Any  # vLLM's sparse prefill: scores that pick q_succ's critical keys
    q_inter_critical: Any  # vLLM's sparse prefill: scores that pick q_inter's critical keys
    k: Any  # keys (all of them, in every role)


def chunk_offsets(positions: Any, chunk_len: int, *, xp: Any) -> Any:
    """``p mod chunk_len`` (``0 <= r < chunk_len``, also for ``p < 0``) of integer positions,
    in the widest integer dtype: the keys' DCA positions."""
    wide = wide_int(xp)
    p = positions if positions.dtype == wide else xp.astype(positions, wide)
    return p % chunk_len  # floor modulo on every backend (the standard's remainder)


def dual_chunk_positions(positions: Any, *, chunk_size: int, local_size: int,
                         xp: Any) -> DualChunk:
    """The DCA positions of integer token positions ``p``, in the widest integer dtype (int64;
    int32 under JAX without x64), each of ``positions.shape``::

        L = chunk_size - local_size,   r = p mod L   (0 <= r < L, also for p < 0)
        k = q_intra      = r
        q_succ           = min(r + L, chunk_size)
        q_inter          = min(2L - 1, chunk_size)        (for every token)
        q_succ_critical  = r + L
        q_inter_critical = r + chunk_size

    (vLLM's ``_compute_cos_sin_cache`` and ``forward_native``: ``q_inter`` is row ``L - 1`` of
    its ``q_succ`` table.) The paper puts its inter-chunk queries at ``c - 1``, ``c`` the
    pretraining length; the code (ChunkLlama, vLLM), followed here, clamps at ``chunk_size``."""
    n = chunk_size - local_size
    r = chunk_offsets(positions, n, xp=xp)
    succ_critical = r + n
    return DualChunk(
        q_intra=r,
        q_succ=xp.clip(succ_critical, max=chunk_size),
        q_inter=xp.full_like(r, min(2 * n - 1, chunk_size)),
        q_succ_critical=succ_critical,
        q_inter_critical=r + chunk_size,
        k=r,
    )


class DualChunkRotary(RotaryEncoder):
    """Dual chunk attention RoPE for long contexts (An et al. 2024; Qwen2.5-1M, vLLM).

    ``rotate`` turns keys (and the queries of their own chunk) at ``p mod (chunk_size - local_size)``;
    ``rotate_dual_chunk(q, k)`` gives the queries of every chunk role too.

    With ``L = chunk_size - local_size`` and ``r = p mod L``, pair ``i`` of a key at ``p`` turns
    by ``r·ω_i``, ``ω_i = θ^(-2i/d)`` (RoFormer's frequencies, no scaling), and a query at ``p``
    by ``P·ω_i`` with ``P`` its role's position (:func:`dual_chunk_positions`): ``r`` against
    keys of its own chunk, ``min(r + L, chunk_size)`` against the previous chunk, ``min(2L - 1,
    chunk_size)`` against older chunks. The score of a query at ``i`` and a key at ``j`` in one
    chunk is therefore RoPE's, and so is every score at a distance ``i - j <= min(local_size,
    chunk_len)`` (the query at most ``local_size`` into the chunk after the key's); no DCA
    distance exceeds ``chunk_size``.

    ``rotate``, ``cos_sin`` and ``tables`` are the keys' rotation (the intra-chunk queries'
    too); :meth:`rotate_dual_chunk`, :meth:`dual_chunk_cos_sin` and
    :meth:`dual_chunk_positions` give every role as a :class:`DualChunk`;
    :meth:`attention_scaling` is vLLM's length factor on the logits.
    """

    name = "dual-chunk"
    properties = frozenset({"rope-layouts"})
    exempt_checks = MappingProxyType({
        "check_rotary_relative":
            "positions count from the start of their chunk (p mod (chunk_size - local_size)): "
            "<R(m)q, R(n)k> depends on m - n only within one chunk (tests/test_dual_chunk.py "
            "checks that, and adjacent chunks' pairs with the query at most local_size into "
            "its chunk)",
    })
    continuous = False  # chunks are counted in tokens: positions are token indices
    __slots__ = ("_rope",)
    _compile_hook_eagerly = True  # the hook reads no values: see peregistry/_jax_eager.py
    _rope: Rotary

    dim = HEAD_DIM
    chunk_size = Option(int, allowed=f"an integer in 1..{MAX_CHUNK}",
                        check=lambda c: 0 < c <= MAX_CHUNK, example=64,
                        doc="DCA chunk_size (Qwen2.5-1M: 262144): no query-key distance "
                            "exceeds it")
    local_size = Option(int, allowed="an integer >= 0 (and < chunk_size)",
                        check=lambda w: w >= 0, example=16,
                        doc="DCA local_size (Qwen2.5-1M: 8192): chunks are chunk_size - "
                            "local_size tokens")
    theta = THETA
    rotary_dim = ROTARY_DIM
    layout = PAIR_LAYOUT
    original_max_position_embeddings = Option(
        int, None, nullable=True, allowed="None or a positive integer", check=lambda n: n > 0,
        doc="DCA's length scaling: attention_scaling(s) = max(1, 0.1·ln(s / this) + 1); "
            "None: 1")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        # The queries of the other roles turn by plain RoPE at their own positions: rotary's
        # machinery (validation, tables, framework fast paths), with the same frequencies.
        with use_services(self._services):
            rope = Rotary(dim=self._values["dim"], theta=self._values["theta"],
                          rotary_dim=self._values["rotary_dim"], layout=self._values["layout"])
        object.__setattr__(self, "_rope", rope)

    def _validate(self) -> None:
        check_rotary_dim(self)
        c, w = self._values["chunk_size"], self._values["local_size"]
        if w >= c:
            raise self._invalid("local_size", w, f"an integer in 0..{c - 1} (below chunk_size="
                                f"{c}: chunks are chunk_size - local_size tokens long)")

    @property
    def chunk_len(self) -> int:
        """Tokens per chunk, ``chunk_size - local_size`` (vLLM's ``chunk_len``, the paper's
        ``s``): the token at ``p`` is in chunk ``p // chunk_len``."""
        return int(self._values["chunk_size"]) - int(self._values["local_size"])

    # -- the hook: the keys' angles ------------------------------------------------------------
    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> tuple[Any, Any]:
        """RoPE's ``cos``/``sin`` at ``p mod chunk_len``, in ``ctx.wide``."""
        r = chunk_offsets(positions, self.chunk_len, xp=ctx.xp)
        return self._rope._half_cos_sin(r, ctx=ctx, seq_len=None)

    def _roles(self, positions: Any, xp: Any) -> DualChunk:
        return dual_chunk_positions(positions, chunk_size=int(self._values["chunk_size"]),
                                    local_size=int(self._values["local_size"]), xp=xp)

    # -- every role ----------------------------------------------------------------------------
    def dual_chunk_positions(self, positions: Any) -> DualChunk:
        """The position of each role for integer token ``positions`` (any shape), as a
        :class:`DualChunk` of integer arrays of the caller's namespace, each of
        ``positions.shape`` (see :func:`dual_chunk_positions`)."""
        ctx, (pos,) = self._context(positions, names=("positions",))
        return self._roles(self._positions(pos, ctx), ctx.xp)

    def dual_chunk_cos_sin(self, positions: Any, *, dtype: Any = None) -> DualChunk:
        """``(cos, sin)`` of each role, each ``(*positions.shape, rotary_dim)`` in the encoder's
        layout, of ``dtype`` (default: the namespace's default float): the tables
        ``rotate_dual_chunk`` turns by. ``q_intra`` and ``k`` are :meth:`cos_sin`'s."""
        roles = self.dual_chunk_positions(positions)
        rope = self._rope
        keys = rope.cos_sin(roles.k, dtype=dtype)
        succ, inter, succ_critical, inter_critical = (rope.cos_sin(p, dtype=dtype)
                                                      for p in roles[1:5])
        return DualChunk(keys, succ, inter, succ_critical, inter_critical, keys)

    def rotate_dual_chunk(self, q: Any, k: Any, positions: Any = None, *,
                          offset: Any = 0) -> DualChunk:
        """Queries ``q`` rotated for each query role and keys ``k`` rotated, as a
        :class:`DualChunk` of arrays of ``q``'s (``k``'s) shape, dtype and namespace.

        :param q: ``(..., seq, dim)`` queries; :param k: ``(..., seq, dim)`` keys (other head
            counts are fine: ``positions`` broadcasts against each).
        :param positions: integer token positions, broadcasting against ``x.shape[:-1]``;
            ``None`` means ``offset + arange(seq)`` (then ``q`` and ``k`` have one ``seq``).
        :param offset: as for :meth:`~peregistry.RotaryEncoder.rotate`.
        """
        call = self._rotate_call(q, positions, offset, None, None)
        pos = call.positions
        if pos is None:
            seq = q.shape[-2]
            if k.shape[-2] != seq:
                raise ValueError(f"{self.name}: q.shape={tuple(q.shape)} and k.shape="
                                 f"{tuple(k.shape)} differ in seq (axis -2); with positions=None "
                                 f"both are at offset + arange(seq): pass positions")
            pos = self._default_positions(seq, call.offset, ctx=call.ctx)
        roles = self._roles(pos, call.ctx.xp)
        rope = self._rope
        intra, keys = self.tables(pos).rotate_all(q, k)  # one table: q_intra's is k's
        succ, inter, succ_critical, inter_critical = (rope.rotate(q, p) for p in roles[1:5])
        return DualChunk(intra, succ, inter, succ_critical, inter_critical, keys)

    def attention_scaling(self, seq_len: int) -> float:
        """vLLM's length scaling of DCA, ``max(1, 0.1·ln(seq_len / original_max_position_
        embeddings) + 1)`` (1.0 when that option is None), for a sequence of ``seq_len`` tokens
        (vLLM: ``max(prompt length, length so far)``). vLLM multiplies the keys (as they are
        cached) and the softmax scale (decoding: the queries) by it, so each logit carries its
        square; never part of ``rotate``."""
        try:
            n = operator.index(seq_len) if not isinstance(seq_len, bool) else None
        except TypeError:
            n = None
        if n is None or n < 1:
            raise ValueError(f"{self.name}: seq_len must be a positive integer, got {seq_len!r}")
        orig = self._values["original_max_position_embeddings"]
        if orig is None:
            return 1.0
        return max(1.0, 0.1 * math.log(n / orig) + 1.0)


@hookimpl
def peregistry_encoders() -> list[type[RotaryEncoder]]:
    """This family's encoders, ``dual-chunk`` (hook ``peregistry_encoders``)."""
    return [DualChunkRotary]
