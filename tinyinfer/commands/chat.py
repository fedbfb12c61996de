"""`tinyinfer chat --model PATH`: an interactive conversation through the model's chat template.

Each turn renders the whole conversation with the chat template (tokenizer_config.json), generates the
assistant's answer (streamed), and appends it to the conversation. The whole prompt is prefilled again each
turn; reusing the previous turns' KV cache is prefix caching (chapter 09).

Type a message and press Enter. `/reset` starts a new conversation; `/exit` or end of input (Ctrl-D) quits.
"""

from __future__ import annotations

import sys

import tinyinfer
from tinyinfer.chat import ChatTemplate
from tinyinfer.commands.generate import (
    add_sampling_arguments,
    loading_options,
    print_logprobs,
    print_stats,
    sampling_overrides,
    write_stream,
)
from tinyinfer.errors import TinyInferError
from tinyinfer.generation import resolve_params


def add_arguments(parser) -> None:
    add_sampling_arguments(parser)
    parser.add_argument("--system", default=None, help="a system message that opens the conversation")


def run(args) -> int:
    template = ChatTemplate.for_model(args.model)  # fail before loading the weights if there is none
    model = tinyinfer.load(args.model, device=args.device, **loading_options(args))
    resolve_params(model, None, sampling_overrides(args))  # bad flags fail now, not at every turn
    opening = [{"role": "system", "content": args.system}] if args.system else []
    messages = list(opening)
    print("chat: type a message; /reset starts over, /exit or Ctrl-D quits", file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except EOFError:
            break
        except UnicodeDecodeError as e:  # the terminal sent bytes that are not UTF-8: ask again
            print(f"error: that line is not valid UTF-8 ({e.reason}): type it again", file=sys.stderr)
            continue
        if line.strip() == "/exit":
            break
        if line.strip() == "/reset":
            messages = list(opening)
            continue
        if not line.strip():
            continue
        messages.append({"role": "user", "content": line})
        try:
            answer = reply(model, template, messages, args)
        except TinyInferError as e:  # e.g. the conversation outgrew the context window: say so, keep the loop
            messages.pop()
            print(f"error: {e} (type /reset to start over)", file=sys.stderr)
            continue
        messages.append({"role": "assistant", "content": answer})
    return 0


def reply(model, template: ChatTemplate, messages: list[dict], args) -> str:
    """Generate, stream and return the assistant's answer to the conversation so far."""
    prompt = template.render(messages, add_generation_prompt=True)
    stream = model.generate(prompt, stream=True, add_special_tokens=False, **sampling_overrides(args))
    write_stream(stream)
    print_logprobs(stream.result, model.tokenizer)
    print_stats(stream.result)
    return stream.result.text
