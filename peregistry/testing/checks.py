"""The catalogue of built-in conformance checks: importing this module registers every one of
them, in the order they run, and :func:`registered_checks` returns them with any a plugin
registered through :func:`~peregistry.testing.check`.

One module per group of checks: ``checks_generic`` (every encoder), ``checks_absolute``,
``checks_relative``, ``checks_rotary`` and ``checks_mrope`` (the laws of each kind), and
``checks_learned`` (learned parameters of any kind). The check functions are re-exported here
by name.
"""

from __future__ import annotations

from ._core import CheckSpec, all_checks
from .checks_absolute import check_shift_invariant_dot, check_shift_linear
from .checks_generic import (
    check_deterministic,
    check_device_preserved,
    check_dtype_preserved,
    check_inputs_not_mutated,
    check_jit,
    check_matches_float64_numpy,
    check_matches_reference,
    check_namespace_preserved,
    check_real_positions,
    check_shapes,
)
from .checks_init import check_init_placement, check_init_seed
from .checks_learned import check_bad_params_named, check_gradients, check_params_fresh
from .checks_mrope import check_mrope_equals_rotary_on_equal_axes, check_mrope_relative_per_axis
from .checks_probes import check_far_range, check_fresh_positions, check_out_of_range_raises
from .checks_relative import check_alibi_slopes, check_causal_future_alike, check_relative_toeplitz
from .checks_rotary import (
    check_rotary_jit_traces_once,
    check_rotary_large_positions,
    check_rotary_layouts,
    check_rotary_matches_cos_sin,
    check_rotary_native_matches_generic,
    check_rotary_norm_preserved,
    check_rotary_offset,
    check_rotary_relative,
)

__all__ = [
    "check_alibi_slopes",
    "check_bad_params_named",
    "check_causal_future_alike",
    "check_deterministic",
    "check_device_preserved",
    "check_dtype_preserved",
    "check_far_range",
    "check_fresh_positions",
    "check_gradients",
    "check_init_placement",
    "check_init_seed",
    "check_inputs_not_mutated",
    "check_jit",
    "check_matches_float64_numpy",
    "check_matches_reference",
    "check_mrope_equals_rotary_on_equal_axes",
    "check_mrope_relative_per_axis",
    "check_namespace_preserved",
    "check_out_of_range_raises",
    "check_params_fresh",
    "check_real_positions",
    "check_relative_toeplitz",
    "check_rotary_jit_traces_once",
    "check_rotary_large_positions",
    "check_rotary_layouts",
    "check_rotary_matches_cos_sin",
    "check_rotary_native_matches_generic",
    "check_rotary_norm_preserved",
    "check_rotary_offset",
    "check_rotary_relative",
    "check_shapes",
    "check_shift_invariant_dot",
    "check_shift_linear",
    "registered_checks",
]


#: The order checks run in (and report rows and pytest ids follow): generic checks and probes
#: first, then the laws of each kind, then learned parameters, then rotary and M-RoPE.
_GROUPS = ("generic", "probes", "absolute", "relative", "learned", "init", "rotary", "mrope")


def _rank(spec: CheckSpec) -> int:
    module = spec.func.__module__
    group = module.rpartition(".checks_")[2]
    if module.startswith(f"{__package__}.checks_") and group in _GROUPS:
        return _GROUPS.index(group)
    return len(_GROUPS)  # a plugin's own checks come last


def registered_checks() -> dict[str, CheckSpec]:
    """Every registered check by name: the built-ins above, then any registered with ``@check``
    (in registration order within a group)."""
    return dict(sorted(all_checks().items(), key=lambda item: _rank(item[1])))
