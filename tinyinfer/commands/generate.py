"""`tinyinfer generate [--model M] "prompt"`: stream a continuation to stdout, statistics to stderr.

    python -m tinyinfer generate --model PATH "Once upon a time" --temperature 0.8 --top-p 0.9 --seed 1
    python -m tinyinfer generate --model PATH "List three fruits:" --stop "\\n\\n" --logprobs 3 -n 2
    python -m tinyinfer generate --model PATH --chat "What is a KV cache?"

Every SamplingParams field is a flag; a flag not given takes the checkpoint's generation_config.json value
(or SamplingParams' default). With --logprobs N each token's logprob and its N best alternatives go to stderr.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

import tinyinfer
from tinyinfer.commands.parallel_flags import add_parallel_arguments, connect_ranks, parallel_model, rank_zero_output
from tinyinfer.distribute import traffic_report
from tinyinfer.errors import TinyInferError
from tinyinfer.kv_quant import KV_CACHE_DTYPES
from tinyinfer.lora import load_adapter
from tinyinfer.moe import track_routing
from tinyinfer.quantize import quantize_model
from tinyinfer.speculative import PromptLookup

# flag -> SamplingParams field, for the flags that map one to one
SAMPLING_FLAGS = {
    "temperature": (float, "0 = greedy (ties -> lowest id); default from the checkpoint"),
    "top_k": (int, "keep the k most likely tokens (0 = off)"),
    "top_p": (float, "keep the smallest set of tokens whose probability reaches p, in (0, 1]"),
    "min_p": (float, "drop tokens less likely than min_p x the most likely, in [0, 1]"),
    "repetition_penalty": (float, "HF repetition penalty on prompt and output tokens (> 0, 1 = off)"),
    "presence_penalty": (float, "OpenAI presence penalty on generated tokens, in [-2, 2]"),
    "frequency_penalty": (float, "OpenAI frequency penalty on generated tokens, in [-2, 2]"),
    "max_tokens": (int, "generate at most this many tokens"),
    "seed": (int, "random seed: the same seed gives the same text"),
    "logprobs": (int, "print each token's logprob and its N best alternatives to stderr"),
}


# the structured-output kinds, each a flag of the same name (the argparse groups make them exclusive)
CONSTRAINT_KINDS = ("json_schema", "json", "regex", "choice")


def add_sampling_arguments(parser) -> None:
    """The flags shared by `generate` and `chat`: one per SamplingParams field."""
    parser.add_argument("--model", default=None, help="built-in name, model folder, llama2.c .bin, .gguf file, or HF "
                        "repo id (default: the built-in model)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    add_loading_arguments(parser)
    for name, (kind, help_text) in SAMPLING_FLAGS.items():
        parser.add_argument("--" + name.replace("_", "-"), type=kind, default=None, help=help_text)
    parser.add_argument("--stop", action="append", default=None, metavar="TEXT", type=unescape,
                        help="stop when the text contains TEXT (not printed); repeatable; \\n and \\t mean "
                             "newline and tab")
    parser.add_argument("--ignore-eos", action="store_true", default=None, help="keep generating past EOS")


def add_loading_arguments(parser) -> None:
    """--kv-cache-dtype and --keep-quantized, how a loaded model holds its numbers, and --tokenizer, what reads
    its text (`loading_options` turns them into tinyinfer.load's arguments)."""
    parser.add_argument("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES,
                        help="how the KV cache stores keys and values: auto (the model's dtype), float16 or int8 "
                             "(fewer bytes per token, a small error; chapter 12)")
    parser.add_argument("--keep-quantized", action="store_true",
                        help="a .gguf model's quantised weights stay quantised in memory, dequantised at every "
                             "product (less memory, slower decode; chapter 12); default: dequantised once at load")
    parser.add_argument("--tokenizer", default=None, help="a tokenizer.json, a folder holding one, or a .gguf file "
                        "(its tokenizer), to use instead of the model's own (a GGUF file's, say)")


def loading_options(args) -> dict:
    """tinyinfer.load's keyword arguments from the flags of add_loading_arguments."""
    return dict(kv_cache_dtype=args.kv_cache_dtype, keep_quantized=args.keep_quantized, tokenizer=args.tokenizer)


ESCAPES = {"\\\\": "\\", "\\n": "\n", "\\t": "\t"}  # as typed on a command line -> the character


def add_enforce_eager_argument(parser) -> None:
    """vLLM's --enforce-eager: the serving engine's decode steps never replay as CUDA graphs."""
    parser.add_argument("--enforce-eager", action="store_true",
                        help="never capture the engine's decode steps as CUDA graphs (on --device cuda they are, "
                             "where the model's step allows it: chapters/02-tensors.md)")


def unescape(text: str) -> str:
    r"""Read the escapes a shell cannot type easily: `--stop '\n\n'` stops at a blank line.

    >>> unescape(r"one\ntwo\\n")
    'one\ntwo\\n'
    """
    return re.sub(r"\\\\|\\n|\\t", lambda m: ESCAPES[m.group()], text)


def add_arguments(parser) -> None:
    parser.add_argument("prompt", help="the text to continue (with --chat: the user message)")
    add_sampling_arguments(parser)
    parser.add_argument("-n", type=int, default=None, help="number of independent samples (default 1)")
    parser.add_argument("--chat", action="store_true", help="wrap the prompt as one user message in the chat template")
    parser.add_argument("--system", default=None, help="with --chat: a system message before the user message")
    parser.add_argument("--quantize", metavar="SCHEME", default=None,
                        help="hold the layers' weights as int8 (per output channel) or int4 (groups of 32); "
                             "see chapters/12-quantisation.md")
    parser.add_argument("--lora", metavar="FOLDER", default=None,
                        help="a PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors) for this model; "
                             "see chapters/13-lora.md")
    parser.add_argument("--draft", metavar="MODEL", default=None,
                        help="speculative decoding: a smaller model with the same tokenizer guesses tokens for this one "
                             "to check (e.g. shakespeare-draft); see chapters/11-speculative-decoding.md")
    parser.add_argument("--speculative-method", choices=["draft_model", "ngram"], default=None,
                        help="ngram: prompt lookup, the guesses are the tokens that followed the text's last tokens "
                             "earlier on (no draft model; pays when the output repeats the input); draft_model: --draft")
    parser.add_argument("--speculate", metavar="K", type=int, default=None,
                        help="with --draft or --speculative-method ngram: guesses per round (default 4)")
    parser.add_argument("--prompt-lookup-max", metavar="N", type=int, default=3,
                        help="with --speculative-method ngram: the longest suffix looked up (default 3)")
    parser.add_argument("--prompt-lookup-min", metavar="N", type=int, default=1,
                        help="with --speculative-method ngram: the shortest suffix looked up (default 1)")
    parser.add_argument("--show-routing", action="store_true",
                        help="Mixture-of-Experts models: print each layer's expert load to stderr after generation")
    add_parallel_arguments(parser)
    if _structured_output_available():
        add_constraint_arguments(parser)


def _structured_output_available() -> bool:
    import tinyinfer.constrain  # noqa: PLC0415

    return hasattr(tinyinfer.constrain, "build_constraint")


def add_constraint_arguments(parser) -> None:
    """--json-schema FILE | --json | --regex R | --choice X (repeatable): structured output."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--json-schema", metavar="FILE", help="output must be JSON valid against this JSON Schema")
    group.add_argument("--json", nargs="?", const="object", choices=["object", "value"],
                       help="output must be a JSON object (or, with --json value, any JSON value)")
    group.add_argument("--regex", metavar="R", help="output must match this regular expression")
    group.add_argument("--choice", action="append", metavar="X", help="output must be one of these strings; repeatable")


def sampling_overrides(args) -> dict:
    """The SamplingParams fields given on the command line (None = not given)."""
    overrides = {name: getattr(args, name) for name in SAMPLING_FLAGS}
    overrides.update(stop=args.stop, ignore_eos=args.ignore_eos, n=getattr(args, "n", None))
    return overrides


def constraint_factory(args, model):
    """A function building a fresh constraint per sample from the constraint flags, or None."""
    chosen = [(kind, getattr(args, kind, None)) for kind in CONSTRAINT_KINDS if getattr(args, kind, None) is not None]
    if not chosen:
        return None
    kind, spec = chosen[0]
    spec = Path(spec) if kind == "json_schema" else spec  # a path, read by build_constraint
    if model.tokenizer is None:
        raise TinyInferError("structured output needs the model's tokenizer: load a model that has one")
    from tinyinfer.constrain import build_constraint  # noqa: PLC0415
    from tinyinfer.generation import constraint_vocabulary  # noqa: PLC0415

    vocabulary = constraint_vocabulary(model)  # one entry per row of the logits, padding rows included
    return lambda: build_constraint(kind, spec, vocabulary)


CUT_BY = {"length": "at max_tokens (raise --max-tokens)", "stop": "by a stop string (drop --stop)"}


def constraint_name(args) -> str:
    """What the constraint flags ask for, in words."""
    return "JSON" if args.json or args.json_schema else "match of the regular expression" if args.regex else "choice"


def run(args) -> int:
    comm = connect_ranks(args)
    with rank_zero_output(comm):
        return generate_on_this_rank(args, comm)


def generate_on_this_rank(args, comm) -> int:
    """The command, run by each rank alike (the same seed on all: rank 0's), printed by rank 0."""
    model = tinyinfer.load(args.model, device=args.device, **loading_options(args))
    if args.quantize is not None:
        quantize_model(model, args.quantize)
    if args.lora is not None:
        load_adapter(model, "adapter", args.lora)
    model = parallel_model(model, comm, args)
    if comm.size > 1 and args.seed is None:  # every rank must draw the same tokens
        args.seed = comm.broadcast_object(int(np.random.default_rng().integers(2**31)))
    comm.stats.reset()  # from here on: the model's traffic only
    routing = track_routing(model) if args.show_routing else None
    prompt, add_special = args.prompt, True
    if args.chat:
        from tinyinfer.chat import ChatTemplate  # noqa: PLC0415

        messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
            {"role": "user", "content": args.prompt}
        ]
        # the rendered template already holds its special tokens (BOS...): encode it without adding more
        prompt, add_special = ChatTemplate.for_model(args.model).render(messages, add_generation_prompt=True), False
    elif args.system:
        raise TinyInferError("--system needs --chat (a system message only exists in a chat template)")
    draft = speculation_helper(args)
    constraints = []  # each sample's, to tell after the run whether its output is complete
    factory = constraint_factory(args, model)
    making = None if factory is None else lambda: constraints.append(factory()) or constraints[-1]
    outputs = model.generate(prompt, stream=True, constraint=making,
                             add_special_tokens=add_special, draft=draft, num_speculative_tokens=4 if args.speculate is None else args.speculate,
                             lora=None if args.lora is None else "adapter", **sampling_overrides(args))
    streams = outputs if isinstance(outputs, list) else [outputs]
    incomplete = False
    for index, stream in enumerate(streams):
        if len(streams) > 1:
            print(f"--- sample {index + 1} of {len(streams)} ---", flush=True)
        write_stream(stream)
        if constraints and not constraints[index].is_complete():
            incomplete = True
            print(f"warning: the {constraint_name(args)} is not complete: the output was cut "
                  f"{CUT_BY.get(stream.result.finish_reason, 'short')}", file=sys.stderr)
        print_logprobs(stream.result, model.tokenizer)
        print_stats(stream.result)
    warn_if_slower(stream.result.speculation for stream in streams)
    if routing is not None:
        print(routing.table(), file=sys.stderr)
    if comm.size > 1:
        print(traffic_report(model, comm), file=sys.stderr)
    return 1 if incomplete else 0  # a constrained output cut short is not what was asked for


def warn_if_slower(speculations) -> None:
    """One line on stderr when guessing rounds were slower per token than the plain step timed in the run."""
    slow = [s for s in speculations if s is not None and s.slower_than_plain]
    if slow:
        print(f"warning: speculation ran at {slow[0].speed_up:.2f}x the speed of plain decoding (measured in this "
              "run): drop --draft / --speculative-method to decode faster", file=sys.stderr)


def speculation_helper(args):
    """What --draft / --speculative-method ask to guess with: a loaded draft model, a PromptLookup, or None."""
    if args.speculative_method == "ngram":
        if args.draft is not None:
            raise TinyInferError("--speculative-method ngram guesses without a draft model: drop --draft")
        return PromptLookup(args.prompt_lookup_max, args.prompt_lookup_min)
    if args.draft is None:
        if args.speculate is not None or args.speculative_method is not None:
            raise TinyInferError("--speculate needs --draft (the model that makes the guesses) or --speculative-method ngram")
        return None
    return tinyinfer.load(args.draft, device=args.device, kv_cache_dtype=args.kv_cache_dtype)


def write_stream(stream) -> None:
    """Print the text pieces as they come, then a newline."""
    for piece in stream:
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    sys.stdout.flush()


def print_logprobs(result, tokenizer) -> None:
    """One line per generated token on stderr: the token, its logprob, and the best alternatives."""
    if result.logprobs is None:
        return

    def show(token_id: int) -> str:
        return repr(tokenizer.decode([token_id])) if tokenizer is not None else str(token_id)

    for choice in result.logprobs:
        alternatives = "  ".join(f"{show(i)} {lp:.3f}" for i, lp in choice.top_logprobs)
        print(f"{show(choice.token_id):>16} {choice.logprob:8.3f}   | {alternatives}", file=sys.stderr)


def print_stats(result) -> None:
    t = result.timings
    print(f"[{result.prompt_tokens} prompt tokens, {len(result.token_ids)} output tokens ({result.finish_reason}); "
          f"TTFT {t.ttft_s * 1000:.1f} ms, TPOT {t.tpot_s * 1000:.1f} ms, decode {t.tokens_per_s:.1f} tokens/s]",
          file=sys.stderr)
    s = result.speculation
    if s is not None:
        print(f"[speculation: {s.accepted} of {s.proposed} guesses kept ({s.acceptance_rate:.0%}), "
              f"{s.tokens_per_target_step:.2f} tokens per step of the model]", file=sys.stderr)

