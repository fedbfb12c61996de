"""Qwen2-MoE: a Mixture-of-Experts (tinyinfer/families/mixtral.py) with a gated shared expert and q/k/v biases
(`qkv_bias`); layers in `mlp_only_layers`, or off the `decoder_sparse_step` grid, keep a dense MLP. With
`use_sliding_window`, the even layers below `max_window_layers` attend through a window."""

from __future__ import annotations

from tinyinfer.families.common import switched_window_from
from tinyinfer.families.family import Family
from tinyinfer.families.llama import LLAMA_LIKE
from tinyinfer.families.mixtral import load_moe_params, read_moe
from tinyinfer.families.qwen2 import QWEN_WINDOW
from tinyinfer.gguf.architectures import EXPERT_TENSORS, LLAMA_TENSORS, GGUFLayout, expert_config, llama_like_config, named

DEFAULTS = dict(LLAMA_LIKE | QWEN_WINDOW, max_position_embeddings=32768, num_key_value_heads=16, qkv_bias=True,
                norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=None, shared_expert_intermediate_size=5632)


def moe_layers(c: dict) -> list[int]:
    """The layers whose MLP is routed: those on the `decoder_sparse_step` grid, but for `mlp_only_layers`."""
    n, step, dense = c["num_hidden_layers"], c["decoder_sparse_step"], set(c["mlp_only_layers"] or [])
    return [i for i in range(n) if i not in dense and (i + 1) % step == 0]


def read_config(c: dict) -> dict:
    return read_moe(c, ("qkv_bias", False, False), switched_window_from(lambda i, first: i % 2 == 0 and i < first),
                    moe_d_ff=c["moe_intermediate_size"], norm_topk_prob=c["norm_topk_prob"],
                    shared_expert_d_ff=c.get("shared_expert_intermediate_size") or 0, moe_layers=moe_layers(c))


def gguf_config(m, names: set) -> dict:
    return llama_like_config(m, names, "qwen2_moe") | expert_config(m) | {
        "shared_expert_intermediate_size": m.get("expert_shared_feed_forward_length", 0), "use_sliding_window": False,
        "mlp_only_layers": []}


GGUF_TENSORS = LLAMA_TENSORS | EXPERT_TENSORS | named({}, {
    "ffn_gate_shexp": "mlp.shared_expert.gate_proj", "ffn_up_shexp": "mlp.shared_expert.up_proj",
    "ffn_down_shexp": "mlp.shared_expert.down_proj", "ffn_gate_inp_shexp": "mlp.shared_expert_gate"})


def gguf_relayout(name: str, w, c: dict):
    """The shared expert's gate, a vector [d] in GGUF, is an nn.Linear(d, 1) weight [1, d] in the family's files."""
    return w.reshape(1, -1) if name == "ffn_gate_inp_shexp" else w


def gguf_reshaped(name: str, shape: tuple) -> tuple:
    return (1, *shape) if name == "ffn_gate_inp_shexp" else shape


FAMILY = Family("qwen2_moe", DEFAULTS, read_config, load_moe_params,
                gguf=GGUFLayout("qwen2moe", gguf_config, GGUF_TENSORS, gguf_relayout, gguf_reshaped, experts=True))
