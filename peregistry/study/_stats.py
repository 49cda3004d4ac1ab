"""The study's statistics over seeds, in pure Python: a mean with its 95% Student-t interval
(Zhou et al. 2024 show length generalization varies strongly with the seed, so a cell is a
mean over seeds with its uncertainty, not one run), and a ranking in which the pairs whose
intervals overlap are marked as ties rather than ordered."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

#: The level of every interval the study reports.
LEVEL = 0.95


def t_abs_cdf(t: float, df: int) -> float:
    """``P(|T| < t)`` for Student's t with ``df`` (a positive integer) degrees of freedom, in
    closed form (Abramowitz and Stegun 1964, 26.7.3 for odd and 26.7.4 for even ``df``), with
    ``θ = atan(t / sqrt(df))``: odd ``df``, ``(2/π)(θ + sin θ (cos θ + (2/3) cos³ θ + ... +
    (2·4···(df-3))/(1·3···(df-2)) cos^(df-2) θ))`` (``2θ/π`` for ``df = 1``); even ``df``,
    ``sin θ (1 + (1/2) cos² θ + ... + (1·3···(df-3))/(2·4···(df-2)) cos^(df-2) θ)``."""
    theta = math.atan(t / math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    if df % 2:
        term, total = c, c if df > 1 else 0.0
        for k in range(3, df - 1, 2):  # term_k = term_{k-2} · (k-1)/k · cos² θ
            term *= (k - 1) / k * c * c
            total += term
        return 2 / math.pi * (theta + s * total)
    term, total = 1.0, 1.0
    for k in range(2, df - 1, 2):  # term_k = term_{k-2} · (k-1)/k · cos² θ
        term *= (k - 1) / k * c * c
        total += term
    return s * total


def t_quantile(df: int, level: float = LEVEL) -> float:
    """The ``t`` with ``P(|T| < t) = level`` for ``df`` degrees of freedom (the two-sided
    critical value: 12.706 for df 1, 4.303 for df 2 at 95%), by bisection of
    :func:`t_abs_cdf`, which rises with ``t``."""
    lo, hi = 0.0, 1.0
    while t_abs_cdf(hi, df) < level:
        hi *= 2
    for _ in range(100):  # the bracket halves each time: far below float64's resolution
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_abs_cdf(mid, df) < level else (lo, mid)
    return (lo + hi) / 2


def half_width(values: Sequence[float], level: float = LEVEL) -> float | None:
    """The half-width of the ``level`` t-interval of the mean of ``values`` (independent runs,
    one per seed): ``t_{n-1} · s / sqrt(n)``, ``s`` the sample standard deviation; None for
    one value (no interval can be said)."""
    n = len(values)
    if n < 2:
        return None
    return t_quantile(n - 1, level) * statistics.stdev(values) / math.sqrt(n)


def overlap(a: tuple[float, float | None], b: tuple[float, float | None]) -> bool:
    """Whether two ``(mean, half-width)`` intervals overlap (a missing half-width is 0: a
    single run is a point)."""
    return abs(a[0] - b[0]) <= (a[1] or 0.0) + (b[1] or 0.0)


def ranking(cells: dict[str, tuple[float, float | None]]) -> list[tuple[str, list[str]]]:
    """``[(name, [names tied with it])]`` best first: ``cells`` (name -> mean, half-width)
    sorted by mean, highest first (names break exact ties, so the order is reproducible); two
    names are tied when their intervals overlap."""
    order = sorted(cells, key=lambda name: (-cells[name][0], name))
    return [(name, [other for other in order
                    if other != name and overlap(cells[name], cells[other])])
            for name in order]
