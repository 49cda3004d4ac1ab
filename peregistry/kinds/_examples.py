"""What the conformance suite and the command line ask of an encoder besides its public
methods: typical valid positions and options, and the positions of a sequence to draw along.
:class:`~peregistry.Encoder` inherits these; encoders with other position conventions override
them."""

from __future__ import annotations

from typing import Any, ClassVar


class Examples:
    """Examples of an encoder's inputs (a mixin of :class:`~peregistry.Encoder`)."""

    __slots__ = ()
    _option_specs: ClassVar[dict[str, Any]]

    def example_positions(self, rng: Any, shape: tuple[int, ...]) -> Any:
        """Typical valid positions of ``shape`` as a NumPy array, for the conformance suite.

        The default draws integers in ``[0, 1024)``; encoders with other position conventions
        (bounded tables, 2-D or multi-axis positions) override it.
        """
        import numpy as np

        return np.asarray(rng.integers(0, 1024, size=shape), dtype=np.int64)

    @classmethod
    def example_options(cls) -> dict[str, Any]:
        """Options that build a small, typical instance: what ``peregistry check`` and
        ``peregistry plot`` give the required options the user leaves out.

        The default takes each required option's :meth:`Option.example_value` (its declared
        ``example``, else a generic value of its type) and leaves out an option that has none
        (the caller reports it). Override it when required options depend on each other.
        """
        from .._options import NO_EXAMPLE

        examples = {key: spec.example_value() for key, spec in cls._option_specs.items()
                    if spec.required}
        return {key: value for key, value in examples.items() if value is not NO_EXAMPLE}

    def sequence_positions(self, n: int) -> Any:
        """The first ``n`` positions of a sequence, in order, as a NumPy array (``peregistry
        plot`` draws the encoder along them): ``arange(n)``; encoders with bounded tables or
        positions of another shape override it."""
        import numpy as np

        return np.arange(n, dtype=np.int64)
