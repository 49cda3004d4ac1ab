"""The typed API (issue 45): ``get_encoder``'s static types and its ``kind`` argument.

A built-in name's overload of :func:`peregistry.get_encoder` gives the class that name is
registered with (held here against the registry, so the two cannot drift); ``kind`` checks at
run time what a type checker is told, before the options are validated.
"""

from __future__ import annotations

import importlib
import typing
from typing import Any

import numpy as np
import pytest
from test_doctests import run_examples

import peregistry as per
from peregistry._records import BUILTIN_FAMILIES


def _typed_names() -> dict[str, str]:
    """Built-in name -> the class name its overload of ``per.get_encoder`` returns."""
    out = {}
    for overload in typing.get_overloads(per.get_encoder):
        hints = overload.__annotations__  # (strings: the module has `from __future__ import annotations`)
        name = hints["name"]
        if name.startswith("Literal["):
            out[name[len('Literal["'):-len('"]')]] = hints["return"]
    return out


def test_every_builtin_name_has_its_family_class_as_type() -> None:
    typed = _typed_names()
    builtin = {name: module for module, names in BUILTIN_FAMILIES.items() for name in names}
    assert sorted(typed) == sorted(builtin)
    for name, module in builtin.items():
        cls = per.get_encoder(name, **_options(name)).__class__
        assert cls.__name__ == typed[name], name
        # the overload names the class of the module that registers it (the TYPE_CHECKING import)
        assert getattr(importlib.import_module(module), typed[name]) is cls


def _options(name: str) -> dict[str, Any]:
    cls = per.default_registry.encoder_class(name)
    return cls.example_options()


def test_kind_returns_the_encoder_when_it_is_of_that_class() -> None:
    enc = per.get_encoder("rotary", per.RotaryEncoder, dim=8)
    assert enc == per.get_encoder("rotary", dim=8)
    assert per.get_encoder("alibi", per.BiasEncoder, num_heads=4).kind == "bias"
    assert per.get_encoder("rotary", per.Encoder, dim=8).name == "rotary"
    x = np.ones((3, 8))
    assert np.array_equal(enc.rotate(x), per.get_encoder("rotary", dim=8).rotate(x))


def test_kind_mismatch_names_both_classes_before_options_are_checked() -> None:
    with pytest.raises(TypeError, match=r"'alibi' is a peregistry\..*ALiBi \(kind 'bias'\), "
                                        r"not a peregistry\..*RotaryEncoder as kind=RotaryEncoder"):
        per.get_encoder("alibi", per.RotaryEncoder, num_heads=4)
    with pytest.raises(TypeError, match="'alibi' is a"):  # (num_heads missing: not reached)
        per.get_encoder("alibi", per.RotaryEncoder)


@pytest.mark.parametrize(("kind", "match"), [
    ("rotary", r"kind='rotary' is a kind's name; pass its class, per\.RotaryEncoder"),
    ("relative-embedding", r"pass its class, per\.RelativeEmbedding"),
    (8, r"kind=8 \(the second positional argument\) is not an encoder class; allowed: an "
        r"Encoder subclass.*Options are keyword-only"),
    (int, "kind=<class 'int'> .* is not an encoder class"),
])
def test_kind_that_is_not_an_encoder_class_says_what_is_allowed(kind: Any, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        per.get_encoder("rotary", kind, dim=8)


def test_kind_of_a_plugin_class() -> None:
    class MyRope(per.RotaryEncoder):
        name = "typed-api-rope"
        dim = per.Option(int)

        def _half_cos_sin(self, positions: Any, *, ctx: Any, seq_len: Any) -> Any:
            raise NotImplementedError

    per.register(MyRope, name="typed-api-plugin")
    try:
        assert type(per.get_encoder("typed-api-rope", MyRope, dim=4)) is MyRope
        assert per.get_encoder("typed-api-rope", per.RotaryEncoder, dim=4).name == "typed-api-rope"
        with pytest.raises(TypeError, match="not a .*MyRope as kind=MyRope"):
            per.get_encoder("rotary", MyRope, dim=4)
    finally:
        per.unregister("typed-api-plugin")


def test_from_hf_config_kind() -> None:
    llama = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
             "rope_theta": 500000.0, "max_position_embeddings": 128}
    assert per.from_hf_config(llama, kind=per.RotaryEncoder).name == "rotary"
    bloom = {"model_type": "bloom", "hidden_size": 64, "n_head": 4}
    assert per.from_hf_config(bloom).name == "alibi"
    with pytest.raises(TypeError, match="'alibi' is a .*ALiBi .* not a .*RotaryEncoder"):
        per.from_hf_config(bloom, kind=per.RotaryEncoder)


def test_get_encoder_docstring_example() -> None:
    run_examples("peregistry.get_encoder")
