"""Encoder base classes: declared options, validation messages, immutability, hashing, repr."""

from __future__ import annotations

import pickle

import pytest

import peregistry as per


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
