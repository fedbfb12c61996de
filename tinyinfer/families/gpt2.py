"""GPT-2: LayerNorms, learned positions, a GELU MLP, biases everywhere. Its Conv1D layers already store
[in, out]; q, k and v come stacked in one c_attn matrix. Some files name every tensor under "transformer.".
"""

from __future__ import annotations

from tinyinfer.config import Config
from tinyinfer.families.common import activation
from tinyinfer.families.family import Family
from tinyinfer.weights import Getter, embedding_table, norm, output_layer

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


FAMILY = Family("gpt2", DEFAULTS, read_config, load_params, strip_prefixes=("transformer.",), embedding_name=EMBEDDING)
