"""Regression tests of the hardening issue (adversarial use): each test names its item."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import peregistry as per


# -- item 8: None as positions is a TypeError naming the argument ------------------------------
@pytest.mark.parametrize(("name", "options"), [("sinusoidal", {"dim": 8}),
                                               ("learned", {"num_positions": 4, "dim": 2})])
def test_encode_none_names_positions(name: str, options: dict[str, Any]) -> None:
    enc = per.get_encoder(name, **options)
    params = enc.init(np) if enc.learned else None
    with pytest.raises(TypeError, match=r"positions must be an array .*got None"):
        enc.encode(None, params=params)


@pytest.mark.parametrize(("name", "options", "method"), [
    ("alibi", {"num_heads": 2}, "bias"),
    ("t5", {"num_heads": 2}, "bias"),
    ("transformer-xl", {"dim": 4}, "embed"),
    ("shaw", {"max_distance": 2, "dim": 4}, "embed"),
])
def test_pair_kinds_none_names_which_positions(name: str, options: dict[str, Any],
                                               method: str) -> None:
    enc = per.get_encoder(name, **options)
    params = enc.init(np) if enc.learned else None
    call = getattr(enc, method)
    with pytest.raises(TypeError, match=r"q_positions must be an array .*got None"):
        call(None, np.arange(3), params=params)
    with pytest.raises(TypeError, match=r"k_positions must be an array .*got None"):
        call(np.arange(3), None, params=params)


# -- item 9: params of another framework than the positions: the message says it is params --------
@pytest.mark.parametrize(("name", "options", "method"), [
    ("t5", {"num_heads": 2}, "bias"),
    ("shaw", {"max_distance": 2, "dim": 4}, "embed"),
])
def test_params_of_another_framework_name_params(name: str, options: dict[str, Any],
                                                 method: str) -> None:
    torch = pytest.importorskip("torch")
    enc = per.get_encoder(name, **options)
    call = getattr(enc, method)
    with pytest.raises(TypeError, match=r"params\['table'\] is a torch array but the positions "
                                        r"are numpy; .*peregistry\.convert\(params, xp\)"):
        call(np.arange(3), np.arange(3), params=enc.init(torch))
    with pytest.raises(TypeError, match=r"q_positions is a numpy array but k_positions is a "
                                        r"torch array"):
        call(np.arange(3), torch.arange(3), params=enc.init(np))


def test_python_positions_follow_params_of_any_framework() -> None:
    torch = pytest.importorskip("torch")
    t5 = per.get_encoder("t5", num_heads=2)
    out = t5.bias([0, 1, 2], [0, 1], params=t5.init(torch))
    assert isinstance(out, torch.Tensor) and tuple(out.shape) == (2, 3, 2)


# -- item 18: ragged position lists name the argument ------------------------------------------
def test_ragged_positions_name_the_argument() -> None:
    with pytest.raises(ValueError, match=r"sinusoidal: positions must be a rectangular "
                                         r"\(non-ragged\) sequence"):
        per.get_encoder("sinusoidal", dim=8).encode([[1, 2], [3]])
    with pytest.raises(ValueError, match=r"alibi: k_positions must be a rectangular"):
        per.get_encoder("alibi", num_heads=2).bias([0, 1], [[0], [1, 2]])
    t5 = per.get_encoder("t5", num_heads=2)
    with pytest.raises(ValueError, match=r"t5: relative_positions must be a rectangular"):
        t5.buckets([[0], [1, 2]])


# -- item 15: a plugin returning arrays of another framework: a clear error, no dtype warning -----
def _foreign_output_encoders() -> list[per.Encoder]:
    class NumpyEncode(per.AbsoluteEncoder):
        name = "numpy-encode"
        dim = per.Option(int, 4)

        def _encode(self, positions: Any, *, params: Any, ctx: Any) -> Any:
            return np.zeros((*positions.shape, 4), dtype=np.float64)

    class NumpyBias(per.BiasEncoder):
        name = "numpy-bias"
        num_heads = per.Option(int, 2)

        def _bias(self, q: Any, k: Any, *, params: Any, ctx: Any, dtype: Any) -> Any:
            return np.zeros((2, q.shape[-1], k.shape[-1]), dtype=np.float32)

    class NumpyEmbed(per.RelativeEmbedding):
        name = "numpy-embed"
        dim = per.Option(int, 4)

        def _embed(self, q: Any, k: Any, *, params: Any, ctx: Any, dtype: Any) -> Any:
            return np.zeros((q.shape[-1], k.shape[-1], 4), dtype=np.float32)

    return [NumpyEncode(), NumpyBias(), NumpyEmbed()]


@pytest.mark.parametrize("which", [0, 1, 2], ids=["encode", "bias", "embed"])
def test_output_of_another_namespace_is_a_type_error(backend: Any, which: int) -> None:
    if backend.name == "numpy":
        pytest.skip("needs a namespace other than numpy")
    enc = _foreign_output_encoders()[which]
    pos = backend.from_numpy(np.arange(3))
    call = {0: lambda: enc.encode(pos), 1: lambda: enc.bias(pos, pos),  # type: ignore[attr-defined]
            2: lambda: enc.embed(pos, pos)}[which]  # type: ignore[attr-defined]
    hook = ("_encode", "_bias", "_embed")[which]
    # pytest turns warnings into errors: the old dtype comparison across namespaces warned
    with pytest.raises(TypeError, match=rf"{enc.name}: \w+\.{hook} returned a numpy array for "
                                        rf"{backend.name} inputs, but must return an array of "
                                        rf"the inputs' namespace \({backend.name}\)"):
        call()


# -- item 2: a plugin class with an invalid default is a broken plugin, named -------------------
def test_plugin_module_with_an_invalid_default_is_reported_naming_plugin_option_value(
        make_dist: Any) -> None:
    from peregistry.registry import Registry

    source = """
        import peregistry as per

        class Neg(per.AbsoluteEncoder):
            name = "neg-default"
            dim = per.Option(int, -3, check=lambda d: d > 0)

        @per.hookimpl
        def peregistry_encoders():
            return [Neg]
    """
    make_dist("neg-pkg", {"neg_pkg_plugin": source}, {"neg": "neg_pkg_plugin"}, version="0.1")
    reg = Registry()
    bad = next(r for r in reg.list_encoders() if r.plugin.distribution == "neg-pkg")
    assert bad.status == "error"
    assert "option 'dim' must be an integer, got -3 (the declared default)" in (bad.error or "")
    with pytest.raises(per.EncoderNotFoundError, match=r"neg-pkg 0\.1: error importing plugin "
                                                       r"\"neg_pkg_plugin\": ValueError: encoder "
                                                       r"'neg-default' \(class neg_pkg_plugin"
                                                       r"\.Neg\): option 'dim'"):
        reg.get_encoder("neg-default")
    assert reg.get_encoder("sinusoidal", dim=4).name == "sinusoidal"


# -- item 3: learned encoders return their params' dtype when dtype=None -----------------------
_LEARNED_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("learned", {"num_positions": 8, "dim": 4}),
    ("learned-2d", {"height": 3, "width": 4, "dim": 2}),
    ("shaw", {"max_distance": 3, "dim": 4}),
    ("t5", {"num_heads": 2}),
]


def _learned_call(enc: Any, backend: Any, params: Any, dtype: Any = None) -> Any:
    if enc.kind == "absolute":
        pos = np.asarray([[0, 1], [2, 3], [1, 1]]) if enc.name == "learned-2d" else np.arange(5)
        return enc.encode(backend.from_numpy(pos), params=params, dtype=dtype)
    pos = backend.from_numpy(np.arange(5))
    call = enc.bias if enc.kind == "bias" else enc.embed
    return call(pos, pos, params=params, dtype=dtype)


@pytest.mark.parametrize(("name", "options"), _LEARNED_CALLS, ids=[n for n, _ in _LEARNED_CALLS])
def test_learned_output_takes_the_params_dtype(backend: Any, name: str,
                                               options: dict[str, Any]) -> None:
    enc = per.get_encoder(name, **options)
    floats = backend.float_dtypes()
    ref = backend.to_numpy(_learned_call(enc, backend, enc.init(backend.native(),
                                                                dtype=floats["float32"])))
    for dt_name, dt in floats.items():
        params = enc.init(backend.native(), dtype=dt)
        out = _learned_call(enc, backend, params)
        assert out.dtype == dt, f"{name}: params of {dt_name} gave {out.dtype}"
        # the values are the float32 ones, rounded once to the params' dtype
        want = backend.to_numpy(_learned_call(enc, backend, enc.init(
            backend.native(), dtype=floats["float32"]), dtype=dt))
        np.testing.assert_array_equal(backend.to_numpy(out).astype(np.float64),
                                      want.astype(np.float64))
        # an explicit dtype still wins
        assert _learned_call(enc, backend, params, dtype=floats["float32"]).dtype == \
            floats["float32"]
    assert ref.dtype == np.float32


def test_learned_2d_grid_takes_the_params_dtype(backend: Any) -> None:
    enc: Any = per.get_encoder("learned-2d", height=3, width=4, dim=2)
    for dt in backend.float_dtypes().values():
        assert enc.grid(2, 3, params=enc.init(backend.native(), dtype=dt)).dtype == dt


# -- item 18: NaN/inf positions give NaN rows of continuous encoders, and only those rows ---------
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_nan_and_inf_positions_give_nan_rows(backend: Any) -> None:
    floats = backend.float_dtypes()
    wide = floats.get("float64", floats["float32"])
    pos = backend.from_numpy(np.asarray([1.0, np.nan, np.inf, -np.inf, 3.0]), dtype=wide)
    out = backend.to_numpy(per.get_encoder("sinusoidal", dim=8).encode(pos))
    assert np.isnan(out[1:4]).all()
    assert np.isfinite(out[[0, 4]]).all()
    xl = per.get_encoder("transformer-xl", dim=4)
    q = backend.from_numpy(np.asarray([0.0, np.nan]), dtype=wide)
    k = backend.from_numpy(np.asarray([0.0, 1.0, np.inf]), dtype=wide)
    emb = backend.to_numpy(xl.embed(q, k))  # (Q, K, dim)
    assert np.isfinite(emb[0, :2]).all()
    assert np.isnan(emb[1]).all() and np.isnan(emb[:, 2]).all()


@pytest.mark.parametrize(("name", "options"), [("learned", {"num_positions": 4, "dim": 2}),
                                               ("t5", {"num_heads": 2})])
def test_nan_cannot_reach_integer_encoders(name: str, options: dict[str, Any]) -> None:
    enc: Any = per.get_encoder(name, **options)
    nan = np.asarray([np.nan])
    params = enc.init(np)
    call = (lambda: enc.encode(nan, params=params)) if enc.kind == "absolute" else (
        lambda: enc.bias(nan, nan, params=params))
    with pytest.raises(TypeError, match=r"positions must have an integer dtype"):
        call()


# -- item 7, for the relative kinds: what construction tabulates is bounded ----------------------
@pytest.mark.parametrize(("name", "options", "option"), [
    ("alibi", {"num_heads": 2**40}, "num_heads"),  # one slope per head, computed at construction
    ("t5", {"num_heads": 8, "max_distance": 2**23}, "max_distance"),  # a bucket per distance
])
def test_sizes_tabulated_at_construction_are_bounded(name: str, options: dict[str, Any],
                                                     option: str) -> None:
    value = options[option]
    with pytest.raises(ValueError, match=rf"{name}: option '{option}' must be an integer in "
                                         rf"1\.\.65536, got {value}"):
        per.get_encoder(name, **options)


def test_the_largest_tabulated_sizes_are_accepted() -> None:
    assert len(per.get_encoder("alibi", num_heads=2**16).slopes) == 2**16
    t5 = per.get_encoder("t5", num_heads=1, max_distance=2**16)
    assert t5.max_distance == 2**16
