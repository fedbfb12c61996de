"""Build tiny random-weight Hugging Face checkpoints for parity tests, offline, in seconds.

Each checkpoint is a real HF folder (`config.json`, `model.safetensors`, `generation_config.json`) written
by transformers itself from a config object, so tinyinfer's loader meets exactly what the Hub holds, plus a
small byte-level BPE `tokenizer.json` so that text prompts and the CLI work on it too.

Why the weights are re-randomised: a freshly built model has every norm weight equal to 1 and every bias
equal to 0, so a loader that swapped two norms, or dropped a bias, would still give the right logits. Here
every parameter gets fresh values with a large spread (matrices and biases ~ N(0, 0.3^2), norm weights
~ U(0.5, 1.5)) so that any wrong mapping moves the logits far beyond the test tolerance and the logits are far
from flat (standard deviation ~2, so greedy picks are not near-ties). A larger spread would not help: float32
rounding alone already moves these logits by ~2e-5 from a float64 run, and it grows with the spread.

Two config.json dialects are found in the wild, and both are written:
- "new" (transformers >= 5): RoPE as `rope_parameters` {"rope_type", "rope_theta", ...}, `dtype`;
- "old" (older transformers, most Hub checkpoints): top-level `rope_theta`, `rope_scaling` (the oldest
  files spell its kind `type`, newer ones `rope_type`), `torch_dtype`, and for GPT-2 no
  `tie_word_embeddings` at all.

Usage:
    python weights_scripts/make_tiny_models.py OUT_DIR [VARIANT ...]   # all variants when none is named

or from Python: `build_tiny_checkpoint("llama", out_dir, num_key_value_heads=1)`,
`build_variant("mistral_window", out_dir)`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import safetensors.torch
import tokenizers
import torch
import transformers

ARCHS = ("gpt2", "llama", "mistral", "qwen2", "qwen3")
VOCAB_SIZE = 300  # 256 byte tokens + 3 special tokens + merges learnt from TOKENIZER_TEXT
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>"]  # ids 0, 1, 2
BOS_ID, EOS_ID = 1, 2
INIT_STD = 0.3  # of every matrix and bias; norm weights are drawn from U(0.5, 1.5)
TOKENIZER_TEXT = (
    "Once upon a time there was a tiny model. The tiny model read the tiny text, and the text was "
    "about a tiny model that read the text. It was a time of tiny things, once and again. "
) * 4

# Small shapes shared by every architecture; a variant overrides what it tests.
_BASE_LLAMA_LIKE = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 48,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 12,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "bos_token_id": BOS_ID,
    "eos_token_id": EOS_ID,
}
_BASE = {
    "gpt2": {
        "vocab_size": VOCAB_SIZE, "n_embd": 48, "n_layer": 2, "n_head": 4, "n_positions": 128,
        "bos_token_id": BOS_ID, "eos_token_id": EOS_ID,
    },
    "llama": _BASE_LLAMA_LIKE,
    "mistral": {**_BASE_LLAMA_LIKE, "sliding_window": None},
    "qwen2": _BASE_LLAMA_LIKE,
    "qwen3": _BASE_LLAMA_LIKE,
}
_CONFIG_CLASS = {
    "gpt2": "GPT2Config",
    "llama": "LlamaConfig",
    "mistral": "MistralConfig",
    "qwen2": "Qwen2Config",
    "qwen3": "Qwen3Config",
}

# The llama3 thresholds are wavelengths 64/1 and 64/4 positions: with head_dim 12 and theta 10000 the six
# frequencies fall in all three bands (kept, smoothed, divided by the factor).
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 10000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}

LINEAR_ROPE = {"rope_type": "linear", "factor": 4.0, "rope_theta": 500.0}
_QWEN2_WINDOW_LAYERS = {
    "num_key_value_heads": 2, "use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1
}

# name -> (arch, config overrides, options). Options: dtype, dialect ("new"/"old"), max_shard_size (to write
# a sharded checkpoint with model.safetensors.index.json), config_edits (applied to the written config.json
# last, to reproduce what real files carry), rewrite_tensors (a TENSOR_REWRITES entry applied to the file).
VARIANTS: dict[str, tuple[str, dict, dict]] = {
    "gpt2": ("gpt2", {}, {}),
    "gpt2_old": ("gpt2", {"n_inner": 80}, {"dialect": "old"}),  # also an MLP width other than 4 x d_model
    "gpt2_hub_layout": ("gpt2", {}, {"dialect": "old", "rewrite_tensors": "gpt2_hub_layout"}),
    "llama": ("llama", {}, {}),
    "llama_old": ("llama", {}, {"dialect": "old"}),
    "llama_gqa": ("llama", {"num_key_value_heads": 2}, {}),
    "llama_mqa": ("llama", {"num_key_value_heads": 1}, {}),
    "llama_tied": ("llama", {"tie_word_embeddings": True}, {}),
    "llama_bias": ("llama", {"attention_bias": True, "mlp_bias": True}, {}),
    "llama_sharded": ("llama", {"num_key_value_heads": 2}, {"max_shard_size": "40KB"}),
    # head_dim (16) != hidden_size / heads (12): q/k/v/o projections are not square.
    "llama_head_dim": ("llama", {"head_dim": 16, "num_key_value_heads": 2}, {}),
    "llama_rope_linear": ("llama", {"rope_parameters": LINEAR_ROPE}, {}),
    "llama_rope_linear_old": (
        "llama",
        {"rope_parameters": LINEAR_ROPE},
        {"dialect": "old", "rope_kind_key": "type"},  # the oldest spelling: {"type": "linear", ...}
    ),
    "llama_rope_llama3": ("llama", {"rope_parameters": LLAMA3_ROPE}, {}),
    "llama_rope_llama3_old": ("llama", {"rope_parameters": LLAMA3_ROPE}, {"dialect": "old"}),
    # A window of 8 keys is far shorter than the 20-token test prompt, so it changes the logits.
    "mistral_window": ("mistral", {"sliding_window": 8, "num_key_value_heads": 2}, {}),
    "mistral_window_old": ("mistral", {"sliding_window": 8, "num_key_value_heads": 2}, {"dialect": "old"}),
    "mistral_no_window": ("mistral", {}, {}),
    "qwen2": ("qwen2", {"num_key_value_heads": 2, "tie_word_embeddings": True}, {}),
    # Real Qwen2 files carry a `sliding_window` number with `use_sliding_window: false`: no window applies.
    "qwen2_window_off_old": (
        "qwen2",
        {"num_key_value_heads": 2},
        {"dialect": "old", "config_edits": {"sliding_window": 8, "use_sliding_window": False, "max_window_layers": 1}},
    ),
    # Qwen's window applies from layer `max_window_layers` on, here to layer 1 only.
    "qwen2_window_layers": ("qwen2", _QWEN2_WINDOW_LAYERS, {}),
    "qwen2_window_layers_old": ("qwen2", _QWEN2_WINDOW_LAYERS, {"dialect": "old"}),
    "qwen3": ("qwen3", {"num_key_value_heads": 2, "head_dim": 16}, {}),
    "qwen3_old": ("qwen3", {"num_key_value_heads": 2, "head_dim": 16}, {"dialect": "old"}),
    "llama_fp16": ("llama", {"num_key_value_heads": 2}, {"dtype": "float16"}),
    "llama_bf16": ("llama", {"num_key_value_heads": 2}, {"dtype": "bfloat16"}),
    "gpt2_fp16": ("gpt2", {}, {"dtype": "float16"}),
    "qwen3_bf16": ("qwen3", {"num_key_value_heads": 2}, {"dtype": "bfloat16", "dialect": "old"}),
}


def make_config(arch: str, **overrides) -> transformers.PretrainedConfig:
    """The HF config object of a tiny `arch` model; `overrides` are HF config fields."""
    if arch not in ARCHS:
        raise ValueError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}")
    config_class = getattr(transformers, _CONFIG_CLASS[arch])
    return config_class(**{**_BASE[arch], **overrides})


def randomise_(model: torch.nn.Module, seed: int) -> None:
    """Give every parameter fresh, widely spread values (see the module docstring for why)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():  # tied tensors are listed once
            if param.ndim == 1 and not name.endswith("bias"):  # a norm's scale
                values = 0.5 + torch.rand(param.shape, generator=generator)
            else:
                values = torch.randn(param.shape, generator=generator) * INIT_STD
            param.copy_(values)


def build_tiny_checkpoint(
    arch: str, out_dir: str | Path, dtype: str = "float32", *, dialect: str = "new", seed: int = 0,
    rope_kind_key: str = "rope_type", config_edits: dict | None = None, max_shard_size: str | None = None,
    rewrite_tensors: str | None = None, **overrides,
) -> Path:
    """Write a tiny random `arch` checkpoint to `out_dir` and return the folder.

    `overrides` are HF config fields (e.g. `num_key_value_heads=1`); `dtype` is the stored weight dtype
    ("float32", "float16", "bfloat16"); `dialect` "old" rewrites config.json the way older transformers
    wrote it; `config_edits` are set in config.json last; `max_shard_size` (e.g. "40KB") splits the weights
    into several safetensors files with an index; `rewrite_tensors` names a TENSOR_REWRITES entry applied to
    the saved (single-file) model.safetensors.
    """
    out_dir = Path(out_dir)
    config = make_config(arch, **overrides)
    model = transformers.AutoModelForCausalLM.from_config(config)
    randomise_(model, seed)
    model = model.to(getattr(torch, dtype))
    model.save_pretrained(out_dir, **({"max_shard_size": max_shard_size} if max_shard_size else {}))
    make_tokenizer().save(str(out_dir / "tokenizer.json"))
    generation = transformers.GenerationConfig(bos_token_id=BOS_ID, eos_token_id=EOS_ID, do_sample=False)
    generation.save_pretrained(out_dir)
    config_path = out_dir / "config.json"
    config_dict = json.loads(config_path.read_text())
    if dialect == "old":
        config_dict = to_old_dialect(config_dict, rope_kind_key)
    config_dict.update(config_edits or {})
    config_path.write_text(json.dumps(config_dict, indent=2, sort_keys=True) + "\n")
    if rewrite_tensors:
        weights_path = out_dir / "model.safetensors"
        tensors = TENSOR_REWRITES[rewrite_tensors](safetensors.torch.load_file(weights_path), config_dict)
        safetensors.torch.save_file(tensors, weights_path, metadata={"format": "pt"})
    return out_dir


def gpt2_hub_layout(tensors: dict, config: dict) -> dict:
    """The layout of the Hub's original GPT-2 files: names without the `transformer.` prefix, and each layer's
    causal-mask buffer `h.{i}.attn.bias` [1, 1, n_positions, n_positions] stored beside the weights."""
    tensors = {name.removeprefix("transformer."): tensor for name, tensor in tensors.items()}
    n = config["n_positions"]
    mask = torch.tril(torch.ones(n, n)).view(1, 1, n, n)  # [n, n] -> [1, 1, n, n]
    return {**tensors, **{f"h.{i}.attn.bias": mask.clone() for i in range(config["n_layer"])}}


TENSOR_REWRITES = {"gpt2_hub_layout": gpt2_hub_layout}


def make_tokenizer() -> tokenizers.Tokenizer:
    """A byte-level BPE tokenizer (the GPT-2 kind) with at most VOCAB_SIZE ids, learnt from TOKENIZER_TEXT."""
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([TOKENIZER_TEXT], trainer)
    return tokenizer


def to_old_dialect(config: dict, rope_kind_key: str = "rope_type") -> dict:
    """Rewrite a transformers-5 config.json dict the way older transformers wrote it.

    {"rope_parameters": {"rope_type": "linear", "rope_theta": 500.0, "factor": 4.0}, "dtype": "float32"}
    -> {"rope_theta": 500.0, "rope_scaling": {"type": "linear", "factor": 4.0}, "torch_dtype": "float32"}
    (with rope_kind_key="type"; "default" RoPE has `rope_scaling: null`).
    """
    config = dict(config)
    if "dtype" in config:
        config["torch_dtype"] = config.pop("dtype")
    if "rope_parameters" in config:
        rope = dict(config.pop("rope_parameters"))
        config["rope_theta"] = rope.pop("rope_theta")
        kind = rope.pop("rope_type", "default")
        config["rope_scaling"] = None if kind == "default" else {rope_kind_key: kind, **rope}
    config.pop("layer_types", None)  # derived from the window fields by newer transformers
    if config.get("model_type") == "gpt2":
        config.pop("tie_word_embeddings", None)  # GPT-2 files predate the field (it is tied)
    return config


def build_variant(name: str, out_dir: str | Path) -> Path:
    """Build the named entry of VARIANTS into `out_dir`."""
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; choose one of {', '.join(VARIANTS)}")
    arch, overrides, options = VARIANTS[name]
    return build_tiny_checkpoint(arch, out_dir, **options, **overrides)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="a folder per variant is written inside it")
    parser.add_argument("variants", nargs="*", help=f"default: all of {', '.join(VARIANTS)}")
    args = parser.parse_args()
    for name in args.variants or VARIANTS:
        print(build_variant(name, args.out_dir / name))


if __name__ == "__main__":
    main()
