"""Run by ``test_sharding_jax.py`` in a fresh interpreter (XLA_FLAGS must be set before jax is
imported): jitted encoders on a (2, 2, 2) mesh of host devices, for each mesh mode named on the
command line (``auto``, ``explicit``: one interpreter for all, jax imported once). Prints one JSON
object ``{"devices": n, "modes": {mode: {case: {"collectives": [...], "sharding_ok": bool,
"equal": bool, "detail": str}}}}``."""

from __future__ import annotations

import json
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import peregistry as per
from peregistry.parallel import packed_positions, shard_offset, shard_positions, shard_tokens

COLLECTIVES = ("all-gather", "all-reduce", "all-to-all", "collective-permute", "reduce-scatter")
B, H, S, D = 4, 4, 16, 64


def run_case(fn: Any, args: tuple[Any, ...], want_spec: Any, reference: Any) -> dict[str, Any]:
    jf = jax.jit(fn)
    hlo = jf.lower(*args).compile().as_text()
    out = jf(*args)
    found = [c for c in COLLECTIVES if c in hlo]
    spec = out.sharding.spec
    norm = tuple(spec) + (None,) * (out.ndim - len(spec))
    want = tuple(want_spec) + (None,) * (out.ndim - len(want_spec))
    a, r = np.asarray(out, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    return {"collectives": found, "sharding_ok": norm == want,
            "equal": bool(np.array_equal(a, r)), "max_abs_diff": float(np.max(np.abs(a - r))),
            "detail": f"out spec {spec}, want {want_spec}"}


def main(mode: str) -> dict[str, Any]:
    types = (AxisType.Explicit if mode == "explicit" else AxisType.Auto,) * 3
    mesh = jax.make_mesh((2, 2, 2), ("b", "h", "s"), axis_types=types)

    def put(a: Any, *spec: Any) -> Any:
        return jax.device_put(a, NamedSharding(mesh, P(*spec)))

    rng = np.random.default_rng(0)
    x_host = jnp.asarray(rng.standard_normal((B, H, S, D)), dtype=jnp.float32)
    x = put(x_host, "b", "h", "s", None)
    pos_host = jnp.arange(S, dtype=jnp.int32) + 5
    pos = put(pos_host, "s")
    rot = per.get_encoder("rotary", dim=D)
    mrope = per.get_encoder("mrope", dim=D, sections=(8, 12, 12))
    ids_host = jnp.asarray(rng.integers(0, 50, size=(3, B, 1, S)), dtype=jnp.int32)
    ids = put(ids_host, None, "b", None, "s")
    sin = per.get_encoder("sinusoidal", dim=D)
    bpos_host = jnp.asarray(rng.integers(0, 100, size=(B, S)), dtype=jnp.int32)
    bpos = put(bpos_host, "b", "s")
    kpos = put(bpos_host, "b", None)  # keys whole on each device, queries split
    t5 = per.get_encoder("t5", num_heads=H)
    params_host = t5.init(jnp, seed=1)
    params = {"table": put(params_host["table"])}  # (buckets, heads): tiny, replicated

    # References: the same jitted function on unsharded (single-device) inputs.
    def ref(fn: Any, *args: Any) -> Any:
        return jax.jit(fn)(*args)

    cases: dict[str, Any] = {}
    f_rot = lambda x: rot.rotate(x, offset=3)  # noqa: E731
    cases["rotate"] = run_case(f_rot, (x,), ("b", "h", "s"), ref(f_rot, x_host))
    f_rotp = lambda x, p: rot.rotate(x, p)  # noqa: E731
    f_m = lambda x, p: mrope.rotate(x, p)  # noqa: E731
    whole_rotp, whole_m = ref(f_rotp, x_host, pos_host), ref(f_m, x_host, ids_host)
    cases["rotate-positions"] = run_case(f_rotp, (x, pos), ("b", "h", "s"), whole_rotp)
    cases["mrope"] = run_case(f_m, (x, ids), ("b", "h", "s"), whole_m)
    f_s = lambda p: sin.encode(p)  # noqa: E731
    cases["sinusoidal"] = run_case(f_s, (bpos,), ("b", "s"), ref(f_s, bpos_host))
    f_t = lambda q, k, pr: t5.bias(q, k, params=pr)  # noqa: E731
    if mode == "auto":  # Explicit axes: jnp's gather asks for an out_sharding (not Array API)
        cases["t5"] = run_case(f_t, (bpos, kpos, params), ("b", None, "s"),
                               ref(f_t, bpos_host, bpos_host, params_host))
        # The table sharded over heads: the bias comes out sharded over batch, heads, sequence.
        params_h = {"table": put(params_host["table"], None, "h")}
        cases["t5-heads"] = run_case(f_t, (bpos, kpos, params_h), ("b", "h", "s"),
                                     ref(f_t, bpos_host, bpos_host, params_host))

    # Context parallel: shard_map over "s"; each block rotates with its own offset.
    def cp_rotate(xl: Any) -> Any:
        i = jax.lax.axis_index("s")
        return rot.rotate(xl, offset=shard_offset(xl.shape[-2], i, offset=jnp.int32(3)))

    def cp_mrope(xl: Any, idl: Any) -> Any:
        return mrope.rotate(xl, idl)

    spec_x = P("b", "h", "s", None)
    f_cp = jax.shard_map(cp_rotate, mesh=mesh, in_specs=(spec_x,), out_specs=spec_x)
    cases["context-parallel-rotate"] = run_case(
        f_cp, (x,), ("b", "h", "s"),
        ref(lambda x: rot.rotate(x, offset=jnp.int32(3)), x_host))
    f_cpm = jax.shard_map(cp_mrope, mesh=mesh, in_specs=(spec_x, P(None, "b", None, "s")),
                          out_specs=spec_x)
    cases["context-parallel-mrope"] = run_case(f_cpm, (x, ids), ("b", "h", "s"), whole_m)
    if mode == "auto":  # shard_map bodies see local arrays: the axis types do not reach them
        cases.update(zigzag_cases(mesh, x_host, ids_host, rot, f_m, ref, put,
                                  (whole_rotp, whole_m)))
    return cases


def zigzag_cases(mesh: Any, x_host: Any, ids_host: Any, rot: Any, f_m: Any, ref: Any, put: Any,
                 wholes: tuple[Any, Any]) -> dict[str, Any]:
    """Zigzag layout over "s" (2 ranks, 4 chunks): the row is put in zigzag order, sharded
    contiguously, and each rank computes its positions from its traced axis_index (and, packed,
    from a traced, replicated cu_seqlens of uneven lengths). Same shapes as the cases above."""
    cp = mesh.shape["s"]
    cu = jnp.asarray([0, 4, 12, 16], dtype=jnp.int32)  # uneven, each a multiple of 2*cp
    perm = jnp.concatenate([shard_tokens(S, cp, r, layout="zigzag", like=cu) for r in range(cp)])
    perm_p = jnp.concatenate([shard_tokens(S, cp, r, layout="zigzag", cu_seqlens=cu)
                              for r in range(cp)])
    spec_x = P("b", "h", "s", None)

    def zz_rotate(xl: Any) -> Any:
        r = jax.lax.axis_index("s")
        return rot.rotate(xl, shard_positions(S, cp, r, layout="zigzag", offset=5, like=xl))

    def zz_packed(xl: Any, cul: Any) -> Any:
        r = jax.lax.axis_index("s")
        return rot.rotate(xl, shard_positions(S, cp, r, layout="zigzag", cu_seqlens=cul))

    whole, whole_m = wholes  # the unsharded rotate at positions 5.., M-RoPE at ids_host
    whole_p = ref(lambda x, c: rot.rotate(x, packed_positions(c, S)), x_host, cu)
    x = put(jnp.take(x_host, perm, axis=2), "b", "h", "s", None)
    xp_ = put(jnp.take(x_host, perm_p, axis=2), "b", "h", "s", None)
    ids = put(jnp.take(ids_host, perm, axis=-1), None, "b", None, "s")
    return {
        "zigzag-rotate": run_case(
            jax.shard_map(zz_rotate, mesh=mesh, in_specs=(spec_x,), out_specs=spec_x), (x,),
            ("b", "h", "s"), jnp.take(whole, perm, axis=2)),
        "zigzag-packed-rotate": run_case(
            jax.shard_map(zz_packed, mesh=mesh, in_specs=(spec_x, P()), out_specs=spec_x),
            (xp_, put(cu)), ("b", "h", "s"), jnp.take(whole_p, perm_p, axis=2)),
        "zigzag-mrope": run_case(
            jax.shard_map(f_m, mesh=mesh, in_specs=(spec_x, P(None, "b", None, "s")),
                          out_specs=spec_x), (x, ids), ("b", "h", "s"),
            jnp.take(whole_m, perm, axis=2)),
    }


if __name__ == "__main__":
    print(json.dumps({"devices": jax.device_count(),
                      "modes": {mode: main(mode) for mode in sys.argv[1:]}}))
