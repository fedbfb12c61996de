"""`tinyinfer serve`: an OpenAI-compatible HTTP server over the batching engine (tinyinfer/engine/server.py).

    python -m tinyinfer serve --port 8000
    curl localhost:8000/v1/completions -H 'Content-Type: application/json' \\
         -d '{"prompt": "ROMEO:", "max_tokens": 30, "temperature": 0}'

With `--lora shout=shakespeare-shout` (repeatable, as vLLM's `--lora-modules`) a request whose "model" is
"shout" runs with that LoRA adapter, in the same batches as the requests on the base model.

Over ranks, `mpirun -n 2 python -m tinyinfer serve --tensor-parallel-size 2`: rank 0 listens and schedules, every
rank runs each step's forward pass (tinyinfer/engine/ranks.py).

Ctrl-C stops it.
"""

from __future__ import annotations

import sys

import tinyinfer
from tinyinfer.chat import ChatTemplate
from tinyinfer.commands.generate import add_kv_cache_dtype_argument
from tinyinfer.commands.parallel_flags import add_parallel_arguments, connect_ranks, parallel_model, rank_zero_output
from tinyinfer.engine.ranks import engine_on_ranks
from tinyinfer.engine.server import Server
from tinyinfer.errors import TinyInferError
from tinyinfer.lora import load_adapter
from tinyinfer.resolve import DEFAULT_MODEL


def add_arguments(parser) -> None:
    parser.add_argument("--model", default=None, help="built-in name, model folder, llama2.c .bin, or HF repo id "
                        "(default: the built-in model)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (0: any free port)")
    parser.add_argument("--served-model-name", default=None, help="the model's name in the API (default: --model)")
    parser.add_argument("--max-num-seqs", type=int, default=32, help="sequences running at once")
    parser.add_argument("--max-num-batched-tokens", type=int, default=512, help="tokens per engine step")
    parser.add_argument("--block-size", type=int, default=16, help="tokens per KV block")
    parser.add_argument("--no-prefix-caching", action="store_true",
                        help="do not reuse the KV blocks of shared prompt prefixes")
    parser.add_argument("--lora", metavar="NAME=PATH", action="append", default=[],
                        help="serve a LoRA adapter as the model NAME (PATH: a PEFT folder or a built-in adapter such "
                             "as shakespeare-shout; a lone built-in name names it too); repeatable; see "
                             "chapters/13-lora.md")
    add_kv_cache_dtype_argument(parser)
    add_parallel_arguments(parser)


def run(args) -> int:
    if not 0 <= args.port <= 65535:
        raise TinyInferError(f"--port {args.port} is not a port: give 0..65535 (0: any free port)")
    comm = connect_ranks(args)
    model = tinyinfer.load(args.model, device=args.device, kv_cache_dtype=args.kv_cache_dtype)
    adapters = load_adapters(model, args.lora)
    model = parallel_model(model, comm, args)
    engine = dict(block_size=args.block_size, max_num_seqs=args.max_num_seqs,
                  max_num_batched_tokens=args.max_num_batched_tokens, prefix_caching=not args.no_prefix_caching)
    with rank_zero_output(comm), engine_on_ranks(model, comm, **engine) as llm:
        return 0 if llm is None else serve(args, llm, adapters)  # None: another rank's work is done


def serve(args, llm, adapters: dict[str, str]) -> int:
    name = args.served_model_name or args.model or DEFAULT_MODEL
    try:
        server = Server(llm, args.host, args.port, name, chat_template_of(args.model), adapters)
    except OSError as e:  # the port is taken, the address is not this machine's...
        raise TinyInferError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}: choose another --port, "
                             "or a --host address of this machine") from None
    with_adapters = f" and LoRA adapters {', '.join(map(repr, adapters))}" if adapters else ""
    print(f"tinyinfer: serving {name!r}{with_adapters} at {server.url}/v1 (Ctrl-C to stop)", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a server is stopped: a clean exit, not an error
    finally:
        server.close()
    return 0


def load_adapters(model, specs: list[str]) -> dict[str, str]:
    """Load each `--lora` adapter onto the model; returns name -> PATH, what the server lists as its root."""
    adapters: dict[str, str] = {}
    for spec in specs:
        name, path = lora_module(spec)
        if name in adapters:
            raise TinyInferError(f"--lora names two adapters {name!r}: give each its own name (--lora NAME=PATH)")
        load_adapter(model, name, path)
        adapters[name] = path
    return adapters


def lora_module(spec: str) -> tuple[str, str]:
    """(name, path) of a `--lora` value: NAME=PATH, or a lone PATH that is its own name (a built-in adapter).

    >>> lora_module("shout=shakespeare-shout"), lora_module("shakespeare-shout"), lora_module("x=a=b")
    (('shout', 'shakespeare-shout'), ('shakespeare-shout', 'shakespeare-shout'), ('x', 'a=b'))
    """
    name, _, path = spec.partition("=") if "=" in spec else (spec, "", spec)
    if not name or not path:
        raise TinyInferError(f"--lora {spec!r} is incomplete: give NAME=PATH (PATH: a PEFT adapter folder or a "
                             "built-in adapter such as shakespeare-shout)")
    return name, path


def chat_template_of(model_spec) -> ChatTemplate | None:
    """The model's chat template, or None when it has none (the chat endpoint then refuses, saying so); a
    broken one stops the server at start, with its error."""
    return ChatTemplate.for_model(model_spec, required=False)
