"""Mixtral: a Mistral whose every MLP is a Mixture-of-Experts (tinyinfer/moe.py): experts as wide as
`intermediate_size`, the chosen weights always renormalised. The other MoE families read like it
(`read_moe`, `moe_mlp`).

Files store one tensor set per expert, model.layers.{i}.block_sparse_moe.gate.weight (the router) and
...experts.{e}.w1 (gate) / w3 (up) / w2 (down); Qwen and OLMoE name them mlp.gate and mlp.experts.{e}.gate_proj /
up_proj / down_proj; transformers 5's fused experts are accepted too (tinyinfer/weights.py `experts`).
"""

from __future__ import annotations

from tinyinfer.config import Config
from tinyinfer.errors import TinyInferError
from tinyinfer.families.common import NO_BIASES, Biases, Sliding, expert_count, window_on_every_layer
from tinyinfer.families.family import Family
from tinyinfer.families.llama import LLAMA_LIKE, load_body, read_body
from tinyinfer.weights import Getter, experts, linear, swiglu_mlp
from tinyinfer.gguf.architectures import LLAMA_TENSORS, GGUFLayout, llama_like_config, llama_relayout, named

DEFAULTS = dict(LLAMA_LIKE, max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=1e6,
                num_key_value_heads=8, sliding_window=None)


def read_moe(c: dict, which_biases: Biases, sliding: Sliding, qk_norm: bool = False, **fields) -> dict:
    """A Llama body (`read_body`) whose layers route among `num_local_experts` (or `num_experts`) experts."""
    return dict(read_body(c, which_biases, sliding, qk_norm), n_experts=expert_count(c),
                n_experts_per_tok=c["num_experts_per_tok"], **fields)


def read_config(c: dict) -> dict:
    return read_moe(c, NO_BIASES, window_on_every_layer, moe_d_ff=c["intermediate_size"], norm_topk_prob=True)


def moe_mlp(get: Getter, cfg: Config, i: int, p: str | None = None,
            expert_names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")) -> dict:
    """Layer i's feed-forward under `p` (model.layers.{i}.mlp): a dense SwiGLU on non-MoE layers, else router +
    experts (+ Qwen2-MoE's gated shared expert)."""
    p = p or f"model.layers.{i}.mlp"
    if not cfg.is_moe_layer(i):
        return swiglu_mlp(get, p, cfg.d_model, cfg.d_ff, cfg.mlp_bias)
    d, E, ff, shared_ff = cfg.d_model, cfg.n_experts, cfg.moe_d_ff, cfg.shared_expert_d_ff
    try:
        mlp = {"router": linear(get, f"{p}.gate.weight", d, E), "experts": experts(get, cfg, p, expert_names)}
        if shared_ff:
            mlp["shared"] = swiglu_mlp(get, f"{p}.shared_expert", d, shared_ff)
            mlp["shared_gate"] = linear(get, f"{p}.shared_expert_gate.weight", d, 1)
    except TinyInferError as e:  # name the config fields the expected shape came from
        raise TinyInferError(f"{e}; config.json says num_experts={E}, hidden_size={d}, expert width {ff} "
                             f"(intermediate_size or moe_intermediate_size), shared_expert_intermediate_size={shared_ff}") from None
    return mlp


def mixtral_mlp(get: Getter, cfg: Config, i: int) -> dict:
    """Mixtral's experts under block_sparse_moe, w1 = gate, w3 = up, w2 = down (fused: under mlp, as Qwen's)."""
    if cfg.is_moe_layer(i) and not get.has(f"model.layers.{i}.mlp.experts.gate_up_proj"):
        return moe_mlp(get, cfg, i, f"model.layers.{i}.block_sparse_moe", ("w1", "w3", "w2"))
    return moe_mlp(get, cfg, i)


def load_params(get: Getter, cfg: Config) -> dict:
    return load_body(get, cfg, mixtral_mlp)


def load_moe_params(get: Getter, cfg: Config) -> dict:
    """A Llama body with `moe_mlp` feed-forwards (Qwen-MoE, OLMoE)."""
    return load_body(get, cfg, moe_mlp)


def gguf_config(m, names: set) -> dict:
    """Mixtral is written as llama with experts (expert_count), its q and k permuted as Llama's."""
    return llama_like_config(m, names, "mixtral") | {"num_local_experts": m["expert_count"],
                                                    "num_experts_per_tok": m["expert_used_count"], "sliding_window": None}


GGUF_TENSORS = LLAMA_TENSORS | named({}, {
    "ffn_gate_inp": "block_sparse_moe.gate", "ffn_gate_exps": "block_sparse_moe.experts.{e}.w1",
    "ffn_up_exps": "block_sparse_moe.experts.{e}.w3", "ffn_down_exps": "block_sparse_moe.experts.{e}.w2"})


FAMILY = Family("mixtral", DEFAULTS, read_config, load_params,
                gguf=GGUFLayout("llama", gguf_config, GGUF_TENSORS, relayout=llama_relayout, experts=True))
