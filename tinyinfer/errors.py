"""The one exception type users see.

Every error caused by what a user passed (a path, a config, a sampling value, a schema) is a
`TinyInferError` whose message names the problem and the fix. The CLI prints it on one line and exits
non-zero; anything else escaping is a bug in tinyinfer.
"""


class TinyInferError(Exception):
    """A user-facing error: the message says what is wrong and how to fix it."""
