"""Pearson's chi-square goodness-of-fit test in NumPy: do sampled counts follow an exact distribution?

    counts = np.bincount(draws, minlength=len(probs))
    assert_counts_fit(counts, probs)          # nothing drawn outside the support, and p-value > ALPHA

The statistic sums (observed - expected)^2 / expected over the cells, after pooling the cells expected fewer than
MIN_EXPECTED times into one (the chi-square approximation needs ~5 per cell). Under the null hypothesis it follows
a chi-square law with (cells - 1) degrees of freedom; its p-value is the regularised upper incomplete gamma
function Q(dof / 2, statistic / 2), computed here by its power series or its continued fraction (Numerical
Recipes, 6.2). The draws are seeded, so a test passes or fails the same way every run: ALPHA only decides how
unlikely a correct sampler's seed must be to fail it (1 in 1000), while a wrong distribution gives p-values like
1e-50 at the sample sizes used.
"""

from __future__ import annotations

import math

import numpy as np

ALPHA = 1e-3  # a correct sampler fails with probability 1e-3 over seeds; the seeds are fixed, so it never does
MIN_EXPECTED = 5.0


def chi_square_sf(statistic: float, dof: int) -> float:
    """P(X >= statistic) for X ~ chi-square(dof): Q(dof/2, statistic/2).

    >>> round(chi_square_sf(3.841458820694124, 1), 6), round(chi_square_sf(18.307038053275146, 10), 6)
    (0.05, 0.05)
    """
    a, x = dof / 2, statistic / 2
    if x <= 0:
        return 1.0
    log_prefix = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:  # the series of the lower function P converges fast here
        term = total = 1 / a
        k = a
        while term > total * 1e-16:
            k += 1
            term *= x / k
            total += term
        return max(0.0, 1 - total * math.exp(log_prefix))
    tiny, b = 1e-300, x + 1 - a  # the continued fraction of Q, by the modified Lentz method
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an, b = -i * (i - a), b + 2
        d = an * d + b
        d = 1 / (d if abs(d) > tiny else tiny)
        c = b + an / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        if abs(d * c - 1) < 1e-16:
            break
    return h * math.exp(log_prefix)


def chi_square(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    """The statistic and its degrees of freedom for `counts` [cells] drawn from `probs` [cells] (summing to 1),
    cells expected fewer than MIN_EXPECTED times pooled into one (itself merged into the next if still short)."""
    counts, probs = np.asarray(counts, dtype=np.float64), np.asarray(probs, dtype=np.float64)
    expected_all = probs * counts.sum()  # [cells]
    small = expected_all < MIN_EXPECTED
    observed, expected = list(counts[~small]), list(expected_all[~small])
    pooled_observed, pooled_expected = counts[small].sum(), expected_all[small].sum()
    if pooled_expected >= MIN_EXPECTED or not expected:
        observed.append(pooled_observed)
        expected.append(pooled_expected)
    elif pooled_expected > 0:  # too few to stand alone: add it to the least expected cell
        smallest = int(np.argmin(expected))
        observed[smallest] += pooled_observed
        expected[smallest] += pooled_expected
    observed, expected = np.array(observed), np.array(expected)
    return float(((observed - expected) ** 2 / expected).sum()), len(expected) - 1


def assert_counts_fit(counts: np.ndarray, probs: np.ndarray, what: str = "the draws") -> float:
    """No count where `probs` is 0, and the chi-square p-value above ALPHA; returns the p-value."""
    counts, probs = np.asarray(counts), np.asarray(probs)
    assert counts[probs == 0].sum() == 0, f"{what}: drawn {counts[probs == 0].sum()} times where the probability is 0"
    statistic, dof = chi_square(counts[probs > 0], probs[probs > 0] / probs.sum())
    p_value = chi_square_sf(statistic, dof)
    assert p_value > ALPHA, f"{what} do not follow the exact distribution: chi-square {statistic:.1f} on {dof} " \
                            f"degrees of freedom, p = {p_value:.3g}"
    return p_value
