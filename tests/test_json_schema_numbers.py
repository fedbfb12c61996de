"""Number automata (number_dfa.py) against brute force, and the schemas they make exact: multipleOf with any
bounds, decimal steps as float-dividing validators decide them, and `not multipleOf`."""

from __future__ import annotations

import json
import random
from fractions import Fraction

import jsonschema
import pytest

from tests.test_json_schema_logic import agrees, holds
from tinyinfer.constrain.number_dfa import bound_dfa, decimal_steps, multiples_dfa
from tinyinfer.constrain.regex_dfa import accepts, intersect, minimize
from tinyinfer.errors import TinyInferError


def number_texts(n: int, seed: int = 0) -> list[str]:
    """Random JSON number texts (no exponent): small and large integers, short and long fractions."""
    rng = random.Random(seed)
    texts = ["0", "-0", "0.0", "-0.5", "0.25", "0.07", "1.750", "10", "-10", "100000", "-100000", "-100000.5"]
    for _ in range(n):
        whole = str(rng.randint(0, 3000) if rng.random() < 0.8 else rng.randint(0, 10**16))
        text = ("-" if rng.random() < 0.5 else "") + whole
        if rng.random() < 0.5:
            text += "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 4)))
        texts.append(text)
    return texts


TEXTS = number_texts(2000)


@pytest.mark.parametrize("limit", [Fraction(0), Fraction(5), Fraction(-5), Fraction(-100000), Fraction(1, 2),
                                   Fraction(-7, 4), Fraction(99999999999.99)])
def test_bound_automata_agree_with_exact_comparison(limit):
    for open_ in (False, True):
        for upper in (False, True):
            automaton = minimize(bound_dfa(limit, open_, upper))
            for text in TEXTS:
                value = Fraction(text)
                expected = (value < limit if open_ else value <= limit) if upper else (
                    value > limit if open_ else value >= limit)
                assert accepts(automaton, text) == expected, (limit, open_, upper, text)


@pytest.mark.parametrize("steps, not_steps, integer", [
    ([3], [], True), ([5, 7], [2], True), ([], [429, 6], True), ([13.5], [], True),
    ([0.01], [], False), ([2.5], [], False), ([0.1], [], False), ([0.01, 3], [], False), ([0.05], [4], False),
])
def test_multiples_are_exact_and_valid_for_float_dividing_validators(steps, not_steps, integer):
    """Everything accepted is a multiple (exact decimals) and valid for jsonschema (float division); every
    integer multiple in range is accepted, and with decimal steps every multiple of the binary lattice."""
    divisible, magnitude = decimal_steps(steps, not_steps, integer)
    automaton = minimize(multiples_dfa(divisible))
    check = jsonschema.Draft7Validator({"allOf": [{"multipleOf": s} for s in steps] +
                                        [{"not": {"multipleOf": s}} for s in not_steps]})
    lattice = [Fraction(repr(s)) if isinstance(s, float) else Fraction(s) for s in steps]
    accepted = 0
    for text in TEXTS + [str(n) for n in range(-3000, 3000)]:
        value = Fraction(text)
        exact = all((value / s).denominator == 1 for s in lattice) and all(
            (value / s).denominator != 1 for s in not_steps)
        if accepts(automaton, text):
            accepted += 1
            assert exact and not (integer and "." in text), (steps, not_steps, text)
            if magnitude is None or abs(value) < magnitude:
                assert check.is_valid(json.loads(text)), (steps, not_steps, text)
        elif "." not in text and not any(isinstance(s, float) for s in steps):
            assert not exact, (steps, not_steps, text)  # integer steps: every integer multiple is there
        elif all((value / s).denominator == 1 for s in divisible.multiples) and exact and "." not in text:
            raise AssertionError((steps, text))  # a lattice point left out
    assert accepted > 20


def test_decimal_steps_too_far_from_their_double_are_refused():
    with pytest.raises(ValueError, match="multipleOf 0.7"):
        decimal_steps([0.7], [], False)
    with pytest.raises(ValueError, match="only integer steps"):
        decimal_steps([], [0.5], False)


def test_multiple_of_with_bounds_and_complements():
    holds({"type": "integer", "multipleOf": 7, "exclusiveMaximum": -100, "minimum": -200},
          [-105, -196, -140], [-98, -203, -100, -106, 7, 0])
    holds({"type": "integer", "not": {"multipleOf": 3}, "minimum": -5, "maximum": 5},
          [-5, -4, -2, -1, 1, 2, 4, 5], [-3, 0, 3, 6])
    holds({"type": "number", "allOf": [{"multipleOf": 4}, {"multipleOf": 6}], "not": {"multipleOf": 36}},
          [12, -24, 48, 60], [36, 0, 6, 8, 1.5])
    holds({"type": "integer", "if": {"multipleOf": 2}, "then": {"minimum": 0}, "else": {"maximum": 0}},
          [0, 2, 10, -1, -7], [-2, 3])
    holds({"type": "number", "minimum": 1, "anyOf": [{"multipleOf": 5}, {"multipleOf": 10}],
           "allOf": [{"anyOf": [{"not": {"multipleOf": 5}}, {"multipleOf": 7}]}]}, [35, 70, 700], [5, 10, 7, -35])


def test_decimal_multiple_of_and_bounds_that_are_not_integers():
    """multipleOf 0.01 up to 99999999999.99: the grammar writes multiples of 0.25, which float division
    decides exactly (0.07 / 0.01 != 7 in floats, so jsonschema rejects 0.07)."""
    schema = {"type": "number", "multipleOf": 0.01, "minimum": 0, "maximum": 99999999999.99}
    holds(schema, [0, 0.25, 12.5, 99999999999.75, 3], [-0.25, 0.07, 100000000000])
    holds({"type": "number", "minimum": 0.5, "exclusiveMaximum": 2.25}, [0.5, 1, 2.2, 2.249], [0.49, 2.25, 3, -1])
    holds({"type": "integer", "multipleOf": 13.5, "exclusiveMinimum": -1000, "exclusiveMaximum": -100},
          [-135, -270, -972], [-100, -1080, 27, -13])
    with pytest.raises(TinyInferError, match="#/properties/x: multipleOf 0.7"):
        from tinyinfer.constrain.json_schema import schema_to_grammar
        schema_to_grammar({"properties": {"x": {"type": "number", "multipleOf": 0.7}}})


def test_multiples_within_bounds_build_only_the_residues_the_texts_reach():
    """The moduli multiply (27 * 2 * 5 * 7 * 11 * 13 * 37 = 10 million residues), but between -1000 and -100
    only a few hundred texts exist; the product never builds the rest. It agrees with the table of
    all residues (a smaller modulus) intersected afterwards."""
    within = minimize(intersect(minimize(bound_dfa(Fraction(-1000), True, upper=False)),
                                minimize(bound_dfa(Fraction(-100), True, upper=True))))
    divisible, _ = decimal_steps([27], [2, 5, 7, 11, 13, 37], True)
    automaton = multiples_dfa(divisible, within)
    assert automaton.n_states < 3000
    for n in range(-1100, 100):
        expected = -1000 < n < -100 and n % 27 == 0 and all(n % k for k in (2, 5, 7, 11, 13, 37))
        assert accepts(automaton, str(n)) == expected, n
    divisible, _ = decimal_steps([2.5, 7], [4], False)
    bounded, separate = minimize(multiples_dfa(divisible, within)), minimize(intersect(multiples_dfa(divisible), within))
    for text in TEXTS + [f"-{n}.5" for n in range(100, 1000)] + [str(n) for n in range(-1000, -100)]:
        assert accepts(bounded, text) == accepts(separate, text), text


def test_long_divisibility_automata_agree_with_jsonschema():
    """A multiple of 4004 but not of 429 below -100000: the residues modulo 12012 minimize to about three
    thousand states (more than the old cap of 4000 before minimizing)."""
    schema = {"type": "integer", "multipleOf": 4004, "not": {"multipleOf": 429}, "exclusiveMaximum": -100000}
    rng = random.Random(0)
    values = [-4004 * k for k in range(1, 200)] + [-4004 * rng.randint(1, 10**9) for _ in range(300)]
    agrees(schema, values + [-12012 * k for k in range(1, 50)] + [n - 1 for n in values[:100]] + [4004, 0])
