"""Tool calling: constrain a reply to a call of one of the offered tools, and read the call back.

Tools come in the OpenAI format:

    tools = [{"type": "function", "function": {"name": "get_weather", "description": "...",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"]}}}]

The call grammar is the JSON Schema `anyOf` of one object per tool, `{"name": <its name>, "arguments":
<its parameters>}`, so the name picks the branch and the arguments follow that tool's schema:

    tool_call_grammar(tools)   derives  {"name":"get_weather","arguments":{"city":"Paris"}}
    parse_tool_calls('{"name":"get_weather","arguments":{"city":"Paris"}}', tools)
    -> ("", [{"id": "call_0", "type": "function",
              "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}])

With `allow_text=True` the model may instead answer in plain text (any reply that does not start with `{`).
With `parallel=True` (OpenAI's `parallel_tool_calls`) it may also make several calls at once, as a JSON array
of calls, `[{"name":...,"arguments":...},{"name":...,"arguments":...}]`.
"""

from __future__ import annotations

import json

from tinyinfer.constrain.grammar import (
    ANY_CHAR,
    EMPTY,
    CharClass,
    Grammar,
    Ref,
    Repeat,
    alt,
    seq,
)
from tinyinfer.constrain.json_schema import schema_to_grammar
from tinyinfer.errors import TinyInferError

EMPTY_PARAMETERS = {"type": "object", "properties": {}}


def tool_functions(tools: list[dict]) -> dict[str, dict]:
    """name -> parameters schema, from OpenAI-style tools (or bare {"name", "parameters"} entries)."""
    functions: dict[str, dict] = {}
    for i, tool in enumerate(tools):
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise TinyInferError(f"tool {i} has no name; write {{'type': 'function', 'function': {{'name': ...}}}}")
        if function["name"] in functions:
            raise TinyInferError(f"two tools are named {function['name']!r}; tool names must be unique")
        functions[function["name"]] = function.get("parameters", EMPTY_PARAMETERS)
    if not functions:
        raise TinyInferError("no tools given; pass at least one tool to constrain a tool call")
    return functions


def tool_call_schema(tools: list[dict], parallel: bool = False) -> dict:
    """The JSON Schema of one call: {"name": one of the tools, "arguments": that tool's parameters}; with
    `parallel` (OpenAI's parallel_tool_calls), of one call or a non-empty array of calls."""
    branches = [{"type": "object", "properties": {"name": {"const": name}, "arguments": parameters},
                 "required": ["name", "arguments"], "additionalProperties": False}
                for name, parameters in tool_functions(tools).items()]
    call = branches[0] if len(branches) == 1 else {"anyOf": branches}
    return {"anyOf": [call, {"type": "array", "items": call, "minItems": 1}]} if parallel else call


def tool_call_grammar(tools: list[dict], allow_text: bool = False, parallel: bool = False) -> Grammar:
    """Grammar of a tool call (with `parallel`, or of an array of calls), or (allow_text) of that or a
    plain-text reply, which then cannot start like a call: with '{' (or, with `parallel`, '[')."""
    grammar = schema_to_grammar(tool_call_schema(tools, parallel), strict=True)  # no argument a tool does not declare
    if allow_text:
        grammar.rules["tool-call"] = grammar.rules["root"]
        openers = ((ord("{"), ord("{")), (ord("["), ord("["))) if parallel else ((ord("{"), ord("{")),)
        text = seq(CharClass(openers, negated=True), Repeat(ANY_CHAR, 0, None))
        grammar.rules["root"] = alt(Ref("tool-call"), text, EMPTY)
    return grammar


def parse_tool_calls(text: str, tools: list[dict]) -> tuple[str, list[dict]]:
    """(content, tool_calls) from generated text: a call, or an array of calls, becomes OpenAI's tool_calls
    entries; text stays text.

    >>> parse_tool_calls('[{"name":"f","arguments":{}},{"name":"f","arguments":{"x":1}}]', [{"name": "f"}])[1][1]
    {'id': 'call_1', 'type': 'function', 'function': {'name': 'f', 'arguments': '{"x": 1}'}}
    """
    functions = tool_functions(tools)
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return text, []
    try:
        parsed = json.loads(stripped)
    except json.JSONDecodeError as e:
        raise TinyInferError(f"the reply starts like a tool call but is not JSON ({e}); was it cut by max_tokens?") from None
    calls = parsed if isinstance(parsed, list) else [parsed]
    for call in calls or [None]:
        if not isinstance(call, dict) or call.get("name") not in functions or not isinstance(call.get("arguments"), dict):
            raise TinyInferError(f"the reply is not a call of one of the tools {sorted(functions)}: {stripped[:80]}")
    return "", [{"id": f"call_{i}", "type": "function",
                 "function": {"name": call["name"], "arguments": json.dumps(call["arguments"], ensure_ascii=False)}}
                for i, call in enumerate(calls)]


class ToolCallStream:
    """Reads a reply generated under the call grammar while it grows, so that calls can be streamed as OpenAI
    streams them: each call's name once it is complete, then its arguments piece by piece.

    The grammar writes calls compactly and in one order, `{"name":"<tool>","arguments":<object>}`, alone or in
    a JSON array: a name ends at its closing quote, arguments at the brace that closes their object (counted
    outside strings), and nothing else needs parsing. A reply that opens with neither `{` nor `[` is text.

    >>> stream = ToolCallStream()
    >>> stream.push('{"name":"get_wea'), stream.push('{"name":"get_weather","arguments":{"ci')
    ([], [(0, 'get_weather', '{"ci')])
    >>> stream.push('{"name":"get_weather","arguments":{"city":"Par}is"}}')
    [(0, None, 'ty":"Par}is"}')]
    """

    def __init__(self):
        self.sent: list[int] = []  # per call: characters of its arguments already returned

    @staticmethod
    def is_text(text: str) -> bool:
        """Whether the reply is text, not calls: its first character tells."""
        return text[:1] not in ("", "{", "[")

    def push(self, text: str) -> list[tuple[int, str | None, str]]:
        """The reply so far -> what it added: (call index, the call's name when the call is new else None,
        arguments text added)."""
        new = []
        for index, (name, arguments) in enumerate(calls_so_far(text)):
            if index == len(self.sent):  # its name has just completed
                self.sent.append(0)
                new.append((index, name, arguments))
            elif len(arguments) > self.sent[index]:
                new.append((index, None, arguments[self.sent[index]:]))
            self.sent[index] = len(arguments)
        return new


CALL_OPENING, ARGUMENTS_KEY = '{"name":', ',"arguments":'


def calls_so_far(text: str) -> list[tuple[str, str]]:
    """(name, arguments text so far) of each call of a compact reply whose name is complete.

    >>> calls_so_far('[{"name":"a","arguments":{"x":"}"}},{"name":"b","arguments":{"y')
    [('a', '{"x":"}"}'), ('b', '{"y')]
    """
    calls, at = [], 1 if text.startswith("[") else 0
    while text.startswith(CALL_OPENING, at):
        name_end = _string_end(text, at + len(CALL_OPENING))
        if name_end is None or not text.startswith(ARGUMENTS_KEY, name_end):
            break
        name, start = json.loads(text[at + len(CALL_OPENING):name_end]), name_end + len(ARGUMENTS_KEY)
        end = _object_end(text, start)
        calls.append((name, text[start:end]))
        if end is None or not text.startswith("},", end):  # arguments still growing, or the last call
            break
        at = end + 2
    return calls


def _string_end(text: str, at: int) -> int | None:
    """Just past the JSON string that opens at text[at], or None while it is not closed."""
    escaped = False
    for i in range(at + 1, len(text)):
        if escaped:
            escaped = False
        elif text[i] == "\\":
            escaped = True
        elif text[i] == '"':
            return i + 1
    return None


def _object_end(text: str, at: int) -> int | None:
    """Just past the JSON object (or array) that opens at text[at], or None while it is not closed."""
    depth, i = 0, at
    while i < len(text):
        if text[i] == '"':
            end = _string_end(text, i)
            if end is None:
                return None
            i = end
            continue
        depth += {"{": 1, "[": 1, "}": -1, "]": -1}.get(text[i], 0)
        i += 1
        if depth == 0:
            return i
    return None
