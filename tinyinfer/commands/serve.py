"""`tinyinfer serve`: an OpenAI-compatible HTTP server over the batching engine (tinyinfer/engine/server.py).

    python -m tinyinfer serve --port 8000
    curl localhost:8000/v1/completions -H 'Content-Type: application/json' \\
         -d '{"prompt": "ROMEO:", "max_tokens": 30, "temperature": 0}'

With `--lora shout=shakespeare-shout` (repeatable, as vLLM's `--lora-modules`) a request whose "model" is
"shout" runs with that LoRA adapter, in the same batches as the requests on the base model.

    python -m tinyinfer serve --api-key KEY            # or TINYINFER_API_KEY=KEY: every route but /health asks for it
    python -m tinyinfer serve --host 0.0.0.0 --api-key KEY --allowed-origins https://app.example

Bound to 127.0.0.1 (the default) only local clients can connect, and only requests naming a loopback Host are
answered; on any other address, give it an API key. Ctrl-C stops it.

Over ranks, `mpirun -n 2 python -m tinyinfer serve --tensor-parallel-size 2`: rank 0 listens and schedules, every
rank runs each step's forward pass (tinyinfer/engine/ranks.py).
"""

from __future__ import annotations

import gc
import sys

import tinyinfer
from tinyinfer.chat import ChatTemplate
from tinyinfer.commands import at_least, positive_number
from tinyinfer.commands.generate import add_enforce_eager_argument, add_loading_arguments, loading_options
from tinyinfer.commands.parallel_flags import add_parallel_arguments, connect_ranks, parallel_model, rank_zero_output
from tinyinfer.constrain import warm_vocabulary
from tinyinfer.engine.limits import API_KEY_ENV, Limits
from tinyinfer.engine.ranks import engine_on_ranks
from tinyinfer.errors import TinyInferError
from tinyinfer.generation import constraint_vocabulary
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
    parser.add_argument("--allow-runtime-lora-updating", action="store_true",
                        help="serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's; they read "
                             "adapters from this machine's disk, so give an --api-key)")
    parser.add_argument("--max-model-len", type=at_least(1), default=None,
                        help="the context window served, prompt and output (default: the model's)")
    add_loading_arguments(parser)
    add_enforce_eager_argument(parser)
    add_parallel_arguments(parser)
    security = parser.add_argument_group("security and limits")
    security.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY on every route but "
                          f"/health (default: the environment variable {API_KEY_ENV}; unset: no key)")
    security.add_argument("--allowed-origins", nargs="+", default=[], metavar="ORIGIN",
                          help="web origins (https://app.example, or *) whose browser requests are answered, with "
                               "CORS headers (default: none)")
    security.add_argument("--max-body-bytes", type=at_least(1), default=Limits.max_body_bytes,
                          help="largest request body (a larger one is a 413)")
    security.add_argument("--max-queued-requests", type=at_least(0), default=Limits.max_queued,
                          help="sequences queued beyond --max-num-seqs before new requests get a 503")
    security.add_argument("--timeout-keep-alive", type=positive_number, default=Limits.keep_alive_s,
                          help="seconds an idle connection stays open between requests")


def run(args) -> int:
    if not 0 <= args.port <= 65535:
        raise TinyInferError(f"--port {args.port} is not a port: give 0..65535 (0: any free port)")
    comm = connect_ranks(args)
    model = tinyinfer.load(args.model, device=args.device, **loading_options(args))
    adapters = load_adapters(model, args.lora)
    model = parallel_model(model, comm, args)
    engine = dict(block_size=args.block_size, max_num_seqs=args.max_num_seqs,
                  max_num_batched_tokens=args.max_num_batched_tokens, prefix_caching=not args.no_prefix_caching,
                  enforce_eager=args.enforce_eager)
    with rank_zero_output(comm), engine_on_ranks(model, comm, **engine) as llm:
        return 0 if llm is None else serve(args, llm, adapters)  # None: another rank's work is done


def serve(args, llm, adapters: dict[str, str]) -> int:
    """Rank 0 (or the only process): the HTTP server over the engine, until Ctrl-C."""
    from tinyinfer.engine.server import Server  # noqa: PLC0415 - the HTTP stack loads only for this command

    name = args.served_model_name or args.model or DEFAULT_MODEL
    limits = Limits(max_body_bytes=args.max_body_bytes, max_queued=args.max_queued_requests,
                    keep_alive_s=args.timeout_keep_alive)
    try:
        server = Server(llm, args.host, args.port, name, chat_template_of(args.model), adapters, api_key=args.api_key,
                        allowed_origins=args.allowed_origins, limits=limits, max_model_len=args.max_model_len,
                        runtime_lora=args.allow_runtime_lora_updating)
    except OSError as e:  # the port is taken, the address is not this machine's...
        raise TinyInferError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}: choose another --port, "
                             "or a --host address of this machine") from None
    warm_up(llm)
    with_adapters = f" and LoRA adapters {', '.join(map(repr, adapters))}" if adapters else ""
    print(f"tinyinfer: serving {name!r}{with_adapters} at {server.url}/v1 (Ctrl-C to stop)", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a server is stopped: a clean exit, not an error
    finally:
        server.close()
    return 0


def warm_up(llm) -> None:
    """What the first requests would pay for, done before serving: the vocabulary that structured output masks
    over (a trie of every token's bytes: 0.24 s for SmolLM2's 49,152 tokens, once) with the walk every JSON
    grammar shares (a string's body: `warm_vocabulary`), then every object alive
    frozen out of Python's garbage collector (`gc.freeze`, as vLLM does after its warm-up). They live as long
    as the server, and a full collection walking them all stalls every running sequence (13 ms a collection
    with SmolLM2-135M loaded, measured; a run of 16 structured requests met one of 41 ms)."""
    warm_vocabulary(constraint_vocabulary(llm.model))
    gc.collect()
    gc.freeze()


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
