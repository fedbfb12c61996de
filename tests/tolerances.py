"""How far two floating-point computations of the same numbers may differ: a bound from the arithmetic.

Every tolerance of the suite that compares two computations of the same values (tinyinfer against transformers,
a cached path against a full recompute, one device or split against another) comes from `rounding_bound`, so a
test passes on every correct machine and BLAS kernel, yet stays tight enough that a real bug (a wrong position,
a swapped tensor: logits move by 0.01 or more) fails it.

The derivation
--------------
1. One rounding. Each floating-point operation returns the exact result times (1 + d), |d| <= u, the unit
   roundoff u = eps / 2 (float32: 5.96e-8; float64: 1.11e-16).
2. One sum of n terms. Higham's worst case is n u sum|x_i y_i|, but the n rounding errors are independent and
   of either sign, so the error is a random walk: it stays within lam sqrt(n) u * scale with probability at least
   1 - 2 exp(-lam^2 / 2) (Higham and Mary, "A new approach to probabilistic rounding error analysis", 2019),
   where scale is the size of the values summed to. lam = 5 (probability 1 - 7e-6 per value) leaves room for the
   few thousand values a test compares at once. n is the longest sum on the way (the widest contraction: d_model,
   d_ff, an expert's width).
3. A rotary angle. RoPE turns q and k by position * frequency (frequency <= 1), rounded once: an error of up to
   u * position radians, which moves the rotated vector by that fraction of its length. Learned positions add
   nothing.
4. A network of `depth` such stages. Each residual block adds its own rounding to the residual stream and the
   norms keep errors relative, so relative errors add up over the blocks: depth = layers + 1 (the output head).
5. Two computations. The two results being compared (two summation orders: one token against many, tinyinfer
   against transformers, 2 shards against 1) each carry such an error: their difference is within twice it.

    rounding_bound(dtype, scale, terms, depth, angle) = 2 * depth * scale * u(dtype) * (lam * sqrt(terms) + angle)

Worked example: llama_gqa's float32 logits of a 20-token prompt (scale 8.5, d_ff 96, 2 layers, angles up to 19)
give 2 * 3 * 8.5 * 5.96e-8 * (5 * 9.8 + 19) = 2.1e-4; the cached-decode difference observed is 4.5e-6 to 1.8e-5 under four OpenBLAS kernels here and 4.5e-5
on another machine, a position bug moves it by ~0.1. In float64 the same bound is 3.8e-13.

Measuring: with TINYINFER_TOLERANCE_LOG=FILE set, `assert_close` appends each check's observed difference and
bound to FILE (one JSON object a line), so the ratio bound / observed can be read off for several BLAS kernels
(e.g. OPENBLAS_CORETYPE=Haswell, Sandybridge, Prescott, set for the measuring run only).
"""

from __future__ import annotations

import json
import os

import numpy as np

LAM = 5.0  # standard deviations of the random-walk rounding error that a bound allows (step 2)


def unit_roundoff(dtype) -> float:
    """u = eps / 2 of a float dtype: the largest relative error of one rounding."""
    return float(np.finfo(dtype).eps) / 2


def rounding_bound(dtype, scale: float, terms: int, depth: int = 1, angle: float = 0.0) -> float:
    """The largest difference two computations in `dtype` of values of size `scale` should show, when each value is
    made by `depth` chained stages of sums of up to `terms` terms, rotated by angles up to `angle` radians (see the
    module docstring)."""
    return 2 * depth * float(scale) * unit_roundoff(dtype) * (LAM * float(np.sqrt(terms)) + angle)


def widest_sum(config) -> int:
    """The longest sum a forward pass of `config` makes: its widest matrix product's inner dimension."""
    return max(config.d_model, config.d_ff, getattr(config, "moe_d_ff", 0), config.n_heads * config.head_dim)


def logits_bound(config, reference: np.ndarray, positions: int | None = None, dtype=np.float32) -> float:
    """The bound for two computations in `dtype` of a model's logits over `positions` positions (default: the rows of
    `reference`, one of the two): its layers and output head are the stages, its widest product or attention span
    the terms, its last position the largest rotary angle, its largest logit the scale."""
    reference = np.asarray(reference, dtype=np.float64)
    positions = reference.shape[0] if positions is None else positions
    angle = positions - 1 if getattr(config, "position", "rope") == "rope" else 0
    terms = max(widest_sum(config), positions)
    return rounding_bound(dtype, np.abs(reference).max(), terms, config.n_layers + 1, angle)


def assert_close(actual, expected, bound: float) -> None:
    """`actual` equals `expected` within `bound` (absolute), recording the observed difference when measuring."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    log = os.environ.get("TINYINFER_TOLERANCE_LOG")
    if log and actual.shape == expected.shape:
        observed = float(np.abs(actual.astype(np.float64) - expected.astype(np.float64)).max())
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").removesuffix(" (call)")
        with open(log, "a") as file:
            file.write(json.dumps({"test": test, "observed": observed, "bound": bound}) + "\n")
    np.testing.assert_allclose(actual, expected, rtol=0, atol=bound)


def report(logs: list[str]) -> None:
    """Print each test's bound / largest observed difference, the smallest and largest over the logs (one a BLAS
    kernel), and flag a ratio outside [2, 100]: a bound closer than 2x to what a correct run shows, or looser than
    100x. Where a kernel gives bit-identical results (observed 0) the ratio is infinite; the test counts as exact."""
    ratios: dict[str, list[float]] = {}
    for log in logs:
        closest: dict[str, float] = {}
        with open(log) as file:
            for line in file:
                entry = json.loads(line)
                ratio = entry["bound"] / entry["observed"] if entry["observed"] else float("inf")
                closest[entry["test"]] = min(ratio, closest.get(entry["test"], float("inf")))
        for test, ratio in closest.items():
            ratios.setdefault(test, []).append(ratio)
    for test, values in sorted(ratios.items(), key=lambda item: min(item[1])):
        finite = [v for v in values if v < float("inf")] or [float("inf")]
        flag = "" if 2 <= min(finite) and max(finite) <= 100 else "  <-- outside [2, 100]"
        exact = f" (exact on {len(values) - len(finite)} of {len(values)})" if len(finite) < len(values) else ""
        print(f"{min(finite):7.1f} {max(finite):7.1f}  {test}{exact}{flag}")


if __name__ == "__main__":
    import sys

    report(sys.argv[1:])  # python tests/tolerances.py LOG...  (logs written with TINYINFER_TOLERANCE_LOG)
