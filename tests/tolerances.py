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
   where scale is the size of the values summed to. lam = 6 (probability 1 - 3e-8 per value) leaves room for the
   ~1e5 values a test compares at once. n is the longest sum on the way (the widest contraction: d_model, d_ff,
   an expert's width, or the attention's span of positions).
3. A rotary angle. RoPE turns q and k by position * frequency (frequency <= 1), rounded once: an error of up to
   u * position radians, which moves the rotated vector by that fraction of its length. It counts only when the
   two computations form their angles each their own way (tinyinfer and transformers); two paths through
   tinyinfer's code read the same angles. Learned positions add nothing.
4. A network of `depth` such stages: each layer, then the output head; a Mixture-of-Experts layer chains one
   more (its router's product and softmax weigh the experts' outputs). The norms keep errors relative, and the
   stages' errors are independent, so they add like the terms of step 2: sqrt(depth).
5. Two computations. The two results being compared (two summation orders: one token against many, tinyinfer
   against transformers, 2 shards against 1) each carry such an error: their difference is within twice it.

    rounding_bound(dtype, scale, terms, depth, angle) = 2 sqrt(depth) scale u(dtype) (lam sqrt(terms) + angle)

Worked example: llama_gqa's float32 logits of a 20-token prompt (scale 8.5, d_ff 96, 2 layers) give, for the
cached path against the full recompute, 2 * sqrt(3) * 8.5 * 5.96e-8 * (6 * 9.8) = 1.0e-4; observed: 4.5e-6 to
1.8e-5 under four OpenBLAS kernels here, 4.5e-5 on another machine; a position bug moves logits by ~0.1. Against
transformers (angles up to 19 radians) it is 1.4e-4. In float64 the same bounds are 1.9e-13 and 2.5e-13.

Measuring: with TINYINFER_TOLERANCE_LOG=FILE set, `assert_close` appends each check's observed difference and
bound to FILE (one JSON object a line), so the ratio bound / observed can be read off for several BLAS kernels
(e.g. OPENBLAS_CORETYPE=Haswell, Sandybridge, Prescott, set for the measuring run only).
"""

from __future__ import annotations

import json
import os

import numpy as np

LAM = 6.0  # standard deviations of the random-walk rounding error that a bound allows (step 2)
_INPUTS: dict = {}  # the last bound's inputs, logged beside it when measuring


def unit_roundoff(dtype) -> float:
    """u = eps / 2 of a float dtype: the largest relative error of one rounding."""
    return float(np.finfo(dtype).eps) / 2


def rounding_bound(dtype, scale: float, terms: int, depth: int = 1, angle: float = 0.0) -> float:
    """The largest difference two computations in `dtype` of values of size `scale` should show, when each value is
    made by `depth` chained stages of sums of up to `terms` terms, rotated by angles up to `angle` radians (see the
    module docstring)."""
    _INPUTS.update(u=unit_roundoff(dtype), scale=float(scale), terms=terms, depth=depth, angle=angle)
    return 2 * float(np.sqrt(depth)) * float(scale) * unit_roundoff(dtype) * (LAM * float(np.sqrt(terms)) + angle)


def widest_sum(config) -> int:
    """The longest sum a forward pass of `config` makes: its widest matrix product's inner dimension."""
    return max(config.d_model, config.d_ff, getattr(config, "moe_d_ff", 0), config.n_heads * config.head_dim)


def logits_bound(config, reference: np.ndarray, positions: int | None = None, dtype=np.float32,
                 own_angles: bool = True) -> float:
    """The bound for two computations in `dtype` of a model's logits over `positions` positions (default: the rows of
    `reference`, one of the two): its layers (two stages for a MoE layer) and output head are the stages, its
    widest product or attention span the terms, its largest logit the scale, and when the two form their rotary
    angles each their own way (`own_angles`: tinyinfer against transformers, or one device against another), its
    last position the largest angle error."""
    reference = np.asarray(reference, dtype=np.float64)
    positions = reference.shape[0] if positions is None else positions
    rotary = own_angles and getattr(config, "position", "rope") == "rope"
    terms = max(widest_sum(config), positions)
    depth = config.n_layers + moe_layers(config) + 1
    return rounding_bound(dtype, np.abs(reference).max(), terms, depth, positions - 1 if rotary else 0)


def moe_layers(config) -> int:
    """How many of `config`'s layers route each token to experts."""
    if not getattr(config, "n_experts", 0):
        return 0
    return config.n_layers if config.moe_layers is None else len(config.moe_layers)


def assert_close(actual, expected, bound: float) -> None:
    """`actual` equals `expected` within `bound` (absolute), recording the observed difference when measuring."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    log = os.environ.get("TINYINFER_TOLERANCE_LOG")
    if log and actual.shape == expected.shape:
        observed = float(np.abs(actual.astype(np.float64) - expected.astype(np.float64)).max())
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").removesuffix(" (call)")
        with open(log, "a") as file:
            file.write(json.dumps({"test": test, "observed": observed, "bound": bound, **_INPUTS}) + "\n")
        _INPUTS.clear()
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
    for test, values in sorted(ratios.items(), key=lambda item: (min(item[1]), item[0])):
        finite = [v for v in values if v < float("inf")]
        exact = f" (exact on {len(values) - len(finite)} of {len(values)})" if len(finite) < len(values) else ""
        if not finite:
            print(f"  exact   exact  {test}")
            continue
        flag = "" if 2 <= min(finite) and max(finite) <= 100 else "  <-- outside [2, 100]"
        print(f"{min(finite):7.1f} {max(finite):7.1f}  {test}{exact}{flag}")


if __name__ == "__main__":
    import sys

    report(sys.argv[1:])  # python tests/tolerances.py LOG...  (logs written with TINYINFER_TOLERANCE_LOG)
