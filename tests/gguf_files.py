"""Tiny GGUF files for tests, written with the gguf package (llama.cpp's own writer and quantisers).

`write_gguf(folder, path, arch, qtype)` converts a tiny Hugging Face checkpoint (tests/tiny_models.py) as llama.cpp's
convert_hf_to_gguf.py does: metadata keys under the architecture's name, llama.cpp's tensor names, and its
re-layouts (Llama's q/k rows permuted for its rotary convention, 1 added to Gemma's norms, GPT-2's Conv1D weights
transposed, a layer's experts merged into one tensor, Falcon's and GPT-NeoX's q/k/v rows regrouped, StableLM 2's
per-head norms stacked, gpt-oss's fused experts split into gate, up and down); each architecture's metadata keys are those its converter class writes (cited where they
are written). The matrices are stored in `qtype`: through `gguf.quants.quantize` where it can (QUANTISABLE: F32
to Q5_1, TQ1_0, TQ2_0, MXFP4); the others (the K-quants, IQ4_NL, IQ4_XS, NVFP4, the codebook types), which it
cannot quantise, are *replaced* by random valid blocks (`random_blocks`): the file then defines the model, and
transformers reads the same file. Vectors and biases (gpt-oss's [E, ff] too) stay F32, as the converter keeps them.

`random_blocks(type, n)` builds blocks of any type with finite scales, for the dequantisers' tests.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import gguf
import numpy as np
import safetensors.numpy
import torch
import transformers
from gguf import GGMLQuantizationType as T

LEGACY = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")
K_QUANTS = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
NEWER = ("IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4")  # a non-linear grid, ternary weights, 4-bit floats
CODEBOOK = ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M")  # codes index iq_grids' tables
ALL_TYPES = LEGACY + K_QUANTS + NEWER + CODEBOOK
QUANTISABLE = LEGACY + ("TQ1_0", "TQ2_0", "MXFP4")  # the types gguf.quants.quantize writes

# byte offset of each float16 field in a block, and the value scale it gets (the weights then have |w| ~ 0.1-1)
F16_FIELDS = {"Q8_0": {0: 0.01}, "Q4_0": {0: 0.05}, "Q4_1": {0: 0.05, 2: 0.3}, "Q5_0": {0: 0.03},
              "Q5_1": {0: 0.03, 2: 0.3}, "Q2_K": {80: 0.02, 82: 0.02}, "Q3_K": {108: 0.01},
              "Q4_K": {0: 0.002, 2: 0.002}, "Q5_K": {0: 0.001, 2: 0.001}, "Q6_K": {208: 0.0005},
              "IQ4_NL": {0: 0.005}, "IQ4_XS": {0: 0.0002}, "TQ1_0": {52: 0.5}, "TQ2_0": {64: 0.3},
              "IQ2_XXS": {0: 0.005}, "IQ2_XS": {0: 0.005}, "IQ2_S": {0: 0.005}, "IQ3_XXS": {0: 0.002},
              "IQ3_S": {0: 0.002}, "IQ1_S": {0: 0.05}}
# IQ1_M's float16 d is split in four: its nibbles are the top nibbles of the block's last four u16 (bytes 48-55)
SPLIT_F16 = {"IQ1_M": (48, 0.05)}
# the one-byte scales, (first byte, end, lowest byte value, highest + 1): MXFP4's E8M0 exponent e means 2^(e - 128)
# per code unit (codes up to 12), so 122..125 give 2^-6..2^-3; NVFP4's UE4M3 bytes 0x18..0x2F have exponent
# fields 3..5, (1 to 1.875) x 2^-5..2^-3 per code unit
BYTE_FIELDS = {"MXFP4": (0, 1, 122, 126), "NVFP4": (0, 4, 0x18, 0x30)}


def random_blocks(type_name: str, n_blocks: int, seed: int = 0) -> np.ndarray:
    """`n_blocks` valid blocks of `type_name`: random bytes, each scale (F16_FIELDS, BYTE_FIELDS, SPLIT_F16) a
    finite positive value.  -> [n_blocks, bytes per block] (uint8)"""
    _, block_bytes = gguf.GGML_QUANT_SIZES[T[type_name]]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for offset, scale in F16_FIELDS.get(type_name, {}).items():
        values = (scale * rng.uniform(0.5, 1.5, size=n_blocks)).astype(np.float16)
        blocks[:, offset:offset + 2] = values.view(np.uint8).reshape(n_blocks, 2)
    if type_name in BYTE_FIELDS:
        start, end, low, high = BYTE_FIELDS[type_name]
        blocks[:, start:end] = rng.integers(low, high, size=(n_blocks, end - start), dtype=np.uint8)
    if type_name in SPLIT_F16:
        start, scale = SPLIT_F16[type_name]
        bits = (scale * rng.uniform(0.5, 1.5, size=(n_blocks, 1))).astype(np.float16).view(np.uint16)  # [n, 1]
        words = blocks[:, start:start + 8].view(np.uint16) & 0x0FFF  # [n, 4]: the rest of each u16 kept
        nibbles = (bits >> np.array([0, 4, 8, 12], dtype=np.uint16)) & 0xF  # [n, 4]: d's bits 4k..4k+3
        blocks[:, start:start + 8] = (words | (nibbles << 12)).view(np.uint8)
    return blocks


def store(w: np.ndarray, qtype: str, seed: int) -> tuple[np.ndarray, T]:
    """A float32 matrix as `qtype` bytes (quantised, or random blocks where gguf cannot quantise): (data, type)."""
    if qtype in QUANTISABLE:
        return gguf.quants.quantize(w.astype(np.float32), T[qtype]), T[qtype]
    block_weights, _ = gguf.GGML_QUANT_SIZES[T[qtype]]
    blocks = random_blocks(qtype, w.size // block_weights, seed)
    return blocks.reshape(*w.shape[:-1], -1), T[qtype]


def permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute: each head's rows i and i + hd/2 become neighbours."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


LLAMA_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
               "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
               "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm",
               "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
               "mlp.gate": "ffn_gate_inp", "mlp.shared_expert.gate_proj": "ffn_gate_shexp",
               "mlp.shared_expert.up_proj": "ffn_up_shexp", "mlp.shared_expert.down_proj": "ffn_down_shexp",
               "mlp.shared_expert_gate": "ffn_gate_inp_shexp", "block_sparse_moe.gate": "ffn_gate_inp",
               "self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up",
               "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down",  # starcoder2
               "self_attn.dense": "attn_output", "mlp.fc1": "ffn_up", "mlp.fc2": "ffn_down",  # phi2
               "self_attn.q_layernorm": "attn_q_norm", "self_attn.k_layernorm": "attn_k_norm"}  # stablelm, stacked
GEMMA2_NAMES = LLAMA_NAMES | {"post_attention_layernorm": "post_attention_norm",
                              "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm"}
TOP_NAMES = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output",
             "model.final_layernorm": "output_norm"}  # phi2
GPT2_NAMES = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
              "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
GPT2_TOP = {"wte": "token_embd", "wpe": "position_embd", "ln_f": "output_norm"}
# gguf.tensor_mapping: input_layernorm (falcon7b) and ln_mlp (falcon40b) are attn_norm, ln_attn is attn_norm_2
FALCON_NAMES = {"input_layernorm": "attn_norm", "ln_mlp": "attn_norm", "ln_attn": "attn_norm_2",
                "self_attention.query_key_value": "attn_qkv", "self_attention.dense": "attn_output",
                "mlp.dense_h_to_4h": "ffn_up", "mlp.dense_4h_to_h": "ffn_down"}
FALCON_TOP = {"word_embeddings": "token_embd", "ln_f": "output_norm", "lm_head": "output"}
GPT_NEOX_NAMES = {"input_layernorm": "attn_norm", "attention.query_key_value": "attn_qkv",
                  "attention.dense": "attn_output", "post_attention_layernorm": "ffn_norm",
                  "mlp.dense_h_to_4h": "ffn_up", "mlp.dense_4h_to_h": "ffn_down"}
GPT_NEOX_TOP = {"gpt_neox.embed_in": "token_embd", "gpt_neox.final_layer_norm": "output_norm", "embed_out": "output"}
LAYER_NAMES = {"gpt2": GPT2_NAMES, "falcon": FALCON_NAMES, "gemma2": GEMMA2_NAMES, "gemma3_text": GEMMA2_NAMES,
               "olmo2": GEMMA2_NAMES, "gpt_neox": GPT_NEOX_NAMES}
TOP = {"gpt2": GPT2_TOP, "falcon": FALCON_TOP, "gpt_neox": GPT_NEOX_TOP}
LAYER = re.compile(r"(?:model\.layers|gpt_neox\.layers|h)\.(\d+)\.(.+)\.(weight|bias)")
PERMUTED = ("llama", "mistral", "mixtral", "granite", "smollm3")  # LlamaModel.modify_tensors, and its subclasses
PER_HEAD_NORM = re.compile(r"(model\.layers\.\d+\.self_attn\.[qk]_layernorm)\.norms\.(\d+)\.weight")
EXPERT = re.compile(r"(model\.layers\.\d+\.(?:mlp|block_sparse_moe)\.experts)\.(\d+)\.(\w+)\.weight")
EXPERT_NAMES = {"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps",
                "w1": "ffn_gate_exps", "w3": "ffn_up_exps", "w2": "ffn_down_exps"}
GGUF_ARCH = {"llama": "llama", "mistral": "llama", "mixtral": "llama", "qwen2": "qwen2", "qwen3": "qwen3",
             "qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe", "gemma": "gemma", "gemma2": "gemma2",
             "gemma3_text": "gemma3", "phi3": "phi3", "gpt2": "gpt2", "falcon": "falcon", "stablelm": "stablelm",
             "starcoder2": "starcoder2", "phi": "phi2", "gpt_neox": "gptneox", "olmo2": "olmo2", "granite": "granite",
             "smollm3": "smollm3", "cohere": "command-r", "cohere2": "cohere2", "gpt_oss": "gpt-oss"}


def gguf_name(hf: str, model_type: str) -> str:
    """llama.cpp's name for a family's tensor name."""
    hf = hf.removeprefix("transformer.")
    if m := LAYER.fullmatch(hf):
        return f"blk.{m[1]}.{LAYER_NAMES.get(model_type, LLAMA_NAMES)[m[2]]}.{m[3]}"
    base, kind = hf.rsplit(".", 1)
    return f"{TOP.get(model_type, TOP_NAMES)[base]}.{kind}"


def falcon_qkv(w: np.ndarray, c: dict) -> np.ndarray:
    """conversion/falcon.py FalconModel.modify_tensors: query_key_value's groups (per key/value head: its queries,
    its key, its value) regrouped as all queries, all keys, all values. The converter takes the group count from
    num_kv_heads (n_head_kv, else 1); here the count the checkpoint has (1 for multi-query Falcon-7B, whose
    config.json states none: transformers' FalconConfig would fill in num_attention_heads)."""
    heads, hd = c["num_attention_heads"], c["hidden_size"] // c["num_attention_heads"]
    groups = c["num_kv_heads"] if c["new_decoder_architecture"] else 1 if c["multi_query"] else heads
    qkv = w.reshape(groups, heads // groups + 2, hd, *w.shape[1:])
    q, k, v = qkv[:, :-2], qkv[:, -2], qkv[:, -1]
    return np.concatenate([part.reshape(-1, *w.shape[1:]) for part in (q, k, v)])


# gguf.tensor_mapping for MODEL_ARCH.GPT_OSS: the norm after attention is post_attention_norm, the router ffn_gate_inp
GPT_OSS_NAMES = LLAMA_NAMES | {"post_attention_layernorm": "post_attention_norm", "mlp.router": "ffn_gate_inp"}
LAYER_NAMES["gpt_oss"] = GPT_OSS_NAMES
GPT_OSS_EXPERTS = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)(_bias)?")


def gpt_oss_tensors(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """conversion/gpt_oss.py GptOssModel, float experts (not the Hub's MXFP4): filter_tensors names the sinks
    `sinks.weight` (attn_sinks); modify_tensors transposes gate_up_proj [E, d, 2ff] to [E, 2ff, d] and splits its
    rows, the even ones ffn_gate_exps, the odd ones ffn_up_exps [E, ff, d], its bias [E, 2ff] by columns alike,
    and transposes down_proj [E, ff, d] to ffn_down_exps [E, d, ff], its bias kept."""
    out = {}
    for hf, w in state.items():
        w = w.astype(np.float32)
        if hf.endswith(".self_attn.sinks"):
            out[f"blk.{hf.split('.')[2]}.attn_sinks.weight"] = w
        elif m := GPT_OSS_EXPERTS.fullmatch(hf):
            prefix, kind = f"blk.{m[1]}", "bias" if m[3] else "weight"
            w = w if m[3] else w.swapaxes(-1, -2)  # weights [E, in, out] -> [E, out, in]
            if m[2] == "down_proj":
                out[f"{prefix}.ffn_down_exps.{kind}"] = np.ascontiguousarray(w)
            else:  # gate_up: rows (weights) or columns (bias) alternate gate, up
                out[f"{prefix}.ffn_gate_exps.{kind}"] = np.ascontiguousarray(w[:, ::2])
                out[f"{prefix}.ffn_up_exps.{kind}"] = np.ascontiguousarray(w[:, 1::2])
        else:
            out[gguf_name(hf, "gpt_oss")] = w
    return out


def gpt_oss_experts_from_gguf(folder: Path, path: Path, out: Path) -> Path:
    """The checkpoint in `folder` with its experts' weights replaced by those the GGUF file `path` stores, read by
    gguf's own reader and dequantiser and put back as the Hugging Face layout (`gpt_oss_tensors` undone: gate and
    up rows interleaved as gate_up_proj's columns, down transposed), written to `out`: what transformers runs
    when the file's experts are MXFP4 (transformers cannot read gpt-oss GGUF files itself)."""
    state = safetensors.numpy.load_file(folder / "model.safetensors")
    stored = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in gguf.GGUFReader(path).tensors}
    for name in [name for name in state if GPT_OSS_EXPERTS.fullmatch(name) and not name.endswith("_bias")]:
        layer = GPT_OSS_EXPERTS.fullmatch(name)[1]
        if name.endswith("down_proj"):
            state[name] = np.ascontiguousarray(stored[f"blk.{layer}.ffn_down_exps.weight"].swapaxes(-1, -2))
            continue
        gate_up = np.empty_like(state[name])  # [E, d, 2ff]
        gate_up[..., ::2] = stored[f"blk.{layer}.ffn_gate_exps.weight"].swapaxes(-1, -2)  # [E, ff, d] -> [E, d, ff]
        gate_up[..., 1::2] = stored[f"blk.{layer}.ffn_up_exps.weight"].swapaxes(-1, -2)
        state[name] = gate_up
    out.mkdir(parents=True, exist_ok=True)
    for config in ("config.json", "generation_config.json"):
        (out / config).write_bytes((folder / config).read_bytes())
    safetensors.numpy.save_file(state, out / "model.safetensors", metadata={"format": "pt"})
    return out


def converted_tensors(folder: Path, c: dict) -> dict[str, np.ndarray]:
    """The checkpoint's tensors under llama.cpp's names, re-laid out as the converter does."""
    model_type = c["model_type"]
    state = safetensors.numpy.load_file(folder / "model.safetensors")
    if model_type == "gpt_oss":
        return gpt_oss_tensors(state)
    out, experts, head_norms = {}, {}, {}
    for hf, w in state.items():
        w = w.astype(np.float32)
        if m := EXPERT.fullmatch(hf):
            layer = m[1].split(".")[2]
            experts.setdefault(f"blk.{layer}.{EXPERT_NAMES[m[3]]}.weight", {})[int(m[2])] = w
            continue
        if m := PER_HEAD_NORM.fullmatch(hf):  # conversion/stablelm.py _stack_qk_norm: [heads, hd] as one tensor
            head_norms.setdefault(gguf_name(m[1] + ".weight", model_type), {})[int(m[2])] = w
            continue
        if hf.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        name = gguf_name(hf, model_type)
        heads, kv_heads = c.get("num_attention_heads"), c.get("num_key_value_heads") or c.get("num_attention_heads")
        if model_type in PERMUTED and ".attn_q." in name:
            w = permute(w, heads)
        if model_type in PERMUTED and ".attn_k." in name:
            w = permute(w, kv_heads)
        if model_type.startswith("gemma") and name.endswith("norm.weight"):
            w = w + 1
        if model_type == "gpt2" and w.ndim == 2 and name.split(".")[-2] in GPT2_NAMES.values():
            w = w.T
        if model_type == "falcon" and ".attn_qkv." in name:
            w = falcon_qkv(w, c)
        if model_type == "gpt_neox" and ".attn_qkv." in name:
            w = gpt_neox_qkv(w, heads)
        if name.endswith("ffn_gate_inp_shexp.weight"):
            w = w.reshape(-1)
        out[name] = np.ascontiguousarray(w)
    for name, by_head in head_norms.items():
        out[name] = np.stack([by_head[h] for h in sorted(by_head)])  # [heads, hd]
    for name, by_expert in experts.items():
        out[name] = np.stack([by_expert[e] for e in sorted(by_expert)])  # [E, out, in]
    if model_type == "gpt2":
        out["output.weight"] = out["token_embd.weight"]  # the converter writes the tied table twice
    return out | rope_tensors(c)


def rope_tensors(c: dict) -> dict[str, np.ndarray]:
    """The RoPE factors the converter writes as tensors: LlamaModel.generate_extra_tensors turns "llama3" scaling
    into one factor per pair (rope_freqs), Phi3MiniModel.generate_extra_tensors stores longrope's two lists
    (rope_factors_long / _short, only when the context is stretched). Same arithmetic: torch float32 frequencies,
    Python floats for the factors."""
    params = c.get("rope_parameters") or c.get("rope_scaling") or {}
    kind = params.get("rope_type", params.get("type"))
    if kind == "llama3":
        dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
        freqs = 1.0 / (params["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
        old_context = params["original_max_position_embeddings"]
        factors = []
        for freq in freqs.tolist():
            wavelength = 2 * math.pi / freq
            if wavelength < old_context / high:
                factors.append(1)
            elif wavelength > old_context / low:
                factors.append(factor)
            else:
                smooth = (old_context / wavelength - low) / (high - low)
                factors.append(1 / ((1 - smooth) / factor + smooth))
        return {"rope_freqs.weight": np.array(factors, dtype=np.float32)}
    if kind == "longrope" and c["max_position_embeddings"] != c["original_max_position_embeddings"]:
        return {"rope_factors_long.weight": np.array(params["long_factor"], dtype=np.float32),
                "rope_factors_short.weight": np.array(params["short_factor"], dtype=np.float32)}
    return {}


def gpt_neox_qkv(w: np.ndarray, heads: int) -> np.ndarray:
    """conversion/gptneox.py GPTNeoXModel.modify_tensors: query_key_value's rows (and bias) from head by head
    (q, k, v of head 0, then of head 1...) to all q, all k, all v."""
    return w.reshape(heads, 3, -1, *w.shape[1:]).swapaxes(0, 1).reshape(w.shape)


def add_metadata(writer: gguf.GGUFWriter, arch: str, c: dict) -> None:
    """config.json as the converter writes it."""
    writer.add_uint32(f"{arch}.vocab_size", c["vocab_size"])
    if c["model_type"] in METADATA:
        METADATA[c["model_type"]](writer, arch, c)
        return
    if c["model_type"] == "gpt2":
        writer.add_uint32(f"{arch}.embedding_length", c["n_embd"])
        writer.add_uint32(f"{arch}.block_count", c["n_layer"])
        writer.add_uint32(f"{arch}.context_length", c["n_positions"])
        writer.add_uint32(f"{arch}.feed_forward_length", c.get("n_inner") or 4 * c["n_embd"])
        writer.add_uint32(f"{arch}.attention.head_count", c["n_head"])
        writer.add_float32(f"{arch}.attention.layer_norm_epsilon", c["layer_norm_epsilon"])
        return
    heads = c["num_attention_heads"]
    writer.add_uint32(f"{arch}.embedding_length", c["hidden_size"])
    writer.add_uint32(f"{arch}.block_count", c["num_hidden_layers"])
    writer.add_uint32(f"{arch}.context_length", c["max_position_embeddings"])
    writer.add_uint32(f"{arch}.feed_forward_length", c["intermediate_size"])
    writer.add_uint32(f"{arch}.attention.head_count", heads)
    writer.add_uint32(f"{arch}.attention.head_count_kv", c.get("num_key_value_heads") or heads)
    head_dim = c.get("head_dim") or c["hidden_size"] // heads
    writer.add_uint32(f"{arch}.attention.key_length", head_dim)
    writer.add_uint32(f"{arch}.attention.value_length", head_dim)
    writer.add_uint32(f"{arch}.rope.dimension_count", int(head_dim * c.get("partial_rotary_factor", 1.0)))
    rope = c.get("rope_parameters") or {}
    theta = rope.get("rope_theta", c.get("rope_theta", 10000.0)) if "rope_theta" in rope or "rope_theta" in c else None
    if c["model_type"] == "gemma3_text":
        theta = (rope.get("full_attention") or {}).get("rope_theta", c.get("rope_theta"))
    if theta is not None:
        writer.add_float32(f"{arch}.rope.freq_base", theta)
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", c["rms_norm_eps"])
    if c["model_type"] == "phi3":  # Phi3MiniModel.set_gguf_parameters
        original = c["original_max_position_embeddings"]
        writer.add_uint32(f"{arch}.rope.scaling.original_context_length", original)
        stretch = c["max_position_embeddings"] / original
        if rope_tensors(c):
            writer.add_float32(f"{arch}.rope.scaling.attn_factor",
                               math.sqrt(1 + math.log(stretch) / math.log(original)) if stretch > 1 else 1.0)
    if c.get("sliding_window") and c["model_type"] in ("gemma2", "gemma3_text", "mistral", "phi3"):
        writer.add_uint32(f"{arch}.attention.sliding_window", c["sliding_window"])
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if c.get(key) is not None and c["model_type"] == "gemma2":
            writer.add_float32(f"{arch}.{key}", c[key])
    experts = c.get("num_local_experts") or c.get("num_experts")
    if experts:
        writer.add_uint32(f"{arch}.expert_count", experts)
        writer.add_uint32(f"{arch}.expert_used_count", c["num_experts_per_tok"])
    if c.get("moe_intermediate_size"):
        writer.add_uint32(f"{arch}.expert_feed_forward_length", c["moe_intermediate_size"])
    if c.get("shared_expert_intermediate_size"):
        writer.add_uint32(f"{arch}.expert_shared_feed_forward_length", c["shared_expert_intermediate_size"])


def falcon_metadata(w: gguf.GGUFWriter, arch: str, c: dict) -> None:
    """conversion/falcon.py FalconModel.set_gguf_parameters: context length 2048 and an MLP 4 x hidden_size wide
    whatever config.json says, head_count_kv = num_kv_heads (n_head_kv, else 1), the "jploski" q/k/v layout;
    no RoPE base."""
    heads = c["num_attention_heads"]
    w.add_uint32(f"{arch}.context_length", 2048)
    w.add_string(f"{arch}.tensor_data_layout", "jploski")
    w.add_uint32(f"{arch}.embedding_length", c["hidden_size"])
    w.add_uint32(f"{arch}.feed_forward_length", 4 * c["hidden_size"])
    w.add_uint32(f"{arch}.block_count", c["num_hidden_layers"])
    w.add_uint32(f"{arch}.attention.head_count", heads)
    kv_heads = c["num_kv_heads"] if c["new_decoder_architecture"] else 1 if c["multi_query"] else heads  # falcon_qkv
    w.add_uint32(f"{arch}.attention.head_count_kv", kv_heads)
    w.add_float32(f"{arch}.attention.layer_norm_epsilon", c["layer_norm_epsilon"])


def stablelm_metadata(w: gguf.GGUFWriter, arch: str, c: dict) -> None:
    """conversion/stablelm.py StableLMModel.set_gguf_parameters: RoPE's width partial_rotary_factor x head_dim
    (head_dim = hidden_size / heads), use_parallel_residual, the LayerNorm's epsilon; no RoPE base."""
    heads = c["num_attention_heads"]
    factor = rotary_factor(c)
    w.add_uint32(f"{arch}.context_length", c["max_position_embeddings"])
    w.add_uint32(f"{arch}.embedding_length", c["hidden_size"])
    w.add_uint32(f"{arch}.block_count", c["num_hidden_layers"])
    w.add_uint32(f"{arch}.feed_forward_length", c["intermediate_size"])
    w.add_uint32(f"{arch}.rope.dimension_count", int(factor * (c["hidden_size"] // heads)))
    w.add_uint32(f"{arch}.attention.head_count", heads)
    w.add_uint32(f"{arch}.attention.head_count_kv", c["num_key_value_heads"])
    w.add_bool(f"{arch}.use_parallel_residual", c.get("use_parallel_residual", True))
    w.add_float32(f"{arch}.attention.layer_norm_epsilon", c["layer_norm_eps"])


def rotary_factor(c: dict) -> float:
    """TextModel.__init__'s rope_parameters["partial_rotary_factor"] (or the config's partial_rotary_factor)."""
    return (c.get("rope_parameters") or {}).get("partial_rotary_factor", c.get("partial_rotary_factor"))


def phi2_metadata(w: gguf.GGUFWriter, arch: str, c: dict) -> None:
    """conversion/phi.py Phi2Model.set_gguf_parameters: an MLP 4 x n_embd wide, as many key/value heads as
    query heads, RoPE's width int(factor x n_embd) // heads; no RoPE base."""
    d, heads = c["hidden_size"], c["num_attention_heads"]
    w.add_uint32(f"{arch}.context_length", c["max_position_embeddings"])
    w.add_uint32(f"{arch}.embedding_length", d)
    w.add_uint32(f"{arch}.feed_forward_length", 4 * d)
    w.add_uint32(f"{arch}.block_count", c["num_hidden_layers"])
    w.add_uint32(f"{arch}.attention.head_count", heads)
    w.add_uint32(f"{arch}.attention.head_count_kv", heads)
    w.add_float32(f"{arch}.attention.layer_norm_epsilon", c["layer_norm_eps"])
    w.add_uint32(f"{arch}.rope.dimension_count", int(rotary_factor(c) * d) // heads)


def gpt_neox_metadata(w: gguf.GGUFWriter, arch: str, c: dict) -> None:
    """conversion/gptneox.py GPTNeoXModel.set_gguf_parameters: RoPE's width rotary_pct x head_dim,
    use_parallel_residual, the LayerNorm's epsilon; no key/value head count, no RoPE base."""
    heads = c["num_attention_heads"]
    w.add_uint32(f"{arch}.context_length", c["max_position_embeddings"])
    w.add_uint32(f"{arch}.embedding_length", c["hidden_size"])
    w.add_uint32(f"{arch}.block_count", c["num_hidden_layers"])
    w.add_uint32(f"{arch}.feed_forward_length", c["intermediate_size"])
    w.add_uint32(f"{arch}.rope.dimension_count", int(rotary_factor(c) * (c["hidden_size"] // heads)))
    w.add_uint32(f"{arch}.attention.head_count", heads)
    w.add_bool(f"{arch}.use_parallel_residual", c.get("use_parallel_residual", True))
    w.add_float32(f"{arch}.attention.layer_norm_epsilon", c["layer_norm_eps"])


def text_model_metadata(w: gguf.GGUFWriter, arch: str, c: dict) -> None:
    """conversion/base.py TextModel.set_gguf_parameters, for the classes that keep it (StarCoder2Model,
    Olmo2Model): the fields it finds, RoPE's base (and linear scaling) from rope_parameters, norm_epsilon as the
    LayerNorm's epsilon, rms_norm_eps as RMSNorm's; not the sliding window."""
    w.add_uint32(f"{arch}.block_count", c["num_hidden_layers"])
    w.add_uint32(f"{arch}.context_length", c["max_position_embeddings"])
    w.add_uint32(f"{arch}.embedding_length", c["hidden_size"])
    w.add_uint32(f"{arch}.feed_forward_length", c["intermediate_size"])
    w.add_uint32(f"{arch}.attention.head_count", c["num_attention_heads"])
    w.add_uint32(f"{arch}.attention.head_count_kv", c["num_key_value_heads"])
    rope = c.get("rope_parameters") or {}
    if rope.get("rope_type") == "linear" and rope.get("factor") is not None:
        w.add_string(f"{arch}.rope.scaling.type", "linear")
        w.add_float32(f"{arch}.rope.scaling.factor", rope["factor"])
    if rope.get("rope_theta") is not None:
        w.add_float32(f"{arch}.rope.freq_base", rope["rope_theta"])
    if c.get("rms_norm_eps"):
        w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", c["rms_norm_eps"])
    if (eps := next((c[k] for k in ("layer_norm_eps", "layer_norm_epsilon", "norm_epsilon") if c.get(k)), None)):
        w.add_float32(f"{arch}.attention.layer_norm_epsilon", eps)
    if c.get("head_dim") is not None:
        w.add_uint32(f"{arch}.attention.key_length", c["head_dim"])
        w.add_uint32(f"{arch}.attention.value_length", c["head_dim"])


def llama_model_metadata(w: gguf.GGUFWriter, arch: str, c: dict) -> None:
    """conversion/llama.py LlamaModel.set_gguf_parameters (SmolLM3Model's): TextModel's, and RoPE's width
    head_dim (hidden_size / heads without one)."""
    text_model_metadata(w, arch, c)
    w.add_uint32(f"{arch}.rope.dimension_count", c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])


def granite_metadata(w: gguf.GGUFWriter, arch: str, c: dict) -> None:
    """conversion/granite.py GraniteModel.set_gguf_parameters: LlamaModel's without head_dim, and each multiplier
    that is not 0 as a scale."""
    llama_model_metadata(w, arch, {key: value for key, value in c.items() if key != "head_dim"})
    for field, key in (("attention_multiplier", "attention.scale"), ("embedding_multiplier", "embedding_scale"),
                       ("residual_multiplier", "residual_scale"), ("logits_scaling", "logit_scale")):
        if c.get(field):
            w.add_float32(f"{arch}.{key}", c[field])


def command_r_metadata(w: gguf.GGUFWriter, arch: str, c: dict) -> None:
    """conversion/command_r.py CommandR2Model.set_gguf_parameters: TextModel's, logit_scale, no RoPE scaling
    (its __init__ takes model_max_length, where config.json has one, as the context length)."""
    context = c.get("model_max_length") or c["max_position_embeddings"]
    text_model_metadata(w, arch, c | {"max_position_embeddings": context})
    w.add_float32(f"{arch}.logit_scale", c["logit_scale"])
    w.add_string(f"{arch}.rope.scaling.type", "none")


def cohere2_metadata(w: gguf.GGUFWriter, arch: str, c: dict) -> None:
    """conversion/command_r.py Cohere2Model.set_gguf_parameters: TextModel's, logit_scale, the window, RoPE's
    width rotary_pct x head_dim, no RoPE scaling; not the sliding layers' pattern."""
    text_model_metadata(w, arch, c)
    w.add_float32(f"{arch}.logit_scale", c["logit_scale"])
    w.add_uint32(f"{arch}.attention.sliding_window", c["sliding_window"])
    w.add_uint32(f"{arch}.rope.dimension_count", int(c["rotary_pct"] * (c["hidden_size"] // c["num_attention_heads"])))
    w.add_string(f"{arch}.rope.scaling.type", "none")


def gpt_oss_metadata(w: gguf.GGUFWriter, arch: str, c: dict) -> None:
    """conversion/gpt_oss.py GptOssModel.set_gguf_parameters: TextModel's (conversion/base.py: the counts, the
    experts, head_dim as key/value length, RoPE's base and YaRN's factor, original context and betas), the window,
    and intermediate_size as the experts' width; not the sliding layers' pattern, nor YaRN's `truncate`."""
    text_model_metadata(w, arch, c)
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
    if rope.get("rope_type") == "yarn":
        w.add_string(f"{arch}.rope.scaling.type", "yarn")
        w.add_float32(f"{arch}.rope.scaling.factor", rope["factor"])
        w.add_uint32(f"{arch}.rope.scaling.original_context_length", rope["original_max_position_embeddings"])
        for field in ("beta_fast", "beta_slow"):
            if rope.get(field) is not None:
                w.add_float32(f"{arch}.rope.scaling.yarn_{field}", rope[field])
    w.add_uint32(f"{arch}.expert_count", c["num_local_experts"])
    w.add_uint32(f"{arch}.expert_used_count", c["num_experts_per_tok"])
    w.add_uint32(f"{arch}.attention.sliding_window", c["sliding_window"])
    w.add_uint32(f"{arch}.expert_feed_forward_length", c["intermediate_size"])


METADATA = {"falcon": falcon_metadata, "stablelm": stablelm_metadata, "starcoder2": text_model_metadata,
            "phi": phi2_metadata, "gpt_neox": gpt_neox_metadata, "olmo2": text_model_metadata,
            "granite": granite_metadata, "smollm3": llama_model_metadata, "cohere": command_r_metadata,
            "cohere2": cohere2_metadata, "gpt_oss": gpt_oss_metadata}


def write_gguf(folder: Path, path: Path, qtype: str = "F32", seed: int = 0, metadata: dict | None = None,
               experts: str | None = None) -> Path:
    """Convert the tiny checkpoint in `folder` to the GGUF file `path`, its matrices stored as `qtype` (the
    merged experts' weights as `experts`, where given: gpt-oss's MXFP4), with `metadata`'s strings added (a
    tokenizer.ggml.model, say)."""
    c = transformers.AutoConfig.from_pretrained(folder).to_dict()
    c["model_type"] = transformers.AutoConfig.from_pretrained(folder).model_type
    arch = GGUF_ARCH[c["model_type"]]
    writer = gguf.GGUFWriter(path, arch)
    add_metadata(writer, arch, c)
    writer.add_uint32("tokenizer.ggml.bos_token_id", 1)
    writer.add_uint32("tokenizer.ggml.eos_token_id", 2)
    for key, value in (metadata or {}).items():
        writer.add_string(key, value)
    for i, (name, w) in enumerate(converted_tensors(folder, c).items()):
        matrix = w.ndim >= 2 and name.endswith(".weight") and not name.startswith("position_embd")
        if matrix and ".ffn_gate_inp." not in name:  # routers (and biases, gpt-oss's [E, ff] too) stay F32
            stored = experts if experts and "_exps." in name else qtype
            data, kind = store(w, stored, seed + i)  # F32 and F16 as floats, the others as bytes [..., row bytes]
            writer.add_tensor(name, data, raw_dtype=kind if data.dtype == np.uint8 else None)
        else:
            writer.add_tensor(name, w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def hf_from_gguf(path: Path, **overrides) -> transformers.PreTrainedModel:
    """transformers' own reading of the GGUF file (gguf.quants dequantises), float32, eager attention."""
    return transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32,
                                                             attn_implementation="eager", **overrides).eval()


def logits_of(model: transformers.PreTrainedModel, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


REAL_MODEL = "smollm2-135m-instruct"


def real_model_path() -> Path | None:
    """SmolLM2-135M-Instruct Q4_1 in tinyinfer's model cache, where `python -m tinyinfer pull smollm2-135m-instruct`
    puts it (tinyinfer/catalogue.py); None when it is not there."""
    from tinyinfer.catalogue import pulled_path  # noqa: PLC0415

    return pulled_path(REAL_MODEL)


def real_model_or_skip() -> Path:
    import pytest  # noqa: PLC0415

    path = real_model_path()
    if path is None:
        pytest.skip(f"the real model is not in the model cache: `python -m tinyinfer pull {REAL_MODEL}` fetches it")
    return path
