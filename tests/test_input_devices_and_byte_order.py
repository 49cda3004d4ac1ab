"""Inputs an encoder cannot take as they are (issue 42): arrays on two devices (item 8) and
NumPy arrays in non-native byte order (item 6)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS

import peregistry as per

# -- item 8: arrays of one framework on two devices ------------------------------------------------
_DEVICE_CALLS = {
    "rotate": (lambda e, t, m: e.rotate(t.ones(3, 8), t.arange(3, device=m)), "rotary",
               r"x on cpu, positions on meta"),
    "rotate(offset=)": (lambda e, t, m: e.rotate(t.ones(3, 8), offset=t.tensor(2, device=m)),
                        "rotary", r"x on cpu, offset on meta"),
    "bias": (lambda e, t, m: e.bias(t.arange(3), t.arange(4, device=m)), "alibi",
             r"q_positions on cpu, k_positions on meta"),
    "embed": (lambda e, t, m: e.embed(t.arange(3, device=m), t.arange(4)), "transformer-xl",
              r"q_positions on meta, k_positions on cpu"),
}


@pytest.mark.skipif("torch" not in BACKENDS, reason="torch devices (the torch env)")
@pytest.mark.parametrize("call", list(_DEVICE_CALLS))
def test_inputs_on_two_devices_name_both(call: str) -> None:
    """Positions on another torch device than ``x`` (the meta device is in every torch build):
    an error naming both arguments and their devices, as the mixed-framework error names the
    frameworks, not torch's ``Tensor on device cpu is not on the expected device meta!``."""
    import torch

    fn, name, words = _DEVICE_CALLS[call]
    options = {"alibi": {"num_heads": 2}}.get(name, {"dim": 8})
    enc: Any = per.get_encoder(name, **options)
    with pytest.raises(ValueError, match=rf"^{name}: inputs are on two devices: {words}; put every array"):
        fn(enc, torch, "meta")


# -- item 6: NumPy arrays in non-native byte order ---------------------------------------------------
def _swapped(a: Any) -> Any:
    """``a`` with the other byte order than the machine's (big-endian on x86_64/aarch64): the same
    values, a dtype that equals no native one."""
    other = a.dtype.newbyteorder("S")
    return a.astype(other) if a.dtype.itemsize > 1 else a


def _builtins() -> list[str]:
    return sorted({i.name for i in per.list_encoders()
                   if i.name is not None and i.plugin.distribution == "peregistry"})


@pytest.mark.skipif("numpy" not in BACKENDS, reason="NumPy byte orders (the numpy env)")
@pytest.mark.parametrize("name", _builtins())
def test_swapped_byte_order_gives_the_native_bits(name: str) -> None:
    """Every built-in encoder's public method takes NumPy arrays (positions, ``x``, params) and
    ``dtype=`` in the other byte order as the native ones: the same bits (computed in the native
    dtype of the same kind and size, never in float32 because ``>f8 != float64``), the result of
    the dtype given (``x``'s for a rotation, ``dtype=``'s otherwise)."""
    from peregistry.registry import default_registry
    from peregistry.testing._drivers import DRIVERS

    class _Case:
        rng = np.random.default_rng(0)

    enc: Any = per.get_encoder(name, **default_registry.encoder_class(name).example_options())
    sampler, caller = DRIVERS[enc.kind]
    probe = sampler(_Case(), enc, (2, 5))  # type: ignore[arg-type]
    for fdt in (np.dtype(np.float64), np.dtype(np.float32)):
        args = {k: v.astype(fdt) if k in probe.float_args else v for k, v in probe.args.items()}
        params = enc.init(np, seed=0, dtype=fdt) if enc.learned else None
        dtype = fdt if probe.dtype_arg else None
        want = caller(enc, args, params, dtype)
        swapped_params = None if params is None else {k: _swapped(v) for k, v in params.items()}
        swapped_dtype = None if dtype is None else fdt.newbyteorder("S")
        swaps: dict[str, tuple[Any, Any, Any]] = {
            key: ({**args, key: _swapped(v)}, params, dtype) for key, v in args.items()}
        if params is not None:
            swaps["params"] = (args, swapped_params, dtype)
        if dtype is not None:
            swaps["dtype"] = (args, params, swapped_dtype)
        swaps["all"] = ({k: _swapped(v) for k, v in args.items()}, swapped_params, swapped_dtype)
        for what, (a, p, d) in swaps.items():
            got = caller(enc, a, p, d)
            np.testing.assert_array_equal(got, want, err_msg=f"{name} {fdt} {what} swapped")
            given = a["x"].dtype if "x" in a else d if d is not None else want.dtype
            assert got.dtype == given, (name, what, got.dtype, given)
    if enc.kind == "rotary":
        pos, x = args["positions"], args["x"].astype(np.float64)
        for got, want in [(enc.cos_sin(_swapped(pos), dtype=np.dtype(">f8")),
                           enc.cos_sin(pos, dtype=np.float64)),
                          ((enc.tables(_swapped(pos)).rotate(_swapped(x)),),
                           (enc.tables(pos).rotate(x),)),
                          ((per.rope.apply_rotary(_swapped(x), *(_swapped(t) for t in
                                                                 _half(enc, pos))),),
                           (per.rope.apply_rotary(x, *_half(enc, pos)),))]:
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(g, w, err_msg=name)


def _half(enc: Any, pos: Any) -> tuple[Any, Any]:
    """Half-width float64 tables of ``enc`` at ``pos``."""
    cos, sin = enc.cos_sin(pos, dtype=np.float64)
    layout = "interleaved" if enc._rotation.interleaved else "half"
    return (per.rope.half_width(cos, layout=layout), per.rope.half_width(sin, layout=layout))


@pytest.mark.skipif("numpy" not in BACKENDS, reason="NumPy byte orders (the numpy env)")
def test_swapped_byte_order_in_multimodal_ids_and_query_scale() -> None:
    from peregistry.multimodal import Image, Text, batch_position_ids, position_ids

    segments = [Text(2), Image((1, 4, 4)), Text(1)]
    want = position_ids(segments).ids
    got = position_ids(segments, dtype=np.dtype(np.int64).newbyteorder("S")).ids
    np.testing.assert_array_equal(got, want)
    mask = _swapped(np.ones((1, 7), dtype=np.int64))
    np.testing.assert_array_equal(batch_position_ids([segments], attention_mask=mask).ids[:, 0],
                                  want)
    enc: Any = per.get_encoder("rotary", dim=8, attn_temperature_tuning=True, floor_scale=4)
    pos = np.array([0, 3, 4, 100, 2**40], dtype=np.int64)
    np.testing.assert_array_equal(enc.query_scale(_swapped(pos), dtype=np.dtype(">f8")),
                                  enc.query_scale(pos, dtype=np.float64))
