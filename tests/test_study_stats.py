"""The extrapolation study's statistics and its report, without training (issue 47): the
95% t-interval against printed tables of Student's t, the ranking with ties where intervals
overlap, and the rows that did not learn their task kept out of the ranking and said so."""

from __future__ import annotations

import math
import statistics

import pytest

from peregistry.study import LEARNED, ExtrapolationResult, Row, Settings
from peregistry.study._stats import half_width, ranking, t_abs_cdf, t_quantile


@pytest.mark.parametrize(("df", "printed"), [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776),
                                             (9, 2.262), (30, 2.042)])
def test_t_quantile_matches_the_printed_table(df: int, printed: float) -> None:
    """Two-sided 95% critical values of Student's t, as printed to three decimals (Fisher and
    Yates, Statistical Tables, table III)."""
    assert abs(t_quantile(df) - printed) <= 5e-4


def test_the_t_distribution_is_integrated_independently() -> None:
    """``P(|T| < t)`` from a midpoint sum of the t density in float64 (Student 1908), against
    the closed forms for odd and even degrees of freedom."""
    for df in (1, 2, 5, 6):
        def density(x: float, df: int = df) -> float:
            return (math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
                    * (1 + x * x / df) ** (-(df + 1) / 2))
        t, steps = 2.5, 20_000
        integral = 2 * sum(density((i + 0.5) * t / steps) for i in range(steps)) * t / steps
        assert abs(t_abs_cdf(t, df) - integral) < 1e-8, df


def test_half_width_is_t_times_the_standard_error() -> None:
    values = [0.5, 0.6, 0.7, 0.65]
    expected = 3.182446305284263 * statistics.stdev(values) / 2  # t_{0.975, 3}
    assert half_width(values) == pytest.approx(expected, rel=1e-12)
    assert half_width([0.5]) is None  # one seed says nothing of the spread


def test_overlapping_intervals_are_ties_not_an_order() -> None:
    order = ranking({"a": (0.9, 0.05), "b": (0.8, 0.04), "c": (0.5, 0.01), "d": (0.8, None)})
    assert order == [("a", []), ("b", ["d"]), ("d", ["b"]), ("c", [])]
    # touching intervals overlap: 0.9 - 0.05 == 0.8 + 0.05
    assert ranking({"x": (0.9, 0.05), "y": (0.8, 0.05)})[0] == ("x", ["y"])


def _result() -> ExtrapolationResult:
    """A hand-made result: three seeds, L = 4, two tasks; ``weak`` under the bar on copy."""
    s = Settings(train_length=4, seeds=(0, 1, 2), tasks=("copy", "reverse"))

    def row(name: str, task: str, at_l: list[float], at_2l: list[float]) -> Row:
        return Row(name, task, {4: at_l, 8: at_2l, 16: [0.1] * 3, 32: [0.1] * 3})

    rows = [row("good", "copy", [1.0, 1.0, 0.99], [0.9, 0.8, 0.85]),
            row("close", "copy", [0.95, 0.97, 0.99], [0.8, 0.82, 0.84]),
            row("far", "copy", [0.95, 0.95, 0.95], [0.2, 0.21, 0.22]),
            row("weak", "copy", [0.5, 0.99, 0.99], [0.9, 0.9, 0.9]),
            row("good", "reverse", [0.9, 0.9, 0.9], [0.3, 0.3, 0.3])]
    return ExtrapolationResult(s, rows, {"grid": "a reason"})


def test_rows_that_did_not_learn_are_said_and_not_ranked() -> None:
    result = _result()
    assert [(r.encoder, ties) for r, ties in result.ranking("copy")] == \
        [("good", ["close"]), ("close", ["good"]), ("far", [])]
    assert result.did_not_learn("copy") == ["weak"]  # mean 0.83 at L, however well at 2L
    assert result.did_not_learn("reverse") == [] and LEARNED == 0.9
    table = result.table()
    assert "weak   " in table and table.count("did not learn") == 2  # the row and the summary
    assert "did not learn copy (< 0.9 at 4), so not ranked: weak" in table
    assert "  1. good   0.850 ±0.12  = close" in table
    assert "  3. far    0.210 ±0.02\n" in table and "skipped grid: a reason" in table
    data = result.as_dict()
    assert data["ranking"]["copy"][0] == {"encoder": "good", "mean": pytest.approx(0.85),
                                          "interval": pytest.approx(half_width([0.9, 0.8, 0.85])),
                                          "ties": ["close"]}
    assert data["did_not_learn"] == {"copy": ["weak"], "reverse": []}
    assert ExtrapolationResult.from_dict(data).as_dict() == data
