"""RoPE scaling types: independent float64 formulas from the papers, Hugging Face's
``ROPE_INIT_FUNCTIONS`` and key names (when transformers is installed), validation errors, the
``Option`` declarations, plugins, and the deprecated ``Param`` and module path."""

from __future__ import annotations

import math
import types
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import pytest

import peregistry as per
from peregistry.rope.scalings import RopeScaling

EPS32 = float(np.finfo(np.float32).eps)
EPS64 = float(np.finfo(np.float64).eps)


# -- independent references (written from the papers' formulas, not from the implementation) ----
def ref_rope(d: int, theta: float) -> np.ndarray:
    return np.array([theta ** (-(2.0 * i) / d) for i in range(d // 2)])


def ref_linear(d: int, theta: float, factor: float) -> np.ndarray:
    return ref_rope(d, theta) / factor


def ref_dynamic(d: int, theta: float, factor: float, orig: int, s: int) -> np.ndarray:
    s = max(s, orig)
    alpha = factor * s / orig - (factor - 1)
    return ref_rope(d, theta * alpha ** (d / (d - 2)))


def ref_yarn(d: int, theta: float, factor: float, orig: int, beta_fast: float = 32,
             beta_slow: float = 1, truncate: bool = True) -> np.ndarray:
    # Peng et al. 2023, eq. 17-18: r(n) = d ln(L / (2π n)) / (2 ln θ)
    def r(n: float) -> float:
        return d * math.log(orig / (2 * math.pi * n)) / (2 * math.log(theta))

    lo, hi = r(beta_fast), r(beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    if lo == hi:
        hi += 0.001
    out = []
    for i, w in enumerate(ref_rope(d, theta)):
        ramp = min(max((i - lo) / (hi - lo), 0.0), 1.0)  # 0: extrapolate, 1: interpolate
        out.append(w * (1 - ramp) + (w / factor) * ramp)
    return np.array(out)


def ref_llama3(d: int, theta: float, factor: float, low: float, high: float,
               orig: int) -> np.ndarray:
    out = []
    for w in ref_rope(d, theta):
        wl = 2 * math.pi / w
        if wl < orig / high:
            out.append(w)
        elif wl > orig / low:
            out.append(w / factor)
        else:
            k = (orig / wl - low) / (high - low)
            out.append((1 - k) * w / factor + k * w)
    return np.array(out)


def ref_longrope(d: int, theta: float, short: list[float], long: list[float], orig: int,
                 s: int | None) -> np.ndarray:
    ext = np.array(long if s is not None and s > orig else short)
    return ref_rope(d, theta) / ext


D = 64
SHORT = [1.0 + 0.01 * i for i in range(D // 2)]
LONG = [1.0 + 0.5 * i for i in range(D // 2)]

CASES: list[tuple[str, dict[str, Any], float, Any]] = [
    ("linear", {"factor": 4.0}, 10000.0, lambda s: ref_linear(D, 1e4, 4.0)),
    ("dynamic", {"factor": 2.0, "original_max_position_embeddings": 2048}, 10000.0,
     lambda s: ref_dynamic(D, 1e4, 2.0, 2048, s or 0)),
    ("yarn", {"factor": 4.0, "original_max_position_embeddings": 4096}, 10000.0,
     lambda s: ref_yarn(D, 1e4, 4.0, 4096)),
    ("yarn", {"factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 32,
              "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}, 10000.0,
     lambda s: ref_yarn(D, 1e4, 40.0, 4096)),
    ("yarn", {"factor": 32.0, "original_max_position_embeddings": 4096, "truncate": False,
              "beta_fast": 32.0, "beta_slow": 1.0}, 150000.0,
     lambda s: ref_yarn(D, 150000.0, 32.0, 4096, truncate=False)),
    ("llama3", {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}, 500000.0,
     lambda s: ref_llama3(D, 500000.0, 8.0, 1.0, 4.0, 8192)),
    ("longrope", {"short_factor": SHORT, "long_factor": LONG,
                  "original_max_position_embeddings": 4096, "factor": 32.0}, 10000.0,
     lambda s: ref_longrope(D, 1e4, SHORT, LONG, 4096, s)),
]
IDS = [f"{c[0]}-{i}" for i, c in enumerate(CASES)]


@pytest.mark.parametrize(("kind", "params", "theta", "ref"), CASES, ids=IDS)
@pytest.mark.parametrize("seq_len", [None, 100, 4096, 4097, 20000])
def test_inv_freq_matches_paper_formula(kind: str, params: dict[str, Any], theta: float,
                                        ref: Any, seq_len: int | None) -> None:
    enc = per.get_encoder("rotary", dim=D, theta=theta, scaling={"type": kind, **params})
    got = enc.inv_freq(seq_len)  # type: ignore[attr-defined]
    want = ref(seq_len)
    np.testing.assert_allclose(got, want, rtol=64 * EPS64, atol=0)


def test_attention_factors_match_papers() -> None:
    def enc(kind: str, **p: Any) -> Any:
        return per.get_encoder("rotary", dim=D, scaling={"type": kind, **p})

    yarn = {"original_max_position_embeddings": 4096}
    assert enc("yarn", factor=4.0, **yarn).attention_factor == pytest.approx(
        0.1 * math.log(4.0) + 1, rel=1e-15)
    # DeepSeek-V2: mscale=0.707, mscale_all_dim=0.707 -> ratio 1; V3: (1.0, 1.0) -> 1
    assert enc("yarn", factor=40.0, mscale=0.707, mscale_all_dim=0.707,
               **yarn).attention_factor == 1.0
    m = enc("yarn", factor=40.0, mscale=1.0, mscale_all_dim=0.5, **yarn).attention_factor
    assert m == pytest.approx((0.1 * math.log(40) + 1) / (0.05 * math.log(40) + 1), rel=1e-15)
    # Hugging Face tests truthiness: mscale=0 means "absent", giving m(factor, 1)
    assert enc("yarn", factor=40.0, mscale=0.0, mscale_all_dim=1.0,
               **yarn).attention_factor == pytest.approx(0.1 * math.log(40) + 1)
    assert enc("yarn", factor=4.0, attention_factor=0.5, **yarn).attention_factor == 0.5
    lr = {"short_factor": SHORT, "long_factor": LONG, "original_max_position_embeddings": 4096}
    assert enc("longrope", factor=32.0, **lr).attention_factor == pytest.approx(
        math.sqrt(1 + math.log(32) / math.log(4096)), rel=1e-15)
    assert enc("longrope", factor=1.0, **lr).attention_factor == 1.0
    assert enc("longrope", attention_factor=1.19, **lr).attention_factor == 1.19
    for kind, p in [("linear", {"factor": 2.0}),
                    ("dynamic", {"factor": 2.0, "original_max_position_embeddings": 64}),
                    ("llama3", {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 8192})]:
        assert enc(kind, **p).attention_factor == 1.0


def test_defaults_are_filled_and_equal_encoders_compare_equal() -> None:
    a = per.get_encoder("rotary", dim=D, scaling={"type": "yarn", "factor": 4,
                                                 "original_max_position_embeddings": 4096})
    b = per.get_encoder("rotary", dim=D, scaling={"rope_type": "yarn", "factor": 4.0,
                                                 "original_max_position_embeddings": 4096,
                                                 "beta_fast": 32, "beta_slow": 1.0,
                                                 "truncate": True})
    assert a == b and hash(a) == hash(b)
    assert a.options["scaling"] == {
        "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": None, "mscale_all_dim": None,
        "attention_factor": None, "truncate": True,
    }
    assert per.get_encoder("rotary", dim=8, scaling={"type": "default"}) == per.get_encoder(
        "rotary", dim=8)


# -- Hugging Face ---------------------------------------------------------------------------------
def _hf_config(head_dim: int, rd: int, theta: float, rope_parameters: dict[str, Any],
               max_pos: int) -> Any:
    transformers = pytest.importorskip(
        "transformers", reason="transformers is not installed (the reference implementation)")
    params = {"rope_theta": theta, **rope_parameters}
    if rd != head_dim:
        params["partial_rotary_factor"] = rd / head_dim
    return transformers.LlamaConfig(hidden_size=head_dim * 4, num_attention_heads=4,
                                    head_dim=head_dim, max_position_embeddings=max_pos,
                                    rope_parameters=params)


HF_CASES: list[tuple[dict[str, Any], int, float]] = [
    ({"type": "linear", "factor": 4.0}, 4096, 10000.0),
    ({"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048}, 2048, 1e4),
    ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}, 16384, 1e4),
    ({"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 32,
      "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.5}, 163840, 10000.0),
    ({"type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
      "truncate": False, "beta_fast": 32.0, "beta_slow": 1.0}, 131072, 150000.0),
    ({"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}, 131072, 500000.0),
    ({"type": "longrope", "short_factor": SHORT[:16], "long_factor": LONG[:16],
      "original_max_position_embeddings": 4096, "factor": 32.0}, 131072, 10000.0),
]


@pytest.mark.parametrize(("scaling", "max_pos", "theta"), HF_CASES,
                         ids=[f"{c[0]['type']}-{i}" for i, c in enumerate(HF_CASES)])
@pytest.mark.parametrize("seq_len", [None, 1000, 5000, 300000])
def test_matches_hugging_face_rope_init_functions(scaling: dict[str, Any], max_pos: int,
                                                  theta: float, seq_len: int | None) -> None:
    pytest.importorskip("torch", reason="Hugging Face's RoPE functions are written in torch")
    head_dim = 64
    rd = 32 if scaling["type"] == "longrope" else head_dim
    hf_params = {("rope_type" if k == "type" else k): v for k, v in scaling.items()}
    config = _hf_config(head_dim, rd, theta, hf_params, max_pos)
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv, af = ROPE_INIT_FUNCTIONS[scaling["type"]](config, "cpu", seq_len=seq_len)
    enc = per.get_encoder("rotary", dim=head_dim, rotary_dim=rd, theta=theta, scaling=scaling)
    ours = enc.inv_freq(seq_len)  # type: ignore[attr-defined]
    # HF computes in float32 (float32 pow): a few ulps from the float64 values.
    np.testing.assert_allclose(ours.astype(np.float32), inv.numpy(), rtol=8 * EPS32, atol=0)
    assert enc.attention_factor == pytest.approx(af, rel=1e-12)  # type: ignore[attr-defined]


# -- validation -----------------------------------------------------------------------------------
def _raises(exc: type[Exception], *patterns: str, **options: Any) -> None:
    with pytest.raises(exc) as info:
        per.get_encoder("rotary", **{"dim": 64, **options})
    for p in patterns:
        assert p in str(info.value), f"{p!r} not in {info.value}"


def test_unknown_scaling_type_lists_the_known_ones() -> None:
    _raises(ValueError, "unknown scaling type 'yarm'", "Did you mean 'yarn'",
            "axial, deepseek-yarn, default, dynamic, grok1, linear, llama3, longrope, ntk, "
            "proportional, telechat3-yarn, yarn", scaling={"type": "yarm"})


def test_scaling_without_type() -> None:
    _raises(ValueError, "needs a 'type'", "linear", scaling={"factor": 2.0})
    _raises(TypeError, "'type' must be a string", scaling={"type": 3})
    _raises(ValueError, "'type'='yarn' and 'rope_type'='linear'",
            scaling={"type": "yarn", "rope_type": "linear", "factor": 2.0})


def test_missing_scaling_parameter_is_named() -> None:
    _raises(ValueError, "scaling 'yarn' is missing required parameter",
            "'original_max_position_embeddings' (a positive integer)",
            scaling={"type": "yarn", "factor": 4.0})
    _raises(ValueError, "missing required parameters 'factor'",
            scaling={"type": "llama3", "original_max_position_embeddings": 8192})


def test_unknown_scaling_parameter_is_named() -> None:
    _raises(ValueError, "scaling 'yarn' has no parameter 'betafast' (did you mean 'beta_fast'?)",
            "its parameters are: factor (required",
            scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096,
                     "betafast": 32})
    _raises(ValueError, "'rope_theta' (it is the encoder option theta=...)",
            scaling={"type": "linear", "factor": 2.0, "rope_theta": 1e6})
    _raises(ValueError, "'partial_rotary_factor' (use the encoder option rotary_dim=",
            scaling={"type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5})


@pytest.mark.parametrize(("scaling", "exc", "pattern"), [
    ({"type": "linear", "factor": 0.5}, ValueError, "'factor' must be a number >= 1, got 0.5"),
    ({"type": "linear", "factor": "2"}, TypeError, "'factor' must be a number >= 1, got '2'"),
    ({"type": "linear", "factor": True}, TypeError, "'factor' must be a number >= 1, got True"),
    ({"type": "linear", "factor": float("nan")}, ValueError, "'factor' must be a number >= 1"),
    ({"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 0}, ValueError,
     "'original_max_position_embeddings' must be a positive integer, got 0"),
    ({"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 10.5}, TypeError,
     "'original_max_position_embeddings' must be a positive integer, got 10.5"),
    ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fast": 1,
      "beta_slow": 32}, ValueError, "'beta_fast' must be greater than 'beta_slow'"),
    ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "truncate": 1},
     TypeError, "'truncate' must be a bool (True or False), got 1"),
    ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
      "attention_factor": -1.0}, ValueError, "'attention_factor' must be None or a number > 0"),
    ({"type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0,
      "original_max_position_embeddings": 8192}, ValueError,
     "'high_freq_factor' must be greater than 'low_freq_factor'"),
    ({"type": "longrope", "short_factor": [1.0] * 3, "long_factor": [1.0] * 32,
      "original_max_position_embeddings": 64, "factor": 2.0}, ValueError,
     "'short_factor' must have rotary_dim/2 = 32 entries, got 3"),
    ({"type": "longrope", "short_factor": [1.0] * 32, "long_factor": "abc",
      "original_max_position_embeddings": 64, "factor": 2.0}, TypeError,
     "'long_factor' must be a list of rotary_dim/2 numbers > 0"),
    ({"type": "longrope", "short_factor": [1.0] * 32, "long_factor": [1.0] * 32,
      "original_max_position_embeddings": 64}, ValueError,
     "needs 'factor' (= max_position_embeddings / original_max_position_embeddings"),
])
def test_bad_scaling_parameters(scaling: dict[str, Any], exc: type[Exception],
                                pattern: str) -> None:
    _raises(exc, f"scaling {scaling['type']!r}", pattern, scaling=scaling)


def test_dynamic_needs_rotary_dim_above_two() -> None:
    _raises(ValueError, "needs rotary_dim > 2", rotary_dim=2,
            scaling={"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64})


# -- plugins --------------------------------------------------------------------------------------
class Stretch(RopeScaling):
    name = "test-stretch"
    parameters: ClassVar[Mapping[str, per.Option]] = {
        "factor": per.Option(float, allowed="a number >= 1", check=lambda f: f >= 1),
        "gain": per.Option(float, 1.0, allowed="a number > 0", check=lambda g: g > 0),
    }

    def inv_freq(self, rotary_dim: int, theta: float, params: Any,
                 seq_len: int | None = None) -> np.ndarray:
        i = np.arange(0, rotary_dim, 2, dtype=np.float64)
        return np.asarray(theta ** (-i / rotary_dim) / math.sqrt(params["factor"]))

    def attention_factor(self, rotary_dim: int, theta: float, params: Any) -> float:
        return float(params["gain"])


class DuckScaling:
    """Only the required protocol: a name and inv_freq."""

    name = "test-duck"

    def inv_freq(self, rotary_dim: int, theta: float, params: Any, seq_len: Any = None) -> Any:
        return [1.0 / (k + 1) for k in range(rotary_dim // 2)]


def _plugin(*scalings: Any) -> Any:
    mod = types.ModuleType("test_scaling_plugin")

    @per.hookimpl
    def peregistry_rope_scalings() -> list[Any]:
        return list(scalings)

    mod.peregistry_rope_scalings = peregistry_rope_scalings  # type: ignore[attr-defined]
    return mod


def test_third_party_scaling_through_get_encoder() -> None:
    name = per.register(_plugin(Stretch(), DuckScaling()), name="test-scalings")
    try:
        enc = per.get_encoder("rotary", dim=8, scaling={"type": "test-stretch", "factor": 4})
        np.testing.assert_allclose(enc.inv_freq(), ref_rope(8, 1e4) / 2, rtol=1e-15)  # type: ignore[attr-defined]
        assert enc.options["scaling"] == {"type": "test-stretch", "factor": 4.0, "gain": 1.0}
        cos, sin = enc.replace(scaling={"type": "test-stretch", "factor": 4, "gain": 2.0}).cos_sin(  # type: ignore[attr-defined]
            np.arange(3))
        np.testing.assert_allclose(cos**2 + sin**2, 4.0, rtol=1e-14)
        with pytest.raises(ValueError, match="has no parameter 'gian'"):
            per.get_encoder("rotary", dim=8, scaling={"type": "test-stretch", "factor": 4,
                                                      "gian": 2.0})
        duck = per.get_encoder("rotary", dim=8, scaling={"type": "test-duck"})
        np.testing.assert_allclose(duck.inv_freq(), [1, 1 / 2, 1 / 3, 1 / 4])  # type: ignore[attr-defined]
        with pytest.raises(ValueError, match="scaling 'test-duck' has no parameter 'x'"):
            per.get_encoder("rotary", dim=8, scaling={"type": "test-duck", "x": 1})
        with pytest.raises(ValueError, match="test-stretch"):
            per.get_encoder("rotary", dim=8, scaling={"type": "nope"})
    finally:
        per.unregister(name)
    with pytest.raises(ValueError, match="unknown scaling type 'test-stretch'"):
        per.get_encoder("rotary", dim=8, scaling={"type": "test-stretch", "factor": 4})


def test_broken_scaling_plugin_does_not_break_the_others() -> None:
    name = per.register(_plugin(object(), Stretch()), name="test-broken-scalings")
    try:
        info = {p.name: p for p in per.default_registry.plugins()}[name]
        assert info.status == "error" and "not a rope scaling" in (info.error or "")
        per.get_encoder("rotary", dim=8, scaling={"type": "yarn", "factor": 2.0,
                                                  "original_max_position_embeddings": 64})
        per.get_encoder("rotary", dim=8, scaling={"type": "test-stretch", "factor": 2.0})
    finally:
        per.unregister(name)


def test_scaling_returning_wrong_shape_is_an_error() -> None:
    class Bad(RopeScaling):
        name = "test-bad-shape"

        def inv_freq(self, rotary_dim: int, theta: float, params: Any,
                     seq_len: int | None = None) -> np.ndarray:
            return np.ones(3)

    name = per.register(_plugin(Bad()), name="test-bad-shape-plugin")
    try:
        with pytest.raises(ValueError, match=r"returned inv_freq of shape \(3,\), but should be"):
            per.get_encoder("rotary", dim=8, scaling={"type": "test-bad-shape"})
    finally:
        per.unregister(name)


# -- Option declarations --------------------------------------------------------------------------
BUILTIN = ("default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional")


def test_builtin_parameters_are_named_options() -> None:
    from peregistry.rope import scalings

    types_ = {s.name: s for s in scalings.builtin_scalings()}
    assert tuple(types_) == BUILTIN
    for scaling in types_.values():
        for key, option in scaling.parameters.items():
            assert isinstance(option, per.Option) and option.name == key, (scaling, key)
    yarn = types_["yarn"].parameters
    assert yarn["beta_fast"].default == 32.0 and yarn["beta_slow"].default == 1.0
    assert yarn["truncate"].default is True and yarn["attention_factor"].nullable
    assert yarn["factor"].required and yarn["original_max_position_embeddings"].required
    assert types_["longrope"].parameters["short_factor"].item is float
    assert scalings.describe_parameters(types_["linear"]) == "factor (required, a number >= 1)"
    assert scalings.describe_parameters(types_["default"]) == "none"
    factor, orig = scalings.factor_option(), scalings.context_option()
    assert factor.type is float and factor.allowed == "a number >= 1" and factor.required
    assert not factor.check(0.99) and factor.check(1.0)
    assert orig.type is int and orig.allowed == "a positive integer" and not orig.check(0)


def _hf_keys(config: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[set[str], set[str]]:
    """The (required, optional) keys transformers' own validation of ``config.rope_parameters``
    expects (``_check_received_keys``)."""
    from transformers.modeling_rope_utils import RotaryEmbeddingConfigMixin

    seen: list[tuple[set[str], set[str]]] = []

    def capture(rope_type: str, received_keys: set[str], required_keys: set[str],
                optional_keys: set[str] | None = None, ignore_keys: Any = None) -> None:
        seen.append((set(required_keys), set(optional_keys or ())))

    monkeypatch.setattr(RotaryEmbeddingConfigMixin, "_check_received_keys", staticmethod(capture))
    config.validate_rope()
    assert len(seen) == 1, seen
    return seen[0]


#: Keys declared here that Hugging Face reads from elsewhere in the model config.
OURS_ONLY = {"dynamic": {"original_max_position_embeddings"}}  # HF: max_position_embeddings
NOT_PARAMETERS = {"rope_type", "rope_theta", "partial_rotary_factor"}  # "type"; encoder options


@pytest.mark.parametrize(("scaling", "max_pos", "theta"), HF_CASES,
                         ids=[f"{c[0]['type']}-{i}" for i, c in enumerate(HF_CASES)])
def test_parameter_names_are_hugging_faces(scaling: dict[str, Any], max_pos: int, theta: float,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from peregistry.rope.scalings import parameter_options, registered_scalings

    kind = scaling["type"]
    rd = 32 if kind == "longrope" else 64
    hf_params = {("rope_type" if k == "type" else k): v for k, v in scaling.items()}
    required, optional = _hf_keys(_hf_config(64, rd, theta, hf_params, max_pos), monkeypatch)
    options = parameter_options(registered_scalings()[kind])
    extra = OURS_ONLY.get(kind, set())
    assert set(options) == (required | optional) - NOT_PARAMETERS | extra
    assert {k for k, o in options.items() if o.required} == required - NOT_PARAMETERS | extra
    # The dict of a Hugging Face config is accepted as is once theta is an encoder option.
    config = _hf_config(64, rd, theta, hf_params, max_pos)
    rope_parameters = {k: v for k, v in config.rope_parameters.items() if k not in NOT_PARAMETERS}
    per.get_encoder("rotary", dim=64, rotary_dim=rd, theta=theta,
                    scaling={**scaling, "rope_type": kind, **rope_parameters})


def test_none_means_the_default_and_json_integers_are_accepted() -> None:
    base = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    a = per.get_encoder("rotary", dim=D, scaling=base)
    b = per.get_encoder("rotary", dim=D, scaling={**base, "beta_fast": None, "truncate": None,
                                                 "mscale": None,
                                                 "original_max_position_embeddings": 4096.0})
    assert a == b and b.options["scaling"]["original_max_position_embeddings"] == 4096
    assert type(b.options["scaling"]["original_max_position_embeddings"]) is int
    _raises(TypeError, "scaling 'yarn'", "'factor' must be a number >= 1, got None",
            scaling={**base, "factor": None})
    lr = per.get_encoder("rotary", dim=8, scaling={
        "type": "longrope", "short_factor": (1, 2, 3, 4), "long_factor": np.arange(1.0, 5.0).tolist(),
        "original_max_position_embeddings": 64, "factor": 2})
    assert lr.options["scaling"]["short_factor"] == (1.0, 2.0, 3.0, 4.0)
    _raises(ValueError, "scaling 'longrope'", "'short_factor' must be a list of rotary_dim/2 "
            "numbers > 0, got (1.0, inf)", rotary_dim=4,
            scaling={"type": "longrope", "short_factor": [1.0, math.inf], "long_factor": [1, 1],
                     "original_max_position_embeddings": 64, "factor": 2})


_TURNS = per.Option(int, 1, allowed="a positive integer", check=lambda t: t > 0)


class Twist(RopeScaling):
    """A plugin's type declared with Options only (one shared by two keys)."""

    name = "test-twist"
    parameters: ClassVar[Mapping[str, per.Option]] = {
        "factor": per.Option(float, allowed="a number >= 1", check=lambda f: f >= 1),
        "turns": _TURNS,
        "more_turns": _TURNS,
        "weights": per.Option(tuple, (1.0,), item=float, doc="any real numbers"),
        "mode": per.Option(str, "a", choices=("a", "b")),
    }

    def inv_freq(self, rotary_dim: int, theta: float, params: Any,
                 seq_len: int | None = None) -> np.ndarray:
        return ref_rope(rotary_dim, theta) / params["factor"]


@pytest.mark.parametrize(("scaling", "exc", "pattern"), [
    ({"factor": 0.5}, ValueError,
     "rotary: scaling 'test-twist': option 'factor' must be a number >= 1, got 0.5"),
    ({"factor": "4"}, TypeError, "option 'factor' must be a number >= 1, got '4' of type str"),
    ({"factor": 2, "turns": 0}, ValueError, "option 'turns' must be a positive integer, got 0"),
    ({"factor": 2, "more_turns": 2.5}, TypeError,
     "option 'more_turns' must be a positive integer, got 2.5"),
    ({"factor": 2, "weights": [1, True]}, TypeError,
     "option 'weights' must be a sequence of real numbers, got (1, True)"),
    ({"factor": 2, "mode": "c"}, ValueError, "option 'mode' must be one of 'a', 'b', got 'c'"),
    ({"turns": 2}, ValueError, "scaling 'test-twist' is missing required parameter 'factor' "
     "(a number >= 1)"),
    ({"factor": 2, "turn": 2}, ValueError, "scaling 'test-twist' has no parameter 'turn' (did you "
     "mean 'turns'?); its parameters are: factor (required, a number >= 1), turns=1, "
     "more_turns=1, weights=(1.0,), mode='a'"),
])
def test_option_declared_plugin_errors_name_type_parameter_value_and_allowed(
        scaling: dict[str, Any], exc: type[Exception], pattern: str) -> None:
    name = per.register(_plugin(Twist()), name="test-twist-plugin")
    try:
        _raises(exc, pattern, scaling={"type": "test-twist", **scaling})
    finally:
        per.unregister(name)


def test_option_declared_plugin_fills_defaults() -> None:
    name = per.register(_plugin(Twist()), name="test-twist-plugin")
    try:
        enc = per.get_encoder("rotary", dim=8, scaling={"type": "test-twist", "factor": 2,
                                                        "more_turns": 3, "weights": [2, 3]})
        assert enc.options["scaling"] == {"type": "test-twist", "factor": 2.0, "turns": 1,
                                          "more_turns": 3, "weights": (2.0, 3.0), "mode": "a"}
        np.testing.assert_allclose(enc.inv_freq(), ref_rope(8, 1e4) / 2, rtol=1e-15)  # type: ignore[attr-defined]
    finally:
        per.unregister(name)
    # the shared declaration is named by its first key, a copy by the second
    assert Twist.parameters["turns"] is _TURNS and _TURNS.name == "turns"
    assert Twist.parameters["more_turns"].name == "more_turns"


def test_resolve_scaling_with_given_types_and_bad_declarations() -> None:
    from peregistry.rope.scalings import Linear, resolve_scaling

    obj, params = resolve_scaling("x", {"rope_type": "linear", "factor": 2}, rotary_dim=8,
                                  theta=1e4, known={"linear": Linear()})
    assert isinstance(obj, Linear) and params == {"type": "linear", "factor": 2.0}
    with pytest.raises(ValueError, match=r"unknown scaling type 'yarn'\. Did you mean 'yarm'\? "
                                         r"Known types: yarm"):
        resolve_scaling("x", {"type": "yarn"}, rotary_dim=8, theta=1e4, known={"yarm": Linear()})
    assert resolve_scaling("x", None, rotary_dim=8, theta=1e4, known={}) == (None, None)

    class Junk:
        name = "test-junk"
        parameters: ClassVar[dict[str, Any]] = {"factor": float}

        def inv_freq(self, *args: Any) -> Any:
            raise AssertionError

    with pytest.raises(TypeError, match="scaling 'test-junk' declares parameter 'factor' as "
                                        "<class 'float'>; declare it with peregistry.Option"):
        resolve_scaling("x", {"type": "test-junk"}, rotary_dim=8, theta=1e4,
                        known={"test-junk": Junk()})


def test_option_tuple_of_floats() -> None:
    option = per.Option(tuple, item=float)
    option.__set_name__(object, "v")
    assert option.allowed == "a sequence of real numbers" and option.item is float
    assert option.convert("o", [1, 2.5, np.float32(3)]) == (1.0, 2.5, 3.0)
    assert per.Option(tuple).item is int and per.Option(tuple).allowed == "a sequence of integers"
    with pytest.raises(TypeError, match=r"o: option 'v' must be a sequence of real numbers, got "
                                        r"\['1'\] of type list"):
        option.convert("o", ["1"])
    with pytest.raises(ValueError, match=r"option 'v' must be a sequence of real numbers, got "
                                         r"\(nan,\)"):
        option.convert("o", (math.nan,))
    with pytest.raises(TypeError, match="Option item .* must be int or float"):
        per.Option(tuple, item=str)


# -- the softmax-scale factor of DeepSeek's yarn (issue 16, item 3) ------------------------------
@pytest.mark.parametrize(("mscale", "mscale_all_dim"), [(1.0, 1.0), (0.707, 0.707), (1.0, 0.0),
                                                        (None, None), (0.0, 2.0)])
def test_softmax_scale_factor_is_deepseeks_mscale_squared(mscale: Any, mscale_all_dim: Any) -> None:
    """m(s, k) = 0.1·k·ln(s) + 1 squared, with k = mscale_all_dim when non-zero (DeepSeek-V2/V3
    multiply their softmax scale by it), in float64 from the formula; 1.0 otherwise."""
    params = {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
              "mscale": mscale, "mscale_all_dim": mscale_all_dim}
    enc = per.get_encoder("rotary", dim=64, scaling=params)
    want = (0.1 * mscale_all_dim * math.log(40.0) + 1.0) ** 2 if mscale_all_dim else 1.0
    assert enc.softmax_scale_factor == pytest.approx(want, rel=4e-16, abs=0)
    assert per.get_encoder("rotary", dim=64).softmax_scale_factor == 1.0
    assert per.get_encoder("rotary", dim=64, scaling={"type": "linear", "factor": 4.0}
                           ).softmax_scale_factor == 1.0


def test_softmax_scale_factor_matches_transformers_deepseek() -> None:
    ds = pytest.importorskip("transformers.models.deepseek_v3.modeling_deepseek_v3",
                             reason="transformers is the reference only in the torch env")
    rope = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
            "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
    enc = per.get_encoder("rotary", dim=64, scaling=rope)
    assert enc.softmax_scale_factor == pytest.approx(ds.yarn_apply_mscale(rope, 1.0), rel=1e-15)
