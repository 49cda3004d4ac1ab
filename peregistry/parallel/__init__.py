"""Positions for packed sequences and sequence (context) parallelism: framework-free helpers.

*Packed rows* (varlen / ``thd``): many sequences in one row, described by ``cu_seqlens``
(flash-attention, TransformerEngine). :func:`packed_positions` gives every token its position in
its own sequence; :func:`packed_mask` and :func:`packed_bias` keep relative encoders from pairing
tokens of different sequences.

*Context parallelism*: the sequence axis split over ``cp_size`` ranks, in the contiguous layout
(:func:`shard_bounds`, :func:`shard_offset`, :func:`shard_ids`) or the load-balanced zigzag layout
(:func:`zigzag_bounds`, :func:`zigzag_shard`), and for both layouts, plain or packed, as arrays
that may be traced (:func:`shard_tokens`, :func:`shard_positions`). Each rank's ``rotate`` of its
tokens at these positions equals the matching rows of the unsharded result exactly::

    idx = shard_tokens(total, cp_size, rank, layout="zigzag", cu_seqlens=cu)
    pos = shard_positions(total, cp_size, rank, layout="zigzag", cu_seqlens=cu)
    q_local = enc.rotate(xp.take(q, idx, axis=-2), pos)

Nothing here imports a framework: arrays come out in the namespace and on the device of the
array arguments (``cu_seqlens``, ``cp_rank``, ``like``), via array-api-compat. See
``docs/distributed.md`` for pictures of the layouts and the mapping to TransformerEngine's and
flash-attention's arguments.
"""

from __future__ import annotations

from ._contiguous import shard_bounds, shard_ids, shard_offset, zigzag_bounds, zigzag_shard
from ._layout import shard_positions, shard_tokens
from ._packed import (
    pack_ids,
    packed_bias,
    packed_mask,
    packed_positions,
    positions_from_sequence_ids,
    sequence_ids,
)

__all__ = ["pack_ids", "packed_bias", "packed_mask", "packed_positions",
           "positions_from_sequence_ids", "sequence_ids", "shard_bounds", "shard_ids",
           "shard_offset", "shard_positions", "shard_tokens", "zigzag_bounds", "zigzag_shard"]
