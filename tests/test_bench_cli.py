"""Tests of ``peregistry bench`` (:mod:`peregistry.bench`): the table's shape, never timing
values (they depend on the machine)."""

from __future__ import annotations

import io

import pytest

from peregistry.bench import BenchRow, Progress, format_bench_table, time_interleaved
from peregistry.cli import main

HEADER = ["encoder", "backend", "shape", "ours", "hand-written", "copy", "vs", "hand", "vs", "copy"]


def test_bench_quick_table(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "sinusoidal", "--backend", "numpy", "--quick", "--reps", "2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == HEADER
    assert set(lines[1].replace(" ", "")) == {"-"}
    rows = [line.split() for line in lines[2:] if line.startswith("sinusoidal")]
    assert len(rows) == 1
    row = rows[0]
    assert row[:3] == ["sinusoidal", "numpy", "256x64"]
    assert row[4] == row[6] == row[8] == "ms"                 # three medians
    assert row[-1].endswith("x") and row[-2].endswith("x")    # two ratios
    float(row[-1][:-1])
    float(row[-2][:-1])
    assert "ratios of medians" in lines[-3]
    assert lines[-2].startswith("rotation kernels: ")
    assert lines[-1].startswith("threads: ") and "NumPy 1" in lines[-1]
    assert err == ""            # no progress bar: stderr is not a terminal


def test_bench_threads_set_on_purpose(capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``--threads N``: every timed call runs on N threads, and the output says so."""
    monkeypatch.setenv("OMP_NUM_THREADS", "7")  # (restored after the test)
    code = main(["bench", "sinusoidal", "--backend", "numpy", "--quick", "--reps", "2",
                 "--threads", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "OMP_NUM_THREADS=1" in out.splitlines()[-1]
    assert main(["bench", "sinusoidal", "--backend", "numpy", "--threads", "0"]) == 2


def test_bench_unknown_encoder(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "nope", "--backend", "numpy", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "no benchmark for encoder 'nope'" in err
    assert "sinusoidal" in err


def test_bench_unknown_backend(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--backend", "tensorflow", "--quick"]) == 2
    assert "bench backend must be one of numpy, torch, jax" in capsys.readouterr().err


def test_time_interleaved_rotates_and_counts() -> None:
    calls: list[str] = []
    ticks = []
    medians = time_interleaved([lambda: calls.append("a"), lambda: calls.append("b")], 3,
                               warmup=1, tick=lambda: ticks.append(1))
    assert len(medians) == 2
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]   # warm-up, then rotating order
    assert len(ticks) == 3


def test_progress_bar_and_table_format() -> None:
    stream = io.StringIO()
    bar = Progress(2, stream, width=4)
    bar.step("x")
    bar.step()
    bar.step()
    bar.close()
    assert "[####] 2/2 x" in stream.getvalue()
    table = format_bench_table([BenchRow("e", "numpy", "4", 2e-3, 1e-3, 5e-4)])
    assert table.splitlines()[2].split()[-2:] == ["2.00x", "4.00x"]


def test_bench_quick_covers_every_builtin_encoder(capsys: pytest.CaptureFixture[str]) -> None:
    import peregistry as per

    builtin = {i.name for i in per.list_encoders() if i.plugin.distribution == "peregistry"}
    assert {"mrope", "learned", "learned-2d", "t5", "shaw", "transformer-xl"} <= builtin
    code = main(["bench", "--backend", "numpy", "--quick", "--reps", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == HEADER
    rows = [line.split() for line in lines[2:] if line and line.split()[0] in builtin]
    assert {r[0] for r in rows} == builtin
    assert len(rows) == len(builtin)                          # one row each, none skipped
    for row in rows:
        assert row[1] == "numpy"
        assert row[-1].endswith("x") and row[-2].endswith("x"), row


def test_bench_skipped_pairs_are_noted() -> None:
    nan = float("nan")
    table = format_bench_table([BenchRow("e", "numpy", "4", 2e-3, 1e-3, 5e-4),
                                BenchRow("f", "array_api_strict", "-", nan, nan, nan, skipped="why"),
                                BenchRow("g", "array_api_strict", "-", nan, nan, nan, skipped="why")])
    lines = table.splitlines()
    assert lines[3].split()[:4] == ["f", "array_api_strict", "-", "skipped"]
    assert lines[-2] == "notes:"
    assert lines[-1] == "[1] skipped f on array_api_strict, g on array_api_strict: why"
