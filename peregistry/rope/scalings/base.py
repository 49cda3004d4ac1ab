"""The scaling protocol: :class:`RopeScaling` (a type's name, its parameters declared with
:class:`~peregistry.Option`, its frequencies and attention factor) and :func:`resolve_scaling`,
which turns an encoder's ``scaling={"type": NAME, ...}`` into the registered type and its
validated parameters, with errors that name the type, the key, the value and what is allowed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ..._options import Option
from ._params import convert_parameter, named

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "SEQ_LEN_DEPENDENCE",
    "RopeScaling",
    "as_scaling",
    "context_option",
    "describe_parameters",
    "factor_option",
    "parameter_options",
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


def factor_option(doc: str = "context extension factor") -> Option:
    """The ``factor`` most types share: a number >= 1."""
    return Option(float, allowed="a number >= 1", check=lambda f: f >= 1.0, doc=doc)


def context_option(doc: str = "context length the model was trained on") -> Option:
    """``original_max_position_embeddings``, the ``L`` of the formulas: a positive integer."""
    return Option(int, allowed="a positive integer", check=lambda n: n > 0, doc=doc)


def positive_option(doc: str, default: float) -> Option:
    """A number > 0 with a default (YaRN's betas, an attention factor's multiplier)."""
    return Option(float, default, allowed="a number > 0", check=lambda b: b > 0, doc=doc)


def beta_options() -> dict[str, Option]:
    """YaRN's ``beta_fast`` and ``beta_slow``, the rotation counts that bound its ramp (Peng et
    al. 2023, §3.2: 32 and 1), shared by the types built on YaRN's frequencies."""
    return {"beta_fast": positive_option("rotations above which frequencies are kept "
                                         "(extrapolated)", 32.0),
            "beta_slow": positive_option("rotations below which frequencies are interpolated", 1.0)}


def check_beta_order(params: Mapping[str, Any], where: str) -> None:
    """Raise unless ``beta_fast > beta_slow`` (else YaRN's ramp is empty or reversed)."""
    if not params["beta_fast"] > params["beta_slow"]:
        raise ValueError(f"{where}: 'beta_fast' must be greater than 'beta_slow', got "
                         f"beta_fast={params['beta_fast']!r}, beta_slow={params['beta_slow']!r}")


class RopeScaling:
    """Base class of scaling types. Subclasses set :attr:`name` and :attr:`parameters` and
    implement :meth:`inv_freq`; the rest has sensible defaults."""

    #: The ``"type"`` in ``scaling={"type": ...}``.
    name: ClassVar[str] = ""
    #: One line for docs and error messages.
    summary: ClassVar[str] = ""
    #: Parameters by key (Hugging Face ``rope_parameters`` names), each an :class:`Option`.
    parameters: ClassVar[Mapping[str, Option]] = {}
    #: One of :data:`SEQ_LEN_DEPENDENCE`.
    seq_len_dependence: ClassVar[str] = "none"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = cls.__dict__.get("parameters")
        if isinstance(declared, Mapping):  # name the options, as a class body names an encoder's
            cls.parameters = {k: named(o, k) if isinstance(o, Option) else o
                              for k, o in declared.items()}

    def validate(self, params: Mapping[str, Any], *, owner: str, rotary_dim: int,
                 theta: float) -> dict[str, Any]:
        """Check ``params`` (without ``"type"``) and return them complete: every declared key,
        defaults filled, in canonical form. Errors name the key, the value and what is allowed."""
        where = f"{owner}: scaling {self.name!r}"
        options = parameter_options(self)
        unknown = [k for k in params if k not in options]
        if unknown:
            raise ValueError(f"{where} has no parameter {_unknown_words(unknown, options)}; "
                             f"its parameters are: {describe_parameters(self)}")
        missing = [k for k, o in options.items() if o.required and k not in params]
        if missing:
            raise ValueError(
                f"{where} is missing required parameter{'s' if len(missing) > 1 else ''} "
                + ", ".join(f"{k!r} ({options[k].allowed})" for k in missing)
            )
        out = {k: convert_parameter(where, o, params.get(k)) for k, o in options.items()}
        self.check(out, where=where, rotary_dim=rotary_dim, theta=theta)
        return out

    def check(self, params: Mapping[str, Any], *, where: str, rotary_dim: int,
              theta: float) -> None:
        """Cross-parameter checks (override; raise ``ValueError`` starting with ``where``)."""

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        """The ``rotary_dim/2`` angular frequencies in float64, for sequence length ``seq_len``
        (None: not known, i.e. at most ``original_max_position_embeddings``)."""
        raise NotImplementedError

    def attention_factor(self, rotary_dim: int, theta: float, params: Mapping[str, Any]) -> float:
        """The factor applied to ``cos`` and ``sin`` (1.0 unless the method says otherwise)."""
        return 1.0

    def softmax_scale_factor(self, params: Mapping[str, Any]) -> float:
        """The factor a model multiplies its attention softmax scale (``1/sqrt(head_dim)``) by
        because of this scaling, outside RoPE (1.0 unless the method says otherwise)."""
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


def parameter_options(scaling: Any) -> dict[str, Option]:
    """The parameters of a scaling type (an object with a ``parameters`` mapping) as named
    :class:`Option` s, in declaration order."""
    out = {}
    for key, decl in getattr(scaling, "parameters", {}).items():
        if isinstance(decl, Option):
            out[key] = named(decl, key)
        else:
            raise TypeError(f"scaling {scaling.name!r} declares parameter {key!r} as {decl!r}; "
                            f"declare it with peregistry.Option")
    return out


def _unknown_words(unknown: list[str], options: Mapping[str, Option]) -> str:
    parts = []
    for k in unknown:
        text = repr(k)
        if k in _MOVED_KEYS:
            text += f" ({_MOVED_KEYS[k]})"
        else:
            import difflib  # error messages only

            close = difflib.get_close_matches(k, list(options), n=1, cutoff=0.6)
            if close:
                text += f" (did you mean {close[0]!r}?)"
        parts.append(text)
    return ", ".join(parts)


def describe_parameters(scaling: Any) -> str:
    """``factor (required, a number >= 1), beta_fast=32.0, …`` for error messages and docs."""
    options = parameter_options(scaling)
    if not options:
        return "none"
    return ", ".join(
        f"{k} (required, {o.allowed})" if o.required else f"{k}={o.default!r}"
        for k, o in options.items()
    )


class _DuckScaling(RopeScaling):
    """Adapts a plugin object that has ``name`` and ``inv_freq`` but not the whole protocol."""

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    @property
    def name(self) -> str:  # type: ignore[override]
        return str(self._obj.name)

    @property
    def parameters(self) -> Mapping[str, Option]:  # type: ignore[override]
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

    def softmax_scale_factor(self, params: Mapping[str, Any]) -> float:
        fn = getattr(self._obj, "softmax_scale_factor", None)
        return 1.0 if fn is None else float(fn(params))

    def seq_len_breakpoints(self, params: Mapping[str, Any]) -> tuple[int, ...]:
        fn = getattr(self._obj, "seq_len_breakpoints", None)
        return () if fn is None else tuple(int(t) for t in fn(params))


def as_scaling(obj: Any) -> RopeScaling:
    """``obj`` itself if it is a :class:`RopeScaling`, else an adapter with the defaults."""
    return obj if isinstance(obj, RopeScaling) else _DuckScaling(obj)


def registered_scalings() -> Mapping[str, Any]:
    """Every scaling type by name, from the plugins (the ``peregistry_rope_scalings`` hook) of
    the registry building the encoder (see :mod:`peregistry._services`)."""
    from ...kinds._services import current_services

    return current_services().scalings()


def resolve_scaling(owner: str, scaling: Mapping[str, Any] | None, *, rotary_dim: int,
                    theta: float, known: Mapping[str, Any] | None = None,
                    ) -> tuple[RopeScaling | None, dict[str, Any] | None]:
    """Look up ``scaling["type"]`` among the ``known`` types (default: the registered ones) and
    validate the rest.

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
    if known is None:
        known = registered_scalings()
    names = ", ".join(sorted(known))
    if kind is None:
        raise ValueError(f"{owner}: option 'scaling' needs a 'type' (one of: {names}), got "
                         f"{dict(scaling)!r}")
    if not isinstance(kind, str):
        raise TypeError(f"{owner}: scaling 'type' must be a string (one of: {names}), got "
                        f"{kind!r}")
    if kind not in known:
        import difflib

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
