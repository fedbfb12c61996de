"""Chat templates render byte-identically to transformers' `apply_chat_template`."""

from __future__ import annotations

import json

import pytest
from conftest import shared_data

from tinyinfer.chat import ChatTemplate, special_tokens_of
from tinyinfer.errors import TinyInferError

CONVERSATION = [
    {"role": "system", "content": "You are terse. Answer in <b>one</b> line & no more."},
    {"role": "user", "content": "What is 2 + 2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "And in French, \u00e9crit en lettres? 🦙"},
]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather <now> for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]

# Templates written like real ones, using the features HF's environment provides.
TEMPLATES = {
    "llama2-style": (
        "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
        "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
        "{% set system_message = false %}{% endif %}"
        "{% for message in loop_messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if loop.index0 == 0 and system_message != false %}"
        "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
        "{% else %}{% set content = message['content'] %}{% endif %}"
        "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
        "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
        "{% endfor %}"
    ),
    "blocks-and-tools": """{%- set ns = namespace(count=0) -%}
{% if tools %}
<tools>
{% for tool in tools %}
    {{ tool | tojson }}
    {{ tool.function.parameters | tojson(indent=2, sort_keys=True) }}
{% endfor %}
</tools>
{% endif %}
{% for message in messages %}
    {% if message.role == 'assistant' %}{% set ns.count = ns.count + 1 %}{% endif %}
    {% if loop.index > 10 %}{% break %}{% endif %}
<|{{ message.role }}|>
{% generation %}{{ message.content | trim }}{% endgeneration %}

{% endfor %}
{% if add_generation_prompt %}
<|assistant {{ ns.count }}|>
{% endif %}
{{ extra_marker | default('') }}{{ unk_token }}""",
}


@pytest.fixture(scope="module")
def hf_tokenizer():
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(shared_data("tokenizers/phi-3-mini")))


@pytest.fixture(scope="module")
def phi3():
    return ChatTemplate.from_pretrained(shared_data("tokenizers/phi-3-mini"))


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("turns", [1, 3, 4])
def test_phi3_template_is_byte_identical_to_transformers(hf_tokenizer, phi3, add_generation_prompt, turns):
    messages = CONVERSATION[:turns]
    expected = hf_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    assert phi3.render(messages, add_generation_prompt=add_generation_prompt) == expected


@pytest.mark.parametrize("name", TEMPLATES)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_templates_using_the_hf_environment_are_byte_identical(hf_tokenizer, phi3, name, add_generation_prompt):
    messages = CONVERSATION if name != "llama2-style" else CONVERSATION[:3] + CONVERSATION[1:2]
    messages = messages[:-1] if name == "llama2-style" else messages
    kwargs = {"tools": TOOLS, "extra_marker": "[marker]"} if name == "blocks-and-tools" else {}
    template = ChatTemplate(TEMPLATES[name], phi3.special_tokens)
    expected = hf_tokenizer.apply_chat_template(
        messages, chat_template=TEMPLATES[name], tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
    )
    assert template.render(messages, add_generation_prompt=add_generation_prompt, **kwargs) == expected


def test_raise_exception_in_a_template_is_a_clear_error(phi3):
    template = ChatTemplate(TEMPLATES["llama2-style"], phi3.special_tokens)
    with pytest.raises(TinyInferError, match="roles must alternate"):
        template.render([{"role": "assistant", "content": "hi"}])


def test_none_values_are_dropped_like_hf(hf_tokenizer):
    source = "{% for m in messages %}{{ m.role }}:{{ m.content if 'content' in m else '(tool call)' }};{% endfor %}"
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": None}]
    expected = hf_tokenizer.apply_chat_template(messages, chat_template=source, tokenize=False)
    assert ChatTemplate(source, {}).render(messages) == expected == "user:hi;assistant:(tool call);"


def test_named_templates_pick_tool_use_when_tools_are_given(tmp_path):
    config = {
        "eos_token": {"content": "</s>", "lstrip": False},
        "chat_template": [
            {"name": "default", "template": "plain {{ messages[0].content }}{{ eos_token }}"},
            {"name": "tool_use", "template": "tools={{ tools | length }} {{ messages[0].content }}"},
        ],
    }
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    template = ChatTemplate.from_pretrained(tmp_path)
    messages = [{"role": "user", "content": "hi"}]
    assert template.render(messages) == "plain hi</s>"
    assert template.render(messages, tools=TOOLS) == "tools=1 hi"


def test_chat_template_jinja_file_wins_over_tokenizer_config(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "old", "bos_token": "<s>"}))
    (tmp_path / "chat_template.jinja").write_text("{{ bos_token }}new {{ messages | length }}\n")
    assert ChatTemplate.from_pretrained(tmp_path).render([{"role": "user", "content": "x"}]) == "<s>new 1"


def test_missing_or_broken_templates_are_clear_errors(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>"}))
    with pytest.raises(TinyInferError, match="no chat template"):
        ChatTemplate.from_pretrained(tmp_path)
    with pytest.raises(TinyInferError, match="not valid Jinja2"):
        ChatTemplate("{% for m in messages %}", {}).render([{"role": "user", "content": "x"}])
    with pytest.raises(TinyInferError, match="empty conversation"):
        ChatTemplate("x", {}).render([])


def test_the_sandbox_blocks_python_internals():
    with pytest.raises(TinyInferError, match="unsafe"):
        ChatTemplate("{{ ''.__class__.__subclasses__() }}", {}).render(
            [{"role": "user", "content": "x"}]
        )


def test_special_tokens_accept_strings_and_added_token_dicts():
    config = {"bos_token": "<s>", "eos_token": {"content": "</s>"}, "unk_token": None, "model_max_length": 5}
    assert special_tokens_of(config) == {"bos_token": "<s>", "eos_token": "</s>"}
