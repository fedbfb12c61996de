"""One module per CLI subcommand: each has add_arguments(parser) and run(args).

The argument types below check a flag's range where the flag is declared, so a bad value is refused by
argparse before any work, in one line (`error: tinyinfer bench serve: argument --rate: ...`):

    parser.add_argument("--requests", type=at_least(1), default=128)
    parser.add_argument("--rate", type=positive_number, default=100.0)
"""

from __future__ import annotations

import argparse
import math


def at_least(low: int):
    """An argparse type: an integer >= low.

    >>> at_least(1)("3")
    3
    >>> at_least(1)("0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: '0' must be an integer >= 1
    """

    def integer(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer: give an integer >= {low}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r} must be an integer >= {low}")
        return value

    integer.__name__ = f"integer >= {low}"  # argparse names the type in some messages
    return integer


def positive_number(text: str) -> float:
    """An argparse type: a finite number > 0 (`1e9` and `3000` both work).

    >>> positive_number("2.5e3")
    2500.0
    >>> positive_number("nan")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: 'nan' must be a finite number > 0
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number: give a finite number > 0") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number > 0")
    return value
