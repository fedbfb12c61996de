"""Phi (Phi-1, Phi-1.5, Phi-2): one LayerNorm (with bias) per layer whose output both sublayers read, side by side
(x = x + attention(norm(x)) + mlp(norm(x))), biases on q, k, v, the output projection `dense`, the GELU MLP (fc1,
fc2) and the LM head, and RoPE on the first `partial_rotary_factor` of each head (0.4 on Phi-2; 0.5 when the file
says nothing). `qk_layernorm` (LayerNorms on q and k per head) is not implemented: refused.

GGUF (llama.cpp's "phi2"): Llama's tensor names but the output projection (attn_output: dense), the MLP (ffn_up,
ffn_down: fc1, fc2) and the final norm (output_norm: final_layernorm), RoPE's width as rope.dimension_count. Files
converted from the original microsoft/phi-2 format hold q, k and v fused (attn_qkv): refused by name."""

from __future__ import annotations

from tinyinfer.config import Config
from tinyinfer.errors import TinyInferError
from tinyinfer.families.common import no_window
from tinyinfer.families.family import Family
from tinyinfer.families.llama import attention, read_body
from tinyinfer.weights import Getter, biased_mlp, embedding_table, norm, output_layer
from tinyinfer.gguf.architectures import LLAMA_TENSORS, GGUFLayout, llama_like_config, named, rotary_factor

DEFAULTS = dict(max_position_embeddings=2048, layer_norm_eps=1e-5, hidden_act="gelu_new", rope_theta=10000.0,
                tie_word_embeddings=False, num_key_value_heads=None, qk_layernorm=False)
PHI_PARTIAL_ROTARY_FACTOR = 0.5  # PhiConfig's default when config.json gives none (not a field of the class)


def read_config(c: dict) -> dict:
    if c.get("qk_layernorm"):
        raise TinyInferError("config.json (phi): qk_layernorm=true (LayerNorms on q and k) is not supported; only "
                             "qk_layernorm false, as in Phi-1, Phi-1.5 and Phi-2, is")
    params = dict(c.get("rope_scaling") or c.get("rope_parameters") or {})  # as PhiConfig reads the dialects
    factor = params.get("partial_rotary_factor", c.get("partial_rotary_factor", PHI_PARTIAL_ROTARY_FACTOR))
    fields = read_body({**c, "rms_norm_eps": c["layer_norm_eps"]}, (True, True, True), no_window)  # LayerNorm's eps
    return dict(fields, norm="layernorm", mlp="gelu_mlp", partial_rotary_factor=factor, parallel_residual=True,
                shared_input_norm=True, lm_head_bias=True)


def load_params(get: Getter, cfg: Config) -> dict:
    """Phi: one LayerNorm per layer (`shared_input_norm`), biases everywhere, the LM head's too."""
    layers = [{"attn_norm": norm(get, f"model.layers.{i}.input_layernorm", cfg),
               **attention(get, cfg, f"model.layers.{i}.self_attn", o_name="dense"),
               "mlp": biased_mlp(get, f"model.layers.{i}.mlp.fc1", f"model.layers.{i}.mlp.fc2", cfg.d_model, cfg.d_ff)}
              for i in range(cfg.n_layers)]
    embed = embedding_table(get, cfg)
    return {"embed": embed, "layers": layers, "final_norm": norm(get, "model.final_layernorm", cfg),
            "lm_head": output_layer(get, cfg, embed), "lm_head_bias": get("lm_head.bias", (cfg.vocab_size,))}


def gguf_config(m, names: set) -> dict:
    if "blk.0.attn_qkv.weight" in names:
        raise TinyInferError(f"{m.path}: a phi2 file with q, k and v fused (attn_qkv, converted from the original "
                             "microsoft/phi-2 format) is not supported; convert the Hugging Face PhiForCausalLM "
                             "checkpoint (separate q_proj, k_proj, v_proj) with convert_hf_to_gguf.py")
    c = llama_like_config(m, names, "phi")
    return c | {"layer_norm_eps": m["attention.layer_norm_epsilon"],
                "partial_rotary_factor": rotary_factor(m, c["head_dim"])}


GGUF_TENSORS = LLAMA_TENSORS | named({"output_norm": "model.final_layernorm"},
                                     {"attn_output": "self_attn.dense", "ffn_up": "mlp.fc1", "ffn_down": "mlp.fc2"})


FAMILY = Family("phi", DEFAULTS, read_config, load_params, gguf=GGUFLayout("phi2", gguf_config, GGUF_TENSORS))
