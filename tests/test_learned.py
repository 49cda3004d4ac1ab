"""Learned tables (learned, learned-2d): values against NumPy formulas and Hugging Face DETR,
init/convert across backends, resizing against NumPy and ``F.interpolate``, gradients and
training steps, the torch module wrapper, JAX pytrees, jit behaviour, and every error path."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import peregistry as per

HF_REASON = "Hugging Face transformers defines the DETR convention (torch env)"


def wide(backend: Any) -> str:
    return "float64" if "float64" in backend.float_dtypes() else "float32"


def params_on(enc: per.Encoder, backend: Any, dtype: str | None = None) -> Any:
    return enc.init(backend.native(), dtype=backend.float_dtypes()[dtype or wide(backend)])


def np_params(enc: per.Encoder) -> dict[str, Any]:
    return {k: np.asarray(v, dtype=np.float64) for k, v in enc.init(np, dtype=np.float32).items()}


LEARNED = per.get_encoder("learned", num_positions=20, dim=6)
GRID = per.get_encoder("learned-2d", height=5, width=7, dim=3)


# -- values --------------------------------------------------------------------------------------
def test_init_gives_the_same_values_on_every_backend(backend: Any) -> None:
    for enc in (LEARNED, GRID, per.get_encoder("t5", num_heads=4),
                per.get_encoder("shaw", max_distance=3, dim=2)):
        want = enc.init(np, seed=7, dtype=np.float32)
        for name in backend.float_dtypes():
            if name in ("float16", "bfloat16"):
                continue
            got = enc.init(backend.native(), seed=7, dtype=backend.float_dtypes()[name])
            assert set(got) == set(want)
            for k in want:
                np.testing.assert_array_equal(backend.to_numpy(got[k]), want[k])
        other = enc.init(np, seed=8)
        assert not np.array_equal(other[next(iter(want))], want[next(iter(want))])


def test_init_dtype_and_device(backend: Any) -> None:
    for name, dt in backend.float_dtypes().items():
        p = LEARNED.init(backend.native(), dtype=dt)
        assert p["table"].dtype == dt, name
    p = LEARNED.init(backend.native())
    assert p["table"].dtype == backend.default_float_dtype()
    for device in backend.test_devices():
        p = LEARNED.init(backend.native(), device=device, dtype=backend.float_dtypes()["float32"])
        assert backend.device(p["table"]) == device


def test_learned_encode_is_table_lookup(backend: Any) -> None:
    pos = np.asarray([[0, 19, 3], [7, 7, 1]])
    out = backend.to_numpy(LEARNED.encode(backend.from_numpy(pos), params=params_on(LEARNED, backend),
                                          dtype=backend.float_dtypes()[wide(backend)]))
    np.testing.assert_array_equal(out, np_params(LEARNED)["table"][pos])


def test_learned_2d_encode_is_column_then_row(backend: Any) -> None:
    pos = np.asarray([[[0, 0], [4, 6]], [[2, 3], [1, 5]]])
    p = np_params(GRID)
    out = backend.to_numpy(GRID.encode(backend.from_numpy(pos), params=params_on(GRID, backend),
                                       dtype=backend.float_dtypes()[wide(backend)]))
    want = np.concatenate([p["col"][pos[..., 1]], p["row"][pos[..., 0]]], axis=-1)
    assert out.shape == (2, 2, 6)
    np.testing.assert_array_equal(out, want)


def test_learned_2d_grid(backend: Any) -> None:
    p = np_params(GRID)
    out = backend.to_numpy(GRID.grid(4, 6, params=params_on(GRID, backend),  # type: ignore[attr-defined]
                                     dtype=backend.float_dtypes()[wide(backend)]))
    r, c = np.meshgrid(np.arange(4), np.arange(6), indexing="ij")
    np.testing.assert_array_equal(out, np.concatenate([p["col"][c], p["row"][r]], axis=-1))
    enc_out = backend.to_numpy(GRID.encode(backend.from_numpy(np.stack([r, c], -1)),
                                           params=params_on(GRID, backend),
                                           dtype=backend.float_dtypes()[wide(backend)]))
    np.testing.assert_array_equal(out, enc_out)


def test_learned_2d_matches_hugging_face_detr() -> None:
    pytest.importorskip("transformers", reason=HF_REASON)
    import torch
    from transformers.models.detr.modeling_detr import DetrLearnedPositionEmbedding

    hf = DetrLearnedPositionEmbedding(embedding_dim=8)
    enc: Any = per.get_encoder("learned-2d", height=50, width=50, dim=8)
    params = {"row": hf.row_embeddings.weight, "col": hf.column_embeddings.weight}
    want = hf((2, 3, 6, 9), device="cpu", dtype=torch.float32)  # (batch, 2*dim, h, w)
    got = enc.grid(6, 9, params=params, dtype=torch.float32)  # (h, w, 2*dim)
    assert torch.equal(got.permute(2, 0, 1), want[0])


# -- resizing ------------------------------------------------------------------------------------
def interp_ref(table: Any, n: int, align_corners: bool) -> Any:
    """Linear interpolation of rows, written from the definition with np.interp."""
    m = table.shape[0]
    if align_corners:
        src = np.arange(n) * ((m - 1) / (n - 1) if n > 1 else 0.0)
    else:
        src = np.maximum((np.arange(n) + 0.5) * m / n - 0.5, 0.0)
    return np.stack([np.interp(src, np.arange(m), table[:, j]) for j in range(table.shape[1])], -1)


@pytest.mark.parametrize("n", [1, 7, 20, 33, 64])
@pytest.mark.parametrize("align_corners", [False, True])
def test_learned_resize_is_linear_interpolation(backend: Any, n: int, align_corners: bool) -> None:
    enc: Any = LEARNED
    new, p = enc.resize(params_on(enc, backend), num_positions=n, align_corners=align_corners)
    assert new == per.get_encoder("learned", num_positions=n, dim=6)
    assert p["table"].dtype == backend.float_dtypes()[wide(backend)]
    want = interp_ref(np_params(enc)["table"], n, align_corners)
    tol = 1e-12 if wide(backend) == "float64" else 1e-6
    np.testing.assert_allclose(backend.to_numpy(p["table"]), want, atol=tol)


@pytest.mark.parametrize("align_corners", [False, True])
def test_resize_matches_torch_interpolate(align_corners: bool) -> None:
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    enc: Any = LEARNED
    p = enc.init(torch, dtype=torch.float64)
    for n in (5, 20, 47):
        _, got = enc.resize(p, num_positions=n, align_corners=align_corners)
        want = F.interpolate(p["table"].T[None], size=n, mode="linear",
                             align_corners=align_corners)[0].T
        torch.testing.assert_close(got["table"], want, rtol=0, atol=1e-12)
    g: Any = GRID
    pg = g.init(torch, dtype=torch.float64)
    new, q = g.resize(pg, height=9, width=4, align_corners=align_corners)
    grid = g.grid(5, 7, params=pg, dtype=torch.float64).permute(2, 0, 1)[None]
    want = F.interpolate(grid, size=(9, 4), mode="bilinear", align_corners=align_corners)[0]
    torch.testing.assert_close(new.grid(9, 4, params=q, dtype=torch.float64).permute(2, 0, 1),
                               want, rtol=0, atol=1e-12)


def test_resize_keeps_params_unchanged_and_errors(backend: Any) -> None:
    enc: Any = LEARNED
    p = params_on(enc, backend)
    before = backend.to_numpy(p["table"]).copy()
    enc.resize(p, num_positions=40)
    np.testing.assert_array_equal(backend.to_numpy(p["table"]), before)
    with pytest.raises(ValueError, match="num_positions must be a positive int, got 0"):
        enc.resize(p, num_positions=0)
    with pytest.raises(TypeError, match="align_corners must be True or False"):
        enc.resize(p, num_positions=4, align_corners="yes")
    with pytest.raises(TypeError, match="resize needs params"):
        enc.resize(None, num_positions=4)
    new, q = GRID.resize(params_on(GRID, backend), width=10)  # type: ignore[attr-defined]
    assert (new.options["height"], new.options["width"]) == (5, 10)
    assert tuple(q["row"].shape) == (5, 3) and tuple(q["col"].shape) == (10, 3)


def test_resize_returns_new_arrays_for_unchanged_axes(backend: Any) -> None:
    """Hardening item 4: an axis whose size does not change is copied, not returned as is."""
    p = params_on(GRID, backend)
    _, q = GRID.resize(p, width=10)  # type: ignore[attr-defined]
    assert q["row"] is not p["row"]
    np.testing.assert_array_equal(backend.to_numpy(q["row"]), backend.to_numpy(p["row"]))
    pl = params_on(LEARNED, backend)
    _, same = LEARNED.resize(pl, num_positions=20)  # type: ignore[attr-defined]
    assert same["table"] is not pl["table"]


def test_optimizer_step_on_resized_params_leaves_the_old_ones() -> None:
    torch = pytest.importorskip("torch")
    p = {k: v.requires_grad_() for k, v in GRID.init(torch).items()}
    before = {k: v.detach().clone() for k, v in p.items()}
    new, q = GRID.resize(p, height=7)  # type: ignore[attr-defined]
    q = {k: v.detach().requires_grad_() for k, v in q.items()}  # detach() shares storage
    opt = torch.optim.SGD(list(q.values()), lr=1.0)
    new.encode(torch.tensor([[6, 2]]), params=q).sum().backward()
    opt.step()
    for k in p:
        torch.testing.assert_close(p[k].detach(), before[k], rtol=0, atol=0)
    a = GRID.init(np)
    _, b = GRID.resize(a, height=7)  # type: ignore[attr-defined]
    b["col"] += 1.0  # in place on the new params
    np.testing.assert_array_equal(a["col"], GRID.init(np)["col"])


# -- errors --------------------------------------------------------------------------------------
def test_out_of_range_positions_name_the_range(backend: Any) -> None:
    p = params_on(LEARNED, backend)
    for bad, lo, hi in (([0, 20], 0, 20), ([-1, 3], -1, 3)):
        with pytest.raises(ValueError, match=rf"learned: positions must be in \[0, 20\) "
                                             rf"\(num_positions=20\), got values from {lo} to {hi}"):
            LEARNED.encode(backend.from_numpy(np.asarray(bad)), params=p)
    pg = params_on(GRID, backend)
    with pytest.raises(ValueError, match=r"column positions must be in \[0, 7\) \(width=7\)"):
        GRID.encode(backend.from_numpy(np.asarray([[0, 7]])), params=pg)
    with pytest.raises(ValueError, match=r"row positions must be in \[0, 5\) \(height=5\)"):
        GRID.encode(backend.from_numpy(np.asarray([[5, 0]])), params=pg)
    with pytest.raises(ValueError, match=r"grid\(6, 2\) exceeds the tables: h must be in \[1, 5\]"):
        GRID.grid(6, 2, params=pg)  # type: ignore[attr-defined]


def test_range_checks_of_empty_long_and_batched_positions(backend: Any) -> None:
    """The range is read from short 1-D positions as a list, else by reductions: every form
    gives the rows or the error naming the range; no positions give no rows."""
    p = params_on(LEARNED, backend)
    assert tuple(LEARNED.encode(backend.from_numpy(np.zeros(0, dtype=np.int64)),
                                params=p).shape) == (0, 6)
    long = np.arange(100) % 20
    want = backend.to_numpy(p["table"])[long]
    for pos in (long, long.reshape(4, 25)):
        got = backend.to_numpy(LEARNED.encode(backend.from_numpy(pos), params=p))
        np.testing.assert_array_equal(got, want.reshape((*pos.shape, 6)))
        with pytest.raises(ValueError, match=r"got values from 0 to 20"):
            LEARNED.encode(backend.from_numpy(np.where(pos == 7, 20, pos)), params=p)


def test_a_masked_array_of_positions_reads_its_data() -> None:
    """A NumPy subclass is not read as a list (a masked array lists masked entries as None)."""
    p = LEARNED.init(np, dtype=np.float64)
    pos = np.ma.masked_array([1, 2, 3], mask=[False, True, False])
    got = LEARNED.encode(pos, params=p)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(p["table"])[[1, 2, 3]])


def test_float_positions_are_a_type_error(backend: Any) -> None:
    fl = backend.from_numpy(np.asarray([0.0, 1.0]), dtype=backend.float_dtypes()["float32"])
    with pytest.raises(TypeError, match="positions must have an integer dtype"):
        LEARNED.encode(fl, params=params_on(LEARNED, backend))
    with pytest.raises(TypeError, match="positions must have an integer dtype"):
        GRID.encode(backend.namespace().reshape(fl, (1, 2)), params=params_on(GRID, backend))


def test_bad_params_name_what_was_expected(backend: Any) -> None:
    pos = backend.from_numpy(np.arange(3))
    with pytest.raises(TypeError, match=r"learned needs params \(from enc.init\(xp\)\)"):
        LEARNED.encode(pos)
    p = params_on(GRID, backend)
    with pytest.raises(ValueError, match=r"params must have keys \['col', 'row'\], got \['row'\]"):
        GRID.encode(backend.from_numpy(np.zeros((1, 2), dtype=np.int64)), params={"row": p["row"]})
    wrong = params_on(per.get_encoder("learned", num_positions=20, dim=5), backend)
    with pytest.raises(ValueError, match=r"params\['table'\].shape=\(20, 5\), but should be "
                                         r"\(20, 6\)"):
        LEARNED.encode(pos, params=wrong)
    with pytest.raises(ValueError, match=r"positions.shape=\(3,\), but should be \(..., 2\)"):
        GRID.encode(pos, params=p)
    with pytest.raises(TypeError, match=r"params\['table'\] must be an array"):
        LEARNED.encode(pos, params={"table": [[0.0] * 6] * 20})
    if backend.name != "numpy":
        with pytest.raises(TypeError, match=r"params\['table'\] is a numpy array but the "
                                            r"positions are"):
            LEARNED.encode(pos, params=LEARNED.init(np))


def test_out_of_range_under_jit_gives_nan_rows(backend: Any) -> None:
    """Documented: under jax.jit / torch.compile values are unknown when tracing, so no error
    can be raised; rows of out-of-range positions are NaN (never clamped, never wrapped)."""
    p = params_on(LEARNED, backend, "float32")

    def fn(pos: Any, params: Any) -> Any:
        return LEARNED.encode(pos, params=params, dtype=backend.float_dtypes()["float32"])

    compiled = backend.jit(fn)
    if compiled is None:
        pytest.skip(f"{backend.name} has no jit")
    pos = np.asarray([0, 20, -1, 5, 19, 1000])
    out = backend.to_numpy(compiled(backend.from_numpy(pos), p))
    table = np_params(LEARNED)["table"]
    bad = np.asarray([False, True, True, False, False, True])
    assert np.isnan(out[bad]).all()
    np.testing.assert_allclose(out[~bad], table[pos[~bad]], rtol=1e-6)


# -- gradients and training steps ----------------------------------------------------------------
def test_gradient_is_scatter_add(backend: Any) -> None:
    grad = backend.grad(lambda p: None)
    if grad is None:
        pytest.skip(f"{backend.name} has no autodiff")
    xp = backend.namespace()
    dt = backend.float_dtypes()[wide(backend)]
    pos = np.asarray([[1, 2], [3, 4], [1, 6]])
    w = np.random.default_rng(0).standard_normal((3, 2 * 3))
    wb, pb = backend.from_numpy(w, dtype=dt), backend.from_numpy(pos)
    g = backend.grad(lambda p: xp.sum(GRID.encode(pb, params=p, dtype=dt) * wb))(
        params_on(GRID, backend))
    want_col, want_row = np.zeros((7, 3)), np.zeros((5, 3))
    np.add.at(want_col, pos[:, 1], w[:, :3])
    np.add.at(want_row, pos[:, 0], w[:, 3:])
    np.testing.assert_allclose(backend.to_numpy(g["col"]), want_col, atol=1e-6)
    np.testing.assert_allclose(backend.to_numpy(g["row"]), want_row, atol=1e-6)
    # through resize and grid too
    g2 = backend.grad(lambda p: xp.sum(GRID.resize(p, height=8)[1]["row"]))(  # type: ignore[attr-defined]
        params_on(GRID, backend))
    assert np.isfinite(backend.to_numpy(g2["row"])).all() and np.any(backend.to_numpy(g2["row"]))
    g3 = backend.grad(lambda p: xp.sum(GRID.grid(3, 3, params=p, dtype=dt) ** 2))(  # type: ignore[attr-defined]
        params_on(GRID, backend))
    assert np.any(backend.to_numpy(g3["col"]))


def test_convert_round_trip(backend: Any) -> None:
    p = params_on(GRID, backend, "float32")
    for target in ("numpy", backend.name):
        q = per.convert(per.convert(p, target), backend.native())
        for k in p:
            assert q[k].dtype == p[k].dtype
            np.testing.assert_array_equal(backend.to_numpy(q[k]), backend.to_numpy(p[k]))


# -- torch: nn.Module wrapper --------------------------------------------------------------------
def test_torch_module_trains_two_steps_and_sees_new_values() -> None:
    torch = pytest.importorskip("torch")
    from peregistry.torch import EncoderModule

    for enc, call in ((LEARNED, lambda m: m(torch.arange(20))),
                      (GRID, lambda m: m.grid(5, 7)),
                      (per.get_encoder("t5", num_heads=2), lambda m: m(torch.arange(9), torch.arange(9))),
                      (per.get_encoder("shaw", max_distance=3, dim=2),
                       lambda m: m(torch.arange(5), torch.arange(5)))):
        m = EncoderModule(enc, seed=3)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        outs = []
        for _ in range(3):
            out = call(m)
            outs.append(out.detach().clone())
            loss = (out**2).sum()
            opt.zero_grad()
            loss.backward()  # a second backward through a cached graph would raise here
            opt.step()
        assert not torch.equal(outs[0], outs[1]) and not torch.equal(outs[1], outs[2])
        torch.testing.assert_close(call(m), call(EncoderModule(enc, params=dict(m.params))))


def test_learned_2d_module_recomputes_its_grid_every_training_step() -> None:
    """Three SGD steps on ``sum(grid(4, 5)**2)`` of a learned-2d ``EncoderModule``: each step's
    grid is ``concat(col[c], row[r])`` of that step's tables, and the tables move as that loss's
    gradient says (``2·h·col[c]`` for ``c < w``, ``2·w·row[r]`` for ``r < h``, nothing for the
    rest), all computed here in float64 NumPy from the first tables alone. A module that kept
    its grid by shape, as transformers 5.23's ``DetrLearnedPositionEmbedding`` does, fails
    the second step (its second backward raises, or it returns the first step's values)."""
    torch = pytest.importorskip("torch")
    from peregistry.torch import EncoderModule

    h, w, dim, lr, steps = 4, 5, 4, 0.05, 3
    m = EncoderModule(per.get_encoder("learned-2d", height=50, width=50, dim=dim), seed=6)
    row = m.params["row"].detach().numpy().astype(np.float64)  # (the first tables: inputs)
    col = m.params["col"].detach().numpy().astype(np.float64)
    first_row, first_col = row[:h].copy(), col[:w].copy()
    assert m.params["row"].dtype == torch.float32
    # float32 training: per step, the gradient sums h (or w) float32 terms and the update
    # rounds twice, each relative to the new value: (max(h, w) + 2) ulps, over every step
    rtol = steps * (max(h, w) + 2) * float(np.finfo(np.float32).eps)
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    for step in range(steps):
        want = np.concatenate([np.broadcast_to(col[None, :w], (h, w, dim)),
                               np.broadcast_to(row[:h, None], (h, w, dim))], axis=-1)
        out = m.grid(h, w)
        assert tuple(out.shape) == (h, w, 2 * dim) and out.dtype == torch.float32
        np.testing.assert_allclose(out.detach().numpy(), want, rtol=rtol, atol=0,
                                   err_msg=f"step {step}")
        loss = out.pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        col[:w] -= lr * 2 * h * col[:w]
        row[:h] -= lr * 2 * w * row[:h]
    np.testing.assert_allclose(m.params["col"].detach().numpy(), col, rtol=rtol, atol=0)
    np.testing.assert_allclose(m.params["row"].detach().numpy(), row, rtol=rtol, atol=0)
    # the steps moved the grid far beyond the tolerance (a stale grid could not pass)
    first = np.concatenate([np.broadcast_to(first_col[None], (h, w, dim)),
                            np.broadcast_to(first_row[:, None], (h, w, dim))], axis=-1)
    assert np.abs(want - first).max() > 1e3 * rtol * np.abs(first).max()


def test_torch_module_state_dict_and_to() -> None:
    torch = pytest.importorskip("torch")
    import io

    from peregistry.torch import EncoderModule

    m = EncoderModule(GRID, seed=1)
    assert sorted(m.state_dict()) == ["params.col", "params.row"]
    assert all(isinstance(p, torch.nn.Parameter) for p in m.parameters())
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    m2 = EncoderModule(GRID, seed=2)
    m2.load_state_dict(torch.load(buf))
    assert torch.equal(m2.grid(5, 7), m.grid(5, 7))
    m64 = m.to(torch.float64)
    assert m64.grid(2, 2).dtype == torch.float64
    assert m64(torch.zeros(1, 2, dtype=torch.int64)).dtype == torch.float64
    assert m64.grid(2, 2, dtype=torch.bfloat16).dtype == torch.bfloat16
    assert "learned-2d" in repr(m)
    fixed = EncoderModule(per.get_encoder("alibi", num_heads=2))
    assert list(fixed.parameters()) == [] and fixed(torch.arange(3), torch.arange(3)).shape == (2, 3, 3)
    with pytest.raises(TypeError, match="alibi has no learned parameters"):
        EncoderModule(per.get_encoder("alibi", num_heads=2), params={"table": torch.zeros(1)})
    bigger = m.resized(height=10)
    assert tuple(bigger.params["row"].shape) == (10, 3)


def test_torch_module_compiles() -> None:
    torch = pytest.importorskip("torch")
    from peregistry.torch import EncoderModule

    m = EncoderModule(LEARNED)
    compiled = torch.compile(m, fullgraph=True, backend="aot_eager")
    pos = torch.arange(10)
    torch.testing.assert_close(compiled(pos), m(pos))
    compiled(pos).sum().backward()
    assert m.params["table"].grad is not None


# -- JAX: params are a pytree --------------------------------------------------------------------
def test_jax_params_are_a_pytree_for_grad_and_jit() -> None:
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    enc: Any = per.get_encoder("learned", num_positions=16, dim=4)
    params = enc.init(jnp, seed=0)
    target = jnp.asarray(np.random.default_rng(0).standard_normal((16, 4)), dtype=jnp.float32)

    @jax.jit
    def step(params: Any) -> tuple[Any, Any]:
        def loss(p: Any) -> Any:
            return jnp.mean((enc.encode(jnp.arange(16), params=p) - target) ** 2)

        value, grads = jax.value_and_grad(loss)(params)
        return jax.tree_util.tree_map(lambda p, g: p - 10.0 * g, params, grads), value

    losses = []
    for _ in range(30):
        params, value = step(params)
        losses.append(float(value))
    assert losses[-1] < 0.05 * losses[0]
    assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure({"table": 0})


# -- the public learned-params init (peregistry.plugin) ------------------------------------------
def test_init_params_is_float32_exact_and_the_same_as_the_built_ins(backend: Any) -> None:
    from peregistry.plugin import init_params

    want = LEARNED.init(np, seed=5, dtype=np.float32)
    for name in backend.float_dtypes():
        got = init_params(LEARNED, backend.native(), seed=5, dtype=backend.float_dtypes()[name])
        assert got["table"].dtype == backend.float_dtypes()[name]
        if name in ("float16", "bfloat16"):
            continue
        values = backend.to_numpy(got["table"]).astype(np.float64)
        np.testing.assert_array_equal(values, np.asarray(want["table"], dtype=np.float64))
    f64 = np.asarray(init_params(LEARNED, np, seed=5, dtype=np.float64)["table"])
    assert np.array_equal(f64.astype(np.float32).astype(np.float64), f64)


def test_learned_params_mixin_makes_a_plugin_table_pass_the_suite(backend: Any) -> None:
    from peregistry.plugin import LearnedParams, gather, index_dtype
    from peregistry.testing import check_encoder

    class Table(LearnedParams, per.AbsoluteEncoder):
        """A learned table written from the public building blocks only."""

        name = "test-public-table"
        dim = per.Option(int, 4)

        @property
        def out_dim(self) -> int:
            return int(self._values["dim"])

        def param_shapes(self) -> dict[str, tuple[int, ...]]:
            return {"table": (1024, int(self._values["dim"]))}

        def _encode(self, positions: Any, *, params: Any, ctx: Any) -> Any:
            idx = ctx.xp.astype(positions, index_dtype(ctx))
            return gather(params["table"], idx, axis=0, ctx=ctx)

    report = check_encoder(Table(dim=4), backends=backend.name)
    assert report.ok, str(report)
    with pytest.raises(TypeError, match="must be an array"):
        Table(dim=4).encode(np.arange(2), params={"table": [[0.0] * 4] * 1024})
