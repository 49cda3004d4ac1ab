"""``peregistry.flax`` (issue 31, item 3): a learned encoder's parameters are ``nnx.Param``
attributes that ``nnx.jit`` and ``nnx.grad`` train, and a tiny NNX model's training step gives
the numbers of the same model written as a plain JAX function of a params dict (the path
peregistry's encoders always had). Flax env only."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS

if "jax" not in BACKENDS:
    pytest.skip("jax not selected (PEREGISTRY_BACKENDS)", allow_module_level=True)
nnx = pytest.importorskip("flax.nnx")
jax = pytest.importorskip("jax")
jnp = jax.numpy

import peregistry as per  # noqa: E402
from peregistry.flax import Encoder  # noqa: E402

VOCAB, WIDTH, SEQ, LR = 32, 8, 12, 0.5


class Tiny(nnx.Module):  # type: ignore[misc]
    """Token embedding + learned absolute positions, rotary q/k, a T5 bias, one head."""

    def __init__(self, rngs: Any) -> None:
        self.embed = nnx.Embed(VOCAB, WIDTH, rngs=rngs)
        self.pos = Encoder("learned", num_positions=16, dim=WIDTH, rngs=rngs)
        self.rope = Encoder("rotary", dim=WIDTH)
        self.rel = Encoder("t5", num_heads=1, num_buckets=8, max_distance=16, rngs=rngs)
        self.out = nnx.Linear(WIDTH, VOCAB, rngs=rngs)

    def __call__(self, ids: Any) -> Any:
        p = jnp.arange(ids.shape[-1])
        h = self.embed(ids) + self.pos(p)
        scores = self.rope(h) @ jnp.swapaxes(self.rope(h), -1, -2) + self.rel(p, p)[0]
        causal = jnp.tril(jnp.ones((ids.shape[-1],) * 2, dtype=bool))
        att = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1) @ h
        return self.out(att)


def plain(params: dict[str, Any], ids: Any) -> Any:
    """The same model as a function of a params dict, with the encoders called directly."""
    pos_enc = per.get_encoder("learned", num_positions=16, dim=WIDTH)
    rope = per.get_encoder("rotary", dim=WIDTH)
    rel = per.get_encoder("t5", num_heads=1, num_buckets=8, max_distance=16)
    p = jnp.arange(ids.shape[-1])
    h = params["embed"]["embedding"][ids] + pos_enc.encode(p, params=params["pos"])
    q = rope.rotate(h)
    scores = q @ jnp.swapaxes(q, -1, -2) + rel.bias(p, p, params=params["rel"])[0]
    causal = jnp.tril(jnp.ones((ids.shape[-1],) * 2, dtype=bool))
    att = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1) @ h
    return att @ params["out"]["kernel"] + params["out"]["bias"]


def loss_of(logits: Any, ids: Any) -> Any:
    logp = jax.nn.log_softmax(logits[:, :-1], axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, ids[:, 1:, None], axis=-1))


def test_a_training_step_matches_plain_jax() -> None:
    model = Tiny(nnx.Rngs(0))
    ids = jnp.asarray(np.random.default_rng(0).integers(0, VOCAB, (2, SEQ)))
    start = nnx.state(model, nnx.Param)
    params = jax.tree.map(lambda v: v, nnx.to_pure_dict(start))

    @nnx.jit
    def step(model: Any, ids: Any) -> Any:
        loss, grads = nnx.value_and_grad(lambda m: loss_of(m(ids), ids))(model)
        state = nnx.state(model, nnx.Param)
        nnx.update(model, jax.tree.map(lambda p, g: p - LR * g, state, grads))
        return loss

    loss = step(model, ids)
    plain_loss, plain_grads = jax.jit(jax.value_and_grad(
        lambda prm: loss_of(plain(prm, ids), ids)))(params)
    want = jax.tree.map(lambda p, g: p - LR * g, params, plain_grads)
    got = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    eps = float(np.finfo(np.float32).eps)
    assert abs(float(loss) - float(plain_loss)) <= 64 * eps * abs(float(plain_loss))
    for path, a, b in zip(jax.tree_util.tree_leaves_with_path(got),
                          jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0,
                                   atol=256 * eps * max(1.0, float(np.abs(b).max())),
                                   err_msg=str(path[0]))
    moved = [k for k in ("pos", "rel") if not np.array_equal(np.asarray(got[k]["table"]),
                                                             np.asarray(params[k]["table"]))]
    assert moved == ["pos", "rel"], "the encoders' params were not trained"


def test_params_are_nnx_params_and_stateless_encoders_hold_none() -> None:
    m = Encoder("learned", num_positions=16, dim=8, rngs=nnx.Rngs(0))
    state = nnx.to_pure_dict(nnx.state(m, nnx.Param))
    assert list(state) == ["table"] and state["table"].shape == (16, 8)
    std = float(np.std(np.asarray(state["table"])))
    enc = per.get_encoder("learned", num_positions=16, dim=8)
    assert 0.3 * enc.init_std("table") < std < 3 * enc.init_std("table")
    for name, opts in (("rotary", {"dim": 8}), ("sinusoidal", {"dim": 8}),
                       ("alibi", {"num_heads": 2})):
        assert nnx.to_pure_dict(nnx.state(Encoder(name, **opts), nnx.Param)) == {}
    given = enc.init(jnp, seed=3)
    m2 = Encoder(enc, params=given)
    np.testing.assert_array_equal(np.asarray(m2(jnp.arange(4))),
                                  np.asarray(enc.encode(jnp.arange(4), params=given)))


def test_bad_arguments_are_named() -> None:
    enc = per.get_encoder("learned", num_positions=16, dim=8)
    with pytest.raises(TypeError, match="pass rngs=nnx.Rngs"):
        Encoder("learned", num_positions=16, dim=8)
    with pytest.raises(TypeError, match="options \\['dim'\\] go with an encoder name"):
        Encoder(enc, dim=8)
    with pytest.raises(ValueError, match=r"params\['table'\] must have shape \(16, 8\)"):
        Encoder(enc, params={"table": jnp.zeros((8, 8))})
    with pytest.raises(TypeError, match="rotary has no parameters"):
        Encoder("rotary", dim=8, params={"table": jnp.zeros(1)})
