"""Numbers as deterministic automata over their JSON text: multipleOf, `not multipleOf`, decimal bounds.

Digit patterns say "an integer from 13 to 271"; they cannot say "a multiple of 7 below -100000", "a multiple
of 0.01 up to 99999999999.99" or "not a multiple of 429". All of these are *regular* over the text, because
reading a decimal number digit by digit needs only a little memory:

- divisibility: the digits so far modulo the step, as in long division: r -> (10 r + d) mod k;
- a bound: whether the digits so far are below, equal to, or above the bound's digits.

Each constraint is one small automaton over the texts `-?(0|[1-9][0-9]*)(\\.[0-9]+)?` (no exponent: the
grammar writes a subset of the valid numbers, never an invalid one); the compiler intersects them
(regex_dfa.py) and minimizes.

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

from tinyinfer.constrain.regex_dfa import Dfa, explore

DIGITS = "0123456789"
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


def _number_dfa(start, on_digit, accept, fractions: bool, within: Dfa | None = None) -> Dfa:
    """An automaton over number texts carrying a payload: `on_digit(payload, in_fraction, d)` gives the next
    payload for a digit d, or None to refuse it; `accept(negative, payload)` decides at the end.
    Without `fractions`, integer texts only. With `within` (a minimized automaton, e.g. of the bounds), only
    texts it accepts: the two run side by side, so payloads beyond its reach are never built."""

    def step(state, ch):
        at, *rest = state
        if within is None:
            nxt = syntax(rest, ch)
            return None if nxt is None else (None, *nxt)
        target = next((t for lo, hi, t in within.edges[at] if lo <= ord(ch) <= hi), None)
        nxt = None if target is None else syntax(rest, ch)
        return None if nxt is None else (target, *nxt)

    def syntax(state, ch):
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
        at, negative, phase, payload = state
        return (within is None or within.accepting[at]) and phase in ("zero", "int", "frac") and accept(negative, payload)

    return explore((0, False, "start", start), step, is_accepting, "-." + DIGITS)


def multiples_dfa(steps: NumberSteps, within: Dfa | None = None) -> Dfa:
    """Numbers that are multiples of every step in `steps.multiples` and of none in `steps.not_multiples`
    (and accepted by `within`, a minimized automaton such as the bounds').

    With E = fraction_digits, the text's value times 10**E is an integer M (digits after the E-th fraction
    digit must be 0); M is a multiple of s * 10**E exactly when it is one of that fraction's numerator, and
    the state is M's prefix modulo the lcm of those integers."""
    e = steps.fraction_digits
    if e is None:  # no steps: the syntax alone
        return _number_dfa(0, lambda state, in_fraction, d: 0, lambda negative, state: True, True, within)
    ints = [(s * 10**e).numerator for s in steps.multiples + steps.not_multiples]
    modulus = math.lcm(*ints) if ints else 1
    wanted, unwanted = ints[: len(steps.multiples)], ints[len(steps.multiples) :]

    def on_digit(state, in_fraction, d):
        r, read = state  # read: fraction digits so far, up to e
        if in_fraction and read == e:
            return state if d == 0 else None
        return (10 * r + d) % modulus, read + in_fraction

    def accept(negative, state):
        r, read = state
        r = r * 10 ** (e - read) % modulus
        return all(r % k == 0 for k in wanted) and all(r % k for k in unwanted)

    return _number_dfa((0, 0), on_digit, accept, e > 0, within)


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
