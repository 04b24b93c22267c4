"""The numbers a grouped comparison prints: a group's spread over its runs, and whether a lead exceeds it."""
from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

# scipy.stats is imported where a p-value is computed (~1 s); most comparisons have one group per side.

SIGNIFICANT = 0.05  # a lead with Welch's p below this is reported as larger than the spread over seeds


@dataclass(frozen=True)
class Spread:
    """One metric's final values over a group's runs."""
    n: int
    mean: float
    std: float | None     # sample standard deviation (n - 1 in the denominator); None with one run
    low: float
    high: float


def spread(values: Sequence[float]) -> Spread | None:
    """n, mean, sample std, min and max; None when there are no values."""
    if not values:
        return None
    return Spread(n=len(values), mean=statistics.fmean(values),
                  std=statistics.stdev(values) if len(values) > 1 else None, low=min(values), high=max(values))


def welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of Welch's t-test (unequal variances) that `a` and `b` have the same mean.

    Needs two values on each side. Two constant samples give 0 when their means differ and 1 when not
    (scipy's t is infinite or undefined there).
    """
    from scipy.stats import ttest_ind

    if len(a) < 2 or len(b) < 2:
        raise ValueError("Welch's t-test needs at least two values in each sample")
    if max(a) == min(a) and max(b) == min(b):
        return 1.0 if a[0] == b[0] else 0.0
    with warnings.catch_warnings():  # nearly equal values: scipy warns of precision loss, the p stays usable
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(ttest_ind(a, b, equal_var=False).pvalue)
    return 1.0 if math.isnan(p) else p


def p_text(p: float) -> str:
    """p = 0.0078, p = 0.80, p = 3.2e-05: two significant digits (trailing zeros kept)."""
    if p == 0:
        return "p = 0"
    return f"p = {p:#.2g}" if p >= 1e-3 else f"p = {p:.1e}"
