"""`tinyinfer bench decode`: prefill and decode speed, next to the two numbers that give them meaning.

1. The memory-bandwidth bound. A decode step of one sequence reads every weight once, so
   tokens/s <= bandwidth / bytes of weights. The bandwidth is measured here, in the same run, as decode reads
   memory: a matrix-vector product over a large matrix, in the matrix library's threads (those decode's
   products use; `memory.measure_read_bandwidth`). The ratio says how close the NumPy forward pass comes to
   what the memory allows. The bytes are those the model holds (`quantize.weight_nbytes`): a GGUF model kept
   quantised (`--keep-quantized`) reads its blocks, about the file's size.
2. Hugging Face transformers (when installed, on an HF checkpoint): its own cached greedy `generate` on the
   same weights with the same thread count, against tinyinfer's own `generate`, both timed the same way:
   decode time = generate(N + 1 tokens) - generate(1 token).
3. On the GPU, the serving engine on the same one sequence, its decode steps replayed as CUDA graphs and run eager
   (`--enforce-eager`): one launch per step against a few hundred (tinyinfer/engine/cuda_graphs.py).

The two runtimes are timed in alternation for a few rounds and each keeps its best round: on a machine
shared with other work, a burst of load then slows one round of both, not one runtime.

    python -m tinyinfer bench decode --random gpt2-124m          # a GPT-2-124M-shaped random checkpoint
    python -m tinyinfer bench decode --model path/to/hf-folder --tokens 64
    python -m tinyinfer bench decode --model smollm2-135m-instruct --keep-quantized --no-hf
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

import tinyinfer
from tinyinfer.commands import at_least
from tinyinfer.engine import LLM
from tinyinfer.engine.cuda_graphs import graph_unsupported
from tinyinfer.errors import TinyInferError
from tinyinfer.memory import measure_read_bandwidth, param_count, resident_bytes
from tinyinfer.quantize import weight_nbytes
from tinyinfer.sampling import SamplingParams

RANDOM_SHAPES = {  # name -> (transformers config class, its arguments)
    "gpt2-124m": ("GPT2Config", {}),
    "llama-110m": ("LlamaConfig", dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                                       num_attention_heads=12, num_key_value_heads=12, vocab_size=32000)),
    # Llama-3.2-1B's own config (1.24B parameters): the shape to judge a GPU's decode by
    "llama-1b": ("LlamaConfig", dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                                     num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                                     max_position_embeddings=131072, rope_theta=500000.0, tie_word_embeddings=True)),
}


def add_arguments(parser) -> None:
    parser.add_argument("--model", help="model folder, llama2.c file, built-in name or repo id (default: built-in)")
    parser.add_argument("--random", choices=sorted(RANDOM_SHAPES), help="build a random-weight checkpoint of this shape")
    parser.add_argument("--prompt-tokens", type=at_least(1), default=64, help="prompt length for the prefill measurement")
    parser.add_argument("--tokens", type=at_least(1), default=64, help="decode steps to time")
    parser.add_argument("--threads", type=at_least(1), default=os.cpu_count(), help="threads for PyTorch (NumPy uses OpenBLAS's)")
    parser.add_argument("--rounds", type=at_least(1), default=5, help="alternating timing rounds; the best of each runtime counts")
    parser.add_argument("--no-hf", action="store_true", help="skip the transformers comparison")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where tinyinfer runs; on cuda the bound is the GPU's measured memory bandwidth")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16"],
                        help="weights and compute dtype (float16 halves the bytes a decode step reads)")
    parser.add_argument("--keep-quantized", action="store_true",
                        help="a .gguf model's weights stay quantised, dequantised at every product (chapter 12)")


def blas_threads() -> int:
    """The threads of the matrix library NumPy's products run in (threadpoolctl's view)."""
    from threadpoolctl import threadpool_info  # noqa: PLC0415

    return max((pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"), default=1)


def build_random_checkpoint(shape: str, folder: Path) -> Path:
    """Save a random-weight HF checkpoint of a known shape (needs transformers and torch)."""
    try:
        import torch  # noqa: PLC0415
        import transformers  # noqa: PLC0415
    except ImportError as e:
        raise TinyInferError("--random needs transformers and torch: pip install -e '.[dev]'") from e
    class_name, kwargs = RANDOM_SHAPES[shape]
    torch.manual_seed(0)
    config = getattr(transformers, class_name)(**kwargs)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


def time_tinyinfer(model, prompt: list[int], n_tokens: int) -> tuple[float, float]:
    """(prefill tokens/s, decode tokens/s) of tinyinfer's greedy `generate`, timed as transformers' is below:
    decode time = generate(N + 1 tokens) - generate(1 token), the whole user-facing loop included."""
    def generate_s(n: int) -> float:
        start = time.perf_counter()
        model.generate(prompt, temperature=0.0, max_tokens=n, ignore_eos=True)
        return time.perf_counter() - start

    generate_s(2)  # warm-up
    first = generate_s(1)  # prefill + first token
    full = generate_s(n_tokens + 1)
    return len(prompt) / first, n_tokens / (full - first)


def engine_timer(model, prompt: list[int], n_tokens: int, enforce_eager: bool):
    """A function timing the serving engine's greedy decode of one sequence, as `time_tinyinfer` times generate ->
    (prefill tokens/s, decode tokens/s): on the GPU its decode steps replay as CUDA graphs, or run eager."""
    llm = LLM(model, max_num_seqs=1, n_blocks=-(-(len(prompt) + n_tokens + 2) // 16), enforce_eager=enforce_eager)

    def generate_s(n: int) -> float:
        start = time.perf_counter()
        llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True))
        return time.perf_counter() - start

    def time_engine() -> tuple[float, float]:
        first = generate_s(1)
        full = generate_s(n_tokens + 1)
        return len(prompt) / first, n_tokens / (full - first)

    generate_s(2)  # warm-up (the first decode step captures the graph)
    return time_engine


def hf_timer(folder: Path, prompt: list[int], n_tokens: int, threads: int):
    """A function timing transformers' cached greedy generate -> (prefill tokens/s, decode tokens/s), or None
    if transformers is not installed."""
    try:
        import torch  # noqa: PLC0415
        import transformers  # noqa: PLC0415
    except ImportError:
        return None
    torch.set_num_threads(threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = torch.tensor([prompt])

    def generate_s(n: int) -> float:
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, use_cache=True,
                           pad_token_id=0, attention_mask=torch.ones_like(ids))
        return time.perf_counter() - start

    def time_hf() -> tuple[float, float]:
        first = generate_s(1)  # prefill + first token
        full = generate_s(n_tokens + 1)
        return len(prompt) / first, n_tokens / (full - first)

    generate_s(2)  # warm-up
    return time_hf


def best_of_rounds(timers: dict, rounds: int) -> dict:
    """Run each timer once per round, in alternation; keep each one's best (prefill, decode) tokens/s."""
    best = {name: (0.0, 0.0) for name in timers}
    for _ in tqdm(range(rounds), desc="timing rounds", leave=False):
        for name, timer in timers.items():
            prefill, decode = timer()
            best[name] = (max(best[name][0], prefill), max(best[name][1], decode))
    return best


def run(args) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        source = build_random_checkpoint(args.random, Path(tmp)) if args.random else args.model
        model = tinyinfer.load(source, device=args.device, dtype=args.dtype, keep_quantized=args.keep_quantized)
        cfg = model.config
        if args.prompt_tokens + args.tokens + 1 > cfg.max_seq_len:
            raise TinyInferError(f"--prompt-tokens + --tokens must fit the context window ({cfg.max_seq_len})")
        prompt = np.random.default_rng(0).integers(0, cfg.vocab_size, args.prompt_tokens).tolist()
        weight_bytes = weight_nbytes(model)
        held = "kept quantised" if args.keep_quantized else f"as {model.dtype}"
        print(f"model: {source} ({cfg.model_type}, {model.n_params / 1e6:.1f}M parameters, "
              f"{weight_bytes / 2**20:.0f} MiB {held}; process resident {resident_bytes() / 2**20:.0f} MiB)")
        print(f"threads: numpy's matrix library {blas_threads()}, torch {args.threads}")
        bandwidth = measure_read_bandwidth(repeats=10, xp=model.xp)  # the memory the weights live in
        # one decode step reads every weight once; of a Mixture-of-Experts only the chosen experts (tinyinfer/moe.py)
        active = param_count(cfg, active=True) / param_count(cfg) if cfg.n_experts else 1.0
        read_bytes = weight_bytes * active
        bound = bandwidth / read_bytes
        timers = {"tinyinfer": lambda: time_tinyinfer(model, prompt, args.tokens)}
        if args.device == "cuda" and graph_unsupported(model) is None:  # the engine's step, as CUDA graphs and eager
            timers |= {f"engine, {kind}": engine_timer(model, prompt, args.tokens, kind == "eager")
                       for kind in ("CUDA graphs", "eager")}
        hf_folder = Path(source) if source and Path(source).is_dir() else None
        skip_hf = args.no_hf or hf_folder is None or args.device != "cpu"  # transformers here runs on the CPU
        hf = None if skip_hf else hf_timer(hf_folder, prompt, args.tokens, args.threads)
        if hf is not None:
            timers["transformers"] = hf
        best = best_of_rounds(timers, args.rounds)
        prefill, decode = best["tinyinfer"]
        memory = "GPU memory" if args.device == "cuda" else "memory"
        print(f"{memory} bandwidth (measured matrix-vector read, decode's threads): {bandwidth / 1e9:.1f} GB/s "
              f"-> decode bound {bound:.1f} tokens/s")
        print(f"tinyinfer:    prefill {prefill:8.1f} tokens/s   decode {decode:7.1f} tokens/s   "
              f"= {decode / bound:.0%} of the bandwidth bound   (best of {args.rounds} rounds)")
        if "engine, eager" in best:
            (_, graphed), (_, eager) = best["engine, CUDA graphs"], best["engine, eager"]
            print(f"engine, one sequence: decode {graphed:7.1f} tokens/s with CUDA graphs, {eager:7.1f} eager "
                  f"(--enforce-eager): {graphed / eager:.2f}x, {graphed / bound:.0%} of the bandwidth bound")
        if hf is not None:
            hf_prefill, hf_decode = best["transformers"]
            print(f"transformers: prefill {hf_prefill:8.1f} tokens/s   decode {hf_decode:7.1f} tokens/s")
            print(f"ratio tinyinfer / transformers: prefill {prefill / hf_prefill:.2f}x   decode {decode / hf_decode:.2f}x")
    return 0
