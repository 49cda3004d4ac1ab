"""Tests of ``peregistry plot`` (:mod:`peregistry.plot`): every plot kind writes a PNG, kinds that
do not fit an encoder are usage errors, and a missing matplotlib gives the install command."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from peregistry.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

CASES = [
    ("sinusoidal", ["--dim", "16"], None),
    ("sinusoidal", ["--dim", "16"], "decay"),
    ("rotary", ["--dim", "32"], "angles"),
    ("rotary", ["--dim", "32", "--scaling", '{"type": "linear", "factor": 2}'], "decay"),
    ("mrope", [], "angles"),
    ("mrope", [], "ids"),
    ("alibi", ["--num-heads", "4"], "bias"),
    ("t5", ["--option", "num_heads=2"], None),
    ("shaw", [], "heatmap"),
    ("learned", [], "heatmap"),
    ("learned-2d", [], None),
]


@pytest.mark.usefixtures("needs_matplotlib")
@pytest.mark.parametrize(("name", "flags", "kind"), CASES,
                         ids=[f"{n}-{k or 'default'}" for n, _, k in CASES])
def test_plot_writes_png(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
                         flags: list[str], kind: str | None) -> None:
    out = tmp_path / "p.png"
    argv = ["plot", name, *flags, "--length", "24", "-o", str(out)]
    if kind is not None:
        argv += ["--kind", kind]
    code = main(argv)
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert f"wrote {out}" in stdout


@pytest.mark.usefixtures("needs_matplotlib")
@pytest.mark.parametrize(("name", "kind", "fragment"), [
    ("alibi", "decay", "does not apply to alibi (bias); it has: bias"),
    ("rotary", "ids", "does not apply to rotary (rotary); it has: angles, decay"),
    ("sinusoidal", "bias", "does not apply to sinusoidal"),
])
def test_plot_kind_that_does_not_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     name: str, kind: str, fragment: str) -> None:
    code = main(["plot", name, "--kind", kind, "-o", str(tmp_path / "x.png")])
    _, err = capsys.readouterr()
    assert code == 2
    assert fragment in err
    assert not (tmp_path / "x.png").exists()


def test_plot_unknown_encoder_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plot", "sinusoidal", "--dimm", "8", "-o", str(tmp_path / "x.png")])
    _, err = capsys.readouterr()
    assert code == 2
    assert "dimm" in err


def test_plot_needs_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plot", "sinusoidal"]) == 2
    assert "-o/--output" in capsys.readouterr().err


def test_plot_without_matplotlib(tmp_path: Path) -> None:
    """With ``import matplotlib`` blocked: exit 2 and the install command, no traceback."""
    script = textwrap.dedent(f"""
        import sys
        sys.modules["matplotlib"] = None          # makes 'import matplotlib' raise ImportError
        from peregistry.cli import main
        sys.exit(main(["plot", "sinusoidal", "--dim", "8", "-o", {str(tmp_path / "x.png")!r}]))
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == ("peregistry: error: plot needs matplotlib: "
                                   "pip install 'peregistry[docs]'")
    assert not (tmp_path / "x.png").exists()


def test_plot_help_lists_the_encoders_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plot", "mrope", "--help"]) == 0
    out = capsys.readouterr().out
    assert "options of mrope" in out
    assert "--sections VALUE" in out
    assert "ints 1,2,3" in out


@pytest.mark.usefixtures("needs_matplotlib")
def test_angles_show_each_features_axis_for_split_pairs() -> None:
    """With ``feature_axes`` (HunYuan-VL's XD-RoPE) a pair's second feature may turn by another
    axis: the angles plot marks each axis's second features too, at ω_i (RoFormer's
    θ^(-2i/d)), where the split rule puts them."""
    import numpy as np

    import peregistry as per
    from peregistry.plot import PlotSettings, plot_angles

    sections = (4, 4, 4, 4)  # chunk k of 2·4 features on axis k: pair i's halves on k and k+2
    enc = per.get_encoder("mrope", dim=32, sections=sections,
                          feature_axes=tuple(k for k in range(4) for _ in range(8)))
    fig = plot_angles(enc, PlotSettings(length=24))
    series = {line.get_label(): line for line in fig.axes[0].get_lines()}
    omega = 10000.0 ** (-np.arange(0, 32, 2) / 32)
    for axis, label in enumerate(("temporal", "height", "width", "axis 3")):
        # pair i: first feature i on axis i // 8, second feature 16 + i on axis 2 + i // 8
        for suffix, members in (("", [i for i in range(16) if i // 8 == axis]),
                                (", second features", [i for i in range(16)
                                                       if 2 + i // 8 == axis])):
            key = f"{label}{suffix} ({len(members)} pairs)"
            if not members:
                assert key not in series, key
                continue
            np.testing.assert_array_equal(series[key].get_xdata(), members)
            np.testing.assert_allclose(series[key].get_ydata(), omega[members], rtol=1e-6)


@pytest.mark.usefixtures("needs_matplotlib")
def test_study_plot_from_its_record(tmp_path: Path) -> None:
    """The extrapolation study's figure from a run's JSON record (docs/extrapolation.json, no
    torch needed): one panel per task, a line per encoder."""
    import json

    from peregistry.study import ExtrapolationResult
    from peregistry.study.plot import figure, plot_extrapolation

    record = Path(__file__).resolve().parent.parent / "docs" / "extrapolation.json"
    result = ExtrapolationResult.from_dict(json.loads(record.read_text()))
    path = tmp_path / "study.png"
    plot_extrapolation(result, path)
    assert path.stat().st_size > 1000
    fig = figure(result)
    axes = fig.get_axes()
    assert len(axes) == len(result.settings.tasks)
    for ax in axes:  # an error-bar line per encoder, labelled
        assert set(ax.get_legend_handles_labels()[1]) == {r.encoder for r in result.rows}


LONG_FACTORS = [1.0 + i / 10 for i in range(64)]


@pytest.mark.usefixtures("needs_matplotlib")
@pytest.mark.parametrize(("name", "options", "kind", "title"), [
    ("rotary", {"dim": 128, "scaling": {"type": "yarn", "factor": 4.0,
                                        "original_max_position_embeddings": 4096,
                                        "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                                        "mscale_all_dim": 0.0}}, "angles", None),
    ("rotary", {"dim": 128, "scaling": {"type": "longrope", "factor": 8.0,
                                        "original_max_position_embeddings": 4096,
                                        "short_factor": LONG_FACTORS,
                                        "long_factor": LONG_FACTORS}}, "decay", None),
    ("alibi", {"num_heads": 2}, "bias", "a title of its own, " * 12),
    ("sinusoidal", {"dim": 16}, "heatmap", "x" * 300),
], ids=["yarn-angles", "longrope-decay", "bias-suptitle", "no-commas"])
def test_titles_fit_inside_the_figure(tmp_path: Path, name: str, options: dict[str, object],
                                      kind: str, title: str | None) -> None:
    """The automatic title of a scaled rotary encoder (and a long --title) wraps inside the
    picture: its rendered extent lies within the figure's, after the layout made room."""
    import matplotlib.pyplot as plt

    import peregistry as per
    from peregistry.plot import PlotSettings, make_figure

    fig = make_figure(per.get_encoder(name, **options), kind, PlotSettings(length=24, title=title))
    try:
        fig.savefig(tmp_path / "t.png")  # draws: the extents are those of the file
        renderer = fig.canvas.get_renderer()
        texts = [t for t in (*(ax.title for ax in fig.axes), fig._suptitle)
                 if t is not None and t.get_text()]
        assert texts
        for text in texts:
            box, frame = text.get_window_extent(renderer), fig.bbox
            assert frame.x0 <= box.x0 and box.x1 <= frame.x1, (text.get_text(), box, frame)
            assert frame.y0 <= box.y0 and box.y1 <= frame.y1, (text.get_text(), box, frame)
        shown = " ".join(t.get_text().replace("\n", " ") for t in texts)
        if name == "rotary":  # every option still named; a long list by its ends and length
            assert "'original_max_position_embeddings': 4096" in shown
            assert ("(1.0, 1.1, 1.2, ..., 7.3) (64 values)" in shown) == (kind == "decay")
        else:
            main_title = texts[-1].get_text()  # the figure's (bias) or the one axes'
            assert main_title.replace("\n", "").replace(" ", "") == title.replace(" ", "")
    finally:
        plt.close(fig)


def test_short_repr() -> None:
    from peregistry._plot_titles import short_repr

    assert short_repr({"a": [1, 2], "b": (1,), "c": "x"}) == "{'a': [1, 2], 'b': (1,), 'c': 'x'}"
    assert short_repr(list(range(10))) == "[0, 1, 2, ..., 9] (10 values)"
    assert short_repr(tuple(range(7))) == "(0, 1, 2, ..., 6) (7 values)"
