"""Tests of the ``peregistry`` command line (:mod:`peregistry.cli`).

Most run ``main([...])`` in-process and read its exit code and captured output; a few run
``python -m peregistry`` (and the console script) in a subprocess, to prove the installed entry
point works and that ``list`` imports no array framework.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from conftest import require_matplotlib

import peregistry as per
from peregistry.cli import main, parse_option_value, parse_positions
from peregistry.encoders.base import Ctx

# The command line's text and parsing do not depend on the env, so they run in one env; the
# tests marked backend_free(False) below depend on the frameworks installed or selected, or
# on matplotlib, or skip off Linux.
pytestmark = pytest.mark.backend_free

SEED_LINE = "[0.9093, -0.4161, 0.1987, 0.9801, 0.0200, 0.9998, 0.0020, 1.0000]"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``main(argv)`` → (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_usage_error(code: int, out: str, err: str, *fragments: str) -> None:
    """Exit code 2, the message on stderr, nothing on stdout, no traceback."""
    assert code == 2, (code, out, err)
    assert out == ""
    assert err.startswith("peregistry: error: ")
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


# -- test encoders, registered in-process ---------------------------------------------------------
class Kitchen(per.AbsoluteEncoder):
    """Test encoder with an option of every type: value = position * gain, repeated dim times."""

    name = "cli-kitchen"
    __slots__ = ()
    dim = per.Option(int, allowed="a positive integer", check=lambda d: d > 0, doc="width")
    gain = per.Option(float, 1.0, doc="multiplier")
    negate = per.Option(bool, False, doc="flip the sign")
    sections = per.Option(tuple, (), doc="integers")
    extra = per.Option(dict, None, nullable=True, doc="anything")
    mode = per.Option(str, "a", choices=("a", "b"))
    max_len = per.Option(int, None, nullable=True, doc="underscore in the name")
    dtype = per.Option(str, "x", doc="collides with show's --dtype")

    def _encode(self, positions: Any, *, params: Mapping[str, Any], ctx: Ctx) -> Any:
        xp = ctx.xp
        scale = -self.gain if self.negate else self.gain
        pos = xp.astype(positions, ctx.wide)[..., None]
        return pos * ctx.constant([scale] * self.dim)


class WrongShape(per.AbsoluteEncoder):
    """Test encoder that returns one column too many: the conformance suite must fail it."""

    name = "cli-wrong-shape"
    __slots__ = ()
    dim = per.Option(int, 4)

    def _encode(self, positions: Any, *, params: Mapping[str, Any], ctx: Ctx) -> Any:
        pos = ctx.xp.astype(positions, ctx.wide)[..., None]
        return pos * ctx.constant([1.0] * (self.dim + 1))


class NeedsTuple(per.AbsoluteEncoder):
    """Test encoder with a required tuple option: check cannot invent one."""

    name = "cli-needs-tuple"
    __slots__ = ()
    sections = per.Option(tuple, doc="required, no generic example")


class Spinner(per.RotaryEncoder):
    """Test encoder of the rotary kind, which show does not handle yet."""

    name = "cli-spinner"
    __slots__ = ()
    dim = per.Option(int, 8)


class Tiles(per.AbsoluteEncoder):
    """Test plugin encoder with options shaped like first-party ones (sections, a scaling dict)
    and examples it declares itself: the command line treats it exactly as a built-in."""

    name = "cli-tiles"
    __slots__ = ()
    sections = per.Option(tuple, allowed="positive integers", doc="tiles per axis",
                          check=lambda s: len(s) > 0 and all(v > 0 for v in s))
    width = per.Option(int, allowed="sum(sections)", check=lambda w: w > 0)
    scaling = per.Option(dict, None, nullable=True, doc='{"factor": F} multiplies the values')

    @classmethod
    def example_options(cls) -> dict[str, Any]:
        return {"sections": (1, 2), "width": 3}  # width depends on sections

    @property
    def out_dim(self) -> int:
        return int(self.width)

    def _validate(self) -> None:
        if self.width != sum(self.sections):
            raise self._invalid("width", self.width, f"sum(sections) = {sum(self.sections)}")

    def _encode(self, positions: Any, *, params: Mapping[str, Any], ctx: Ctx) -> Any:
        factor = float((self.options["scaling"] or {}).get("factor", 1.0))
        pos = ctx.xp.astype(positions, ctx.wide)[..., None]
        return pos * ctx.constant([factor] * self.width)


class _Plugin:
    def __init__(self, *classes: type[per.Encoder]) -> None:
        self.classes = list(classes)

    @per.hookimpl
    def peregistry_encoders(self) -> list[type[per.Encoder]]:
        return self.classes


class _BrokenPlugin:
    @per.hookimpl
    def peregistry_encoders(self) -> list[type[per.Encoder]]:
        raise RuntimeError("the plugin exploded on purpose")


@pytest.fixture
def test_encoders() -> Iterator[None]:
    name = per.register(_Plugin(Kitchen, WrongShape, NeedsTuple, Spinner), name="cli-test-plugin")
    try:
        yield
    finally:
        per.unregister(name)


@pytest.fixture
def tiles_plugin() -> Iterator[None]:
    name = per.register(_Plugin(Tiles), name="cli-tiles-plugin")
    try:
        yield
    finally:
        per.unregister(name)


@pytest.fixture
def broken_plugin() -> Iterator[str]:
    name = per.register(_BrokenPlugin(), name="cli-broken-plugin")
    try:
        yield name
    finally:
        per.unregister(name)


# -- top level ------------------------------------------------------------------------------------
def test_no_arguments_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys)
    assert code == 0
    assert "usage: peregistry" in out
    for command in ("list", "show", "check"):
        assert command in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0
    assert out.strip() == f"peregistry {per.__version__}"


def test_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert_usage_error(*run(capsys, "frobnicate"), "invalid choice: 'frobnicate'")


def test_unknown_argument_of_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert_usage_error(*run(capsys, "list", "--bogus"), "unrecognized arguments: --bogus")


# -- list -----------------------------------------------------------------------------------------
def list_cells(out: str) -> dict[str, dict[str, str]]:
    """``peregistry list``'s text table: each row's cells by column name, keyed by its name
    (the columns start where the rule's dashes do)."""
    header, rule, *rows = out.splitlines()
    starts = [i for i, c in enumerate(rule) if c == "-" and (i == 0 or rule[i - 1] == " ")]
    names = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    table = {}
    for row in rows:
        if row.startswith(" ") or not row.strip() or row[0].isdigit():
            continue  # a note under a row, the count line
        cells = [row[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        table[cells[0]] = dict(zip(names, cells, strict=True))
    return table


def test_list_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "list")
    assert code == 0
    assert out.splitlines()[0].split() == ["name", "kind", "plugin", "status", "summary"]
    row = list_cells(out)["sinusoidal"]
    assert row == {"name": "sinusoidal", "kind": "absolute",
                   "plugin": f"peregistry {per.__version__}", "status": "ok",
                   "summary": per.get_encoder("sinusoidal", dim=8).summary}


def test_list_shows_each_encoders_summary(capsys: pytest.CaptureFixture[str],
                                          test_encoders: None) -> None:
    """The summary column is each encoder's ``summary``: by default its docstring's first line
    (docs/plugins.md), a plugin's too."""
    code, out, _ = run(capsys, "list")
    assert code == 0
    cells = list_cells(out)
    assert cells["cli-kitchen"]["summary"] == (Kitchen.__doc__ or "").partition("\n")[0]
    assert cells["cli-kitchen"]["summary"].startswith("Test encoder with an option")
    for info in per.list_encoders():
        assert info.summary and cells[str(info.name)]["summary"] == info.summary
        if info.plugin.distribution == "peregistry":  # ours are whole sentences, not a first line cut short
            assert info.summary.endswith("."), (info.name, info.summary)


def test_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "list", "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert isinstance(data, list)
    (row,) = [r for r in data if r["name"] == "sinusoidal"]
    assert row["kind"] == "absolute"
    assert row["status"] == "ok"
    assert row["error"] is None
    assert row["plugin"]["distribution"] == "peregistry"
    assert row["plugin"]["version"] == per.__version__


def test_list_shows_in_process_plugins(capsys: pytest.CaptureFixture[str],
                                       test_encoders: None) -> None:
    code, out, _ = run(capsys, "list")
    assert code == 0
    row = list_cells(out)["cli-kitchen"]
    assert row["plugin"] == "cli-test-plugin (in-process)"
    assert row["status"] == "ok"


def test_list_shows_a_broken_plugin_with_its_error(capsys: pytest.CaptureFixture[str],
                                                   broken_plugin: str) -> None:
    code, out, _ = run(capsys, "list")
    assert code == 0
    lines = out.splitlines()
    i = next(i for i, r in enumerate(lines) if broken_plugin in r)
    assert lines[i].split()[-1] == "error"  # (no summary)
    assert "the plugin exploded on purpose" in lines[i + 1]
    assert list_cells(out)["sinusoidal"]["status"] == "ok"

    code, out, _ = run(capsys, "list", "--format", "json")
    assert code == 0
    (row,) = [r for r in json.loads(out) if r["plugin"]["name"] == broken_plugin]
    assert row["name"] is None
    assert row["status"] == "error"
    assert "RuntimeError: the plugin exploded on purpose" in row["error"]


def test_broken_plugin_is_gone_after_teardown(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "list", "--format", "json")
    assert all(r["status"] == "ok" for r in json.loads(out) if r["plugin"]["distribution"]
               == "peregistry")
    assert "cli-broken-plugin" not in out


# -- show: values ---------------------------------------------------------------------------------
def test_show_seed_vector(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "show", "sinusoidal", "--dim", "8", "--positions", "2")
    assert (code, err) == (0, "")
    header, values = out.splitlines()
    assert header.startswith(repr(per.get_encoder("sinusoidal", dim=8)))
    assert "backend=numpy" in header
    assert "dtype=float64" in header
    assert values == SEED_LINE


def test_show_decimals(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "sinusoidal", "--dim", "8", "--positions", "2",
                       "--decimals", "2")
    assert code == 0
    assert out.splitlines()[1] == "[0.91, -0.42, 0.20, 0.98, 0.02, 1.00, 0.00, 1.00]"


@pytest.mark.parametrize(
    ("spec", "labels"),
    [("0,1,2", ["0", "1", "2"]), ("0:4", ["0", "1", "2", "3"]), ("1:7:3", ["1", "4"]),
     ("-2:0", ["-2", "-1"]), ("0.5,2", ["0.5", "2.0"])],
)
def test_show_positions_list_and_range(capsys: pytest.CaptureFixture[str], spec: str,
                                       labels: list[str]) -> None:
    code, out, _ = run(capsys, "show", "sinusoidal", "--dim", "8", f"--positions={spec}")
    assert code == 0
    rows = out.splitlines()[1:]
    assert [r.split(":")[0] for r in rows] == labels
    if "2" in labels:
        assert rows[labels.index("2")] == f"2: {SEED_LINE}"


def test_show_default_positions_when_only_options_given(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    code, out, _ = run(capsys, "show", "sinusoidal", "--dim", "4")
    assert code == 0
    assert [r.split(":")[0] for r in out.splitlines()[1:]] == ["0", "1", "2", "3"]


def test_show_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "sinusoidal", "--dim", "8", "--positions", "0,2",
                       "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert data["encoder"] == "sinusoidal"
    assert data["options"] == {"dim": 8, "base": 10000.0, "layout": "interleaved"}
    assert data["backend"] == "numpy"
    assert data["dtype"] == "float64"
    assert data["positions"] == [0, 2]
    result = data["results"]["encode"]
    assert result["shape"] == [2, 8]
    expected = [float(v) for v in SEED_LINE.strip("[]").split(", ")]
    assert result["values"][1] == pytest.approx(expected, abs=5e-5)


def test_show_split_layout_and_option_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "sinusoidal", "--option", "dim=8", "--layout", "split",
                       "--positions", "2")
    assert code == 0
    assert "layout='split'" in out.splitlines()[0]
    split = "[0.9093, 0.1987, 0.0200, 0.0020, -0.4161, 0.9801, 0.9998, 1.0000]"
    assert out.splitlines()[1] == split


@pytest.mark.parametrize(
    ("backend", "dtype", "expected_dtype"),
    [("array_api_strict", None, "float64"), ("torch", "float32", "float32"),
     ("torch", "bfloat16", "bfloat16"), ("jax", "float32", "float32")],
)
@pytest.mark.backend_free(False)  # each backend where it is installed
def test_show_on_other_backends(capsys: pytest.CaptureFixture[str], backend: str,
                                dtype: str | None, expected_dtype: str) -> None:
    pytest.importorskip(backend)
    argv = ["show", "sinusoidal", "--dim", "8", "--positions", "2", "--backend", backend]
    if dtype is not None:
        argv += ["--dtype", dtype]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    header, values = out.splitlines()
    assert f"backend={backend}" in header
    assert f"dtype={expected_dtype}" in header
    got = [float(v) for v in values.strip("[]").split(", ")]
    want = [float(v) for v in SEED_LINE.strip("[]").split(", ")]
    assert got == pytest.approx(want, abs=1e-2 if dtype == "bfloat16" else 2e-4)


def test_show_every_option_type(capsys: pytest.CaptureFixture[str], test_encoders: None) -> None:
    code, out, err = run(
        capsys, "show", "cli-kitchen", "--dim", "3", "--gain", "0.5", "--negate", "true",
        "--sections", "1,2,3", "--extra", '{"a": [1, 2]}', "--mode", "b", "--max-len", "none",
        "--option", "dtype=y", "--positions", "2", "--decimals", "1",
    )
    assert (code, err) == (0, "")
    header, values = out.splitlines()
    assert header.startswith("get_encoder('cli-kitchen', dim=3, gain=0.5, negate=True, "
                             "sections=(1, 2, 3), extra={'a': (1, 2)}, mode='b', max_len=None, "
                             "dtype='y')")
    assert values == "[-1.0, -1.0, -1.0]"
    code, out, _ = run(capsys, "show", "cli-kitchen", "--dim", "2", "--max_len", "7",
                       "--positions", "1")
    assert code == 0
    assert "max_len=7" in out


def test_show_rotary_prints_cos_and_sin(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "show", "rotary", "--dim", "4", "--positions", "1")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[1:] == ["cos: shape (4,)", "[0.5403, 1.0000, 0.5403, 1.0000]",
                         "sin: shape (4,)", "[0.8415, 0.0100, 0.8415, 0.0100]"]


def test_show_rotary_with_scaling_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "rotary", "--dim", "8", "--scaling",
                       '{"type": "linear", "factor": 2}', "--positions", "2", "--format", "json")
    assert code == 0
    data = json.loads(out)
    # linear scaling divides positions by the factor: position 2 turns like 1 unscaled
    assert data["results"]["cos"]["values"][0] == pytest.approx(math.cos(1.0))


def test_show_mrope_takes_1d_positions_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, text, _ = run(capsys, "show", "mrope", "--dim", "8", "--sections", "2,1,1",
                        "--positions", "0:3")
    assert code == 0
    code, rope, _ = run(capsys, "show", "rotary", "--dim", "8", "--positions", "0:3")
    assert code == 0
    assert text.splitlines()[1:] == rope.splitlines()[1:]


def test_show_mrope_rows_are_axes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "mrope", "--dim", "8", "--sections", "2,1,1",
                       "--positions", "0,1;0,2;0,3", "--format", "json")
    assert code == 0
    cos = json.loads(out)["results"]["cos"]["values"]
    assert cos[1][:4] == pytest.approx([math.cos(1), math.cos(0.1), math.cos(0.02),
                                        math.cos(0.003)], abs=1e-12)


# -- show: describing options ---------------------------------------------------------------------
def test_show_without_options_lists_them(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "sinusoidal")
    assert code == 0
    assert out.startswith("sinusoidal (absolute)")
    lines = out.splitlines()
    assert lines[3].split() == ["option", "type", "default", "allowed", "doc"]
    dim = next(r for r in lines if r.startswith("--dim "))
    assert "int" in dim
    assert "(required)" in dim
    assert "a positive even integer" in dim
    assert "length of the encoding vector" in dim
    layout = next(r for r in lines if r.startswith("--layout "))
    assert "'interleaved'" in layout
    assert "one of 'interleaved', 'split'" in layout
    assert "peregistry show sinusoidal --dim 64 --positions 0:4" in out


def test_show_without_options_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "sinusoidal", "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert data["kind"] == "absolute"
    opts = {o["name"]: o for o in data["options"]}
    assert list(opts) == ["dim", "base", "layout"]
    assert opts["dim"]["required"] is True
    assert opts["base"]["default"] == 10000.0
    assert opts["layout"]["choices"] == ["interleaved", "split"]


def test_show_help_lists_the_encoders_options(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "sinusoidal", "--help")
    assert code == 0
    assert "options of sinusoidal" in out
    assert "--dim VALUE" in out
    assert "--layout VALUE" in out


def test_show_help_without_name(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "--help")
    assert code == 0
    assert "usage: peregistry show" in out


def test_show_lists_colliding_option_as_option_flag(capsys: pytest.CaptureFixture[str],
                                                   test_encoders: None) -> None:
    code, out, _ = run(capsys, "show", "cli-kitchen")
    assert code == 0
    assert "--option dtype=VALUE" in out
    assert "--max-len" in out


# -- show: errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["show", "sinusoidal", "--dim", "7", "--positions", "2"],
         ["option 'dim' must be a positive even integer, got 7"]),
        (["show", "sinusoidal", "--dim", "abc"],
         ["sinusoidal: option 'dim' must be a positive even integer, got 'abc'"]),
        (["show", "sinusoidal", "--dim", "8", "--base", "-1"],
         ["option 'base' must be a finite number > 0 (and != 1), got -1.0"]),
        (["show", "sinusoidal", "--dim", "8", "--layout", "diagonal"],
         ["option 'layout' must be one of 'interleaved', 'split', got 'diagonal'"]),
        (["show", "sinusoidal", "--dim", "8", "--frobs", "3"],
         ["sinusoidal: unknown option 'frobs'; valid options: dim, base, layout"]),
        (["show", "sinusoidal", "--dim", "8", "--option", "frobs=3"],
         ["unknown option 'frobs'"]),
        (["show", "sinusoidal", "--option", "dim"], ["--option expects NAME=VALUE"]),
        (["show", "sinusoidal", "--positions", "2"],
         ["missing required option 'dim' (a positive even integer)"]),
        (["show", "sinusoidal", "--dim", "8", "--positions", "two"],
         ["--positions must be", "got 'two'"]),
        (["show", "sinusoidal", "--dim", "8", "--positions", "4:2"], ["the range is empty"]),
        (["show", "sinusoidal", "--dim", "8", "--positions", "0,1;2"], ["rows of different"]),
        (["show", "sinusoidal", "--dim", "8", "--backend", "tensorflow"],
         ["no backend adapter named 'tensorflow'", "numpy"]),
        (["show", "sinusoidal", "--dim", "8", "--dtype", "int8"],
         ["dtype='int8' is not a real floating dtype of numpy"]),
        (["show", "sinusoidal", "--dim", "8", "--decimals", "-1"], ["--decimals"]),
        (["show", "sinusoidal", "--dim", "8", "stray"], ["unrecognized argument 'stray'"]),
        (["show", "sinusodial"], ["no encoder named 'sinusodial'", "Did you mean 'sinusoidal'"]),
        (["show"], ["show needs an encoder NAME"]),
    ],
)
def test_show_errors(capsys: pytest.CaptureFixture[str], argv: list[str],
                     fragments: list[str]) -> None:
    assert_usage_error(*run(capsys, *argv), *fragments)


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--negate", "maybe"], ["option 'negate' must be", "got 'maybe'", "true or false"]),
        (["--sections", "1,x"], ["option 'sections'", "integers separated by commas"]),
        (["--extra", "{oops"], ["option 'extra'", "not valid JSON"]),
        (["--extra", "[1]"], ["option 'extra'", "JSON object"]),
        (["--gain", "fast"], ["option 'gain' must be a real number, got 'fast'"]),
        (["--mode", "none"], ["option 'mode' must be one of 'a', 'b', got 'none'"]),
    ],
)
def test_show_value_errors_by_type(capsys: pytest.CaptureFixture[str], test_encoders: None,
                                   argv: list[str], fragments: list[str]) -> None:
    assert_usage_error(*run(capsys, "show", "cli-kitchen", "--dim", "2", *argv), *fragments)


def test_show_backend_not_installed(capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from peregistry.backends._torch import TorchBackend

    monkeypatch.setattr(TorchBackend, "is_installed", lambda self: False)
    assert_usage_error(*run(capsys, "show", "sinusoidal", "--dim", "8", "--backend", "torch"),
                       "backend 'torch' is not installed", "peregistry[torch]")


def test_unexpected_error_has_no_traceback_unless_asked(capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import peregistry.cli as cli

    def boom(enc: Any, ctx: Any) -> Any:
        raise RuntimeError("kaboom")

    monkeypatch.setitem(cli.SHOW_BY_KIND, "absolute", boom)
    code, _out, err = run(capsys, "show", "sinusoidal", "--dim", "8", "--positions", "2")
    assert code == 1
    assert "RuntimeError: kaboom" in err
    assert "Traceback" not in err
    with pytest.raises(RuntimeError, match="kaboom"):
        main(["--traceback", "show", "sinusoidal", "--dim", "8", "--positions", "2"])


# -- a plugin's encoder: no special case --------------------------------------------------------
def test_plugin_options_parse_as_flags(capsys: pytest.CaptureFixture[str],
                                       tiles_plugin: None) -> None:
    code, out, err = run(capsys, "show", "cli-tiles", "--sections", "2,3,3", "--width", "8",
                         "--scaling", '{"type": "linear", "factor": 2}', "--positions", "1",
                         "--decimals", "1")
    assert (code, err) == (0, "")
    header, values = out.splitlines()
    assert header.startswith("get_encoder('cli-tiles', sections=(2, 3, 3), width=8, "
                             "scaling={'factor': 2, 'type': 'linear'})")
    assert values == "[" + ", ".join(["2.0"] * 8) + "]"
    assert_usage_error(*run(capsys, "show", "cli-tiles", "--sections", "2,x", "--width", "2"),
                       "cli-tiles: option 'sections' must be positive integers, got '2,x'")
    assert_usage_error(*run(capsys, "show", "cli-tiles", "--sections", "2", "--width", "3",
                            "--positions", "1"),
                       "option 'width' must be sum(sections) = 2, got 3")


@pytest.mark.backend_free(False)  # plots with matplotlib (docs env)
def test_plugin_example_options_fill_show_check_and_plot(capsys: pytest.CaptureFixture[str],
                                                         tiles_plugin: None,
                                                         tmp_path: Path) -> None:
    code, out, _ = run(capsys, "show", "cli-tiles")
    assert code == 0
    assert "ints 1,2,3" in next(r for r in out.splitlines() if r.startswith("--sections "))
    assert "peregistry show cli-tiles --sections 1,2 --width 3 --positions 0:4" in out
    code, out, _ = run(capsys, "check", "cli-tiles", "--backend", "numpy")
    assert code == 0, out
    assert {r.split()[0] for r in out.splitlines()[2:-1]} == {"cli-tiles"}
    code, out, _ = run(capsys, "check", "cli-tiles", "--backend", "numpy",
                       "--option", "sections=1,1", "--option", "width=2")
    assert code == 0, out
    require_matplotlib()
    code, out, err = run(capsys, "plot", "cli-tiles", "--length", "4", "-o", str(tmp_path / "t.png"))
    assert code == 0, err
    assert "get_encoder('cli-tiles', sections=(1, 2), width=3, scaling=None)" in out


# -- parsing helpers ------------------------------------------------------------------------------
def test_parse_positions_shapes() -> None:
    assert parse_positions("2").shape == ()
    assert parse_positions("2").dtype.kind == "i"
    assert parse_positions("0,1,2").tolist() == [0, 1, 2]
    assert parse_positions("0:4").tolist() == [0, 1, 2, 3]
    assert parse_positions(":3").tolist() == [0, 1, 2]
    assert parse_positions("0,1;2,3").shape == (2, 2)
    assert parse_positions("1.5").dtype.kind == "f"


def test_parse_option_value_none_only_when_nullable() -> None:
    assert parse_option_value("cli-kitchen", Kitchen._option_specs["max_len"], "None") is None
    assert parse_option_value("cli-kitchen", Kitchen._option_specs["sections"], "[1, 2]") == (1, 2)
    assert parse_option_value("cli-kitchen", Kitchen._option_specs["sections"], "") == ()
    assert parse_option_value("cli-kitchen", Kitchen._option_specs["mode"], "none") == "none"


# -- check ----------------------------------------------------------------------------------------
def test_check_named_encoder(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "sinusoidal", "--backend", "numpy", "--option", "dim=16")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["encoder", "backend", "check", "status"]
    body = [r.split() for r in lines[2:-1]]
    assert body
    assert all(r[0] == "sinusoidal" and r[1] == "numpy" and r[3] == "passed" for r in body)
    assert {"check_shapes", "check_shift_linear"} <= {r[2] for r in body}
    assert lines[-1] == f"{len(body)} ok, 0 failed"


@pytest.mark.backend_free(False)  # the selected backends
def test_check_default_is_every_encoder_with_example_options(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``check`` without NAME hands every registered encoder, built with its example options, to
    the suite on the chosen backends. The suite is stubbed for the chosen backends: running it
    for real on every encoder under torch.compile and jax.jit took minutes (issue 12), and the
    conformance tests run it for every built-in on each backend anyway. It runs for real on
    NumPy below, so the example options are proven to pass."""
    import peregistry.testing as testing
    from peregistry.testing._core import selected_backends

    chosen = {b.name for b in selected_backends()}
    seen: list[tuple[per.Encoder, str]] = []

    def suite(enc: per.Encoder, *, backends: str) -> testing.Report:
        seen.append((enc, backends))
        return testing.Report(tuple(testing.ReportRow(enc.name, b, "check_stub", "passed")
                                    for b in backends.split(",")))

    with monkeypatch.context() as m:
        m.setattr(testing, "check_encoder", suite)
        code, out, _ = run(capsys, "check", "--backend", ",".join(sorted(chosen)))
    assert code == 0, out
    backends = {r.split()[1] for r in out.splitlines()[2:-1] if r.startswith("sinusoidal ")}
    assert backends == chosen
    registered = sorted({i.name for i in per.list_encoders() if i.name is not None})
    assert sorted(enc.name for enc, _ in seen) == registered
    for enc, names in seen:
        assert enc == per.get_encoder(enc.name, **type(enc).example_options())
        assert set(names.split(",")) == chosen

    code, out, _ = run(capsys, "check", "--backend", "numpy")  # the real suite
    assert code == 0, out
    # rows start with the encoder's name; indented lines under a row give an exemption's reason
    rows = [r for r in out.splitlines()[2:-1] if r and not r[0].isspace()]
    assert {r.split()[0] for r in rows} == set(registered)


def test_check_failure_exits_1(capsys: pytest.CaptureFixture[str], test_encoders: None) -> None:
    code, out, _ = run(capsys, "check", "cli-wrong-shape", "--backend", "numpy")
    assert code == 1
    assert "failed" in out
    assert "check_shapes" in out


def test_check_reports_required_options_it_cannot_fill(capsys: pytest.CaptureFixture[str],
                                                       test_encoders: None) -> None:
    code, out, _ = run(capsys, "check", "cli-needs-tuple", "sinusoidal", "--backend", "numpy")
    assert code == 1
    assert "cannot fill required option 'sections'" in out
    assert "--option cli-needs-tuple:NAME=VALUE" in out
    assert any(r.startswith("sinusoidal ") and r.split()[-1] == "passed"
               for r in out.splitlines())
    code, out, _ = run(capsys, "check", "cli-needs-tuple", "--backend", "numpy",
                       "--option", "cli-needs-tuple:sections=1,2")
    assert "cannot fill" not in out


def test_check_lists_a_broken_plugin_never_crashes(capsys: pytest.CaptureFixture[str],
                                                   broken_plugin: str) -> None:
    code, out, _ = run(capsys, "check", "--backend", "numpy")
    assert code == 0  # the broken plugin named no encoder; sinusoidal still passes
    assert "sinusoidal" in out


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["check", "nope"], ["no encoder named 'nope'"]),
        (["check", "sinusoidal", "--backend", "tensorflow"],
         ["no backend adapter named 'tensorflow'"]),
        (["check", "sinusoidal", "--option", "frobs=1"],
         ["--option 'frobs=1': no checked encoder has an option 'frobs'"]),
        (["check", "sinusoidal", "--option", "dim=7"],
         ["option 'dim' must be a positive even integer, got 7"]),
        (["check", "sinusoidal", "--option", "sinusoidal:frobs=1"], ["unknown option 'frobs'"]),
        (["check", "sinusoidal", "--option", "other:dim=8"], ["names encoder 'other'"]),
        (["check", "sinusoidal", "--option", "dim"], ["--option expects NAME=VALUE"]),
    ],
)
def test_check_errors(capsys: pytest.CaptureFixture[str], argv: list[str],
                      fragments: list[str]) -> None:
    assert_usage_error(*run(capsys, *argv), *fragments)


# -- subprocesses ---------------------------------------------------------------------------------
def _run_subprocess(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def test_python_dash_m_prints_the_seed_vector() -> None:
    proc = _run_subprocess(sys.executable, "-m", "peregistry", "show", "sinusoidal", "--dim", "8",
                           "--positions", "2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1] == SEED_LINE


def test_console_script() -> None:
    script = Path(sys.executable).parent / "peregistry"
    if not script.exists():
        pytest.skip("the peregistry console script is not installed next to this Python")
    proc = _run_subprocess(str(script), "show", "sinusoidal", "--dim", "8", "--positions", "2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1] == SEED_LINE
    proc = _run_subprocess(str(script), "show", "sinusoidal", "--dim", "7", "--positions", "2")
    assert proc.returncode == 2
    assert proc.stderr == ("peregistry: error: sinusoidal: option 'dim' must be a positive even "
                           "integer, got 7\n")


def test_a_closed_pipe_is_no_error() -> None:
    """``peregistry list | head -1``: the reader stops reading; no error message, no traceback."""
    proc = subprocess.run(f"'{sys.executable}' -m peregistry list | head -1", shell=True,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.stdout.split() == ["name", "kind", "plugin", "status", "summary"]
    assert proc.stderr == ""


@pytest.mark.backend_free(False)  # with the frameworks installed
def test_list_imports_no_array_framework() -> None:
    code = (
        "import sys\n"
        "from peregistry.cli import main\n"
        "assert main(['list']) == 0\n"
        "assert main(['show', 'sinusoidal']) == 0\n"
        "loaded = [m for m in ('numpy', 'torch', 'jax', 'array_api_strict') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    proc = _run_subprocess(sys.executable, "-c", code)
    assert proc.returncode == 0, proc.stderr
    assert "sinusoidal" in proc.stdout


# -- sizes that allocate are bounded ---------------------------------------------------------------
BOUNDED_RUN = """
import resource, sys
# A cap on the address space: before the bounds these commands died of MemoryError (or took
# tens of GB); with them they stop at the usage error, in well under a second.
cap = 3 * 2**30
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
from peregistry.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["show", "sinusoidal", "--dim", "8", "--positions", "0:1000000000"],
         ["--positions '0:1000000000' names 1,000,000,000 positions; at most 10,000,000 are "
          "allowed"]),
        (["show", "sinusoidal", "--dim", "8", "--positions", "0:2000000000:2"],
         ["names 1,000,000,000 positions"]),
        (["show", "sinusoidal", "--dim", "8", "--positions", "0:2000000"],
         ["--positions '0:2000000' names 2,000,000 positions, which give 16,000,000 values of "
          "sinusoidal (8 per position); at most 10,000,000 values are shown"]),
        (["show", "alibi", "--num-heads", "8", "--positions", "0:2000"],
         ["2,000 positions, which give 32,000,000 values of alibi (8 per pair of positions)"]),
        (["show", "sinusoidal", "--dim", "8", "--positions", "1", "--decimals", "1000000000"],
         ["argument --decimals: expected a non-negative integer of at most 30, "
          "got '1000000000'"]),
        (["plot", "sinusoidal", "--length", "100000000", "-o", "never.png"],
         ["argument --length: expected a positive integer of at most 4,096, got '100000000'"]),
        (["bench", "sinusoidal", "--quick", "--backend", "numpy", "--reps", "1000000000"],
         ["argument --reps: expected a positive integer of at most 10,000"]),
    ],
)
@pytest.mark.backend_free(False)  # skips off Linux
def test_sizes_that_allocate_are_bounded_with_a_usage_error(argv: list[str],
                                                             fragments: list[str]) -> None:
    if sys.platform != "linux":
        pytest.skip("RLIMIT_AS is what keeps the unbounded case from taking the machine down")
    out = subprocess.run([sys.executable, "-c", BOUNDED_RUN, *argv], capture_output=True,
                         text=True, timeout=120, check=False)
    assert_usage_error(out.returncode, out.stdout, out.stderr, *fragments)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("0:10:0", "(the step is 0)"),
        ("99999999999999999999", "(positions beyond the int64 range)"),
        ("99999999999999999998:99999999999999999999", "(positions beyond the int64 range)"),
    ],
)
def test_positions_out_of_range_are_usage_errors(capsys: pytest.CaptureFixture[str], spec: str,
                                                 fragment: str) -> None:
    assert_usage_error(*run(capsys, "show", "sinusoidal", "--dim", "8", f"--positions={spec}"),
                       f"got {spec!r}", fragment)


def test_ranges_are_int64_arrays_and_the_limits_are_in_the_help(
        capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np

    arr = parse_positions("3:-9:-4")
    assert arr.dtype == np.int64 and arr.tolist() == list(range(3, -9, -4))
    code, out, _ = run(capsys, "show", "sinusoidal", "--help")
    assert code == 0
    assert "at most 10,000,000 positions and 10,000,000 values" in " ".join(out.split())


def test_traceback_keeps_a_usage_errors_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 42: ``--traceback`` shows the traceback of a usage error, and the exit status
    stays 2 (it was 1: the error was re-raised)."""
    code, out, err = run(capsys, "--traceback", "show", "no-such-encoder")
    assert code == 2, err
    assert out == ""
    assert "Traceback (most recent call last)" in err
    assert err.rstrip().splitlines()[-1].startswith("peregistry: error: ")
    assert "no-such-encoder" in err
    code, _, err = run(capsys, "show", "sinusoidal", "--dim", "x", "--traceback")
    assert code == 2 and "Traceback" in err and "'dim'" in err
