"""GPT-2: LayerNorms, learned positions, a GELU MLP, biases everywhere. Its Conv1D layers already store
[in, out]; q, k and v come stacked in one c_attn matrix. Some files name every tensor under "transformer.".
"""

from __future__ import annotations

from tinyinfer.config import Config
from tinyinfer.families.common import activation
from tinyinfer.families.family import Family
from tinyinfer.weights import Getter, embedding_table, norm, output_layer
from tinyinfer.gguf.architectures import GGUFLayout, named

DEFAULTS = dict(n_positions=1024, n_inner=None, layer_norm_epsilon=1e-5, activation_function="gelu_new",
                scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False, tie_word_embeddings=True)


def read_config(c: dict) -> dict:
    d = c["n_embd"]
    return dict(
        vocab_size=c["vocab_size"], d_model=d, n_layers=c["n_layer"], n_heads=c["n_head"],
        n_kv_heads=c["n_head"], head_dim=d // c["n_head"], d_ff=c["n_inner"] or 4 * d,
        max_seq_len=c["n_positions"], norm="layernorm", norm_eps=c["layer_norm_epsilon"],
        activation=activation(c["activation_function"]), mlp="gelu_mlp", position="learned",
        qkv_bias=True, o_bias=True, mlp_bias=True, tie_word_embeddings=c["tie_word_embeddings"],
        attn_scale_weights=c["scale_attn_weights"], attn_scale_inverse_layer=c["scale_attn_by_inverse_layer_idx"],
    )


EMBEDDING = "wte.weight"


def load_params(get: Getter, cfg: Config) -> dict:
    d = cfg.d_model
    layers = []
    for i in range(cfg.n_layers):
        p = f"h.{i}"
        layers.append({
            "attn_norm": norm(get, f"{p}.ln_1", cfg),
            "qkv": get(f"{p}.attn.c_attn.weight", (d, 3 * d)), "qkv_bias": get(f"{p}.attn.c_attn.bias", (3 * d,)),
            "o": get(f"{p}.attn.c_proj.weight", (d, d)), "o_bias": get(f"{p}.attn.c_proj.bias", (d,)),
            "mlp_norm": norm(get, f"{p}.ln_2", cfg),
            "mlp": {"up": get(f"{p}.mlp.c_fc.weight", (d, cfg.d_ff)), "up_bias": get(f"{p}.mlp.c_fc.bias", (cfg.d_ff,)),
                    "down": get(f"{p}.mlp.c_proj.weight", (cfg.d_ff, d)), "down_bias": get(f"{p}.mlp.c_proj.bias", (d,))},
        })
    embed = embedding_table(get, cfg, EMBEDDING)
    return {"embed": embed, "pos_embed": get("wpe.weight", (cfg.max_seq_len, d)), "layers": layers,
            "final_norm": norm(get, "ln_f", cfg), "lm_head": output_layer(get, cfg, embed)}


def gguf_config(m, names: set) -> dict:
    return {"model_type": "gpt2", "n_embd": m["embedding_length"], "n_layer": m["block_count"],
            "n_head": m["attention.head_count"], "n_positions": m["context_length"],
            "n_inner": m.get("feed_forward_length"), "layer_norm_epsilon": m["attention.layer_norm_epsilon"],
            "tie_word_embeddings": True}  # the converter writes the embedding again as output.weight


GGUF_CONV1D = {"attn_qkv": "attn.c_attn", "attn_output": "attn.c_proj", "ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"}
GGUF_TENSORS = named({"token_embd": "wte", "position_embd": "wpe", "output_norm": "ln_f", "output": "lm_head"},
                     {"attn_norm": "ln_1", "ffn_norm": "ln_2", **GGUF_CONV1D}, prefix="h.{i}.")


def gguf_relayout(name: str, w, c: dict):
    """GPT-2's Conv1D weights are [in, out]; the converter transposed them to [out, in]."""
    return w.T.copy() if w.ndim == 2 and name in GGUF_CONV1D else w


def gguf_reshaped(name: str, shape: tuple) -> tuple:
    return shape[::-1] if len(shape) == 2 and name in GGUF_CONV1D else shape


FAMILY = Family("gpt2", DEFAULTS, read_config, load_params, strip_prefixes=("transformer.",), embedding_name=EMBEDDING,
                gguf=GGUFLayout("gpt2", gguf_config, GGUF_TENSORS, gguf_relayout, gguf_reshaped))
