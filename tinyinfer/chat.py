"""Chat templates: turn a list of messages into the exact prompt text a chat model was trained on.

A chat model expects its conversation in one precise format (`<|user|>\\nhi<|end|>\\n<|assistant|>\\n` for
Phi-3), and a prompt that differs by one newline degrades its answers. Checkpoints ship that format as a
Jinja2 template in `tokenizer_config.json` (`chat_template`, a string or a list of named templates), or in a
`chat_template.jinja` / `chat_template.json` file beside it. Templating is not the lesson, so this module
uses jinja2 and reproduces Hugging Face's `apply_chat_template` environment exactly:

- a sandboxed environment (templates from the Hub are untrusted code) with `trim_blocks` and
  `lstrip_blocks`, and the `loopcontrols` extension (`{% break %}`, `{% continue %}`);
- `raise_exception(msg)`, `strftime_now(fmt)`, and a `tojson` filter that does not HTML-escape and accepts
  `indent`, `separators`, `sort_keys`, `ensure_ascii`;
- the `{% generation %}` tag (used to mark assistant tokens for training), rendered as its body;
- the context: `messages`, `tools`, `documents`, `add_generation_prompt`, the tokenizer's special tokens
  (`bos_token`, `eos_token`, ...) and any extra keyword.

    >>> t = ChatTemplate("{% for m in messages %}[{{ m.role }}] {{ m.content }}\\n{% endfor %}", {})
    >>> t.render([{"role": "user", "content": "hi"}])
    '[user] hi\\n'
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tinyinfer.config import read_json
from tinyinfer.errors import TinyInferError
from tinyinfer.resolve import DEFAULT_MODEL, resolve_path

# the special tokens a tokenizer_config.json may name; HF puts each one it has into the template context
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for training masks; here it renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # Jinja's own tojson HTML-escapes '<', '>', '&' and "'"; chat templates expect plain JSON.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


class ChatTemplate:
    """A compiled chat template plus the special tokens it may refer to."""

    def __init__(self, source: str | list, special_tokens: dict[str, str]):
        self.sources = _named_templates(source)
        self.special_tokens = dict(special_tokens)
        self._compiled = {}

    @classmethod
    def from_pretrained(cls, path: str | Path) -> ChatTemplate:
        """Load from a model folder (or a tokenizer_config.json path).

        Like HF, a `chat_template.jinja` (or `chat_template.json`) file in the folder wins over the
        `chat_template` field of tokenizer_config.json.
        """
        template = cls.from_pretrained_if_any(path)
        if template is None:
            raise TinyInferError(
                f"{path} has no chat template (no chat_template in tokenizer_config.json, no chat_template.jinja): "
                "use a chat/instruct checkpoint, or generate without --chat"
            )
        return template

    @classmethod
    def from_pretrained_if_any(cls, path: str | Path) -> ChatTemplate | None:
        """`from_pretrained`, or None when the folder has no template (a broken one is still an error)."""
        path = Path(path)
        folder = path if path.is_dir() else path.parent
        config_path = path if path.is_file() else folder / "tokenizer_config.json"
        config = read_json(config_path, "tokenizer_config.json") if config_path.is_file() else {}
        source = config.get("chat_template")
        if (folder / "chat_template.json").is_file():
            source = read_json(folder / "chat_template.json", "chat_template.json").get("chat_template")
        if (folder / "chat_template.jinja").is_file():
            source = (folder / "chat_template.jinja").read_text(encoding="utf-8")
        return cls(source, special_tokens_of(config)) if source else None

    @classmethod
    def for_model(cls, model, required: bool = True) -> ChatTemplate | None:
        """The chat template of a model given as `tinyinfer.load` takes it (folder, file, built-in name).
        A model without one is an error, or None if not `required`."""
        if model is None:
            model = DEFAULT_MODEL
        path = resolve_path(model)
        if path.is_file() and path.suffix == ".gguf":  # the template is in the file's metadata
            return cls.from_gguf(path, required)
        folder = path if path.is_dir() else path.parent
        return cls.from_pretrained(folder) if required else cls.from_pretrained_if_any(folder)

    @classmethod
    def from_gguf(cls, path: str | Path, required: bool = True) -> ChatTemplate | None:
        """The template of a GGUF file's `tokenizer.chat_template` (tinyinfer/tokenizer/gguf.py reads it)."""
        from tinyinfer.gguf.reader import GGUFFile  # noqa: PLC0415 - the reader maps the file: only when asked

        template = chat_template_from_gguf(GGUFFile(path).metadata)
        if template is None and required:
            raise TinyInferError(f"{path} has no chat template (no tokenizer.chat_template in its metadata): use a "
                                 "chat/instruct model's GGUF, or generate without --chat")
        return template

    def render(
        self,
        messages: list[dict],
        add_generation_prompt: bool = False,
        tools: list[dict] | None = None,
        documents: list[dict] | None = None,
        **kwargs,
    ) -> str:
        """The prompt text for `messages` ([{"role": ..., "content": ...}, ...]), as HF renders it."""
        if not messages:
            raise TinyInferError("cannot apply a chat template to an empty conversation: give at least one message")
        for message in messages:
            if not isinstance(message, dict):
                raise TinyInferError(f"chat messages must be dicts like {{'role': 'user', 'content': 'hi'}}, got {message!r}")
        # HF drops keys whose value is None (APIs send content=None), because templates test for missing keys
        messages = [{k: v for k, v in m.items() if v is not None} for m in messages]
        name = "tool_use" if tools is not None and "tool_use" in self.sources else "default"
        context = {**self.special_tokens, **kwargs}  # explicit keywords win over special tokens, as in HF
        try:
            return self._template(name).render(
                messages=messages,
                tools=tools,
                documents=documents,
                add_generation_prompt=add_generation_prompt,
                **context,
            )
        except jinja2.exceptions.TemplateError as e:
            raise TinyInferError(f"the chat template refused this conversation: {e}") from e

    def _template(self, name: str) -> jinja2.Template:
        if name not in self.sources:
            raise TinyInferError(f"no chat template named {name!r}: this checkpoint has {', '.join(self.sources)}")
        if name not in self._compiled:
            try:
                self._compiled[name] = _environment().from_string(self.sources[name])
            except jinja2.exceptions.TemplateSyntaxError as e:
                raise TinyInferError(f"the chat template {name!r} is not valid Jinja2 (line {e.lineno}: {e})") from e
        return self._compiled[name]


def _named_templates(source) -> dict[str, str]:
    """A template string, or HF's list of {"name", "template"} dicts, as {name: source}."""
    if isinstance(source, str):
        return {"default": source}
    if isinstance(source, list) and all(isinstance(t, dict) and {"name", "template"} <= t.keys() for t in source):
        return {t["name"]: t["template"] for t in source}
    raise TinyInferError("chat_template must be a string or a list of {'name': ..., 'template': ...} objects")


def special_tokens_of(config: dict) -> dict[str, str]:
    """The special-token strings of a tokenizer_config.json, e.g. {"bos_token": "<s>", ...}.

    A token may be saved as a string or as an AddedToken dict {"content": "<s>", ...}.

    >>> special_tokens_of({"bos_token": {"content": "<s>", "lstrip": False}, "eos_token": "</s>", "pad_token": None})
    {'bos_token': '<s>', 'eos_token': '</s>'}
    """
    tokens = {}
    for name in SPECIAL_TOKEN_NAMES:
        value = config.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            tokens[name] = value
    return tokens


def chat_template_from_gguf(metadata: dict) -> ChatTemplate | None:
    """The chat template of a GGUF file's `tokenizer.chat_template`, with the special tokens it may name (None: no
    template)."""
    from tinyinfer.tokenizer.gguf import special_tokens_from_gguf  # noqa: PLC0415 - only GGUF files need it

    source = metadata.get("tokenizer.chat_template")
    return ChatTemplate(source, special_tokens_from_gguf(metadata)) if source else None
