"""The one exception type users see.

Every error caused by what a user passed (a path, a config, a sampling value, a schema) is a
`TinyInferError` whose message names the problem and the fix. The CLI prints it on one line and exits
non-zero; anything else escaping is a bug in tinyinfer.
"""


from numbers import Integral


class TinyInferError(Exception):
    """A user-facing error: the message says what is wrong and how to fix it."""


def is_integer_at_least(value, low: int = 1) -> bool:
    """Whether `value` is an integer (Python's or NumPy's) >= low. A bool is not: True would pass for 1.

    >>> is_integer_at_least(3), is_integer_at_least(True), is_integer_at_least(2.0), is_integer_at_least(0, low=0)
    (True, False, False, True)
    """
    return isinstance(value, Integral) and not isinstance(value, bool) and value >= low
