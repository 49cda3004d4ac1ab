"""RoPE scaling types (context-length extension), as plugins: ``scaling={"type": NAME, ...}``.

A scaling type changes the rotary frequencies ``ω_i`` (and possibly multiplies ``cos``/``sin``
by an *attention factor*) so that a model trained on ``original_max_position_embeddings``
positions works on longer sequences. Parameter names, defaults and formulas follow Hugging Face
``transformers.modeling_rope_utils`` (``rope_parameters``) exactly; the frequencies are computed
once per encoder on the host, in float64 NumPy, from ``(rotary_dim, theta, params)``.

Notation: ``d = rotary_dim``, ``ω_i = θ^(-2i/d)`` for ``i = 0 … d/2 - 1``, ``L = original_max_
position_embeddings``, ``s`` the current sequence length, ``λ_i = 2π/ω_i`` the wavelengths.

==========  ==================================================================================
type        formula (source)
==========  ==================================================================================
linear      ``ω'_i = ω_i / factor`` — position interpolation (Chen et al. 2023,
            arXiv:2306.15595; kaiokendev)
dynamic     ``θ' = θ·(factor·max(s, L)/L - (factor - 1))^(d/(d-2))``, ``ω'_i = θ'^(-2i/d)`` —
            dynamic NTK-aware scaling (bloc97 / emozilla, 2023); depends on ``s``
yarn        ``ω'_i = ω_i/factor·(1 - γ_i) + ω_i·γ_i`` with the ramp
            ``γ_i = 1 - clip((i - lo)/(hi - lo), 0, 1)`` between the dimensions where the
            number of rotations over ``L`` is ``beta_fast`` and ``beta_slow``; attention factor
            ``0.1·ln(factor) + 1`` (or DeepSeek's ratio with ``mscale``/``mscale_all_dim``) —
            YaRN (Peng et al. 2023, arXiv:2309.00071)
longrope    ``ω'_i = ω_i / r_i`` with ``r = long_factor`` if ``s > L`` else ``short_factor``;
            attention factor ``sqrt(1 + ln(factor)/ln(L))`` — LongRoPE (Ding et al. 2024,
            arXiv:2402.13753), Phi-3; depends on ``s``
llama3      ``ω'_i = ω_i`` for ``λ_i < L/high_freq_factor``, ``ω_i/factor`` for
            ``λ_i > L/low_freq_factor``, and in between ``(1-κ)ω_i/factor + κω_i`` with
            ``κ = (L/λ_i - low_freq_factor)/(high_freq_factor - low_freq_factor)`` — Llama 3.1
            (Meta, "The Llama 3 Herd of Models", 2024)
==========  ==================================================================================

The attention factor multiplies ``cos`` and ``sin`` (as Hugging Face applies
``attention_scaling``), so ``rotate`` scales the rotated features by it.

Writing a scaling type
----------------------
Subclass :class:`RopeScaling` (or provide an object with the same attributes; only ``name`` and
``inv_freq`` are required), and return an instance from the ``peregistry_rope_scalings`` hook::

    import numpy as np
    import peregistry as per
    from peregistry.encoders.rope_scaling import Param, RopeScaling

    class Stretch(RopeScaling):
        name = "stretch"
        parameters = {"factor": Param("float", allowed="a number >= 1", check=lambda f: f >= 1)}

        def inv_freq(self, rotary_dim, theta, params, seq_len=None):
            i = np.arange(0, rotary_dim, 2, dtype=np.float64)
            return theta ** (-i / rotary_dim) / np.sqrt(params["factor"])

    @per.hookimpl
    def peregistry_rope_scalings():
        return [Stretch()]

after which ``get_encoder("rotary", dim=64, scaling={"type": "stretch", "factor": 4})`` works.
"""

from __future__ import annotations

import difflib
import math
import numbers
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from .._hooks import hookimpl
from .._options import REQUIRED

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "SEQ_LEN_DEPENDENCE",
    "Dynamic",
    "Linear",
    "Llama3",
    "LongRope",
    "Param",
    "RopeScaling",
    "Yarn",
    "as_scaling",
    "base_inv_freq",
    "resolve_scaling",
]

#: How a scaling's frequencies depend on the sequence length ``s``:
#: ``"none"``; ``"piecewise"`` (constant between :meth:`RopeScaling.seq_len_breakpoints`, so a
#: traced call can select among precomputed tables); ``"continuous"`` (needs a concrete ``s``).
SEQ_LEN_DEPENDENCE = ("none", "piecewise", "continuous")

#: Keys of Hugging Face ``rope_parameters`` that are encoder options here, with the hint.
_MOVED_KEYS = {
    "rope_theta": "it is the encoder option theta=...",
    "partial_rotary_factor": "use the encoder option rotary_dim=int(dim * partial_rotary_factor)",
}


def base_inv_freq(rotary_dim: int, theta: float) -> np.ndarray[Any, Any]:
    """RoFormer's ``ω_i = θ^(-2i/d)``, ``i = 0 … d/2 - 1``, in float64 (correct to an ulp)."""
    import numpy as np

    i2 = np.arange(0, rotary_dim, 2, dtype=np.float64)
    return np.asarray(1.0 / np.power(float(theta), i2 / rotary_dim), dtype=np.float64)


def _f64(a: Any) -> np.ndarray[Any, Any]:
    import numpy as np

    return np.asarray(a, dtype=np.float64)


# -- parameter declarations -------------------------------------------------------------------
_KIND_WORDS = {
    "float": "a real number",
    "int": "an integer",
    "bool": "a bool (True or False)",
    "floats": "a list of real numbers",
}


@dataclass(frozen=True)
class Param:
    """One parameter of a scaling type.

    :param kind: ``"float"``, ``"int"``, ``"bool"`` or ``"floats"`` (a list of real numbers).
    :param default: omit for a required parameter; ``None`` means "derived" (e.g. yarn's
        ``attention_factor``), and an explicit ``None`` in the dict then also means derived.
    :param allowed: phrase for error messages ("a number >= 1").
    :param check: predicate on the converted value (not called for ``None``).
    :param doc: one line for the docs.
    """

    kind: str
    default: Any = REQUIRED
    allowed: str = ""
    check: Callable[[Any], bool] | None = None
    doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def describe(self) -> str:
        return self.allowed or _KIND_WORDS[self.kind]

    def convert(self, where: str, key: str, value: Any) -> Any:
        """The value in canonical form (floats as float, lists as tuples), or a clear error."""
        if value is None:
            if self.required:
                raise TypeError(f"{where}: {key!r} must be {self.describe()}, got None")
            return self.default
        bad_type = TypeError(f"{where}: {key!r} must be {self.describe()}, got {value!r} of "
                             f"type {type(value).__name__}")
        is_bool = isinstance(value, bool) or type(value).__name__ == "bool_"
        out: Any
        if self.kind == "bool":
            if not is_bool:
                raise bad_type
            out = bool(value)
        elif self.kind == "int":
            if is_bool:
                raise bad_type
            try:
                out = operator.index(value)
            except TypeError:
                if isinstance(value, numbers.Real) and float(value).is_integer():
                    out = int(float(value))  # 4096.0 from a JSON config
                else:
                    raise bad_type from None
        elif self.kind == "float":
            if is_bool or not isinstance(value, numbers.Real):
                raise bad_type
            out = float(value)
            if not math.isfinite(out):
                raise ValueError(f"{where}: {key!r} must be {self.describe()}, got {value!r}")
        elif self.kind == "floats":
            if isinstance(value, str | bytes) or not isinstance(value, Sequence) or not all(
                isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value
            ):
                raise bad_type
            out = tuple(float(v) for v in value)
            if not all(math.isfinite(v) for v in out):
                raise ValueError(f"{where}: {key!r} must be {self.describe()}, got {value!r}")
        else:  # pragma: no cover - declaration error
            raise TypeError(f"Param kind must be one of {', '.join(_KIND_WORDS)}, got {self.kind}")
        if self.check is not None and not self.check(out):
            raise ValueError(f"{where}: {key!r} must be {self.describe()}, got {value!r}")
        return out


# -- the scaling protocol ----------------------------------------------------------------------
class RopeScaling:
    """Base class of scaling types. Subclasses set :attr:`name` and :attr:`parameters` and
    implement :meth:`inv_freq`; the rest has sensible defaults."""

    #: The ``"type"`` in ``scaling={"type": ...}``.
    name: ClassVar[str] = ""
    #: One line for docs and error messages.
    summary: ClassVar[str] = ""
    #: Parameters by key (Hugging Face ``rope_parameters`` names).
    parameters: ClassVar[Mapping[str, Param]] = {}
    #: One of :data:`SEQ_LEN_DEPENDENCE`.
    seq_len_dependence: ClassVar[str] = "none"

    def validate(self, params: Mapping[str, Any], *, owner: str, rotary_dim: int,
                 theta: float) -> dict[str, Any]:
        """Check ``params`` (without ``"type"``) and return them complete: every declared key,
        defaults filled, in canonical form. Errors name the key, the value and what is allowed."""
        where = f"{owner}: scaling {self.name!r}"
        unknown = [k for k in params if k not in self.parameters]
        if unknown:
            raise ValueError(f"{where} has no parameter {_unknown_words(unknown, self)}; "
                             f"its parameters are: {describe_parameters(self)}")
        missing = [k for k, p in self.parameters.items() if p.required and k not in params]
        if missing:
            raise ValueError(
                f"{where} is missing required parameter{'s' if len(missing) > 1 else ''} "
                + ", ".join(f"{k!r} ({self.parameters[k].describe()})" for k in missing)
            )
        out = {k: p.convert(where, k, params.get(k, p.default if not p.required else None))
               for k, p in self.parameters.items()}
        self.check(out, where=where, rotary_dim=rotary_dim, theta=theta)
        return out

    def check(self, params: Mapping[str, Any], *, where: str, rotary_dim: int,
              theta: float) -> None:
        """Cross-parameter checks (override; raise ``ValueError``)."""

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        """The ``rotary_dim/2`` angular frequencies in float64, for sequence length ``seq_len``
        (None: not known, i.e. at most ``original_max_position_embeddings``)."""
        raise NotImplementedError

    def attention_factor(self, rotary_dim: int, theta: float, params: Mapping[str, Any]) -> float:
        """The factor applied to ``cos`` and ``sin`` (1.0 unless the method says otherwise)."""
        return 1.0

    def seq_len_breakpoints(self, params: Mapping[str, Any]) -> tuple[int, ...]:
        """For ``"piecewise"`` dependence: increasing ``t_1 < t_2 …`` such that the frequencies
        are constant for ``s`` in ``(-inf, t_1], (t_1, t_2], …``."""
        return ()

    def seq_len_key(self, params: Mapping[str, Any], seq_len: int | None) -> Any:
        """A cache key equal for every ``seq_len`` that gives the same frequencies."""
        if self.seq_len_dependence == "none":
            return None
        if self.seq_len_dependence == "piecewise":  # the piece's index (a loop: jit-traceable)
            if seq_len is None:
                return 0
            return sum(1 for t in self.seq_len_breakpoints(params) if seq_len > t)
        return seq_len

    def __repr__(self) -> str:
        return f"<rope scaling {self.name!r}>"


def _unknown_words(unknown: list[str], scaling: RopeScaling) -> str:
    parts = []
    for k in unknown:
        text = repr(k)
        if k in _MOVED_KEYS:
            text += f" ({_MOVED_KEYS[k]})"
        else:
            close = difflib.get_close_matches(k, list(scaling.parameters), n=1, cutoff=0.6)
            if close:
                text += f" (did you mean {close[0]!r}?)"
        parts.append(text)
    return ", ".join(parts)


def describe_parameters(scaling: RopeScaling) -> str:
    """``factor (required), beta_fast=32.0, …`` for error messages and docs."""
    if not scaling.parameters:
        return "none"
    return ", ".join(
        f"{k} (required, {p.describe()})" if p.required else f"{k}={p.default!r}"
        for k, p in scaling.parameters.items()
    )


class _DuckScaling(RopeScaling):
    """Adapts a plugin object that has ``name`` and ``inv_freq`` but not the whole protocol."""

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    @property
    def name(self) -> str:  # type: ignore[override]
        return str(self._obj.name)

    @property
    def parameters(self) -> Mapping[str, Param]:  # type: ignore[override]
        return getattr(self._obj, "parameters", {})

    @property
    def seq_len_dependence(self) -> str:  # type: ignore[override]
        return str(getattr(self._obj, "seq_len_dependence", "none"))

    def validate(self, params: Mapping[str, Any], *, owner: str, rotary_dim: int,
                 theta: float) -> dict[str, Any]:
        fn = getattr(self._obj, "validate", None)
        if fn is None:
            return super().validate(params, owner=owner, rotary_dim=rotary_dim, theta=theta)
        return dict(fn(params, owner=owner, rotary_dim=rotary_dim, theta=theta))

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        return self._obj.inv_freq(rotary_dim, theta, params, seq_len)  # type: ignore[no-any-return]

    def attention_factor(self, rotary_dim: int, theta: float, params: Mapping[str, Any]) -> float:
        fn = getattr(self._obj, "attention_factor", None)
        return 1.0 if fn is None else float(fn(rotary_dim, theta, params))

    def seq_len_breakpoints(self, params: Mapping[str, Any]) -> tuple[int, ...]:
        fn = getattr(self._obj, "seq_len_breakpoints", None)
        return () if fn is None else tuple(int(t) for t in fn(params))


def as_scaling(obj: Any) -> RopeScaling:
    """``obj`` itself if it is a :class:`RopeScaling`, else an adapter with the defaults."""
    return obj if isinstance(obj, RopeScaling) else _DuckScaling(obj)


def resolve_scaling(owner: str, scaling: Mapping[str, Any] | None, *, rotary_dim: int,
                    theta: float) -> tuple[RopeScaling | None, dict[str, Any] | None]:
    """Look up ``scaling["type"]`` in the registry and validate the rest.

    Returns ``(scaling type, normalised dict with "type")``, or ``(None, None)`` for no scaling
    (``None`` or ``{"type": "default"}``). Hugging Face's ``"rope_type"`` is accepted for
    ``"type"``."""
    if scaling is None:
        return None, None
    params = dict(scaling)
    kind = params.pop("type", None)
    if "rope_type" in params:
        alias = params.pop("rope_type")
        if kind is not None and alias != kind:
            raise ValueError(f"{owner}: option 'scaling' has 'type'={kind!r} and "
                             f"'rope_type'={alias!r}; give one")
        kind = alias
    from ..registry import default_registry

    known = default_registry.scalings()
    names = ", ".join(sorted(known))
    if kind is None:
        raise ValueError(f"{owner}: option 'scaling' needs a 'type' (one of: {names}), got "
                         f"{dict(scaling)!r}")
    if not isinstance(kind, str):
        raise TypeError(f"{owner}: scaling 'type' must be a string (one of: {names}), got "
                        f"{kind!r}")
    if kind not in known:
        close = difflib.get_close_matches(kind, list(known), n=1, cutoff=0.6)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"{owner}: unknown scaling type {kind!r}.{hint} Known types: {names} "
                         f"(plugins add more through the peregistry_rope_scalings hook)")
    obj = as_scaling(known[kind])
    normalised = obj.validate(params, owner=owner, rotary_dim=rotary_dim, theta=theta)
    if obj.seq_len_dependence not in SEQ_LEN_DEPENDENCE:
        raise ValueError(f"scaling plugin {kind!r} declares seq_len_dependence="
                         f"{obj.seq_len_dependence!r}; allowed: {', '.join(SEQ_LEN_DEPENDENCE)}")
    if kind == "default":
        return None, None
    return obj, {"type": kind, **normalised}


# -- built-in scaling types --------------------------------------------------------------------
_GE1 = "a number >= 1"
_POS_INT = "a positive integer"


def _factor(doc: str = "context extension factor") -> Param:
    return Param("float", allowed=_GE1, check=lambda f: f >= 1.0, doc=doc)


def _orig(doc: str = "context length the model was trained on") -> Param:
    return Param("int", allowed=_POS_INT, check=lambda n: n > 0, doc=doc)


class Default(RopeScaling):
    """No scaling: RoFormer's frequencies. ``{"type": "default"}`` equals ``scaling=None``."""

    name = "default"
    summary = "no scaling (RoFormer frequencies)"

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        return base_inv_freq(rotary_dim, theta)


class Linear(RopeScaling):
    """Position interpolation: ``ω'_i = ω_i / factor`` (Chen et al. 2023, arXiv:2306.15595)."""

    name = "linear"
    summary = "position interpolation, ω/factor (Chen et al. 2023)"
    parameters: ClassVar[Mapping[str, Param]] = {
        "factor": _factor("positions are divided by this")}

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        return _f64(base_inv_freq(rotary_dim, theta) / params["factor"])


class Dynamic(RopeScaling):
    """Dynamic NTK-aware scaling (bloc97 and emozilla, r/LocalLLaMA 2023; HF ``dynamic``):

    ``θ' = θ·(factor·s/L - (factor - 1))^(d/(d-2))`` with ``s = max(seq_len, L)``, then
    ``ω'_i = θ'^(-2i/d)``. For ``s <= L`` this is plain RoPE.

    ``original_max_position_embeddings`` is ``L``; Hugging Face reads it from the model config's
    ``max_position_embeddings``."""

    name = "dynamic"
    summary = "dynamic NTK-aware base scaling (bloc97/emozilla 2023)"
    parameters: ClassVar[Mapping[str, Param]] = {
        "factor": _factor(),
        "original_max_position_embeddings": _orig(
            "L: the model's max_position_embeddings in Hugging Face configs"),
    }
    seq_len_dependence = "continuous"

    def check(self, params: Mapping[str, Any], *, where: str, rotary_dim: int,
              theta: float) -> None:
        if rotary_dim <= 2:
            raise ValueError(f"{where} needs rotary_dim > 2 (its exponent is d/(d-2)), got "
                             f"rotary_dim={rotary_dim}")

    def seq_len_key(self, params: Mapping[str, Any], seq_len: int | None) -> Any:
        orig = params["original_max_position_embeddings"]
        return orig if seq_len is None else max(int(seq_len), orig)

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        orig = params["original_max_position_embeddings"]
        factor = params["factor"]
        s = orig if seq_len is None else max(int(seq_len), orig)
        d = rotary_dim
        base = theta * ((factor * s / orig) - (factor - 1)) ** (d / (d - 2))
        return base_inv_freq(d, base)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


class Yarn(RopeScaling):
    """YaRN (Peng et al. 2023, arXiv:2309.00071), as Hugging Face ``_compute_yarn_parameters``.

    With ``r(n) = d·ln(L/(2π·n)) / (2 ln θ)`` (the dimension that makes ``n`` rotations over
    ``L`` positions), ``lo = r(beta_fast)``, ``hi = r(beta_slow)`` (floored/ceiled when
    ``truncate``), clipped to ``[0, d-1]``, and ``γ_i = 1 - clip((i - lo)/(hi - lo), 0, 1)``:
    ``ω'_i = (ω_i/factor)·(1 - γ_i) + ω_i·γ_i`` (high frequencies kept, low ones interpolated).

    Attention factor: ``attention_factor`` if given; else, when both ``mscale`` and
    ``mscale_all_dim`` are non-zero (DeepSeek-V2/V3), ``m(factor, mscale)/m(factor,
    mscale_all_dim)``; else ``m(factor, 1)``, where ``m(s, k) = 0.1·k·ln(s) + 1`` (1 if s <= 1).
    """

    name = "yarn"
    summary = "YaRN ramp between interpolation and extrapolation (Peng et al. 2023)"
    parameters: ClassVar[Mapping[str, Param]] = {
        "factor": _factor(),
        "original_max_position_embeddings": _orig(),
        "beta_fast": Param("float", 32.0, "a number > 0", lambda b: b > 0,
                           "rotations above which frequencies are kept (extrapolated)"),
        "beta_slow": Param("float", 1.0, "a number > 0", lambda b: b > 0,
                           "rotations below which frequencies are interpolated"),
        "mscale": Param("float", None, "None or a number >= 0", lambda m: m >= 0,
                        "DeepSeek: numerator coefficient of the attention factor"),
        "mscale_all_dim": Param("float", None, "None or a number >= 0", lambda m: m >= 0,
                                "DeepSeek: denominator coefficient of the attention factor"),
        "attention_factor": Param("float", None, "None or a number > 0", lambda a: a > 0,
                                  "factor on cos/sin (None: derived from factor and mscale)"),
        "truncate": Param("bool", True, doc="floor/ceil the correction range (gpt-oss: False)"),
    }

    def check(self, params: Mapping[str, Any], *, where: str, rotary_dim: int,
              theta: float) -> None:
        if not params["beta_fast"] > params["beta_slow"]:
            raise ValueError(f"{where}: 'beta_fast' must be greater than 'beta_slow', got "
                             f"beta_fast={params['beta_fast']!r}, beta_slow="
                             f"{params['beta_slow']!r}")

    def attention_factor(self, rotary_dim: int, theta: float, params: Mapping[str, Any]) -> float:
        if params["attention_factor"] is not None:
            return float(params["attention_factor"])
        factor, mscale, mscale_all = params["factor"], params["mscale"], params["mscale_all_dim"]
        if mscale and mscale_all:  # Hugging Face tests truthiness: 0 and None mean "absent"
            return float(_yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all))
        return _yarn_mscale(factor)

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        import numpy as np

        d = rotary_dim
        orig = params["original_max_position_embeddings"]

        def correction_dim(rotations: float) -> float:
            return (d * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(theta))

        low = correction_dim(params["beta_fast"])
        high = correction_dim(params["beta_slow"])
        if params["truncate"]:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, d - 1)
        if low == high:
            high += 0.001  # Hugging Face: prevent a singular ramp
        ramp = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
        extrapolation = 1.0 - ramp
        omega = base_inv_freq(d, theta)
        return np.asarray((omega / params["factor"]) * (1.0 - extrapolation)
                          + omega * extrapolation, dtype=np.float64)


class LongRope(RopeScaling):
    """LongRoPE (Ding et al. 2024, arXiv:2402.13753) as in Phi-3 and Hugging Face
    ``_compute_longrope_parameters``: ``ω'_i = ω_i / r_i`` with ``r = long_factor`` when the
    sequence length ``s > L`` and ``short_factor`` otherwise.

    Attention factor: ``attention_factor`` if given, else ``sqrt(1 + ln(factor)/ln(L))`` (1 if
    ``factor <= 1``). Hugging Face derives a missing ``factor`` from the model config as
    ``max_position_embeddings / original_max_position_embeddings`` (32 for
    Phi-3-mini-128k-instruct); here one of ``factor`` and ``attention_factor`` must be given.
    """

    name = "longrope"
    summary = "LongRoPE per-frequency factors, short/long by sequence length (Ding et al. 2024)"
    parameters: ClassVar[Mapping[str, Param]] = {
        "short_factor": Param("floats", allowed="a list of rotary_dim/2 numbers > 0",
                              check=lambda v: all(x > 0 for x in v),
                              doc="divisors of ω_i for s <= L"),
        "long_factor": Param("floats", allowed="a list of rotary_dim/2 numbers > 0",
                             check=lambda v: all(x > 0 for x in v),
                             doc="divisors of ω_i for s > L"),
        "original_max_position_embeddings": _orig(),
        "factor": Param("float", None, "None or a number >= 1", lambda f: f >= 1.0,
                        "max_position_embeddings / L (sets the attention factor)"),
        "attention_factor": Param("float", None, "None or a number > 0", lambda a: a > 0,
                                  "factor on cos/sin (None: derived from factor)"),
    }
    seq_len_dependence = "piecewise"

    def check(self, params: Mapping[str, Any], *, where: str, rotary_dim: int,
              theta: float) -> None:
        for key in ("short_factor", "long_factor"):
            if len(params[key]) != rotary_dim // 2:
                raise ValueError(f"{where}: {key!r} must have rotary_dim/2 = {rotary_dim // 2} "
                                 f"entries, got {len(params[key])}")
        if params["factor"] is None and params["attention_factor"] is None:
            raise ValueError(f"{where} needs 'factor' (= max_position_embeddings / "
                             f"original_max_position_embeddings of the model config, e.g. 32.0 "
                             f"for Phi-3-mini-128k) or 'attention_factor'; got neither")

    def seq_len_breakpoints(self, params: Mapping[str, Any]) -> tuple[int, ...]:
        return (int(params["original_max_position_embeddings"]),)

    def attention_factor(self, rotary_dim: int, theta: float, params: Mapping[str, Any]) -> float:
        if params["attention_factor"] is not None:
            return float(params["attention_factor"])
        factor = params["factor"]
        if factor <= 1.0:
            return 1.0
        return math.sqrt(1 + math.log(factor) / math.log(params["original_max_position_embeddings"]))

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        import numpy as np

        long = seq_len is not None and seq_len > params["original_max_position_embeddings"]
        ext = np.asarray(params["long_factor" if long else "short_factor"], dtype=np.float64)
        return base_inv_freq(rotary_dim, theta) / ext


class Llama3(RopeScaling):
    """Llama 3.1 frequency-dependent scaling (Meta 2024; HF ``_compute_llama3_parameters``).

    With wavelengths ``λ_i = 2π/ω_i``: keep ``ω_i`` where ``λ_i < L/high_freq_factor``, use
    ``ω_i/factor`` where ``λ_i > L/low_freq_factor``, and in between
    ``(1-κ_i)·ω_i/factor + κ_i·ω_i`` with ``κ_i = (L/λ_i - low_freq_factor)/(high_freq_factor
    - low_freq_factor)``."""

    name = "llama3"
    summary = "Llama 3.1 wavelength-dependent interpolation"
    parameters: ClassVar[Mapping[str, Param]] = {
        "factor": _factor(),
        "low_freq_factor": Param("float", allowed="a number > 0", check=lambda f: f > 0,
                                 doc="wavelengths above L/low_freq_factor are divided by factor"),
        "high_freq_factor": Param("float", allowed="a number > 0", check=lambda f: f > 0,
                                  doc="wavelengths below L/high_freq_factor are kept"),
        "original_max_position_embeddings": _orig(),
    }

    def check(self, params: Mapping[str, Any], *, where: str, rotary_dim: int,
              theta: float) -> None:
        if not params["high_freq_factor"] > params["low_freq_factor"]:
            raise ValueError(f"{where}: 'high_freq_factor' must be greater than "
                             f"'low_freq_factor', got high_freq_factor="
                             f"{params['high_freq_factor']!r}, low_freq_factor="
                             f"{params['low_freq_factor']!r}")

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        import numpy as np

        factor = params["factor"]
        low, high = params["low_freq_factor"], params["high_freq_factor"]
        orig = params["original_max_position_embeddings"]
        omega = base_inv_freq(rotary_dim, theta)
        wavelen = 2 * math.pi / omega
        scaled = np.where(wavelen > orig / low, omega / factor, omega)
        smooth = (orig / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < orig / high) & ~(wavelen > orig / low)
        return np.asarray(np.where(medium, smoothed, scaled), dtype=np.float64)


@hookimpl
def peregistry_rope_scalings() -> list[RopeScaling]:
    return [Default(), Linear(), Dynamic(), Yarn(), LongRope(), Llama3()]
