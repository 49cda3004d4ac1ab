"""A mutation corpus for the conformance suite: realistic single-bug plugin encoders, each
written as a plugin author would from ``docs/plugins.md`` (subclassing the documented bases of
``peregistry`` / ``peregistry.plugin``), and correct reference plugins that must pass.

Modules:

* :mod:`.references` — the correct plugins, one per kind: ``RefSin`` (absolute continuous),
  ``RefTable`` (learned absolute using the base ``Encoder.init``), ``RefBias`` (ALiBi-style
  bias), ``RefRelEmb`` (sinusoid of ``k - q``), ``RefLearnedBias`` (learned bias table via
  ``LearnedParams``), ``RefRope`` (rotary) and ``RefMRope`` (multi-axis rotary).
* :mod:`.absolute` — stale per-shape caches (output, params), a sine in place of the cosine
  half with no properties declared, float32 angles, ignored dtype, flattened batch shape,
  NumPy and device leaks, input mutation, nondeterminism, Python control flow on array values;
  learned tables that wrap or clamp out-of-range positions, ``init`` ignoring seed, dtype,
  device or namespace, gradients detached through NumPy.
* :mod:`.relative` — float16-computed bias, stale caches, query-dependent (shift-variant)
  bias, a shift-variant "sink" at the origin, ignored dtype, heads on the wrong axis, NumPy
  leak; relative embeddings clipping positions before subtracting (above and below), stale
  cache, input mutation, nondeterminism, control flow, wrong concat axis; learned bias with
  detached gradients, an ``init`` ignoring its seed, a stale table, and a key-indexed table.
* :mod:`.rotary` — rotation by −angle (all pairs, one pair), half/interleaved layout mix-up, a
  non-linear angle in one pair, float32 angles, ignored offset, stale cache, ignored dtype,
  NumPy and device leaks, control flow, ``x`` mutated in place, and an M-RoPE that does not
  reduce to RoPE on equal axes.

:data:`CATALOGUE` lists every mutant with the checks expected to catch it and the backends
where its bug cannot show (with the reason).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import absolute as A
from . import relative as R
from . import rotary as T
from .references import REFERENCES

__all__ = ["CATALOGUE", "REFERENCES", "Mutant"]


def _not_jax(b: Any) -> str | None:
    return "jax arrays are immutable: an encoder cannot write into its input" \
        if b.name == "jax" else None


def _wide_float64(b: Any) -> str | None:
    return None if "float64" in b.float_dtypes() else (
        f"{b.name} computes in float32 at most (JAX without x64): float32 angles are its "
        f"precision there, not a bug")


def _not_numpy(b: Any) -> str | None:
    return "on NumPy, np.* on the input is the input's namespace" if b.name == "numpy" else None


def _jit(b: Any) -> str | None:
    return None if b.jit(lambda: None) is not None else f"{b.name} has no tracing compiler"


def _grad(b: Any) -> str | None:
    return None if b.grad(lambda p: None) is not None else f"{b.name} has no autodiff"


def _two_devices(b: Any) -> str | None:
    devices = b.test_devices()
    return None if len(devices) >= 2 else (
        f"{b.name} offers one device here ({devices[0]}): a device leak cannot show")


def _both(*conds: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
    def cond(b: Any) -> str | None:
        return next((r for c in conds if (r := c(b)) is not None), None)
    return cond


@dataclass(frozen=True)
class Mutant:
    """One broken encoder: how to build it, the checks expected to catch it, and where its
    bug cannot show (``unshowable(backend)`` returns the reason, or None)."""

    factory: type[Any]
    options: dict[str, Any]
    expected: frozenset[str]
    unshowable: Callable[[Any], str | None] = field(default=lambda b: None)

    @property
    def id(self) -> str:
        return str(self.factory.name)

    def build(self) -> Any:
        return self.factory(**self.options)


def _m(factory: type[Any], *checks: str, options: dict[str, Any] | None = None,
       unshowable: Callable[[Any], str | None] = lambda b: None) -> Mutant:
    return Mutant(factory, options or {}, frozenset(checks), unshowable)


CATALOGUE: list[Mutant] = [
    # -- absolute continuous ------------------------------------------------------------------
    _m(A.StaleSinCache, "check_fresh_positions"),
    _m(A.SinForCos, "check_shift_linear", "check_shift_invariant_dot"),
    _m(A.Float32Angles, "check_shift_linear", "check_shift_invariant_dot", "check_far_range",
       unshowable=_wide_float64),
    _m(A.IgnoresDtype, "check_dtype_preserved"),
    _m(A.FlattensBatch, "check_shapes"),
    _m(A.NumpyLeak, "check_namespace_preserved", unshowable=_not_numpy),
    _m(A.DeviceLeak, "check_device_preserved", unshowable=_two_devices),
    _m(A.MutatesPositions, "check_inputs_not_mutated", unshowable=_not_jax),
    _m(A.Nondeterministic, "check_deterministic"),
    _m(A.ControlFlowOnValues, "check_jit", unshowable=_jit),
    # -- learned absolute ---------------------------------------------------------------------
    _m(A.WrapsPositions, "check_out_of_range_raises"),
    _m(A.ClampsPositions, "check_out_of_range_raises"),
    _m(A.InitIgnoresSeed, "check_init_seed"),
    _m(A.InitIgnoresDtype, "check_init_placement"),
    _m(A.InitIgnoresDevice, "check_init_placement", "check_device_preserved",
       unshowable=_two_devices),
    _m(A.InitIgnoresNamespace, "check_init_placement", unshowable=_not_numpy),
    _m(A.DetachedTable, "check_gradients", unshowable=_grad),
    _m(A.StaleTableCache, "check_params_fresh"),
    _m(A.StaleTableOutput, "check_fresh_positions", "check_params_fresh"),
    # -- bias -----------------------------------------------------------------------------------
    _m(R.Float16Bias, "check_far_range", "check_matches_float64_numpy"),
    _m(R.StaleBias, "check_fresh_positions", "check_relative_toeplitz"),
    _m(R.QueryDependentBias, "check_relative_toeplitz"),
    _m(R.SinkAtOrigin, "check_relative_toeplitz"),
    _m(R.BiasIgnoresDtype, "check_dtype_preserved"),
    _m(R.HeadsLast, "check_shapes"),
    _m(R.BiasNumpyLeak, "check_namespace_preserved", unshowable=_not_numpy),
    # -- relative embedding ---------------------------------------------------------------------
    _m(R.ClipsPositions, "check_far_range", "check_relative_toeplitz"),
    _m(R.ClipsLow, "check_relative_toeplitz"),
    _m(R.StaleEmbedding, "check_fresh_positions", "check_relative_toeplitz"),
    _m(R.MutatesQueries, "check_inputs_not_mutated", unshowable=_not_jax),
    _m(R.FlakyEmbedding, "check_deterministic"),
    _m(R.EmbedControlFlow, "check_jit", unshowable=_jit),
    _m(R.WrongConcatAxis, "check_shapes"),
    # -- learned bias ---------------------------------------------------------------------------
    _m(R.LearnedBiasDetached, "check_gradients", unshowable=_grad),
    _m(R.LearnedBiasInitSeed, "check_init_seed"),
    _m(R.LearnedBiasStaleTable, "check_params_fresh"),
    _m(R.LearnedBiasQueryIndex, "check_relative_toeplitz"),
    # -- rotary ---------------------------------------------------------------------------------
    _m(T.MinusAngle, "check_rotary_matches_cos_sin"),
    _m(T.MinusAngleOnePair, "check_rotary_matches_cos_sin"),
    _m(T.InterleavedApply, "check_rotary_matches_cos_sin", "check_rotary_norm_preserved",
       "check_rotary_relative"),
    _m(T.QuadraticPair, "check_rotary_relative"),
    _m(T.GrownTableDrift, "check_rotary_relative"),
    _m(T.Float32RopeAngles, "check_rotary_relative", "check_rotary_large_positions",
       unshowable=_wide_float64),
    _m(T.IgnoresOffset, "check_rotary_offset"),
    _m(T.StaleRopeCache, "check_fresh_positions", "check_rotary_relative", "check_jit"),
    _m(T.RopeIgnoresDtype, "check_dtype_preserved"),
    _m(T.RopeNumpyLeak, "check_namespace_preserved", "check_jit", "check_rotary_jit_traces_once",
       unshowable=_not_numpy),
    _m(T.RopeControlFlow, "check_jit", "check_rotary_jit_traces_once", unshowable=_jit),
    _m(T.RopeMutatesX, "check_inputs_not_mutated", unshowable=_not_jax),
    _m(T.RopeDeviceLeak, "check_device_preserved", unshowable=_two_devices),
    _m(T.MRopeOwnFrequencies, "check_mrope_equals_rotary_on_equal_axes"),
]
