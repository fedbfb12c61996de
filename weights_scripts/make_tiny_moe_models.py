"""Build tiny random-weight Mixture-of-Experts checkpoints (mixtral, qwen2_moe, qwen3_moe, olmoe) for parity tests.

The companion of make_tiny_models.py, and built the same way: transformers writes a real HF folder from a
config object, then every parameter is re-randomised with a large spread (`randomise_` there explains why;
for a router it also means each token's top-k experts are far from ties, so routing cannot flip on rounding).

Variants cover what differs between the families: Mixtral's `block_sparse_moe.experts.{e}.w1/w2/w3` names and
always-renormalised weights; Qwen2-MoE's shared expert with its sigmoid gate and q/k/v biases; Qwen3-MoE's
per-head q/k norm and `norm_topk_prob`; OLMoE's q/k norm over the whole projection; dense layers between MoE
ones (`mlp_only_layers`, `decoder_sparse_step`); many experts with few tokens (most experts idle); both
config.json dialects (old: `rope_theta`, `torch_dtype`, and `num_experts` where transformers 5 writes
`num_local_experts`); fp16 and bf16 files.

Usage:
    python weights_scripts/make_tiny_moe_models.py OUT_DIR [VARIANT ...]   # all variants when none is named
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch
import transformers


def _import_sibling(name: str):
    """weights_scripts/ is a folder of scripts, not a package: import make_tiny_models.py by its path."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


tiny = _import_sibling("make_tiny_models")

_BASE = dict(
    vocab_size=tiny.VOCAB_SIZE, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=False,
    bos_token_id=tiny.BOS_ID, eos_token_id=tiny.EOS_ID, pad_token_id=0, num_experts_per_tok=2,
)
_CONFIG_CLASS = {"mixtral": "MixtralConfig", "qwen2_moe": "Qwen2MoeConfig", "qwen3_moe": "Qwen3MoeConfig",
                 "olmoe": "OlmoeConfig"}
_FAMILY = {  # what each family needs beyond _BASE
    "mixtral": dict(num_local_experts=4),
    "qwen2_moe": dict(num_experts=4, moe_intermediate_size=32, shared_expert_intermediate_size=40),
    "qwen3_moe": dict(num_experts=4, moe_intermediate_size=32, head_dim=16, norm_topk_prob=True),
    "olmoe": dict(num_experts=4),
}

# name -> (family, config overrides, options: dtype, dialect)
VARIANTS: dict[str, tuple[str, dict, dict]] = {
    "mixtral": ("mixtral", {}, {}),
    "mixtral_old": ("mixtral", {}, {"dialect": "old"}),
    "mixtral_window": ("mixtral", {"sliding_window": 8}, {}),
    "mixtral_tied": ("mixtral", {"tie_word_embeddings": True, "num_experts_per_tok": 1}, {}),
    # 16 experts, top-2: a 4-token prompt fills at most 8 of them, so at least 8 receive no token at all
    "mixtral_16_experts": ("mixtral", {"num_local_experts": 16}, {}),
    "qwen2_moe": ("qwen2_moe", {}, {}),
    "qwen2_moe_old": ("qwen2_moe", {"norm_topk_prob": True}, {"dialect": "old"}),
    # layer 0 dense (mlp_only_layers), then every second layer routed (decoder_sparse_step 2): layers 1 and 3
    "qwen2_moe_sparse_step": ("qwen2_moe", {"num_hidden_layers": 4, "mlp_only_layers": [0], "decoder_sparse_step": 2}, {}),
    "qwen3_moe": ("qwen3_moe", {}, {}),
    "qwen3_moe_old": ("qwen3_moe", {"norm_topk_prob": False}, {"dialect": "old"}),
    "olmoe": ("olmoe", {}, {}),
    "olmoe_old": ("olmoe", {"num_experts_per_tok": 3, "norm_topk_prob": True}, {"dialect": "old"}),
    "mixtral_fp16": ("mixtral", {}, {"dtype": "float16"}),
    "qwen3_moe_bf16": ("qwen3_moe", {}, {"dtype": "bfloat16"}),
}


def make_config(family: str, **overrides) -> transformers.PretrainedConfig:
    """The HF config object of a tiny `family` model; `overrides` are HF config fields."""
    config_class = getattr(transformers, _CONFIG_CLASS[family])
    return config_class(**{**_BASE, **_FAMILY[family], **overrides})


def to_old_dialect(config: dict) -> dict:
    """make_tiny_models.to_old_dialect, plus the expert count under the name older files use (`num_experts`,
    except Mixtral's `num_local_experts`)."""
    config = tiny.to_old_dialect(config)
    if config["model_type"] != "mixtral" and "num_local_experts" in config:
        config["num_experts"] = config.pop("num_local_experts")
    return config


def build_tiny_moe_checkpoint(family: str, out_dir: str | Path, dtype: str = "float32", *, dialect: str = "new",
                              seed: int = 0, **overrides) -> Path:
    """Write a tiny random `family` checkpoint to `out_dir` (weights stored as `dtype`) and return the folder."""
    out_dir = Path(out_dir)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(make_config(family, **overrides))
    tiny.randomise_(model, seed)
    model.to(getattr(torch, dtype)).save_pretrained(out_dir)
    tiny.make_tokenizer().save(str(out_dir / "tokenizer.json"))
    transformers.GenerationConfig(bos_token_id=tiny.BOS_ID, eos_token_id=tiny.EOS_ID, do_sample=False).save_pretrained(out_dir)
    config_path = out_dir / "config.json"
    config = json.loads(config_path.read_text())
    if dialect == "old":
        config = to_old_dialect(config)
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return out_dir


def build_variant(name: str, out_dir: str | Path) -> Path:
    """Build the named entry of VARIANTS into `out_dir`."""
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; choose one of {', '.join(VARIANTS)}")
    family, overrides, options = VARIANTS[name]
    return build_tiny_moe_checkpoint(family, out_dir, **options, **overrides)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="a folder per variant is written inside it")
    parser.add_argument("variants", nargs="*", help=f"default: all of {', '.join(VARIANTS)}")
    args = parser.parse_args()
    transformers.utils.logging.disable_progress_bar()
    for name in args.variants or VARIANTS:
        print(build_variant(name, args.out_dir / name))


if __name__ == "__main__":
    main()
