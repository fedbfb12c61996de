"""Structured output: grammars, token masks, JSON Schema, regex, choices and tool calls.

(The factory `build_constraint` and the full map of this package are documented below once they land.)
"""
