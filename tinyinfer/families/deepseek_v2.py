"""DeepSeek-V2 (V2-Lite): a Llama body with multi-head latent attention (tinyinfer/mla.py) and, from layer
`first_k_dense_replace` on, a Mixture-of-Experts beside `n_shared_experts` always-on experts, fused into one
ungated SwiGLU of n_shared_experts x moe_intermediate_size. DeepSeek-V3 (tinyinfer/families/deepseek_v3.py) is
read and loaded by the same code. Their routers (tinyinfer/moe.py) differ:

    deepseek_v3  sigmoid scores, e_score_correction_bias steering the choice, groups ranked by their two
                 best scores; weights normalised with `norm_topk_prob`
    deepseek_v2  softmax probabilities; `topk_method` "greedy" (the top-k of all) or "group_limited_greedy"
                 (groups ranked by their best); never normalised

and both multiply the weights by `routed_scaling_factor`. V3 rotates neighbouring pairs with `rope_interleave`,
V2 always (its complex-number RoPE); the loader reorders them (`rope_columns`). `attention_bias`, V2's `mlp_bias`,
and the fields of DeepSeek's own files that transformers ignores, when not at the value it assumes
(`DEEPSEEK_IGNORED`), are refused.

Tensors:
    model.layers.{i}.self_attn.q_proj | q_a_proj, q_a_layernorm, q_b_proj;  kv_a_proj_with_mqa, kv_a_layernorm,
        kv_b_proj, o_proj
    model.layers.{i}.mlp.gate.weight, .gate.e_score_correction_bias, .experts..., .shared_experts.{gate,up,down}_proj
"""

from __future__ import annotations

import math

import numpy as np

from tinyinfer.config import Config
from tinyinfer.errors import TinyInferError, is_integer_at_least
from tinyinfer.families.common import NO_BIASES, rope
from tinyinfer.families.family import Family
from tinyinfer.families.llama import LLAMA_LIKE, load_body, read_body
from tinyinfer.weights import Getter, experts, halves_order, linear, swiglu_mlp

DEFAULTS = dict(LLAMA_LIKE, vocab_size=102400, num_key_value_heads=None, attention_bias=False, mlp_bias=False,
                first_k_dense_replace=0, kv_lora_rank=512, q_lora_rank=1536, n_group=None, n_routed_experts=64,
                n_shared_experts=2, qk_nope_head_dim=128, qk_rope_head_dim=64, routed_scaling_factor=1.0,
                topk_group=None, topk_method="greedy", norm_topk_prob=False, v_head_dim=128,
                num_experts_per_tok=None, moe_intermediate_size=1407)

# Fields of DeepSeek's original config.json files that transformers ignores, and the value it behaves as if they had
# (the releases' values): another value is refused, since DeepSeek's own code and transformers would differ
DEEPSEEK_IGNORED = {
    "deepseek_v2": {"scoring_func": "softmax", "norm_topk_prob": False, "moe_layer_freq": 1},
    "deepseek_v3": {"scoring_func": "sigmoid", "topk_method": "noaux_tc", "moe_layer_freq": 1},
}


def read_config(c: dict) -> dict:
    """DeepSeek-V2's or V3's config.json (by its model_type)."""
    model_type, n, E, k = c["model_type"], c["num_hidden_layers"], c["n_routed_experts"], c["num_experts_per_tok"]
    v3 = model_type == "deepseek_v3"
    method = "group_limited_greedy" if v3 else c["topk_method"]
    if method not in ("greedy", "group_limited_greedy"):
        raise TinyInferError(f"config.json ({model_type}): topk_method={method!r} is not supported (supported: greedy, "
                             "group_limited_greedy)")
    if not v3 and c["mlp_bias"]:
        raise TinyInferError("config.json (deepseek_v2): mlp_bias=true is not supported; only mlp_bias false, as in "
                             "the DeepSeek-V2 releases, is")
    for key, meant in DEEPSEEK_IGNORED[model_type].items():  # DeepSeek's own code reads them, transformers does not
        if c.get(key, meant) != meant:
            raise TinyInferError(f"config.json ({model_type}): {key}={c[key]!r} is not supported: transformers' "
                                 f"{model_type} ignores it (and runs as if {key}={meant!r}) where DeepSeek's own code "
                                 f"would not, so its meaning is unclear; only {meant!r} is supported")
    n_groups, topk_groups = (c["n_group"], c["topk_group"]) if method == "group_limited_greedy" else (1, 1)
    for key, value in (("n_group", n_groups), ("topk_group", topk_groups), ("num_experts_per_tok", k)):
        if not is_integer_at_least(value):
            raise TinyInferError(f"config.json ({model_type}): {key}={value!r} must be an integer >= 1")
    if E % n_groups or E // n_groups < 1 + v3 or topk_groups > n_groups or k > topk_groups * (E // n_groups):
        raise TinyInferError(f"config.json ({model_type}): n_routed_experts={E} in n_group={n_groups} groups, the best "
                             f"topk_group={topk_groups} kept, num_experts_per_tok={k}: the groups must be equal (and "
                             "of at least 2 experts in V3), topk_group at most n_group, and the kept groups hold at "
                             "least num_experts_per_tok experts")
    return dict(read_latent_attention(c), n_experts=E, n_experts_per_tok=k, moe_d_ff=c["moe_intermediate_size"],
                norm_topk_prob=bool(v3 and c["norm_topk_prob"]),
                shared_expert_d_ff=c["moe_intermediate_size"] * c["n_shared_experts"], shared_expert_gated=False,
                router="sigmoid_grouped" if v3 else "softmax_grouped", n_groups=n_groups, topk_groups=topk_groups,
                routed_scaling=c["routed_scaling_factor"], moe_layers=list(range(c["first_k_dense_replace"] or 0, n)))


def read_latent_attention(c: dict) -> dict:
    """The attention of DeepSeek-V2 and V3: one key/value head of kv_lora_rank + qk_rope_head_dim numbers in the
    cache, and the score scale (qk_nope_head_dim + qk_rope_head_dim)^-1/2, times mscale(factor, mscale_all_dim)^2
    under a scaled RoPE that gives mscale_all_dim (as transformers' yarn_apply_mscale). num_key_value_heads is not
    read: every head's key and value come from the one latent (the releases set it to num_attention_heads)."""
    model_type, n_heads = c["model_type"], c["num_attention_heads"]
    if c["attention_bias"]:
        raise TinyInferError(f"config.json ({model_type}): attention_bias=true (biases on q_a_proj, kv_a_proj_with_mqa "
                             "and o_proj) is not supported; only attention_bias false, as in the DeepSeek releases, is")
    sizes = {key: c[key] for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")}
    if c["q_lora_rank"] is not None:
        sizes["q_lora_rank"] = c["q_lora_rank"]
    for key, value in sizes.items():
        if not is_integer_at_least(value) or (key == "qk_rope_head_dim" and value % 2):
            raise TinyInferError(f"config.json ({model_type}): {key}={value!r} must be an integer >= 1"
                                 f"{' and even (RoPE rotates pairs)' if key == 'qk_rope_head_dim' else ''}")
    theta, scaling = rope(c)
    params = c.get("rope_scaling") or c.get("rope_parameters") or {}
    scale = (sizes["qk_nope_head_dim"] + sizes["qk_rope_head_dim"]) ** -0.5
    if params.get("rope_type", params.get("type", "default")) != "default" and params.get("mscale_all_dim"):
        factor = (scaling or params)["factor"]
        mscale = 1.0 if factor <= 1 else 0.1 * params["mscale_all_dim"] * math.log(factor) + 1.0
        scale = scale * mscale * mscale
    fields = read_body({**c, "num_key_value_heads": n_heads, "head_dim": 1}, NO_BIASES)  # the body's reading
    return dict(fields, n_kv_heads=1, head_dim=sizes["kv_lora_rank"] + sizes["qk_rope_head_dim"], rope_theta=theta,
                rope_scaling=scaling, attn_multiplier=scale, q_lora_rank=c["q_lora_rank"], **{
                    key: sizes[key] for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")},
                interleaved_rope=c.get("rope_interleave", True))  # V2: always


def latent_attention(get: Getter, cfg: Config, p: str) -> dict:
    """One layer's latent attention: {"q" | "q_a", "q_a_norm", "q_b"; "kv_a", "kv_a_norm", "kv_b_key" [H, dn, r],
    "kv_b_value" [H, r, dv], "o"}. kv_b_proj [H*(dn + dv), r] holds per head the key half (dn rows) then the value
    half (dv rows). With `interleaved_rope` (V3's rope_interleave; V2's complex numbers) the rotary coordinates of
    the queries and of the shared key (the last dr of each) pair neighbours in the file; they are reordered into
    tinyinfer's halves, as Cohere's are: moving q's and k's coordinates alike changes no dot product."""
    d, H, r, dr = cfg.d_model, cfg.n_heads, cfg.kv_lora_rank, cfg.qk_rope_head_dim
    dn, dv, ql = cfg.qk_nope_head_dim, cfg.v_head_dim, cfg.q_lora_rank
    q_columns, kv_columns = rope_columns(cfg)
    if ql:
        attn = {"q_a": linear(get, f"{p}.q_a_proj.weight", d, ql), "q_a_norm": get(f"{p}.q_a_layernorm.weight", (ql,)),
                "q_b": linear(get, f"{p}.q_b_proj.weight", ql, H * (dn + dr))[:, q_columns]}
    else:
        attn = {"q": linear(get, f"{p}.q_proj.weight", d, H * (dn + dr))[:, q_columns]}
    kv_b = get(f"{p}.kv_b_proj.weight", (H * (dn + dv), r)).reshape(H, dn + dv, r)  # [H*(dn + dv), r] -> [H, dn + dv, r]
    return attn | {"kv_a": linear(get, f"{p}.kv_a_proj_with_mqa.weight", d, r + dr)[:, kv_columns],
                   "kv_a_norm": get(f"{p}.kv_a_layernorm.weight", (r,)),
                   "kv_b_key": np.ascontiguousarray(kv_b[:, :dn]),  # [H, dn, r]
                   "kv_b_value": np.ascontiguousarray(kv_b[:, dn:].transpose(0, 2, 1)),  # [H, dv, r] -> [H, r, dv]
                   "o": linear(get, f"{p}.o_proj.weight", H * dv, d)}


def rope_columns(cfg: Config) -> tuple[np.ndarray, np.ndarray]:
    """The file's column behind each of tinyinfer's in q (H heads of dn + dr) and in kv_a (r + dr): the rotary
    part of each reordered from neighbouring pairs to halves with `interleaved_rope`, the rest in place.

    >>> cfg = Config("deepseek_v3", 10, 4, 1, 1, 1, 6, 4, 8, kv_lora_rank=2, qk_nope_head_dim=1, qk_rope_head_dim=4,
    ...              interleaved_rope=True)
    >>> [columns.tolist() for columns in rope_columns(cfg)]
    [[0, 1, 3, 2, 4], [0, 1, 2, 4, 3, 5]]
    """
    dn, dr, r = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.kv_lora_rank
    rotary = halves_order(1, dr) if cfg.interleaved_rope else np.arange(dr)  # [dr]
    head = np.concatenate([np.arange(dn), dn + rotary])  # [dn + dr]
    q_columns = (np.arange(cfg.n_heads)[:, None] * (dn + dr) + head).ravel()  # [H*(dn + dr)]
    return q_columns, np.concatenate([np.arange(r), r + rotary])


def mlp(get: Getter, cfg: Config, i: int) -> dict:
    """Layer i's feed-forward: dense below first_k_dense_replace, else router (+ the V3 bias), experts and the
    shared experts, one SwiGLU n_shared_experts x moe_intermediate_size wide (V2's router has no bias)."""
    p, d, E = f"model.layers.{i}.mlp", cfg.d_model, cfg.n_experts
    if not cfg.is_moe_layer(i):
        return swiglu_mlp(get, p, d, cfg.d_ff)
    layer = {"router": linear(get, f"{p}.gate.weight", d, E), "experts": experts(get, cfg, p)}
    if cfg.router == "sigmoid_grouped":
        layer["router_bias"] = get(f"{p}.gate.e_score_correction_bias", (E,))
    if cfg.shared_expert_d_ff:
        layer["shared"] = swiglu_mlp(get, f"{p}.shared_experts", d, cfg.shared_expert_d_ff)
    return layer


def load_params(get: Getter, cfg: Config) -> dict:
    return load_body(get, cfg, mlp, latent_attention)


FAMILY = Family("deepseek_v2", DEFAULTS, read_config, load_params)
