"""FoPE, Fourier Position Embedding (Hua et al. 2024, "Fourier Position Embedding: Enhancing
Attention's Periodic Extension for Length Generalization", arXiv:2412.17739, ICML 2025): RoPE
whose ``cos``/``sin`` tables are learned Fourier series over the RoFormer frequencies, the
frequencies too slow to complete a period within the training length clipped to zero, as vLLM's
``FourierRotaryEmbedding`` (``model_executor/layers/rotary_embedding/fope.py``) computes them
for Intern-S1-Pro and xtuner's ``FourierEmbedding`` trains them; the ``fope`` entry point of
the ``peregistry`` distribution.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import peregistry.rope._delegation as _delegation

from .._markers import hookimpl
from .._options import MAX_DIM, Option
from ..kinds.context import resolve_dtype
from ..rope import Frequencies, Layout, RotaryEncoder, RotaryTables, cos_sin, inv_freq
from .learned_params import LearnedParams, init_params
from .rotary import HEAD_DIM, PAIR_LAYOUT, THETA

if TYPE_CHECKING:
    from ..backends._base import Ctx
    from ..rope._call import Call

__all__ = ["FoPE", "fope_frequencies"]


def fope_frequencies(dim: int, theta: float, max_position_embeddings: int,
                     num_inv_freq: int | None = None) -> list[float]:
    """The frequencies FoPE keeps: ``ω_j = θ^(-2j/dim)`` with ``ω_j > 2π/L`` (a period shorter
    than the training length ``L = max_position_embeddings``), or the first ``num_inv_freq``
    when that is given (vLLM's ``_compute_inv_freq``; host float64, vLLM compares in float32)."""
    omega = [float(w) for w in inv_freq(dim, theta)]
    if num_inv_freq is not None:
        return omega[:num_inv_freq]
    floor = 2.0 * math.pi / max_position_embeddings
    return [w for w in omega if w > floor]  # a prefix: ω_j is monotonic in j


def _repeat_heads(t: Any, groups: int, *, xp: Any) -> Any:
    """``t`` of shape ``(..., kv, m, n)`` as ``(..., kv·groups, m, n)``, each head repeated
    ``groups`` times in a row: query head ``i`` uses KV head ``i // groups`` (GQA)."""
    *lead, kv, m, n = (int(s) for s in t.shape)
    spread = xp.broadcast_to(xp.expand_dims(t, axis=-3), (*lead, kv, groups, m, n))
    return xp.reshape(spread, (*lead, kv * groups, m, n))


def _reshaped(cos: Any, sin: Any, batch: tuple[int, ...], *, xp: Any) -> tuple[Any, Any]:
    """Half-width tables ``(..., width)`` viewed as ``(*batch, width)``."""
    width = int(cos.shape[-1])
    return xp.reshape(cos, (*batch, width)), xp.reshape(sin, (*batch, width))


class FoPE(LearnedParams, RotaryEncoder):
    """Fourier Position Embedding: RoPE tables as learned Fourier series (Hua et al. 2024).

    With ``d = dim`` and ``ω_j = θ^(-2j/d)``, the ``D`` retained frequencies are those with
    ``ω_j > 2π/L`` (``L = max_position_embeddings``), or the first ``num_inv_freq``
    (:func:`fope_frequencies`). Pair ``k`` of a token at position ``p`` turns by the tables (vLLM
    ``_compute_cos_sin_cache``, ``einsum("tD,Dd->td")``)::

        C_k(p) = Σ_{j<D} cos(p·ω_j)·A[j, k],   S_k(p) = Σ_{j<D} sin(p·ω_j)·B[j, k],   k < D
        C_k(p) = 1,                           S_k(p) = sin_padding,                 D <= k < d/2
        a_k' = a_k·C_k - b_k·S_k,              b_k' = b_k·C_k + a_k·S_k

    the clipped pairs (``k >= D``) at frequency zero: with ``sin_padding=0`` (vLLM since PR
    55243, 2026-09-03, ``fope.py`` at 151a2c74) they pass through; with 1 (the paper's code,
    xtuner, SGLang ``rope_variant.py`` at 0b1fd02d) they turn by a fixed 45°, scaled by √2.
    ``A`` and ``B`` are the params ``cos_coef`` and ``sin_coef``, ``(D, D)`` each, or
    ``(num_kv_heads, D, D)`` with
    ``sep_head=True``: one Fourier series per KV head, query head ``i`` of ``H`` using KV head
    ``i // (H / num_kv_heads)`` (vLLM's view of the queries). Fresh params are ``I + N(0,
    σ²)``, ``σ = init_factor/√D`` (xtuner's ``xavier_normal_(gain=fope_init_factor)`` of a
    ``D×D`` matrix, plus the identity). Without params the coefficients are the identity: RoPE
    on the retained frequencies, the others clipped (the paper's ablation without the Fourier
    series), and every rotary law of the conformance suite holds (the norm law with
    ``sin_padding=0`` only); learned coefficients mix
    frequencies, so norms and the ``m - n`` law no longer hold exactly (by design).
    """

    name = "fope"
    __slots__ = ()
    _compile_hook_eagerly = True  # the hook reads no values: one program per shape on eager JAX

    dim = HEAD_DIM
    max_position_embeddings = Option(
        int, allowed="an integer >= 7 (2π/L must be below ω_0 = 1)", check=lambda n: n >= 7,
        example=2048, doc="training length L: frequencies of period >= L are clipped to zero")
    theta = THETA
    num_inv_freq = Option(int, None, nullable=True, allowed="None or an integer in 1..dim/2",
                          check=lambda n: n > 0,
                          doc="keep the first n frequencies instead of clipping by "
                              "max_position_embeddings (vLLM/xtuner num_inv_freq)")
    sep_head = Option(bool, False, doc="one Fourier series per KV head (vLLM fope_sep_head)")
    num_kv_heads = Option(int, None, nullable=True,
                          allowed=f"None, or with sep_head=True an integer in 1..{MAX_DIM}",
                          check=lambda n: 0 < n <= MAX_DIM,
                          doc="KV heads with their own coefficients when sep_head=True (vLLM "
                              "num_key_value_heads)")
    init_factor = Option(float, 0.1, allowed="a finite number >= 0", check=lambda f: f >= 0,
                         doc="gain of the noise added to the identity by init (vLLM/xtuner "
                             "fope_init_factor; Intern-S1-Pro 0.5)")
    sin_padding = Option(
        int, 0, allowed="0 or 1", check=lambda v: v in (0, 1),
        doc="sin of the clipped pairs: 0 (vLLM since PR 55243: they pass through) or 1 (the "
            "paper's code, xtuner, SGLang: cos = sin = 1, a fixed 45° turn scaled by √2)")
    layout = PAIR_LAYOUT

    def _validate(self) -> None:
        v = self._values
        half = int(v["dim"]) // 2
        n = v["num_inv_freq"]
        if n is not None and n > half:
            raise self._invalid("num_inv_freq", n, f"None or an integer in 1..dim/2 ({half})")
        if v["sep_head"] and v["num_kv_heads"] is None:
            raise self._invalid("num_kv_heads", None, "an integer >= 1 with sep_head=True (one "
                                                      "Fourier series per KV head)")
        if not v["sep_head"] and v["num_kv_heads"] is not None:
            raise self._invalid("num_kv_heads", v["num_kv_heads"],
                                "None with sep_head=False (one Fourier series for every head); "
                                "pass sep_head=True for one per KV head")
        kept = fope_frequencies(int(v["dim"]), float(v["theta"]),
                                int(v["max_position_embeddings"]), n)
        self._cache["kept"] = len(kept)
        # The clipped pairs at frequency zero: cos 1 and sin 0, computed like the others.
        self._cache["freqs"] = Frequencies.from_omega([*kept, *[0.0] * (half - len(kept))])

    @property
    def exempt_checks(self) -> Mapping[str, str]:  # type: ignore[override]
        """None, except with ``sep_head=True`` and ``num_kv_heads > 1``: ``check_shapes``, whose
        probes rotate ``x`` without a head axis or with a head count that is no multiple of
        ``num_kv_heads``, which per-KV-head coefficients cannot rotate; and with
        ``sin_padding=1`` and clipped pairs: ``check_rotary_norm_preserved`` (by design)."""
        out: dict[str, str] = {}
        half = int(self._values["dim"]) // 2
        if self._values["sin_padding"] == 1 and self.num_frequencies < half:
            out["check_rotary_norm_preserved"] = (
                f"sin_padding=1 (the paper's code, xtuner, SGLang): the {half - self.num_frequencies}"
                f" clipped pairs have cos = sin = 1, a fixed 45° turn scaled by √2, so |x|² of "
                f"those pairs doubles; the m - n law still holds (tests/test_engine_fope.py)")
        kv = self._values["num_kv_heads"]
        if not self._values["sep_head"] or kv is None or kv == 1:
            return MappingProxyType(out)
        return MappingProxyType({**out, "check_shapes": (
            f"with sep_head=True and num_kv_heads={kv}, x is (..., heads, seq, dim) with heads a "
            f"multiple of num_kv_heads (query head i uses KV head i // (heads / {kv})'s "
            f"coefficients): the probes of x of shape (dim,) (no head axis) and (2, 3, 4, dim) "
            f"(3 heads) have no such heads and are refused with a ValueError; x of such heads "
            f"takes every position shape (tests/test_fope.py)")})

    @property
    def num_frequencies(self) -> int:
        """``D``: how many frequencies FoPE keeps (the size of each coefficient matrix)."""
        return int(self._cache["kept"])

    def frequencies(self) -> Any:
        """The ``D`` retained frequencies ``ω_j`` as a float64 NumPy array."""
        import numpy as np

        return np.asarray(self._cache["freqs"].omega[: self.num_frequencies], dtype=np.float64)

    # -- learned parameters ---------------------------------------------------------------------
    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        d = self.num_frequencies
        shape = (int(self._values["num_kv_heads"]), d, d) if self._values["sep_head"] else (d, d)
        return {"cos_coef": shape, "sin_coef": shape}

    def init_std(self, name: str) -> float:
        """``init_factor·sqrt(2/(D + D))``: xavier-normal noise of a ``D×D`` matrix."""
        return float(self._values["init_factor"]) / math.sqrt(self.num_frequencies)

    def init(self, xp: Any, *, seed: int = 0, dtype: Any = None,
             device: Any = None) -> dict[str, Any]:
        """Fresh params: the identity plus the noise of :func:`init_params` (NumPy's PCG64, seed
        ``seed + i`` for the ``i``-th parameter, std :meth:`init_std`), summed in float64 and
        rounded to float32, so one seed gives the same numbers on every backend and dtype."""
        import numpy as np

        backend = self.services.backend_of_namespace(xp)
        out = resolve_dtype(self.name, backend, dtype, device)
        noise = init_params(self, "numpy", seed=seed, dtype=np.float64)
        eye = np.eye(self.num_frequencies)
        return {key: backend.from_numpy((value + eye).astype(np.float32), dtype=out, device=device)
                for key, value in noise.items()}

    # -- the hook: RoPE tables of the retained frequencies, the clipped ones at zero -------------
    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> tuple[Any, Any]:
        """``cos(p·ω_j)``, ``sin(p·ω_j)`` for every pair, ``ω_j = 0`` for the clipped ones: the
        tables without params (identity coefficients) and the basis the params mix."""
        cos, sin = cos_sin(positions, self._cache["freqs"], ctx=ctx)
        kept = self.num_frequencies
        if self._values["sin_padding"] == 1 and kept < int(sin.shape[-1]):
            sin = ctx.xp.concat((sin[..., :kept], ctx.xp.ones_like(sin[..., kept:])), axis=-1)
        return cos, sin

    # -- public methods ---------------------------------------------------------------------------
    def rotate(self, x: Any, positions: Any = None, *, offset: Any = 0,
               params: Mapping[str, Any] | None = None, seq_len: int | None = None) -> Any:
        """``x`` ``(..., seq, dim)`` rotated at ``positions`` by the tables of ``params`` (None:
        identity coefficients); same shape, dtype, namespace and device as ``x``, gradients
        reaching the params. With ``sep_head=True`` the heads are ``x.shape[-3]``, a multiple of
        ``num_kv_heads`` (or absent with one KV head). ``positions``, ``offset`` and ``seq_len``
        as for :meth:`peregistry.RotaryEncoder.rotate`."""
        return self._rotate(x, positions, offset=offset, params=params, seq_len=seq_len,
                            native=True)

    def cos_sin(self, positions: Any, *, dtype: Any = None, seq_len: int | None = None,
                params: Mapping[str, Any] | None = None) -> tuple[Any, Any]:
        """``(cos, sin)`` in the encoder's layout, ``(*positions.shape, dim)`` each, of ``dtype``
        (default: the params' dtype; without params the namespace's default float). With
        ``sep_head=True`` and params, one table per KV head before the sequence axis:
        ``(*positions.shape[:-1], num_kv_heads, positions.shape[-1], dim)`` (scalar positions
        count as one), as xtuner's ``(batch, heads, seq, dim)``."""
        if params is None:
            return super().cos_sin(positions, dtype=dtype, seq_len=seq_len)
        ctx, cos, sin, prepared = self._learned_tables(positions, params, seq_len, heads=None)
        out = self._output_dtype(dtype, prepared, ctx)
        layout: Layout = "interleaved" if self._rotation.interleaved else "half"
        return _delegation.full_width_tables(cos, sin, layout=layout, dtype=out, xp=ctx.xp)

    def tables(self, positions: Any, *, seq_len: int | None = None,
               params: Mapping[str, Any] | None = None, heads: int | None = None) -> RotaryTables:
        """The tables of ``positions`` and ``params`` made once (see
        :meth:`peregistry.RotaryEncoder.tables`). With ``sep_head=True`` and params they rotate
        tensors of ``heads`` heads (default ``num_kv_heads``; queries of GQA: their count)."""
        if params is None:
            self._heads(heads, what="heads")
            return super().tables(positions, seq_len=seq_len)
        ctx, cos, sin, _ = self._learned_tables(positions, params, seq_len, heads=heads)
        return RotaryTables(cos, sin, layout="interleaved" if self._rotation.interleaved
                            else "half", head_dim=self._rotation.head_dim, owner=self.name,
                            ctx=ctx)

    # -- machinery ----------------------------------------------------------------------------
    def _rotate(self, x: Any, positions: Any, *, offset: Any, params: Mapping[str, Any] | None,
                seq_len: int | None, native: bool) -> Any:
        if params is None:
            return super()._rotate(x, positions, offset=offset, params=None, seq_len=seq_len,
                                   native=native)
        call = self._rotate_call(x, positions, offset, None, seq_len)
        prepared = self._check_params(params, call.ctx)
        cos, sin, groups = self._learned_rotation_tables(call, prepared)
        xp, x, spec = call.ctx.xp, call.x, self._rotation
        shape = tuple(x.shape)
        if groups > 1:  # x viewed as (..., kv, groups, seq, dim), as vLLM views the queries
            x = xp.reshape(x, (*shape[:-3], shape[-3] // groups, groups, *shape[-2:]))
            cos, sin = xp.expand_dims(cos, axis=-3), xp.expand_dims(sin, axis=-3)
        out = _delegation.rotate(x, cos, sin, rotary_dim=spec.rotary_dim,
                                 interleaved=spec.interleaved, cdt=call.cdt, xp=xp,
                                 native=native, eager=not call.tracing)
        return out if groups == 1 else xp.reshape(out, shape)

    def _heads(self, heads: Any, *, what: str) -> int | None:
        """The head count of the tensors rotated with per-head tables (a multiple of
        ``num_kv_heads``); None without ``sep_head``, where it must not be given."""
        kv = self._values["num_kv_heads"]
        if kv is None:
            if heads is not None:
                raise ValueError(f"{self.name}: {what}={heads!r} is only used with sep_head=True "
                                 f"(one Fourier series per KV head)")
            return None
        if heads is None:
            return int(kv)
        if isinstance(heads, bool) or not isinstance(heads, int) or heads <= 0 or heads % kv:
            raise ValueError(f"{self.name}: {what}={heads!r}, but should be a positive multiple "
                             f"of num_kv_heads={kv} (query heads share a KV head's coefficients "
                             f"in groups, as in GQA)")
        return heads

    def _learned_tables(self, positions: Any, params: Mapping[str, Any], seq_len: Any, *,
                        heads: int | None) -> tuple[Ctx, Any, Any, Mapping[str, Any]]:
        """``cos_sin``'s and ``tables``' half-width tables (``ctx.wide``): per-head ones with
        the KV-head axis (``heads`` of them) inserted before the sequence axis."""
        ctx, (pos,) = self._context(positions)
        pos = self._positions(pos, ctx)
        prepared = self._check_params(params, ctx)
        h = self._heads(heads, what="heads")
        cos, sin = self._tables_at(pos, ctx=ctx, cdt=ctx.wide, seq_len=self._check_seq_len(seq_len),
                                   tracing=ctx.backend.is_tracing(pos))
        if h is not None:
            shape = tuple(int(s) for s in pos.shape)
            lead, seq = (shape[:-1], shape[-1]) if shape else ((), 1)
            cos, sin = _reshaped(cos, sin, (*lead, 1, seq), xp=ctx.xp)
        cos, sin = self._mix(cos, sin, prepared, heads=h, ctx=ctx)
        return ctx, cos, sin, prepared

    def _learned_rotation_tables(self, call: Call,
                                 params: Mapping[str, Any]) -> tuple[Any, Any, int]:
        """:meth:`rotate`'s tables in ``call.cdt``: the basis at the call's positions
        (:meth:`_rotation_tables` in ``ctx.wide``, unfused), mixed by ``params``, shaped to broadcast
        against ``x`` (its head axis ``x.shape[-3]`` with ``sep_head``); and the query heads
        per KV head when the tables are one per KV head for ``x``'s grouped heads (else 1)."""
        ctx, xshape = call.ctx, tuple(int(s) for s in call.x.shape)
        cos, sin = self._rotation_tables(call, ctx.wide, fuse=False)
        heads, groups = None, 1
        if self._values["sep_head"]:
            kv = int(self._values["num_kv_heads"])
            if len(xshape) < 3 and kv > 1:
                raise ValueError(f"{self.name}: sep_head with num_kv_heads={kv} rotates x of "
                                 f"shape (..., heads, seq, dim), got x.shape={xshape}")
            if len(xshape) >= 3:
                heads = self._heads(xshape[-3], what="x.shape[-3]")
                # positions aligned with x's (..., heads, seq): their head axis is 1 or heads
                batch = tuple(int(s) for s in cos.shape[:-1])
                batch = (1,) * (2 - len(batch)) + batch
                cos, sin = _reshaped(cos, sin, batch, xp=ctx.xp)
                if batch[-2] == 1 and kv > 1 and heads is not None:  # one table per KV head
                    groups = heads // kv
        cos, sin = self._mix(cos, sin, params, heads=heads, ctx=ctx, repeat=False)
        xp, cdt = ctx.xp, call.cdt
        # (mixed by params: not constant)
        cos, sin = _delegation.materialize(cos if cos.dtype == cdt else xp.astype(cos, cdt),
                                           sin if sin.dtype == cdt else xp.astype(sin, cdt),
                                           xp=xp, constant=False)
        return cos, sin, groups

    def _mix(self, cos: Any, sin: Any, params: Mapping[str, Any], *, heads: int | None,
             ctx: Ctx, repeat: bool = True) -> tuple[Any, Any]:
        """The learned half-width tables from the basis ``cos``/``sin`` (``(..., d/2)``, the
        first ``D`` columns the retained frequencies, the rest 1 and 0), in ``ctx.wide``.

        Shared coefficients (or one KV head and ``heads=None``): ``(..., d/2)``. Per head:
        ``cos`` is ``(..., h, seq, d/2)`` with ``h`` 1 (one row for every head) or ``heads``
        (positions per head), and the result ``(..., heads, seq, d/2)`` (``(..., 1, seq, d/2)``
        for one KV head: it broadcasts; ``(..., kv, seq, d/2)`` for one row and
        ``repeat=False``: the caller groups the heads)."""
        xp, wide = ctx.xp, ctx.wide
        d = self.num_frequencies
        a, b = params["cos_coef"], params["sin_coef"]
        a = a if a.dtype == wide else xp.astype(a, wide)
        b = b if b.dtype == wide else xp.astype(b, wide)
        bc, bs = cos[..., :d], sin[..., :d]
        if self._values["sep_head"] and heads is None:
            a, b = a[0, ...], b[0, ...]  # x without a head axis: the one KV head's series
        if self._values["sep_head"] and heads is not None:
            kv = int(self._values["num_kv_heads"])
            groups = heads // kv
            per_head = int(bc.shape[-3]) != 1  # positions per head: each its own coefficients
            if per_head and groups > 1 and kv > 1:
                a, b = _repeat_heads(a, groups, xp=xp), _repeat_heads(b, groups, xp=xp)
            mc, ms = xp.matmul(bc, a), xp.matmul(bs, b)  # (..., kv or heads, seq, D)
            if repeat and not per_head and groups > 1 and kv > 1:  # (one KV head broadcasts)
                mc, ms = _repeat_heads(mc, groups, xp=xp), _repeat_heads(ms, groups, xp=xp)
        else:
            mc, ms = xp.matmul(bc, a), xp.matmul(bs, b)
        rest = int(cos.shape[-1]) - d
        if rest:  # the clipped pairs: frequency zero, cos 1 and sin `sin_padding`
            shape = (*(int(s) for s in mc.shape[:-1]), rest)
            ones = xp.ones(shape, dtype=wide, device=ctx.device)
            mc = xp.concat((mc, ones), axis=-1)
            ms = xp.concat((ms, ones if self._values["sin_padding"] else xp.zeros_like(ones)),
                           axis=-1)
        return mc, ms


@hookimpl
def peregistry_encoders() -> list[type[RotaryEncoder]]:
    """This family's encoders, ``fope`` (hook ``peregistry_encoders``)."""
    return [FoPE]
