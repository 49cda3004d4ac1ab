"""The machinery of the conformance suite: check registration, cases, backend selection. A
*check* is a plain function ``check_<property>(case)`` that raises :class:`CheckFailure` with a
message saying what was expected and what came; it declares the encoder kinds it applies to and
the capabilities it needs (``"jit"`` or ``"grad"`` of the backend, an encoder property such as
``"shift-linear"``, ``"continuous"``, ``"learned"``). A *case* is one encoder × one backend × one
check. This module imports no check module (the catalogue :mod:`peregistry.testing.checks` does),
so every check module can import it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from ..backends._base import Backend
    from ..kinds.base import Encoder

__all__ = [
    "BACKENDS_ENV",
    "Case",
    "CheckFailure",
    "CheckSpec",
    "all_checks",
    "check",
    "selected_backends",
]

#: Environment variable that picks the backends the suite runs on: a comma-separated list of
#: adapter names (``numpy,torch``) or ``all`` (every installed backend; the default).
BACKENDS_ENV = "PEREGISTRY_BACKENDS"

#: Machine epsilon by dtype name, for tolerances (NumPy lacks bfloat16).
EPS = {
    "float16": 2.0**-10,
    "bfloat16": 2.0**-7,
    "float32": 2.0**-23,
    "float64": 2.0**-52,
}


class CheckFailure(AssertionError):
    """A conformance check failed; the message says what was expected and what came."""


@dataclass(frozen=True)
class CheckSpec:
    """A registered check: its function and when it applies."""

    func: Callable[[Case], None]
    kinds: frozenset[str] | None
    requires: frozenset[str]

    @property
    def name(self) -> str:
        """The check's name, its function's (``check_<property>``)."""
        return self.func.__name__

    @property
    def doc(self) -> str:
        """The first line of the check function's docstring (empty if it has none)."""
        return (self.func.__doc__ or "").strip().splitlines()[0] if self.func.__doc__ else ""


_CHECKS: dict[str, CheckSpec] = {}


def check(
    *, kinds: Iterable[str] | None = None, requires: Iterable[str] = ()
) -> Callable[[Callable[[Case], None]], Callable[[Case], None]]:
    """Register a check for encoders of ``kinds`` (all if None) having every capability in
    ``requires``. Capabilities: encoder properties, ``"continuous"``, ``"learned"``, and the
    backend's ``"jit"`` and ``"grad"`` (automatic differentiation)."""

    def deco(func: Callable[[Case], None]) -> Callable[[Case], None]:
        if not func.__name__.startswith("check_"):
            raise ValueError(f"check functions are named check_<property>, got {func.__name__}")
        _CHECKS[func.__name__] = CheckSpec(
            func, frozenset(kinds) if kinds is not None else None, frozenset(requires)
        )
        return func

    return deco


def all_checks() -> dict[str, CheckSpec]:
    """The checks registered so far, in registration order (the built-ins register when
    :mod:`peregistry.testing.checks` is imported: see its ``registered_checks``)."""
    return dict(_CHECKS)


#: The laws every encoder of a kind is held to by default (a law it legitimately breaks is
#: declared in its ``exempt_checks``); other properties (``alibi-slopes``,
#: ``causal-future-alike``, ``multi-axis``) name a model's convention and are declared.
KIND_LAWS: Mapping[str, frozenset[str]] = {
    "bias": frozenset({"relative"}),
    "relative-embedding": frozenset({"relative"}),
}
#: Continuous absolute encoders: a sinusoid's laws (Vaswani et al. 2017, section 3.5).
CONTINUOUS_ABSOLUTE_LAWS = frozenset({"shift-linear", "shift-invariant-dot"})


def capabilities(encoder: Encoder, backend: Backend) -> frozenset[str]:
    caps = set(encoder.properties)  # read from the instance: may depend on the options
    caps |= KIND_LAWS.get(encoder.kind, frozenset())
    if encoder.kind == "absolute" and encoder.continuous and _scalar_positions(encoder):
        caps |= CONTINUOUS_ABSOLUTE_LAWS
    if encoder.kind == "rotary" and "layout" in type(encoder)._option_specs:
        caps.add("rope-layouts")
    bounds = getattr(encoder, "position_range", None)
    if bounds is not None and bounds() is not None:
        caps.add("bounded")
    elif encoder.kind in ("bias", "relative-embedding") or (
            encoder.kind == "absolute" and not encoder.learned and _scalar_positions(encoder)):
        caps.add("far-range")
    if encoder.continuous:
        caps.add("continuous")
    if encoder.learned:
        caps.add("learned")
    if type(encoder).float64_reference is not None:
        caps.add("reference")
    if backend.jit(lambda: None) is not None:
        caps.add("jit")
    if backend.grad(lambda p: None) is not None:
        caps.add("grad")
    return frozenset(caps)


def _scalar_positions(encoder: Encoder) -> bool:
    """True if a position is one number (not a ``(row, col)`` pair on a last axis, whose shift
    laws a 2-D encoder declares in its ``properties``)."""
    import numpy as np

    probe = encoder.example_positions(np.random.default_rng(0), (3,))
    return tuple(np.shape(probe)) == (3,)


# -- backend selection ----------------------------------------------------------------------------
def selected_backends(value: str | None = None) -> list[Backend]:
    """The backends named by ``value`` (default: the ``PEREGISTRY_BACKENDS`` environment variable;
    unset or ``all`` means every installed backend). An unknown or uninstalled name is an error,
    never an empty run."""
    from ..registry import default_registry

    known = {b.name: b for b in default_registry.backends()}
    raw = os.environ.get(BACKENDS_ENV, "all") if value is None else value
    names = [n.strip() for n in raw.split(",") if n.strip()]
    if not names or names == ["all"]:
        chosen = [b for b in known.values() if b.is_installed()]
        if not chosen:
            raise ValueError("no backend is installed (numpy should always be)")
        return chosen
    out = []
    for n in names:
        if n not in known:
            raise ValueError(
                f"{BACKENDS_ENV}={raw!r}: unknown backend {n!r}; known: {', '.join(known)} or 'all'"
            )
        if not known[n].is_installed():
            raise ValueError(f"{BACKENDS_ENV}={raw!r}: backend {n!r} is not installed")
        out.append(known[n])
    return out


# -- cases ----------------------------------------------------------------------------------------
@dataclass
class Case:
    """One check of one encoder on one backend, with the helpers checks use."""

    encoder: Encoder
    backend: Backend
    spec: CheckSpec
    expected_failure: str | None = None
    #: The encoder's reason for breaking this law (its ``exempt_checks``), or None.
    exempt: str | None = None
    #: How the encoder is named in ids: its name, plus its options when the same name is
    #: checked with several option sets (``sinusoidal(dim=64,layout=split)``).
    label: str = ""
    _rng: Any = field(default=None, repr=False)

    @property
    def id(self) -> str:
        """``<encoder>-<backend>-<check>``, the pytest id of this case."""
        return f"{self.label or self.encoder.name}-{self.backend.name}-{self.spec.name}"

    @property
    def xp(self) -> Any:
        """The backend's Array API namespace."""
        return self.backend.namespace()

    @property
    def rng(self) -> np.random.Generator:
        """This case's NumPy generator, seeded (1234) on first use: every run draws the same
        inputs."""
        if self._rng is None:
            import numpy as np

            self._rng = np.random.default_rng(1234)
        return self._rng  # type: ignore[no-any-return]

    def run(self) -> None:
        """Run the check; raise :class:`CheckFailure` (prefixed with the case id) if it fails.

        Under pytest, a case with a declared expected failure is marked ``xfail`` by
        :func:`~peregistry.testing.parametrize_with_checks`; calling ``run`` directly just runs.
        """
        from ..kinds._declaration import OverrideError

        try:
            self.spec.func(self)
        except (CheckFailure, OverrideError) as exc:
            raise CheckFailure(f"[{self.id}] {exc}") from exc

    # helpers for checks --------------------------------------------------------------------
    def asarray(self, a: Any, *, dtype: str | None = None, device: Any = None) -> Any:
        """A backend array from NumPy/Python data; ``dtype`` is a standard name."""
        import numpy as np

        arr = np.asarray(a)
        target = None
        if dtype is not None:
            target = self.float_dtypes.get(dtype) or getattr(self.xp, dtype)
        return self.backend.from_numpy(arr, dtype=target, device=device)

    def to_numpy(self, x: Any) -> np.ndarray[Any, Any]:
        """A backend array as a float64 NumPy array (to compare with a reference)."""
        import numpy as np

        return np.asarray(self.backend.to_numpy(x), dtype=np.float64)

    @property
    def float_dtypes(self) -> Mapping[str, Any]:
        """The backend's floating dtypes by standard name (``"float32"``, ...)."""
        return self.backend.float_dtypes()

    def dtype_name(self, dtype: Any) -> str:
        """The standard name of a backend dtype (``"bfloat16"``, ``"float32"``, ...)."""
        return self.backend.dtype_name(dtype)

    def tolerance(self, dtype: str, *, steps: float = 8.0, scale: float = 1.0) -> float:
        """Absolute tolerance ``steps · eps(dtype) · scale`` for results of magnitude ``scale``.

        ``steps`` counts the roundings a result can suffer (the cast of a wide result is one
        half-ulp; float32 sin/cos and the angle reduction add a few more)."""
        return steps * EPS[dtype] * scale

    def fail(self, message: str) -> CheckFailure:
        """A :class:`CheckFailure` with ``message``, for a check to raise."""
        return CheckFailure(message)
