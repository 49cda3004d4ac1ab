"""The laws of a kind apply by default (issue 14, item 1): an encoder that declares no
``properties`` is still held to its kind's laws, and one that legitimately breaks a law declares
an exemption with a reason (``exempt_checks``), reported ``exempt`` and never a failure.

Each test runs only the checks it asserts on, per selected backend.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest
from test_conformance import GoodSin

import peregistry as per
from peregistry.testing import cases_for, check_encoder, parametrize_with_checks
from peregistry.testing._core import selected_backends
from peregistry.testing._report import run_case


@pytest.fixture(params=[b.name for b in selected_backends()])
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def statuses(enc: per.Encoder, backend: str, *checks: str) -> dict[str, tuple[str, str]]:
    rows = (run_case(c) for c in cases_for([enc], backends=backend, checks=checks))
    return {r.check: (r.status, r.message) for r in rows}


class PlainSin(GoodSin):
    """A sinusoid as a plugin author writes it, declaring no properties."""

    name = "test-plain-sin"
    properties = frozenset()
    dim = per.Option(int, 8)


class SinTwice(PlainSin):
    """The bug: the cosine half replaced by a sine (``sin, sin`` instead of ``sin, cos``)."""

    name = "test-sin-twice"

    def _encode(self, positions: Any, *, params: Any, ctx: Any) -> Any:
        a = self._angles(positions, ctx)
        return ctx.xp.concat((ctx.xp.sin(a), ctx.xp.sin(a)), axis=-1)


class PlainBias(per.BiasEncoder):
    """``-|k - q|`` per head, declaring no properties."""

    name = "test-plain-bias"
    num_heads = per.Option(int, 2)

    def example_positions(self, rng: Any, shape: tuple[int, ...]) -> Any:
        return rng.integers(0, 300, size=shape)

    def _bias(self, q: Any, k: Any, *, params: Any, ctx: Any, dtype: Any) -> Any:
        xp = ctx.xp
        d = xp.astype(k[..., None, :] - q[..., :, None], ctx.wide)
        heads = xp.arange(1, self.num_heads + 1, dtype=ctx.wide, device=ctx.device)
        return -xp.abs(d)[..., None, :, :] * heads[:, None, None]


class AbsoluteBias(PlainBias):
    """The bug: a bias that also depends on the query's absolute position."""

    name = "test-absolute-bias"

    def _bias(self, q: Any, k: Any, *, params: Any, ctx: Any, dtype: Any) -> Any:
        out = super()._bias(q, k, params=params, ctx=ctx, dtype=dtype)
        return out + ctx.xp.astype(q, ctx.wide)[..., None, :, None] * 1e-3


class DampedSin(PlainSin):
    """Legitimately not shift-invariant: a sinusoid damped with the position (an exemption)."""

    name = "test-damped-sin"
    exempt_checks = MappingProxyType({
        "check_shift_invariant_dot": "the amplitude decays as 1/(1 + p/1000): dot products "
                                     "shrink with the position by design",
        "check_shift_linear": "the decay is not a linear map of the encoding",
    })

    def _encode(self, positions: Any, *, params: Any, ctx: Any) -> Any:
        out = super()._encode(positions, params=params, ctx=ctx)
        p = ctx.xp.astype(positions, ctx.wide)[..., None]
        return out / (1.0 + p / 1000.0)


LAWS = ("check_shift_linear", "check_shift_invariant_dot")


def test_a_plain_sinusoid_gets_the_laws_of_its_kind(backend_name: str) -> None:
    got = statuses(PlainSin(), backend_name, *LAWS)
    assert set(got) == set(LAWS), f"the laws did not apply to a plugin declaring none: {got}"
    assert all(status == "passed" for status, _ in got.values()), got


def test_cosine_half_replaced_by_a_sine_is_caught_without_properties(backend_name: str) -> None:
    got = statuses(SinTwice(), backend_name, *LAWS)
    assert got["check_shift_invariant_dot"][0] == "failed", got
    assert "depend only on k" in got["check_shift_invariant_dot"][1]


def test_every_bias_is_held_to_k_minus_q(backend_name: str) -> None:
    assert statuses(PlainBias(), backend_name, "check_relative_toeplitz") == {
        "check_relative_toeplitz": ("passed", "")}
    status, message = statuses(AbsoluteBias(), backend_name,
                               "check_relative_toeplitz")["check_relative_toeplitz"]
    assert status == "failed" and "k - q" in message, message


def test_an_exempt_law_is_run_and_reported_exempt_with_its_reason(backend_name: str) -> None:
    report = check_encoder(DampedSin(), backends=backend_name)
    rows = {r.check: r for r in report.rows}
    assert rows["check_shift_invariant_dot"].status == "exempt"
    message = rows["check_shift_invariant_dot"].message
    assert "decays as 1/(1 + p/1000)" in message and "fails as declared" in message, message
    assert rows["check_shift_linear"].status == "exempt"
    assert report.ok, str(report)
    assert "exempt" in str(report)


@pytest.mark.parametrize(("exempt", "match"), [
    ({"check_no_such_law": "because"}, "names unknown check 'check_no_such_law'"),
    ({"check_shift_linear": ""}, r"exempt_checks\['check_shift_linear'\] needs a reason"),
    ({"check_shift_linear": None}, "needs a reason"),
])
def test_a_bad_exemption_is_an_error_naming_the_encoder(exempt: dict[str, Any],
                                                         match: str) -> None:
    cls = type("BadExempt", (PlainSin,), {"name": "test-bad-exempt", "exempt_checks": exempt})
    with pytest.raises(ValueError, match=f"test-bad-exempt: .*{match}"):
        cases_for([cls()], backends="numpy")


def test_exemptions_are_non_strict_xfail_under_pytest() -> None:
    mark = parametrize_with_checks([DampedSin()], backends="numpy")
    params = {p.id: p for p in mark.args[1]}
    (marks,) = [p.marks for pid, p in params.items() if pid.endswith("check_shift_linear")]
    assert marks[0].name == "xfail" and marks[0].kwargs["strict"] is False
    assert marks[0].kwargs["reason"].startswith("exempt: the decay")


def test_two_dimensional_positions_keep_their_declared_laws_only() -> None:
    """The shift laws by default concern one-number positions; an encoder of ``(row, col)``
    pairs declares its laws (the vision plugin's sincos-2d does not, and gets none)."""
    from peregistry.registry import default_registry
    from peregistry.testing._core import capabilities

    learned_2d = per.get_encoder("learned-2d", height=4, width=4, dim=8)
    caps = capabilities(learned_2d, default_registry.backend("numpy"))
    assert not caps & {"shift-linear", "shift-invariant-dot"}
    caps = capabilities(PlainSin(), default_registry.backend("numpy"))
    assert {"shift-linear", "shift-invariant-dot"} <= caps


# -- item 4: a plugin overriding a public method keeps the output guarantees ---------------------
class Doubling(PlainSin):
    """Adds behaviour around super(): allowed, and passes the suite."""

    name = "test-doubling"

    def encode(self, positions: Any, *, params: Any = None, dtype: Any = None) -> Any:
        return super().encode(positions, params=params, dtype=dtype) * 2


class LosesDtype(PlainSin):
    name = "test-loses-dtype"

    def encode(self, positions: Any, *, params: Any = None, dtype: Any = None) -> Any:
        out = super().encode(positions, params=params, dtype=None)  # forgets dtype
        return out


def test_an_override_around_super_passes(backend_name: str) -> None:
    report = check_encoder(Doubling(), backends=backend_name)
    assert report.ok, str(report)


def test_an_override_that_drops_the_dtype_is_stopped_naming_it(xp: Any) -> None:
    from peregistry.kinds._declaration import OverrideError

    enc = LosesDtype()
    with pytest.raises(OverrideError, match=r"test-loses-dtype: LosesDtype\.encode \(an override "
                                            r"of the base class's\) returned dtype float\d+, but "
                                            r"should return float16"):
        enc.encode(xp.asarray([1, 2]), dtype="float16") if hasattr(xp, "float16") else \
            pytest.skip("no float16 in this namespace")


def test_the_built_ins_are_not_wrapped() -> None:
    from peregistry.encoders.rotary import Rotary
    from peregistry.encoders.sinusoidal import Sinusoidal

    assert not getattr(Rotary.rotate, "__peregistry_guarded__", False)
    assert not getattr(Sinusoidal.encode, "__peregistry_guarded__", False)
    assert getattr(Doubling.encode, "__peregistry_guarded__", False)
