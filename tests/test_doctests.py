"""The examples in the docstrings of the entry points a user meets first run, as doctests
(issue 44).

Each entry point names the object whose docstring holds its example and the frameworks the
example needs. The NumPy examples run in every env; ``patch`` needs torch and transformers (the
torch env), the Keras layers keras (the keras env, on each Keras backend), the Flax module flax
(the flax env). An example whose framework is not installed is skipped, saying which; an entry
point whose docstring has no example fails.
"""

from __future__ import annotations

import doctest
import importlib
from typing import Any

import pytest

#: entry point -> (dotted path of the object holding its example, frameworks it needs).
ENTRY_POINTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "get_encoder": ("peregistry.registry.Registry.get_encoder", ()),
    "list_encoders": ("peregistry.list_encoders", ()),
    "encode": ("peregistry.encoders.base.AbsoluteEncoder.encode", ()),
    "rotate": ("peregistry.rope.encoder.RotaryEncoder.rotate", ()),
    "cos_sin": ("peregistry.rope.encoder.RotaryEncoder.cos_sin", ()),
    "tables": ("peregistry.rope.encoder.RotaryEncoder.tables", ()),
    "bias": ("peregistry.encoders.base.BiasEncoder.bias", ()),
    "embed": ("peregistry.encoders.base.RelativeEmbedding.embed", ()),
    "from_hf_config": ("peregistry.from_hf_config", ()),
    "check_encoder": ("peregistry.testing._report.check_encoder", ()),
    "patch": ("peregistry.integrations.transformers.patch", ("torch", "transformers")),
    "keras.RotaryEmbedding": ("peregistry.integrations.keras.RotaryEmbedding", ("keras",)),
    "keras.PositionEmbedding": ("peregistry.integrations.keras.PositionEmbedding", ("keras",)),
    "keras.RelativeBias": ("peregistry.integrations.keras.RelativeBias", ("keras",)),
    "flax.Encoder": ("peregistry.integrations.flax.Encoder", ("flax",)),
}


def _resolve(path: str) -> Any:
    """The object at dotted ``path``: the longest importable module, then attributes."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(path)


def run_examples(path: str, frameworks: tuple[str, ...] = ()) -> None:
    """Run the ``>>>`` examples of the docstring of the object at ``path`` (skipped, with the
    reason, when one of ``frameworks`` is not installed); fail if it has none or one fails."""
    for name in frameworks:
        pytest.importorskip(name, reason=f"the example of {path} needs {name}")
    obj = _resolve(path)
    name = path.rpartition(".")[2]
    tests = [t for t in doctest.DocTestFinder(recurse=False).find(obj, name, globs={})
             if t.examples]
    assert tests, f"{path} has no >>> example in its docstring"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        test.name = path
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {path} failed"


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_entry_point_example_runs(entry_point: str) -> None:
    path, frameworks = ENTRY_POINTS[entry_point]
    run_examples(path, frameworks)
