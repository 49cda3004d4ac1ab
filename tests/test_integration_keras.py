"""``peregistry.keras`` (issue 31, item 2) against keras-hub's own layers, on the Keras backend
this process runs (the tox env ``keras`` runs this file once with ``KERAS_BACKEND=jax`` and
once with ``KERAS_BACKEND=torch``; no TensorFlow): keras-hub's ``RotaryEmbedding``,
``SinePositionEncoding`` and ``AlibiBias`` are the references; a learned table is a trainable
Keras weight that ``fit`` moves and ``model.save``/``load_model`` keep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

keras = pytest.importorskip("keras")
keras_hub = pytest.importorskip("keras_hub")
if keras.backend.backend() not in ("jax", "torch"):
    pytest.skip(f"the {keras.backend.backend()} Keras backend is not one peregistry serves",
                allow_module_level=True)

import peregistry as per  # noqa: E402
from peregistry.keras import PositionEmbedding, RelativeBias, RotaryEmbedding  # noqa: E402

# Keras 3.15's own Variable.__array__ (model.save, fit on torch) lacks NumPy 2's copy keyword,
# and NumPy warns about it; not peregistry's code
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning")
EPS32 = float(np.finfo(np.float32).eps)
RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _rng_from_its_seed() -> None:
    """Each test draws the same numbers whatever ran before it (a failure replays alone, -k)."""
    RNG.bit_generator.state = np.random.default_rng(0).bit_generator.state


def tensor(shape: tuple[int, ...]) -> Any:
    return keras.ops.convert_to_tensor(RNG.standard_normal(shape).astype("float32"))


def host(a: Any) -> np.ndarray[Any, Any]:
    # not keras.ops.convert_to_numpy: on the torch backend it warns (NumPy 2's __array__ copy
    # keyword), which pytest turns into an error
    if hasattr(a, "value") and not hasattr(a, "shape"):
        a = a.value
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.asarray(a, dtype=np.float64)


def close(got: Any, want: Any, positions: int) -> None:
    """keras-hub computes its angles in float32: off by about eps32 · position."""
    want_np = host(want)
    tol = 8 * EPS32 * max(positions, 1) * max(1.0, float(np.abs(want_np).max()))
    np.testing.assert_allclose(host(got), want_np, rtol=0, atol=tol)


@pytest.mark.parametrize("start", [0, 7])
def test_rotary_matches_keras_hub(start: int) -> None:
    x = tensor((2, 10, 3, 16))  # keras-hub's default layout: (batch, seq, heads, dim)
    theirs = keras_hub.layers.RotaryEmbedding(max_wavelength=10000)(x, start_index=start)
    close(RotaryEmbedding("rotary", dim=16)(x, start_index=start), theirs, start + 10)
    assert host(theirs - x).max() > 1e-3  # a rotation, not the identity
    # another layout, explicit positions, and keras-hub's linear scaling_factor
    y = tensor((2, 3, 10, 16))
    pos = keras.ops.convert_to_tensor(RNG.integers(0, 50, (2, 10)).astype("int32"))
    theirs = keras_hub.layers.RotaryEmbedding(max_wavelength=500, scaling_factor=4.0,
                                              sequence_axis=2)(y, positions=pos)
    ours = RotaryEmbedding("rotary", dim=16, theta=500.0,
                           scaling={"type": "linear", "factor": 4.0}, sequence_axis=2)
    close(ours(y, positions=pos), theirs, 50)


def test_sine_matches_keras_hub() -> None:
    h = tensor((2, 10, 16))
    for start in (0, 5):
        theirs = keras_hub.layers.SinePositionEncoding()(h, start_index=start)
        close(PositionEmbedding("sinusoidal", dim=16)(h, start_index=start), theirs, start + 10)


def test_alibi_matches_keras_hub_under_the_causal_softmax() -> None:
    scores = tensor((2, 8, 6, 6))
    theirs = host(keras_hub.layers.AlibiBias()(scores))
    p = keras.ops.arange(6)
    bias = RelativeBias("alibi", num_heads=8)(p, p)
    assert tuple(bias.shape) == (8, 6, 6)
    ours = host(scores + bias)
    causal = np.tril(np.ones((6, 6), dtype=bool))

    def softmax(v: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        v = np.where(causal, v, -np.inf)
        e = np.exp(v - v.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    # keras-hub adds m·(k - K + 1), ALiBi's -m·|q - k| plus a constant per query row
    np.testing.assert_allclose(softmax(ours), softmax(theirs), rtol=0, atol=64 * EPS32)


def _functional() -> Any:
    inp = keras.Input((10, 16))
    h = inp + PositionEmbedding("learned", num_positions=32, dim=16)(inp)
    return keras.Model(inp, keras.layers.Dense(4)(h))


class _Attention(keras.Model):  # type: ignore[misc]
    """One head with a T5 bias: the positions are made inside ``call``, so the bias layer is
    part of the computation (in a functional model, a layer called on constants is not)."""

    def __init__(self) -> None:
        super().__init__()
        self.pos = PositionEmbedding("learned", num_positions=32, dim=16)
        self.rel = RelativeBias("t5", num_heads=2, num_buckets=8, max_distance=16)
        self.out = keras.layers.Dense(4)

    def call(self, x: Any) -> Any:
        h = x + self.pos(x)
        p = keras.ops.arange(x.shape[1])
        scores = keras.ops.einsum("bqd,bkd->bqk", h, h)[:, None] + self.rel(p, p)
        att = keras.ops.einsum("bhqk,bkd->bqd", keras.ops.softmax(scores, axis=-1), h)
        return self.out(att)


def _fit_moves(model: Any, x: Any, y: Any) -> None:
    tables = [w for w in model.weights if w.path.endswith("/table")]
    assert tables and all(w.trainable for w in tables)
    before = [host(w) for w in tables]
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    assert all(np.abs(host(w) - b).max() > 0 for w, b in zip(tables, before, strict=True))


def test_learned_tables_train_save_and_load(tmp_path: Path) -> None:
    keras.utils.set_random_seed(0)
    x, y = host(tensor((4, 10, 16))), host(tensor((4, 10, 4)))
    attention = _Attention()
    attention(x)
    _fit_moves(attention, x, y)
    assert len([w for w in attention.weights if w.path.endswith("/table")]) == 2
    model = _functional()
    _fit_moves(model, x, y)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(host(loaded(x)), host(model(x)))


def test_configs_round_trip_and_errors() -> None:
    for layer in (RotaryEmbedding("rotary", dim=16, sequence_axis=2),
                  PositionEmbedding("sinusoidal", dim=8, layout="split"),
                  RelativeBias("alibi", num_heads=4),
                  RotaryEmbedding(per.get_encoder("mrope", dim=16, sections=(2, 3, 3)))):
        again = type(layer).from_config(layer.get_config())
        assert again.encoder == layer.encoder
        assert again.get_config() == layer.get_config()
    with pytest.raises(TypeError, match="needs an encoder of kind 'rotary', got 'alibi'"):
        RotaryEmbedding("alibi", num_heads=4)
    with pytest.raises(TypeError, match="options \\['dim'\\] go with an encoder name"):
        PositionEmbedding(per.get_encoder("sinusoidal", dim=8), dim=8)
