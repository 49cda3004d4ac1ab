"""``peregistry study extrapolation`` (issues 32, 47): it completes, its output has the promised
structure, the same call gives the same numbers (byte for byte whatever the number of models
side by side), a plugin's encoder runs unchanged, and each kind enters the model its own way
(relative kinds see only position differences). The statistics (t-interval, ties) and the
addition task are checked against independent arithmetic. Nothing here asserts a trained
accuracy: those are noisy outcomes, reported in docs/extrapolation.md. Tiny settings only."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import sys
from typing import Any

import pytest
from conftest import BACKENDS

if "torch" not in BACKENDS:
    pytest.skip("torch not selected (PEREGISTRY_BACKENDS)", allow_module_level=True)
torch = pytest.importorskip("torch")

import peregistry as per  # noqa: E402
from peregistry.cli import main  # noqa: E402
from peregistry.plugin import Ctx, Frequencies, cos_sin  # noqa: E402
from peregistry.study import (  # noqa: E402
    DEFAULT_TASKS,
    SCALINGS,
    ExtrapolationResult,
    Settings,
    extrapolation,
)
from peregistry.study._model import TinyDecoder  # noqa: E402
from peregistry.study._run import encoders  # noqa: E402
from peregistry.study._tasks import VOCAB, batch  # noqa: E402

TINY = Settings(train_length=4, steps=3, seeds=(0, 1), batch=4, eval_batch=4, min_length=None)


def test_quick_run_completes_with_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    """--quick's rows, with its training cut to 2 steps (the test checks the structure)."""
    from peregistry.study import QUICK

    assert main(["study", "extrapolation", "--quick", "--steps", "2", "--threads", "1",
                 "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["lengths"] == list(QUICK.lengths) and out["tasks"] == list(DEFAULT_TASKS)
    assert set(out["skipped"]) == {"mrope", "learned-2d", "dual-chunk"}
    names = {"nope", "sinusoidal", "learned", "rotary", "xpos", "fope", "alibi", "t5", "kerple",
             "fire", "shaw", "transformer-xl", *(f"rotary+{s}" for s in SCALINGS)}
    rows = {(r["encoder"], r["task"]): r for r in out["rows"]}
    assert set(rows) == {(n, t) for n in names for t in DEFAULT_TASKS}
    for r in rows.values():
        for n in map(str, out["lengths"]):
            assert len(r["accuracy"][n]) == 1 and 0.0 <= r["accuracy"][n][0] <= 1.0
            assert r["mean"][n] == r["accuracy"][n][0] and r["spread"][n] == 0.0
            assert r["interval"][n] is None  # one seed: no interval
        assert r["learned"] == (r["mean"][str(out["train_length"])] >= out["learned_at"])
    for t in DEFAULT_TASKS:  # every row is ranked or said not to have learned, not both
        ranked = [r["encoder"] for r in out["ranking"][t]]
        assert sorted(ranked + out["did_not_learn"][t]) == sorted(names)
        assert all(rows[(name, t)]["learned"] for name in ranked)
    # the scalings leave the training length alone: the same model, the same numbers
    at_l = str(out["train_length"])
    for t in DEFAULT_TASKS:
        for s in SCALINGS:
            assert rows[(f"rotary+{s}", t)]["accuracy"][at_l] == \
                rows[("rotary", t)]["accuracy"][at_l]


def test_the_same_call_gives_the_same_numbers() -> None:
    first = extrapolation(["rotary", "learned", "nope"], settings=TINY).as_dict()
    again = extrapolation(["rotary", "learned", "nope"], settings=TINY).as_dict()
    assert first == again
    assert ExtrapolationResult.from_dict(first).as_dict() == first  # the JSON reads back
    randomized = dataclasses.replace(TINY, randomized=True)
    assert extrapolation(["rotary"], settings=randomized).as_dict() == \
        extrapolation(["rotary"], settings=randomized).as_dict()
    # the model and the data follow the seed: another seed trains another model
    one = dataclasses.replace(TINY, seeds=(0,))
    model_params = []
    for seed in (0, 5):
        torch.manual_seed(seed)
        model_params.append(TinyDecoder(VOCAB, None, seed).head.weight.clone())
    assert not torch.equal(*model_params)
    assert extrapolation(["nope"], settings=one).as_dict() == \
        extrapolation(["nope"], settings=one).as_dict()


def test_addition_is_long_addition_with_reversed_digits() -> None:
    """Each sequence read back as Python integers: ``c = a + b`` (digits least significant
    first, Zhou et al. 2024), ``n + 1`` digits of ``c`` scored, the teacher-forced targets the
    next tokens."""
    from peregistry.study._tasks import PLUS, SEP, length_of

    n = 7
    inputs, targets, scored = batch("addition", n, 16, torch.Generator().manual_seed(3))
    assert inputs.shape == (16, length_of("addition", n)) == scored.shape
    for ids, nxt, mask in zip(inputs.tolist(), targets.tolist(), scored.tolist(), strict=True):
        seq = ids + nxt[-1:]
        assert nxt == seq[1:] and seq[n] == PLUS and seq[2 * n + 1] == SEP
        def number(digits: list[int]) -> int:
            return int("".join(map(str, reversed(digits))))
        a, b, c = number(seq[:n]), number(seq[n + 1:2 * n + 1]), number(seq[2 * n + 2:])
        assert a + b == c and len(seq[2 * n + 2:]) == n + 1
        assert [i for i, m in enumerate(mask) if m] == list(range(2 * n + 1, 3 * n + 2))


def test_the_learning_rate_warms_up_then_decays_to_zero() -> None:
    from peregistry.study._train import schedule

    assert [schedule(k, 100) for k in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert schedule(10, 100) == 1.0 and schedule(55, 100) == pytest.approx(0.5)
    assert 0 < schedule(99, 100) < 1e-3
    assert schedule(0, 1) == 1.0  # one step: the peak


class StudyRope(per.RotaryEncoder):
    """A third-party rotary encoder: the study knows nothing of it."""

    name = "test-study-rope"
    __slots__ = ()
    dim = per.Option(int, allowed="a positive even integer", check=lambda d: d > 0 and d % 2 == 0,
                     example=8)

    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> Any:
        freqs = Frequencies.from_omega(500.0 ** (-2 * i / self.dim) for i in range(self.dim // 2))
        return cos_sin(positions, freqs, ctx=ctx)


class GridOnly(per.AbsoluteEncoder):
    """A plugin encoder that takes 2-D grid positions only: it cannot enter a causal model."""

    name = "test-study-grid"
    __slots__ = ()
    dim = per.Option(int, example=8)

    def _encode(self, positions: Any, *, params: Any, ctx: Ctx) -> Any:
        raise ValueError("positions must be (2, ...) grid coordinates")


class _Plugin:
    @per.hookimpl
    def peregistry_encoders(self) -> list[type[per.Encoder]]:
        return [StudyRope, GridOnly]


def test_a_plugin_encoder_runs_unchanged() -> None:
    name = per.register(_Plugin(), name="test-study-plugin")
    try:
        result = extrapolation([StudyRope.name, GridOnly.name, "nope"], settings=TINY)
        assert {r.encoder for r in result.rows} == {StudyRope.name, "nope"}
        assert "grid coordinates" in result.skipped[GridOnly.name]
        ((_, enc),), _ = encoders([StudyRope.name], TINY)
        assert enc.options["dim"] == 16  # the model's head width, not the example's 8
    finally:
        per.unregister(name)


@pytest.mark.parametrize("name", ["nope", "rotary", "xpos", "alibi", "t5", "shaw",
                                  "transformer-xl", "sinusoidal", "learned"])
def test_each_kind_enters_the_model_its_way(name: str) -> None:
    """Relative kinds see position differences only: shifting every position by 7 leaves the
    logits; absolute ones change them."""
    (_, enc), = encoders([name], Settings())[0]
    torch.manual_seed(0)
    model = TinyDecoder(VOCAB, enc, seed=0).eval()
    ids, _, _ = batch("copy", 8, 2, torch.Generator().manual_seed(0))
    pos = torch.arange(ids.shape[1])
    with torch.no_grad():
        a, b = model(ids, pos), model(ids, pos + 7)
    shifted = float((a - b).abs().max())
    if enc is not None and enc.kind == "absolute":
        assert shifted > 1e-3
    else:
        assert shifted <= 1e-4 * float(a.abs().max()), name


def test_a_learned_rotary_encoder_trains_its_params() -> None:
    """FoPE's coefficients are the model's parameters and reach ``rotate``: a step moves them."""
    (_, enc), = encoders(["fope"], TINY)[0]
    model = TinyDecoder(VOCAB, enc, seed=0)
    assert set(model.position.params) == {"cos_coef", "sin_coef"}
    ids, targets, scored = batch("copy", 4, 2, torch.Generator().manual_seed(0))
    logits = model(ids, torch.arange(ids.shape[1]))
    torch.nn.functional.cross_entropy(logits[scored], targets[scored]).backward()
    for key, value in model.position.params.items():
        assert value.grad is not None and float(value.grad.abs().max()) > 0, key


def test_bad_arguments_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["study", "extrapolation", "--encoders", "no-such-encoder", "--quick"]) == 2
    assert "no-such-encoder" in capsys.readouterr().err
    assert main(["study", "extrapolation", "--seeds", "0"]) == 2
    assert main(["study", "interpolation"]) == 2
    capsys.readouterr()
    assert main(["study", "extrapolation", "--threads", "0"]) == 2
    assert "argument --threads: expected a positive integer, got '0'" in capsys.readouterr().err


def test_the_command_says_its_threads_and_progress_when_piped(
        capsys: pytest.CaptureFixture[str]) -> None:
    """stderr is not a terminal here: the threads set, then progress lines with the time left,
    then the total; the table alone on stdout; torch's threads as they were afterwards."""
    before = torch.get_num_threads()
    assert main(["study", "extrapolation", "--quick", "--encoders", "nope", "--steps", "2",
                 "--threads", "1"]) == 0
    out, err = capsys.readouterr()
    first, *progress, last = err.splitlines()
    assert first.startswith("study: threads OMP_NUM_THREADS=1") and "torch 1 (inter-op " in first
    assert progress[0] == "[0/3] nope copy seed 0; 0 s elapsed"
    assert all(re.fullmatch(r"\[\d/3\] nope \w+ seed 0; \d+ s elapsed.*", p) for p in progress)
    assert re.fullmatch(r"done: 3 of 3 in \d+ s", last) and "\r" not in err
    assert out.startswith("task copy") and torch.get_num_threads() == before
    assert main(["study", "extrapolation", "--quick", "--encoders", "nope", "--steps", "2",
                 "--threads", "1", "--no-progress"]) == 0
    assert capsys.readouterr().err.count("\n") == 1          # the threads line alone


def test_the_run_trains_on_the_threads_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from peregistry.study import _run

    seen, one = [], _run.job

    def spy(*args: Any) -> Any:
        seen.append(torch.get_num_threads())
        return one(*args)

    monkeypatch.setattr(_run, "job", spy)
    before = torch.get_num_threads()
    one_seed = dataclasses.replace(TINY, seeds=(0,))
    extrapolation(["nope"], settings=one_seed)
    assert seen == [1] * len(DEFAULT_TASKS) and torch.get_num_threads() == before
    torch.set_num_threads(3)
    try:
        extrapolation(["nope"], settings=one_seed, threads=None)  # torch's threads as they are
        assert seen[len(DEFAULT_TASKS):] == [3] * len(DEFAULT_TASKS)
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ValueError, match="threads must be a positive integer or None, got 0"):
        extrapolation(["nope"], settings=one_seed, threads=0)


def test_the_json_is_the_same_bytes_whatever_the_threads(
        capsys: pytest.CaptureFixture[str]) -> None:
    """One model after another in this process, or two side by side in processes: every model
    is seeded and on one thread wherever it runs, so the record is byte-identical."""
    outputs = []
    for threads in ("1", "2"):
        assert main(["study", "extrapolation", "--quick", "--encoders", "rotary,alibi",
                     "--tasks", "copy", "--steps", "3", "--seeds", "2", "--format", "json",
                     "--threads", threads, "--no-progress"]) == 0
        out, err = capsys.readouterr()
        assert f"{threads} model" in err
        outputs.append(out)
    assert outputs[0] == outputs[1]
    assert len(json.loads(outputs[0])["rows"]) == 2 + len(SCALINGS)




# -- issue 42, item 4: every field of Settings is checked when it is made ----------------------------
@pytest.mark.parametrize(("field", "value", "fragment"), [
    ("train_length", 0, "a positive integer"),
    ("train_length", -3, "a positive integer"),
    ("train_length", 2.5, "a positive integer"),
    ("train_length", True, "a positive integer"),
    ("steps", 0, "a positive integer"),
    ("seeds", (), "a non-empty tuple"),
    ("seeds", (0, 0), "distinct"),
    ("seeds", (-1,), "integers >= 0"),
    ("seeds", 3, "a non-empty tuple"),
    ("tasks", (), "a non-empty tuple"),
    ("tasks", ("copy", "sort"), "'sort'"),
    ("tasks", "copy", "a non-empty tuple"),
    ("tasks", ("copy", "copy"), "distinct"),
    ("batch", 0, "a positive integer"),
    ("eval_batch", -1, "a positive integer"),
    ("lr", 0.0, "a finite number > 0"),
    ("lr", float("nan"), "a finite number > 0"),
    ("lr", float("inf"), "a finite number > 0"),
    ("lr", "0.1", "a finite number > 0"),
    ("randomized", 1, "True or False"),
    ("width", 20, "a positive multiple of 8"),
    ("width", 0, "a positive multiple of 8"),
    ("layers", 0, "a positive integer"),
    ("min_length", 0, "None or an integer in 1..train_length (20)"),
    ("min_length", 21, "None or an integer in 1..train_length (20)"),
])
def test_settings_check_every_field(field: str, value: Any, fragment: str) -> None:
    with pytest.raises(ValueError, match=f"Settings: {field} must be ") as info:
        Settings(**{field: value})
    assert fragment in str(info.value) and repr(value) in str(info.value)


def test_an_unknown_task_is_not_a_plugins_failure() -> None:
    """Before: the plugin's encoder was 'skipped: failed in the model' for the study's mistake."""
    name = per.register(_Plugin(), name="test-study-plugin-task")
    try:
        with pytest.raises(ValueError,
                           match=r"tasks must be .*copy, reverse, addition, offset.*'sort'"):
            extrapolation([StudyRope.name], settings=dataclasses.replace(TINY, tasks=("sort",)))
    finally:
        per.unregister(name)


def test_settings_lists_become_tuples() -> None:
    s = Settings(seeds=[0, 1], tasks=["copy"])  # type: ignore[arg-type]
    assert s.seeds == (0, 1) and s.tasks == ("copy",)


def test_the_default_is_kazemnejads_setup() -> None:
    """Lengths up to 20, evaluated at 2x (4x, 8x extra), copy, reverse, addition, 3 seeds."""
    s = Settings()
    assert s.train_length == 20 and s.lengths == (20, 40, 80, 160)
    assert s.tasks == ("copy", "reverse", "addition") and len(s.seeds) >= 3
    assert s.shortest == 1 and dataclasses.replace(s, min_length=None).shortest == 20


def test_a_bad_task_on_the_command_line_names_the_field(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["study", "extrapolation", "--quick", "--tasks", "copy,sort"]) == 2
    assert "--tasks: Settings: tasks must be" in capsys.readouterr().err


# -- issue 42, item 3: --plot is checked before training, the table printed before drawing ----------
def test_a_bad_plot_path_is_a_usage_error_before_training(
        tmp_path: Any, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    import peregistry.study as study

    def no_training(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("trained before checking --plot")

    monkeypatch.setattr(study, "extrapolation", no_training)
    if importlib.util.find_spec("matplotlib") is None:  # the check only imports it
        monkeypatch.setitem(sys.modules, "matplotlib", types.ModuleType("matplotlib"))
    missing = tmp_path / "no" / "such" / "x.png"
    assert main(["study", "extrapolation", "--quick", "--plot", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "--plot" in err and str(missing.parent) in err and "does not exist" in err
    assert main(["study", "extrapolation", "--quick", "--plot", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    # matplotlib missing: said before training, too
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["study", "extrapolation", "--quick", "--plot", str(tmp_path / "x.png")]) == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err


def test_the_table_is_printed_before_the_plot_is_drawn(
        tmp_path: Any, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    import peregistry.study as study
    import peregistry.study.plot as study_plot

    monkeypatch.setattr(study, "QUICK", dataclasses.replace(TINY, seeds=(0,)))

    def fail(result: Any, path: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(study_plot, "plot_extrapolation", fail)
    if importlib.util.find_spec("matplotlib") is None:  # the check before training only imports it
        monkeypatch.setitem(sys.modules, "matplotlib", types.ModuleType("matplotlib"))
    code = main(["study", "extrapolation", "--quick", "--encoders", "nope", "--threads", "1",
                 "--plot", str(tmp_path / "x.png")])
    out, err = capsys.readouterr()
    assert code == 1 and "disk full" in err
    assert out.startswith("task copy (trained at length 4;")  # the results are not lost
