"""Tests of ``peregistry bench`` (:mod:`peregistry.bench`): the table's shape, never timing
values (they depend on the machine)."""

from __future__ import annotations

import io
import os
import re
import sys

import pytest

from peregistry.bench import BenchRow, Progress, format_bench_table, time_interleaved
from peregistry.bench._progress import format_duration
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
    assert "OMP_NUM_THREADS=1" in lines[-1]                   # one thread unless told
    assert re.search(r"load average \d+\.\d\d at the start, \d+\.\d\d at the end",
                     lines[-1]) or not hasattr(os, "getloadavg")
    # stderr is not a terminal: the threads set, then progress as lines (no \r), then the end
    first, *progress, last = err.splitlines()
    assert first.startswith("bench: threads OMP_NUM_THREADS=1") and "CPUs" in first
    assert progress and all(re.fullmatch(r"\[\d+/2\] sinusoidal on numpy; \d+ s elapsed.*", p)
                            for p in progress), progress
    assert re.fullmatch(r"done: 2 of 2 in \d+ s", last)
    assert "\r" not in err
    code = main(["bench", "sinusoidal", "--backend", "numpy", "--quick", "--reps", "2",
                 "--no-progress"])
    assert code == 0 and capsys.readouterr().err.count("\n") == 1   # the threads line alone


def test_bench_threads_set_on_purpose(capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``--threads N``: every timed call runs on N threads, and the output says so."""
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    code = main(["bench", "sinusoidal", "--backend", "numpy", "--quick", "--reps", "2",
                 "--threads", "3"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "OMP_NUM_THREADS=3" in out.splitlines()[-1]
    assert os.environ["OMP_NUM_THREADS"] == "7"              # the bench's setting ends with it
    assert main(["bench", "sinusoidal", "--backend", "numpy", "--threads", "0"]) == 2


def test_threads_are_set_and_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`threads` sets the variables (torch's count too, when torch is imported) for the
    body alone, and says what it set."""
    from peregistry.bench._threads import THREAD_VARIABLES, threads

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    with threads(2, jax=False) as said:
        assert all(os.environ[k] == "2" for k in THREAD_VARIABLES)
        assert said[0].startswith("OMP_NUM_THREADS=2")
        if torch is not None:
            assert torch.get_num_threads() == 2 and any(s.startswith("torch 2") for s in said)
    assert os.environ["OMP_NUM_THREADS"] == "5" and "OPENBLAS_NUM_THREADS" not in os.environ
    if torch is not None:
        assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads must be a positive integer, got 0"), threads(0):
        pass


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


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_bar_and_table_format() -> None:
    stream, clock = io.StringIO(), Clock()
    bar = Progress(2, stream, width=4, redraw=True, clock=clock)
    bar.step("x")
    clock.now += 10
    bar.step()
    assert stream.getvalue().endswith("\r[##..] 1/2 x" + " " * 24 + "10 s elapsed, about 10 s left")
    bar.step()
    bar.close()
    assert "[####] 2/2 x" in stream.getvalue()
    assert stream.getvalue().endswith("\r")  # the bar cleared
    table = format_bench_table([BenchRow("e", "numpy", "4", 2e-3, 1e-3, 5e-4)])
    assert table.splitlines()[2].split()[-2:] == ["2.00x", "4.00x"]


def test_progress_off_a_terminal_writes_lines_with_the_time_left() -> None:
    """Piped, a line at the first step, then at most one every ``every`` seconds (at a step's
    start, or between repetitions of one), and the total at the end; no ``\\r``."""
    stream, clock = io.StringIO(), Clock()
    bar = Progress(4, stream, every=10, clock=clock)
    assert not bar.redraw                      # a StringIO is not a terminal
    bar.step("a")
    for label in ("b", "c", "d"):
        clock.now += 6
        bar.step()
        bar.step(label)
    clock.now += 6
    bar.step()
    bar.close()
    assert stream.getvalue().splitlines() == [
        "[0/4] a; 0 s elapsed",
        "[2/4] c; 12 s elapsed, about 12 s left",   # 6 s after the last line: none at b
        "done: 4 of 4 in 24 s",
    ]
    reps, clock = io.StringIO(), Clock()
    bar = Progress(30, reps, every=10, clock=clock)
    bar.step("one encoder")
    for _ in range(30):
        clock.now += 1
        bar.step()
    bar.close()
    assert reps.getvalue().splitlines()[1:] == [
        "[10/30] one encoder; 10 s elapsed, about 20 s left",
        "[20/30] one encoder; 20 s elapsed, about 10 s left",
        "done: 30 of 30 in 30 s"]
    assert "\r" not in stream.getvalue() + reps.getvalue()
    warm, clock = io.StringIO(), Clock()
    bar = Progress(4, warm, every=0, clock=clock)
    for step_time in (30, 5, 5):                 # the first step pays the imports
        bar.step("x")
        clock.now += step_time
        bar.step()
    bar.step("x")
    assert warm.getvalue().splitlines()[-1] == "[3/4] x; 40 s elapsed, about 5 s left"
    assert format_duration(59.4) == "59 s" and format_duration(185) == "3 min 05 s"
    assert format_duration(3720) == "1 h 02 min"


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


@pytest.mark.parametrize("name", ["rotary", "rotary-interleaved", "rotary-decode", "dual-chunk"])
def test_bench_copies_written_values(name: str) -> None:
    """The copy reference copies an array of written values (ours' result, or random inputs),
    never a NumPy ``zeros``: a large one is pages never written, whose copy reads one shared zero
    page from cache, a cheaper reference than a copy of ``x`` (docs/benchmarks.md, issue 43)."""
    import numpy as np

    from peregistry.bench._cases import BENCHMARKS, Bench
    from peregistry.registry import default_registry

    case = BENCHMARKS[name](Bench(default_registry.backend("numpy")), True)
    copied = np.asarray(case.copy())
    assert copied.size and np.count_nonzero(copied) > copied.size // 2
    if name.startswith("rotary") and name != "rotary-decode":
        np.testing.assert_array_equal(copied, case.ours())  # ours' result, of its shape and dtype
