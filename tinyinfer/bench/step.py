"""`tinyinfer bench step`: where the time of one serving step goes, and what that caps batching at.

A decode step of B sequences in one batch shares some of its work among them, and not the rest:

- shared: running the layers at all (a few hundred array operations a step, whatever B) and reading each
  weight matrix from memory once;
- per sequence, whatever the batch: its multiply-adds with every weight (a product of B rows costs B times
  the FLOPs of one row), reading its own keys and values in every layer, sampling its next token over the
  whole vocabulary, and detokenizing it.

Sequential generation pays both parts for every token. Batching divides the shared part by B but leaves the
per-sequence part whole, so the per-sequence part alone bounds what batching can gain: on a GPU it is
small beside reading the weights, and a batch of 32 costs little more than one sequence; on a CPU with a small
model it is most of the step.

This bench fills an engine with `--concurrency` sequences of `--context` tokens, all decoding, and times
(fastest of `--repeats` runs each, so that other work on the machine, which only ever slows a run, drops out;
both in wall time and in this process's CPU time, which a busy machine disturbs far less):

    one engine step (a token for every sequence)
      its forward pass, and inside it, each run alone on the same shapes: the weight products, and the
      attention (writing the new keys and values, gathering every sequence's blocks, the products, softmax)
      the sampling and the detokenizing of a token for every sequence

next to `model.generate` of one such sequence, whose time per output token is a sequential step. Per token,
their ratio is the most continuous batching gains over sequential generation here in the steady state;
a served workload also pays the same prefills in both modes and ends on a tail of small batches.

    python -m tinyinfer bench step                      # the built-in model: 32 sequences of 48 tokens
    python -m tinyinfer bench step --model M --concurrency 8 --context 256
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
from threadpoolctl import threadpool_limits

import tinyinfer
from tinyinfer.backend import synchronize
from tinyinfer.bench.prompts import random_prompt
from tinyinfer.commands import at_least
from tinyinfer.engine import LLM
from tinyinfer.errors import TinyInferError
from tinyinfer.mlp import matmul
from tinyinfer.model import SeqChunk
from tinyinfer.param_tree import leaves
from tinyinfer.sampling import Sampler, SamplingParams, sample_batch


def add_arguments(parser) -> None:
    parser.add_argument("--model", default=None, help="built-in name, model folder, llama2.c .bin, or HF repo id "
                        "(default: the built-in model)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--concurrency", type=at_least(2), default=32, help="sequences decoding together")
    parser.add_argument("--context", type=at_least(1), default=48, help="prompt tokens of each sequence")
    parser.add_argument("--repeats", type=at_least(1), default=20, help="runs of each part; the fastest is kept")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--seed", type=at_least(0), default=0)
    parser.add_argument("--blas-threads", type=at_least(1), default=1,
                        help="matrix-library threads (1 by default, as in bench serve)")


def run(args) -> int:
    with threadpool_limits(limits=args.blas_threads, user_api="blas"):
        model = tinyinfer.load(args.model, device=args.device)
        (parts, cpu), alone = measure(model, args.concurrency, args.context, args.repeats, args.temperature, args.seed)
    print(f"model: {args.model or 'built-in'} ({model.n_params / 1e6:.2f}M parameters), device {args.device}; "
          f"{args.concurrency} sequences of {args.context}+ tokens, all decoding; BLAS threads {args.blas_threads}; "
          f"fastest of {args.repeats} runs of each part")
    print_parts(parts, cpu, args.concurrency, alone)
    return 0


def measure(model, concurrency: int, context: int, repeats: int, temperature: float = 0.8,
            seed: int = 0) -> tuple[tuple[dict[str, float], dict[str, float]], tuple[float, float]]:
    """((wall, CPU) seconds of one steady step of `concurrency` sequences of `context`+ tokens and of each of
    its parts, (wall, CPU) seconds per token of `model.generate` on one of them alone)."""
    if model.config.n_experts:
        raise TinyInferError("bench step times the products of a dense model; for a Mixture-of-Experts model "
                             "see `tinyinfer bench moe`")
    room = model.config.max_seq_len - context  # tokens each sequence may still gain
    if room < 2 * repeats + 32:  # some decode while others prefill; then `repeats` steps are timed
        raise TinyInferError(f"--context {context} leaves {room} of the model's {model.config.max_seq_len} "
                             f"positions to generate in; lower --context (or --repeats)")
    params = SamplingParams(temperature=temperature, max_tokens=room, ignore_eos=True)
    prompts = [random_prompt(model, np.random.default_rng([seed, i]), context) for i in range(concurrency)]
    parts = time_parts(model, filled_engine(model, prompts, params), repeats)
    return parts, generate_per_token(model, prompts[0], params)


def generate_per_token(model, prompt: list[int], params: SamplingParams, n: int = 32) -> tuple[float, float]:
    """(wall, CPU) seconds per output token of `model.generate` alone, fastest of 3: the wall from its TPOT,
    the CPU as the difference between n + 1 tokens and 1 token (the prefill drops out)."""
    def cpu_of(tokens: int) -> float:
        start = time.process_time()
        model.generate(prompt, dataclasses.replace(params, max_tokens=tokens))
        return time.process_time() - start

    wall = min(model.generate(prompt, dataclasses.replace(params, max_tokens=n)).timings.tpot_s for _ in range(3))
    return wall, max(min(cpu_of(n + 1) for _ in range(3)) - min(cpu_of(1) for _ in range(3)), 0.0) / n


UNSHARED = ("weight products", "attention", "sampling", "detokenizing")  # the parts each sequence pays in full


def bounds(parts: dict[str, float], rows: int, alone_tpot: float) -> tuple[float, float]:
    """(how many times sequential generation a steady step of `rows` sequences is, how many times it could be
    with nothing but the work no batch shares): a token alone against a token's share of each."""
    return alone_tpot * rows / parts["engine step"], alone_tpot * rows / sum(parts[name] for name in UNSHARED)


def filled_engine(model, prompts: list[list[int]], params: SamplingParams) -> LLM:
    """An engine running every prompt, stepped until all of them have finished prefill and are decoding."""
    llm = LLM(model, max_num_seqs=len(prompts), enforce_eager=True)  # the parts timed are the eager step's
    for i, prompt in enumerate(prompts):
        llm.add_request(prompt, dataclasses.replace(params, seed=i))
    while llm.scheduler.waiting or any(not seq.output_ids for seq in llm.scheduler.running):
        llm.step()
    return llm


def fastest(fn, repeats: int, xp=np) -> tuple[float, float]:
    """The shortest of `repeats` runs of fn(), in seconds of wall time and of this process's CPU time, each
    waiting for the device `xp` to finish."""
    wall = cpu = float("inf")
    for _ in range(repeats):
        synchronize(xp)
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        synchronize(xp)
        wall, cpu = min(wall, time.perf_counter() - start), min(cpu, time.process_time() - start_cpu)
    return wall, cpu


def time_parts(model, llm: LLM, repeats: int) -> tuple[dict[str, float], dict[str, float]]:
    """Seconds of one engine step and of each part of it, timed alone on the engine's own sequences: in wall
    time and in CPU time."""
    seqs = list(llm.scheduler.running)
    # each sequence's newest cached position again: its keys and values are rewritten with the same numbers
    chunks = [SeqChunk(seq.seq_id, seq.num_tokens - 2, [seq.tokens[-2]], seq.lora) for seq in seqs]
    logits = model.forward(chunks, llm.cache)  # [B, V]
    samplers = [Sampler(seq.params, seq.prompt_ids, rng=np.random.default_rng(i)) for i, seq in enumerate(seqs)]
    parts = {
        "forward pass": fastest(lambda: model.forward(chunks, llm.cache), repeats, model.xp),
        "weight products": fastest(weight_products(model, len(seqs)), repeats, model.xp),
        "attention": fastest(decode_attention_of(model, llm, chunks), repeats, model.xp),
        "sampling": fastest(lambda: sample_batch(samplers, logits), repeats, model.xp),
        "detokenizing": fastest(detokenizing(model, seqs), repeats) if model.tokenizer is not None else (0.0, 0.0),
    }
    parts["engine step"] = fastest(llm.step, repeats, model.xp)  # last: each step adds a token to every sequence
    return {name: t[0] for name, t in parts.items()}, {name: t[1] for name, t in parts.items()}


def weight_products(model, rows: int, head_rows: int | None = None):
    """A function doing the products of a step of `rows` tokens: x @ w for every weight matrix of every layer,
    and the LM head on `head_rows` of them (all by default, as in a decode step; a prefill needs it on the last
    token only), with x random of the shape the forward pass gives it, each product as the forward pass
    computes it (`matmul`). No rows, no product."""
    rng = np.random.default_rng(0)
    xp = model.xp
    head_rows = rows if head_rows is None else head_rows
    layers = [(w, rows) for w in leaves(model.params["layers"]) if w.ndim == 2] if rows else []
    products = layers + ([(model.params["lm_head"], head_rows)] if head_rows else [])
    inputs = [xp.asarray(rng.standard_normal((n, w.shape[0])).astype(model.dtype)) for w, n in products]
    return lambda: [matmul(x, w) for x, (w, _) in zip(inputs, products)]


def decode_attention_of(model, llm: LLM, chunks: list[SeqChunk]):
    """A function doing the attention of a decode step of `chunks` in every layer, as the forward pass does
    (the batched groups of `Model.decode_block`), writing back the keys and values already cached there."""
    cfg, cache, xp = model.config, llm.cache, model.xp
    plan = model._plan_attention(chunks, cache)
    shape = (len(chunks), cfg.n_kv_heads, cfg.head_dim)  # [B, KV, hd]
    q = xp.asarray(np.random.default_rng(0).standard_normal((len(chunks), cfg.n_heads, cfg.head_dim)),
                   dtype=model.dtype)  # [B, H, hd]
    out = xp.empty((len(chunks), cfg.n_heads * cfg.head_dim), dtype=model.dtype)  # [B, H*hd]
    k, v = [xp.empty(shape, model.dtype) for _ in cache.k], [xp.empty(shape, model.dtype) for _ in cache.v]
    for i in range(cfg.n_layers):
        for rows, slots in plan.decode_groups:  # what the cache holds where the step writes: [KV, b, hd] -> [b, KV, hd]
            k[i][rows] = cache.k[i][:, slots.blocks, slots.offsets].transpose(1, 0, 2)
            v[i][rows] = cache.v[i][:, slots.blocks, slots.offsets].transpose(1, 0, 2)

    def attend():
        for i in range(cfg.n_layers):
            for rows, slots in plan.decode_groups:
                model.decode_block(i, rows, slots, q, k[i], v[i], out, cache)

    return attend


def detokenizing(model, seqs):
    """A function pushing one more token of each sequence through its own streaming detokenizer."""
    from tinyinfer.tokenizer import StreamingDetokenizer  # noqa: PLC0415 - models without a tokenizer skip it

    streams = [StreamingDetokenizer(model.tokenizer) for _ in seqs]
    for stream, seq in zip(streams, seqs):
        for token in seq.output_ids:
            stream.push(token)
    return lambda: [stream.push(seq.output_ids[-1]) for stream, seq in zip(streams, seqs)]


def print_parts(parts: dict[str, float], cpu: dict[str, float], rows: int, alone: tuple[float, float]) -> None:
    """The parts in wall and CPU milliseconds, the step against its matrix products, and the batching bounds."""
    lines = [
        (f"one engine step ({rows} tokens)", "engine step", ""),
        ("  forward pass", "forward pass", ""),
        (f"    weight products (every matrix, {rows} rows)", "weight products", ""),
        ("    attention (write, gather, products, softmax)", "attention", ""),
        ("    the rest: norms, RoPE, activations, ...", None, "  (the difference)"),
        (f"  sampling ({rows} rows)", "sampling", ""),
        (f"  detokenizing ({rows} tokens)", "detokenizing", ""),
        ("  scheduling and the engine's bookkeeping", "", "  (the difference)"),
    ]

    def value(t: dict[str, float], key) -> float:
        if key is None:
            return t["forward pass"] - t["weight products"] - t["attention"]
        if key == "":
            return t["engine step"] - t["forward pass"] - t["sampling"] - t["detokenizing"]
        return t[key]

    print(f"\n{'':<52}{'wall':>10s}{'CPU':>10s}")
    for label, key, note in lines:
        print(f"{label:<52}{1000 * value(parts, key):>7.2f} ms{1000 * value(cpu, key):>7.2f} ms{note}")
    print(f"\nengine step / its weight products: {parts['engine step'] / parts['weight products']:.2f} (wall), "
          f"{cpu['engine step'] / cpu['weight products']:.2f} (CPU)")
    for name, t, per_token in (("wall", parts, alone[0]), ("CPU", cpu, alone[1])):
        at_most, unshared_only = bounds(t, rows, per_token)
        print(f"{name}: per token {1000 * t['engine step'] / rows:.3f} ms in the batch, {1000 * per_token:.3f} ms "
              f"generating alone: in the steady state, continuous batching is at most {at_most:.1f}x sequential "
              f"generation; with nothing but the work no batch shares (products, attention, sampling, "
              f"detokenizing: {1000 * sum(t[n] for n in UNSHARED) / rows:.3f} ms a token) it could reach "
              f"{unshared_only:.1f}x")
