"""`tinyinfer bench moe`: a Mixture-of-Experts model against a dense one with the same *active* parameters.

A MoE token passes through k experts; a dense model whose MLP is as wide as those k experts together does the
same arithmetic per token and reads about the same bytes of weights per decode step. What is left is the
price of routing (a softmax over experts, a sort, k smaller matrix products instead of one) and, in prefill,
each expert working on only its share of the prompt.

The two models are timed in alternation in one process (a prefill of each, in turn, then one decode step of
each, in turn), so both see the same machine load; the medians give the ratio.

    python -m tinyinfer bench moe                                 # builds the pair below (needs transformers)
    python -m tinyinfer bench moe --moe PATH --dense PATH         # any two models
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

import tinyinfer
from tinyinfer.commands import at_least
from tinyinfer.errors import TinyInferError
from tinyinfer.memory import param_count
from tinyinfer.model import SeqChunk

# The built pair: 8 experts of width 1024, top-2, against a dense MLP of width 2 x 1024.
PAIR_SHAPE = dict(d=512, layers=4, experts=8, top_k=2, expert_width=1024, vocab=8192)


def add_arguments(parser) -> None:
    parser.add_argument("--moe", help="a Mixture-of-Experts model (default: build a random Mixtral-shaped one)")
    parser.add_argument("--dense", help="a dense model to compare with (default: build one with equal active parameters)")
    parser.add_argument("--prompt-tokens", type=at_least(1), default=64, help="prompt length for the prefill measurement")
    parser.add_argument("--tokens", type=at_least(1), default=64, help="decode steps to time")


def build_pair(folder: Path, d: int, layers: int, experts: int, top_k: int, expert_width: int,
               vocab: int) -> tuple[Path, Path]:
    """Save a random Mixtral-shaped checkpoint and a dense Llama whose MLP is as wide as top_k experts (equal
    active parameters but for the router's d x E), with transformers' own init: speed ignores the values."""
    try:
        import torch  # noqa: PLC0415
        import transformers  # noqa: PLC0415
    except ImportError as e:
        raise TinyInferError("building the pair needs transformers and torch: pip install -e '.[dev]', or give "
                             "--moe and --dense") from e
    common = dict(vocab_size=vocab, hidden_size=d, num_hidden_layers=layers, num_attention_heads=8,
                  num_key_value_heads=4, max_position_embeddings=512, tie_word_embeddings=False)
    configs = {"moe": transformers.MixtralConfig(**common, intermediate_size=expert_width, num_local_experts=experts,
                                                 num_experts_per_tok=top_k),
               "dense_same_active": transformers.LlamaConfig(**common, intermediate_size=top_k * expert_width)}
    torch.manual_seed(0)
    for name, config in configs.items():
        transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder / name)
    return folder / "moe", folder / "dense_same_active"


def time_alternating(models: dict, prompt: list[int], n_tokens: int, repeats: int = 3) -> dict:
    """name -> (median prefill seconds, median decode-step seconds), the models timed in turn."""
    prefill = {name: [] for name in models}
    steps = {name: [] for name in models}
    state = {}
    for _ in range(repeats):
        for name, model in models.items():
            cache = model.new_cache(1, len(prompt) + n_tokens + 1)
            start = time.perf_counter()
            logits = model.forward([SeqChunk(0, 0, prompt)], cache)  # [1, V]
            prefill[name].append(time.perf_counter() - start)
            state[name] = (cache, logits)
    for position in range(len(prompt), len(prompt) + n_tokens):
        for name, model in models.items():
            cache, logits = state[name]
            start = time.perf_counter()
            logits = model.forward([SeqChunk(0, position, [int(logits[0].argmax())])], cache)  # greedy step
            steps[name].append(time.perf_counter() - start)
            state[name] = (cache, logits)
    return {name: (float(np.median(prefill[name])), float(np.median(steps[name]))) for name in models}


def run(args) -> int:
    if (args.moe is None) != (args.dense is None):
        raise TinyInferError("give both --moe and --dense, or neither (then a matched pair is built)")
    with tempfile.TemporaryDirectory() as tmp:
        paths = (args.moe, args.dense) if args.moe else build_pair(Path(tmp), **PAIR_SHAPE)
        models = {"moe": tinyinfer.load(paths[0]), "dense": tinyinfer.load(paths[1])}
        if not models["moe"].config.n_experts:
            raise TinyInferError(f"--moe {paths[0]} is a dense model: give a Mixture-of-Experts checkpoint")
        vocab = min(model.config.vocab_size for model in models.values())
        limit = min(model.config.max_seq_len for model in models.values())
        if args.prompt_tokens + args.tokens + 1 > limit:
            raise TinyInferError(f"--prompt-tokens + --tokens must fit the context window ({limit})")
        prompt = np.random.default_rng(0).integers(0, vocab, args.prompt_tokens).tolist()
        for name, model in models.items():
            cfg = model.config
            print(f"{name:6s} {paths[0] if name == 'moe' else paths[1]}: {cfg.model_type}, {param_count(cfg) / 1e6:.1f}M "
                  f"parameters, {param_count(cfg, active=True) / 1e6:.1f}M active per token")
        times = time_alternating(models, prompt, args.tokens)
    print(f"{'':18s}{'prefill tokens/s':>18s}{'decode tokens/s':>18s}")
    for name, (prefill_s, step_s) in times.items():
        print(f"{name:18s}{args.prompt_tokens / prefill_s:18.1f}{1 / step_s:18.1f}")
    (moe_prefill, moe_step), (dense_prefill, dense_step) = times["moe"], times["dense"]
    print(f"{'ratio moe / dense':18s}{dense_prefill / moe_prefill:17.2f}x{dense_step / moe_step:17.2f}x")
    return 0
