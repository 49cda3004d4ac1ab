"""Writing a peregistry plugin: a tutorial you can copy.

A plugin is a distribution that announces a module in the ``peregistry`` entry point group.
The built-in families are registered exactly this way, by the ``peregistry`` distribution.

1. ``pyproject.toml`` of your package::

       [project]
       name = "mypkg"
       dependencies = ["peregistry"]

       [project.entry-points.peregistry]
       mypkg = "mypkg.peregistry_plugin"

2. ``mypkg/peregistry_plugin.py``: an encoder class and a hook returning it::

       import peregistry as per

       class ShiftedSin(per.AbsoluteEncoder):
           \"\"\"Sinusoid with a phase shift (first docstring line = summary in `peregistry list`).\"\"\"

           name = "shifted-sin"                 # unique registry name
           continuous = True                    # real-valued positions make sense
           properties = frozenset({"shift-linear", "shift-invariant-dot"})  # laws the suite checks

           dim = per.Option(int, allowed="a positive even integer",
                            check=lambda d: d > 0 and d % 2 == 0)
           phase = per.Option(float, 0.0)

           def _encode(self, positions, *, params, ctx):
               xp = ctx.xp                      # the caller's Array API namespace
               i = xp.arange(self.dim // 2, dtype=ctx.wide, device=ctx.device)
               angle = xp.astype(positions, ctx.wide)[..., None] * 10000.0 ** (-2 * i / self.dim)
               return xp.concat((xp.sin(angle + self.phase), xp.cos(angle + self.phase)), axis=-1)

       @per.hookimpl
       def peregistry_encoders():
           return [ShiftedSin]

   The base class validates the options (clear errors naming option, value and what is allowed),
   makes the encoder immutable, hashable and comparable, finds the caller's namespace and device,
   and casts the wide result (``ctx.wide``: float64 where the backend has it) once to the dtype
   the caller asked for. Use only Array API calls on ``xp``; framework differences belong in
   backend adapters (hook ``peregistry_backends``).

3. Two lines in your tests run the conformance suite on every installed backend::

       from peregistry.testing import parametrize_with_checks

       @parametrize_with_checks([("shifted-sin", {"dim": 16})])
       def test_conformance(case):
           case.run()

   ``PEREGISTRY_BACKENDS=numpy,torch`` restricts the backends; known failures are declared with
   ``expected_failed_checks={"check_name": "reason"}``.

Angles for continuous encoders: :class:`Frequencies` holds host-side frequency constants and
:func:`cos_sin` computes ``cos(p·ω)``, ``sin(p·ω)`` accurately on every backend (float64 where
the backend has it, exact range reduction on float32-only backends such as JAX without x64), as
the built-in sinusoidal and rotary encoders do::

    from peregistry.plugin import Frequencies, cos_sin

    freqs = Frequencies.from_omega(10000.0 ** (-2 * i / dim) for i in range(dim // 2))
    cos, sin = cos_sin(positions, freqs, ctx=ctx)   # each (*positions.shape, dim/2)

Rotary families build on the rope engine (:mod:`peregistry.rope`, whose pure functions —
``inv_freq``, ``full_width``, ``rotate_half``, ``apply_rotation``, ... — are public too):
:class:`RotaryEncoder` (implement ``_half_cos_sin``), :class:`ScaledRotary` (RoFormer
frequencies with a ``scaling`` option, as ``rotary``/``mrope``) and :class:`MultiAxisRotary`
(positions ``(num_axes, ...)``; implement ``num_axes`` and ``_axis_frequencies``, as ``mrope``
and peregistry-vision's ``axial-rotary``). :class:`RotaryTables` applies tables made once
(``enc.tables(positions)``) to any number of tensors::

    from peregistry.plugin import Frequencies, MultiAxisRotary
    from peregistry.rope import inv_freq

    class Axial2D(MultiAxisRotary):
        name = "axial-2d"
        dim = per.Option(int, allowed="a positive multiple of 4",
                         check=lambda d: d > 0 and d % 4 == 0)
        num_axes = 2

        def _axis_frequencies(self, seq_len):
            omega = inv_freq(self.dim // 2)   # each axis: dim/2 features, dim/4 pairs
            return (Frequencies.from_omega(omega),) * 2

For notebooks and tests, :func:`peregistry.register` adds a plugin in-process (any module or
object with hookimpls) and :func:`peregistry.unregister` takes it away. A plugin that fails to
import or raises in its hook is shown by ``peregistry list`` with its error and never breaks the
other encoders; a name claimed twice is an error naming both distributions.

Environment switches: ``PEREGISTRY_DISABLE_PLUGIN_AUTOLOAD=1`` (built-ins only),
``PEREGISTRY_LOAD_PLUGINS=dist1,dist2`` (only these third-party distributions),
``PEREGISTRY_DISABLED_PLUGINS=dist1`` (never these).
"""

from __future__ import annotations

from ._hooks import hookimpl, hookspec
from ._options import Option
from .backends._base import Backend, Ctx
from .encoders.learned_params import LearnedParams, init_params
from .encoders.pairs import clip_distance, compute_dtype, distance, gather, index_dtype
from .kinds.base import AbsoluteEncoder, BiasEncoder, Encoder, RelativeEmbedding
from .rope import Frequencies, MultiAxisRotary, RotaryEncoder, RotaryTables, ScaledRotary, angles, cos_sin

__all__ = [
    "AbsoluteEncoder",
    "Backend",
    "BiasEncoder",
    "Ctx",
    "Encoder",
    "Frequencies",
    "MultiAxisRotary",
    "Option",
    "RelativeEmbedding",
    "RotaryEncoder",
    "RotaryTables",
    "ScaledRotary",
    "angles",
    "cos_sin",
    "hookimpl",
    "hookspec",
]

# Building blocks of the pair kinds (``k - q``) and of learned encoders: see docs/plugins.md.
__all__ += [
    "LearnedParams",
    "clip_distance",
    "compute_dtype",
    "distance",
    "gather",
    "index_dtype",
    "init_params",
]
