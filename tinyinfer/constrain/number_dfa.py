"""Numbers as deterministic automata over their JSON text: multipleOf, `not multipleOf`, decimal bounds.

Digit patterns say "an integer from 13 to 271"; they cannot say "a multiple of 7 below -100000", "a multiple
of 0.01 up to 99999999999.99" or "not a multiple of 429". All of these are *regular* over the text, because
reading a decimal number digit by digit needs only a little memory:

- divisibility: the digits so far modulo the step, as in long division: r -> (10 r + d) mod k;
- a bound: whether the digits so far are below, equal to, or above the bound's digits.

Each constraint is one small automaton over the texts `-?(0|[1-9][0-9]*)(\\.[0-9]+)?` (no exponent: the
grammar writes a subset of the valid numbers, never an invalid one). The compiler intersects the bounds'
automata (regex_dfa.py), then builds divisibility *within* them: the residues are states numbered by
arithmetic (`Residues`), stepped for a whole breadth-first frontier at once, and only the (residue, bound)
pairs some text reaches exist. "A multiple of 4004 but not of 429, below -100000" reaches 34,000 pairs and
minimizes to about 3,000 states; "a multiple of 27 and of none of 2, 5, 7, 11, 13, 37, between -1000 and
-100" has ten million residues but reaches a few hundred.

    multiples_dfa(NumberSteps([3], [], 0))           accepts "0", "-12", "300"; not "7", "1.5"
    multiples_dfa(NumberSteps([Fraction(1, 4)], [], 2)) accepts "0.25", "-3.5", "7", "1.750"; not "0.1"
    bound_dfa(Fraction(-100000), True, upper=True)   accepts "-100001", "-100000.5"; not "-100000", "3"

Decimal steps and binary floating point. The jsonschema package decides `multipleOf: 0.01` by float division:
`0.07 / 0.01 == 7.000000000000001`, so it rejects 0.07. `decimal_steps` keeps the numbers on which exact
decimal arithmetic and float arithmetic agree: multiples of the step that are also exact binary fractions
(for 0.01: multiples of 0.25), small enough that the quotient is an exact float integer. A step whose float
is so far from its decimal that even those quotients may round off is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from tinyinfer.constrain.regex_dfa import (
    MAX_STATES,
    SURROGATES,
    Dfa,
    check_size,
    explore,
    intersect,
    product,
)

DIGITS = "0123456789"
# The columns of a number automaton's table: "-", ".", each digit, and the characters between them.
NUMBER_CUTS = np.array(sorted({0, ord("-"), ord("-") + 1, ord("."), ord(".") + 1, *range(ord("0"), ord("9") + 2),
                               *SURROGATES}), dtype=np.int64)
MINUS, POINT = int(np.searchsorted(NUMBER_CUTS, ord("-"))), int(np.searchsorted(NUMBER_CUTS, ord(".")))
DIGIT = [int(np.searchsorted(NUMBER_CUTS, ord(str(d)))) for d in range(10)]
FLOAT_BITS = 53  # significand bits of a double


@dataclass(frozen=True)
class NumberSteps:
    """What divisibility asks of a number: a multiple of every `multiples` step, of no `not_multiples`
    step, with at most `fraction_digits` significant digits after the point (0: integers only; None: no
    steps, any fraction)."""

    multiples: list
    not_multiples: list
    fraction_digits: int


def decimal_steps(steps: list, not_steps: list, integer: bool) -> tuple[NumberSteps, Fraction | None]:
    """The automaton's steps for the schema's `multipleOf` values (JSON numbers: int or float), and a
    magnitude bound (exclusive) the numbers must stay under, or None. Raises ValueError naming a step
    that float arithmetic makes inexact.

        decimal_steps([0.01], [], integer=False) -> (NumberSteps([Fraction(1, 4)], [], 2), 2**53 / 100)"""
    lattice, bound = [], None
    for step in steps:
        if isinstance(step, int):
            lattice.append(Fraction(step))
            continue
        exact = Fraction(repr(step))  # the decimal the schema wrote; `step` is its nearest double
        drift = abs(exact / Fraction(step) - 1)  # value / float(step) = quotient * (1 + drift) at most
        if drift >= Fraction(1, 2 ** (FLOAT_BITS + 1)):  # then an integer quotient may round to its neighbour
            raise ValueError(f"multipleOf {step}: its nearest double is too far from {step} for float division")
        twos = _power_of(exact.denominator, 2)
        lattice.append(Fraction(exact.numerator, 2**twos))  # the multiples that are exact binary fractions
        limit = min(Fraction(2**FLOAT_BITS, 2**twos), 2**FLOAT_BITS * exact)  # exact value and exact quotient
        bound = limit if bound is None else min(bound, limit)
    decimal_not_steps = [step for step in not_steps if not isinstance(step, int)]
    if decimal_not_steps:
        raise ValueError(f"not multipleOf {decimal_not_steps[0]}: only integer steps can be excluded exactly")
    if integer or not_steps or steps:  # integer steps: integer texts (the float of 1e30 is inexact)
        digits = 0 if integer else max(_power_of(s.denominator, 2) for s in lattice) if lattice else 0
    else:
        digits = None  # no steps: any fraction
    return NumberSteps(lattice, [Fraction(s) for s in not_steps], digits), bound


def _power_of(n: int, p: int) -> int:
    """How many times p divides n: _power_of(100, 2) -> 2."""
    count = 0
    while n % p == 0:
        n, count = n // p, count + 1
    return count


def _number_dfa(start, on_digit, accept, fractions: bool) -> Dfa:
    """An automaton over number texts carrying a payload: `on_digit(payload, in_fraction, d)` gives the next
    payload for a digit d, or None to refuse it; `accept(negative, payload)` decides at the end.
    Without `fractions`, integer texts only."""

    def step(state, ch):
        negative, phase, payload = state
        if ch == "-":
            return (True, "sign", payload) if phase == "start" else None
        if ch == ".":
            return (negative, "dot", payload) if phase in ("zero", "int") and fractions else None
        if phase == "zero":  # no leading zeros
            return None
        nxt = on_digit(payload, phase in ("dot", "frac"), int(ch))
        if nxt is None:
            return None
        if phase in ("start", "sign"):
            return negative, "zero" if ch == "0" else "int", nxt
        return negative, "frac" if phase == "dot" else phase, nxt

    def is_accepting(state):
        negative, phase, payload = state
        return phase in ("zero", "int", "frac") and accept(negative, payload)

    return explore((False, "start", start), step, is_accepting, "-." + DIGITS)


def multiples_dfa(steps: NumberSteps, within: Dfa | None = None) -> Dfa:
    """Numbers that are multiples of every step in `steps.multiples` and of none in `steps.not_multiples`,
    and accepted by `within` (a minimized automaton such as the bounds'), if given.

    With E = fraction_digits, the text's value times 10**E is an integer M (digits after the E-th fraction
    digit must be 0); M is a multiple of s * 10**E exactly when it is one of that fraction's numerator, and
    the state is M's prefix modulo the lcm of those integers (`Residues`). Within bounds, only the
    (residue, bound state) pairs the texts reach are built: a range of a few hundred numbers needs a few
    hundred states, whatever the modulus."""
    if steps.fraction_digits is None:  # no steps: the syntax alone
        syntax = _number_dfa(0, lambda state, in_fraction, d: 0, lambda negative, state: True, True)
        return syntax if within is None else intersect(syntax, within)
    residues = Residues(steps)
    if within is not None:
        return product(NUMBER_CUTS, residues.step, residues.accept, within)
    check_size(residues.n_states)
    every = np.arange(residues.n_states)
    return Dfa.from_table(NUMBER_CUTS, residues.step(every), residues.accept(every))


class Residues:
    """The divisibility automaton over number texts, its states numbered by arithmetic (K: the modulus,
    E: fraction digits; the sign changes no divisibility, so it is read and forgotten):

        0 start, 1 after "-", 2 the integer part "0",
        3 + r                      an integer part with residue r (no leading zero)
        3 + K + r                  after "." with residue r
        3 + 2K + K * (k - 1) + r   k of E fraction digits read, residue r (past E: zeros only)

    so that `step` and `accept` work on arrays of states at once, for the whole table or a product's
    frontier."""

    def __init__(self, steps: NumberSteps):
        self.e = e = steps.fraction_digits
        ints = [(s * 10**e).numerator for s in steps.multiples + steps.not_multiples]
        self.k = math.lcm(*ints) if ints else 1
        self.wanted, self.unwanted = ints[: len(steps.multiples)], ints[len(steps.multiples) :]
        self.n_states = 3 + self.k * (1 + (e > 0) + e)
        if self.n_states * (MAX_STATES + 1) >= 2**63:  # state numbers and product pair codes stay in int64
            raise ValueError(f"multipleOf: the steps' common multiple {self.k} is too large for an automaton")

    def decode(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(phase, residue): phase -3/-2/-1 for start/sign/zero, 0 integer part, k after k fraction digits
        (0.5 marks the "." before any)."""
        inner = states - 3
        phase = np.where(states < 3, states - 3, np.where(inner < self.k, 0, inner // self.k - 1)).astype(float)
        phase[(inner >= self.k) & (inner < 2 * self.k)] = 0.5
        return phase, np.where(states < 3, 0, inner % self.k)

    def state(self, phase, residue):
        """The inverse of decode for phases 0 (integer part) and k >= 1 (fraction digits)."""
        phase = np.asarray(phase, dtype=np.int64)
        return np.where(phase == 0, 3 + residue, 3 + 2 * self.k + self.k * (phase - 1) + residue)

    def step(self, states: np.ndarray) -> np.ndarray:
        """[F] -> [F, C] targets on NUMBER_CUTS (-1: none)."""
        phase, r = self.decode(states)
        out = np.full((states.size, NUMBER_CUTS.size), -1, dtype=np.int64)
        out[states == 0, MINUS] = 1
        if self.e:
            out[(phase == -1) | (phase == 0), POINT] = 3 + self.k + r[(phase == -1) | (phase == 0)]
        for d in range(10):
            shifted = (10 * r + d) % self.k
            starts = phase < -1  # start or sign: a first digit
            out[starts, DIGIT[d]] = 2 if d == 0 else 3 + d % self.k
            integer = phase == 0
            out[integer, DIGIT[d]] = self.state(0, shifted[integer])
            more = (phase == 0.5) | ((phase >= 1) & (phase < self.e))  # a fraction digit that counts
            out[more, DIGIT[d]] = self.state(np.floor(phase[more]) + 1, shifted[more])
        full = phase == self.e if self.e else np.zeros(states.size, dtype=bool)
        out[full, DIGIT[0]] = states[full]  # digits past the E-th: zeros only
        return out

    def accept(self, states: np.ndarray) -> np.ndarray:
        """[F] bool: a complete number whose value is divisible as asked."""
        phase, r = self.decode(states)
        read = np.where(phase == -1, self.e, np.where(phase >= 1, phase, 0)).astype(np.int64)
        scale = np.array([pow(10, self.e - n, self.k) for n in range(self.e + 1)], dtype=object)[read]
        value = r.astype(object) * scale % self.k  # M's residue (missing fraction digits are zeros), exactly
        ok = (phase == -1) | (phase == 0) | (phase >= 1)
        for k in self.wanted:
            ok &= value % k == 0
        for k in self.unwanted:
            ok &= value % k != 0
        return ok


def bound_dfa(limit: Fraction, open_: bool, upper: bool) -> Dfa:
    """Numbers x >= limit (x > limit when open_; with upper: x <= limit, x < limit).

    The payload compares the magnitude's digits with |limit|'s: n integer digits so far (capped one past
    the bound's), cmp = -1/0/1 for below/equal/above so far; in the fraction, the position j (capped).
    A negative text turns the question around: -y >= L is y <= -L."""
    whole, fraction = _decimal_digits(abs(limit))
    zero_limit = limit == 0

    def on_digit(state, in_fraction, d):
        n, cmp, j = state
        if not in_fraction:  # compare digit n+1 with the bound's, while the lengths may still agree
            if n < len(whole) and cmp == 0:
                cmp = (d > int(whole[n])) - (d < int(whole[n]))
            return min(n + 1, len(whole) + 1), cmp, j
        if j == 0:  # the first fraction digit settles the integer parts
            cmp = _settle(n, cmp, len(whole))
        bound_digit = int(fraction[j]) if j < len(fraction) else 0
        if cmp == 0:
            cmp = (d > bound_digit) - (d < bound_digit)
        return n, cmp, min(j + 1, len(fraction))

    def accept(negative, state):
        n, cmp, j = state
        cmp = _settle(n, cmp, len(whole)) if j == 0 else cmp
        if cmp == 0 and j < len(fraction):  # the bound has nonzero digits left
            cmp = -1
        if cmp == 0 and zero_limit:  # x is zero: its sign does not matter
            negative = False
        versus = (1 if cmp >= 0 else -1) * (-1 if negative else 1) if cmp else 0  # sign(x - L) when signs agree
        if negative != (limit < 0):  # signs differ: x - L has x's sign (unless x = L = 0, handled above)
            versus = -1 if negative else 1
        if upper:
            versus = -versus
        return versus > 0 or (versus == 0 and not open_)

    return _number_dfa((0, 0, 0), on_digit, accept, True)


def _settle(n: int, cmp: int, length: int) -> int:
    """Compare integer parts once all digits are read: a longer one is larger (no leading zeros)."""
    return 1 if n > length else -1 if n < length else cmp


def _decimal_digits(value: Fraction) -> tuple[str, str]:
    """(integer digits, fraction digits without trailing zeros) of a terminating decimal: 12.5 -> ("12", "5")."""
    twos, fives = _power_of(value.denominator, 2), _power_of(value.denominator, 5)
    if value.denominator != 2**twos * 5**fives:
        raise ValueError(f"{value} is not a terminating decimal")
    places = max(twos, fives)
    digits = str(value.numerator * 10**places // value.denominator).rjust(places + 1, "0")
    whole, fraction = digits[: len(digits) - places], digits[len(digits) - places :]
    return whole, fraction.rstrip("0")
