"""Encoder base classes: declared options, validation messages, immutability, hashing, repr."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

import peregistry as per

pytestmark = pytest.mark.backend_free  # options are plain Python values


class Toy(per.AbsoluteEncoder):
    """A toy encoder for option tests."""

    name = "toy"
    dim = per.Option(int, allowed="a positive integer", check=lambda d: d > 0)
    scale = per.Option(float, 1.0, allowed="a finite number > 0", check=lambda s: s > 0)
    mode = per.Option(str, "a", choices=("a", "b"))
    flag = per.Option(bool, False)
    extra = per.Option(dict, None, nullable=True)
    sizes = per.Option(tuple, (1, 2))

    def _validate(self) -> None:
        if self.mode == "b" and self.dim < 4:
            raise self._invalid("dim", self.dim, ">= 4 when mode='b'")


def test_defaults_filled_and_options_is_a_fresh_dict() -> None:
    enc = Toy(dim=3)
    assert enc.options == {"dim": 3, "scale": 1.0, "mode": "a", "flag": False, "extra": None,
                           "sizes": (1, 2)}
    enc.options["dim"] = 99
    assert enc.dim == 3


def test_unknown_option_is_type_error_listing_valid_ones() -> None:
    with pytest.raises(TypeError, match=r"toy: unknown option 'dimm'; valid options: dim, scale"):
        Toy(dim=3, dimm=4)


def test_missing_required_option_names_it() -> None:
    with pytest.raises(TypeError, match=r"missing required option 'dim' \(a positive integer\)"):
        Toy()


@pytest.mark.parametrize(
    ("kwargs", "exc", "pattern"),
    [
        ({"dim": 0}, ValueError, r"option 'dim' must be a positive integer, got 0"),
        ({"dim": 2.0}, TypeError, r"option 'dim' must be a positive integer, got 2.0 of type float"),
        ({"dim": True}, TypeError, r"option 'dim' .* got True of type bool"),
        ({"dim": "8"}, TypeError, r"got '8' of type str"),
        ({"dim": 2, "scale": float("nan")}, ValueError, r"option 'scale' must be a finite"),
        ({"dim": 2, "scale": -1}, ValueError, r"option 'scale' must be a finite number > 0, got -1"),
        ({"dim": 2, "mode": "c"}, ValueError, r"option 'mode' must be one of 'a', 'b', got 'c'"),
        ({"dim": 2, "flag": 1}, TypeError, r"option 'flag' must be a bool"),
        ({"dim": 2, "extra": [1]}, TypeError, r"option 'extra' must be a dict"),
        ({"dim": 2, "sizes": "12"}, TypeError, r"option 'sizes'"),
        ({"dim": 2, "mode": "b"}, ValueError, r"option 'dim' must be >= 4 when mode='b', got 2"),
        ({"dim": None}, TypeError, r"option 'dim' must be a positive integer, got None"),
    ],
)
def test_bad_values_name_option_value_and_allowed(kwargs: dict, exc: type, pattern: str) -> None:
    with pytest.raises(exc, match=pattern):
        Toy(**kwargs)


def test_numpy_scalars_are_accepted_and_normalised() -> None:
    np = pytest.importorskip("numpy")
    enc = Toy(dim=np.int64(5), scale=np.float32(0.5))
    assert type(enc.dim) is int
    assert type(enc.scale) is float
    assert enc == Toy(dim=5, scale=0.5)


def test_immutable() -> None:
    enc = Toy(dim=3)
    with pytest.raises(AttributeError, match="immutable"):
        enc.dim = 4  # type: ignore[misc]
    with pytest.raises(AttributeError, match="immutable"):
        enc.other = 1  # type: ignore[attr-defined]


def test_equal_and_hash_by_name_and_options_including_dicts() -> None:
    a = Toy(dim=3, extra={"b": [1, 2], "a": {"x": 1}})
    b = Toy(dim=3, extra={"a": {"x": 1}, "b": [1, 2]})
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b, Toy(dim=4)}) == 2
    assert a != Toy(dim=3)
    assert a.options["extra"] == {"a": {"x": 1}, "b": (1, 2)}


def test_caller_dict_is_not_aliased() -> None:
    extra = {"k": [1]}
    enc = Toy(dim=3, extra=extra)
    extra["k"].append(2)
    extra["z"] = 0
    assert enc.options["extra"] == {"k": (1,)}


def test_repr_shows_name_and_every_option() -> None:
    assert repr(Toy(dim=3)) == (
        "get_encoder('toy', dim=3, scale=1.0, mode='a', flag=False, extra=None, sizes=(1, 2))"
    )


def test_replace_and_pickle_round_trip() -> None:
    enc = Toy(dim=3)
    assert enc.replace(dim=5).dim == 5
    assert pickle.loads(pickle.dumps(enc)) == enc
    with pytest.raises(ValueError, match="'dim'"):
        enc.replace(dim=-1)


def test_summary_and_family_default_from_class() -> None:
    assert Toy.summary == "A toy encoder for option tests."
    assert Toy.family == "toy"
    assert Toy.kind == "absolute"


def test_keyword_only() -> None:
    with pytest.raises(TypeError):
        Toy(3)  # type: ignore[call-arg]


# -- command-line text and example values ---------------------------------------------------------
@pytest.mark.parametrize(
    ("option", "text", "value"),
    [
        ("dim", "8", 8),
        ("dim", " -3 ", -3),
        ("scale", "1e4", 10000.0),
        ("scale", "0.5", 0.5),
        ("mode", "b", "b"),
        ("mode", "none", "none"),  # not nullable: a string like any other
        ("flag", "true", True),
        ("flag", "Off", False),
        ("flag", "1", True),
        ("sizes", "2,3,3", (2, 3, 3)),
        ("sizes", "[1, 2]", (1, 2)),
        ("sizes", "(4,)", (4,)),
        ("sizes", "", ()),
        ("extra", '{"type": "linear", "factor": 2}', {"type": "linear", "factor": 2}),
        ("extra", "None", None),
        ("extra", "null", None),
    ],
)
def test_parse_text_by_type(option: str, text: str, value: object) -> None:
    got = Toy._option_specs[option].parse("toy", text)
    assert got == value
    assert type(got) is type(value)


@pytest.mark.parametrize(
    ("option", "text", "pattern"),
    [
        ("dim", "abc", r"^toy: option 'dim' must be a positive integer, got 'abc'$"),
        ("dim", "2.5", r"option 'dim' must be a positive integer, got '2.5'"),
        ("dim", "none", r"option 'dim' must be a positive integer, got 'none'"),
        ("scale", "fast", r"option 'scale' must be a finite number > 0, got 'fast'"),
        ("flag", "maybe", r"option 'flag' must be a bool \(True or False\), got 'maybe' "
                          r"\(write true or false\)"),
        ("sizes", "1,x", r"option 'sizes' must be a sequence of integers, got '1,x' \(write "
                         r"integers separated by commas, e.g. 1,2,3\)"),
        ("extra", "{oops", r"option 'extra' must be a dict, got '\{oops' \(not valid JSON"),
        ("extra", "[1]", r"option 'extra' must be a dict, got '\[1\]' \(write a JSON object"),
    ],
)
def test_parse_errors_name_option_text_and_allowed(option: str, text: str, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        Toy._option_specs[option].parse("toy", text)


def test_parse_float_sequence() -> None:
    spec = per.Option(tuple, item=float)
    spec.name = "short_factor"
    assert spec.parse("x", "1,0.5,2e1") == (1.0, 0.5, 20.0)
    assert spec.syntax == "numbers 1.0,0.5"
    with pytest.raises(ValueError, match=r"option 'short_factor' must be a sequence of real "
                                         r"numbers, got '1,a' \(write numbers separated by commas"):
        spec.parse("x", "1,a")


def test_parsed_text_is_checked_by_convert_as_any_value() -> None:
    spec = Toy._option_specs["dim"]
    with pytest.raises(ValueError, match=r"option 'dim' must be a positive integer, got 0"):
        spec.convert("toy", spec.parse("toy", "0"))


def test_syntax_names_how_a_type_is_written() -> None:
    specs = Toy._option_specs
    assert [specs[k].syntax for k in ("dim", "scale", "mode", "flag", "extra", "sizes")] == [
        "int", "float", "str", "bool", "JSON object", "ints 1,2,3"]


def test_example_value_declared_choice_or_generic() -> None:
    from peregistry._options import NO_EXAMPLE

    assert per.Option(int, example=7).example_value() == 7
    assert per.Option(int, check=lambda n: n < 10).example_value() == 8  # first generic accepted
    assert per.Option(str, choices=("x", "y")).example_value() == "x"
    assert per.Option(tuple).example_value() is NO_EXAMPLE
    assert per.Option(dict).example_value() is NO_EXAMPLE
    assert per.Option(int, check=lambda n: n > 10**6).example_value() is NO_EXAMPLE


def test_example_options_fill_required_options_only() -> None:
    assert Toy.example_options() == {"dim": 64}

    class Grid(per.AbsoluteEncoder):
        name = "toy-grid"
        dim = per.Option(int, check=lambda d: d < 50)
        cells = per.Option(tuple, example=(2, 3))
        note = per.Option(str, "x")

    assert Grid.example_options() == {"dim": 32, "cells": (2, 3)}
    Grid(**Grid.example_options())


def test_builtin_encoders_build_from_their_example_options() -> None:
    from peregistry.registry import default_registry

    builtin = [i.name for i in per.list_encoders() if i.plugin.distribution == "peregistry"]
    assert "sinusoidal" in builtin
    for name in builtin:
        assert name is not None
        cls = default_registry.encoder_class(name)
        assert per.get_encoder(name, **cls.example_options()).name == name


# -- declared defaults are validated (hardening item 2) -----------------------------------------
@pytest.mark.parametrize(("option", "error", "pattern"), [
    (lambda: per.Option(int, -3, allowed="a positive integer", check=lambda d: d > 0),
     ValueError, r"option 'dim' must be a positive integer, got -3 \(the declared default\)"),
    (lambda: per.Option(int, "8"), TypeError,
     r"option 'dim' must be an integer, got '8' of type str \(the declared default\)"),
    (lambda: per.Option(str, "c", choices=("a", "b")), ValueError,
     r"option 'dim' must be one of 'a', 'b', got 'c'"),
    (lambda: per.Option(float, float("nan")), ValueError, r"option 'dim' must be a real number"),
    (lambda: per.Option(int, None), TypeError, r"option 'dim' must be an integer, got None"),
])
def test_invalid_default_is_an_error_when_the_class_is_defined(option: Any, error: type,
                                                               pattern: str) -> None:
    with pytest.raises(error, match=r"encoder 'bad-default' \(class (tests\.)?test_options\."
                                    r"test_invalid_default.*\.Bad\): " + pattern):
        class Bad(per.AbsoluteEncoder):
            name = "bad-default"
            dim = option()


def test_valid_defaults_of_every_kind_are_accepted() -> None:
    class Fine(per.AbsoluteEncoder):
        name = "fine-defaults"
        dim = per.Option(int, 4, check=lambda d: d > 0)
        extra = per.Option(dict, None, nullable=True)
        scaling = per.Option(dict, {"type": "linear"})
        sizes = per.Option(tuple, [1, 2])
        weights = per.Option(tuple, (0.5,), item=float)
        flag = per.Option(bool, True)

    assert Fine().options["dim"] == 4


def test_a_registered_class_whose_default_went_bad_is_a_broken_plugin() -> None:
    from peregistry.registry import Registry

    class Later(per.AbsoluteEncoder):
        name = "default-goes-bad"
        dim = per.Option(int, 3, allowed="a positive integer", check=lambda d: d > 0)

    Later._option_specs["dim"].default = -3  # changed after the class was defined

    class Plugin:
        @per.hookimpl
        def peregistry_encoders(self) -> list[type[per.Encoder]]:
            return [Later]

    reg = Registry()
    reg.register(Plugin(), name="sloppy-plugin")
    with pytest.raises(per.EncoderNotFoundError,
                       match=r"sloppy-plugin.*option 'dim' must be a positive integer, got -3 "
                             r"\(the declared default\)"):
        reg.get_encoder("default-goes-bad")
    assert reg.get_encoder("sinusoidal", dim=4).name == "sinusoidal"
