"""Gemma 3 (text): Gemma 2's body (four norms per layer, query_pre_attn_scalar, soft-capped logits when
final_logit_softcapping is set) with q and k each normed per head (scaling by 1 + weight) before RoPE, no
attention soft cap, a window on five layers of six, and two RoPEs: the global layers rotate with rope_theta
(1e6) and its scaling (linear x8 on the 4B and larger), the sliding ones with rope_local_base_freq (1e4),
unscaled. Its activation is `hidden_activation`.

A multimodal Gemma 3 (model_type "gemma3", 4B and larger) has a vision tower beside the text model: tinyinfer runs
the text model alone (`text_config`), its tensors read from under `language_model.`.
"""

from __future__ import annotations

from tinyinfer.errors import TinyInferError
from tinyinfer.families.common import check_window, every_but_the_nth
from tinyinfer.families.family import Family
from tinyinfer.families.gemma import GEMMA_LIKE, read_gemma_body
from tinyinfer.families.llama import load_body
from tinyinfer.gguf.architectures import GEMMA2_TENSORS, GGUFLayout, gemma_relayout, llama_like_config

GEMMA3_THETAS = {"global": 1_000_000.0, "local": 10_000.0}  # transformers' Gemma3TextConfig.default_theta
# rope_theta: per layer type, GEMMA3_THETAS
DEFAULTS = dict({k: v for k, v in GEMMA_LIKE.items() if k != "rope_theta"}, max_position_embeddings=131072,
                hidden_activation="gelu_pytorch_tanh", num_key_value_heads=4, query_pre_attn_scalar=256,
                sliding_window=4096, layer_types=None, final_logit_softcapping=None, attn_logit_softcapping=None,
                use_bidirectional_attention=False)


def read_config(c: dict) -> dict:
    if c.get("attn_logit_softcapping") is not None:  # Gemma3Attention never passes it to the attention
        raise TinyInferError(f"config.json (gemma3_text): attn_logit_softcapping={c['attn_logit_softcapping']} is not "
                             "supported: transformers' Gemma 3 ignores it, so its meaning is unclear; set it to null")
    global_rope, local_theta = rope_per_layer_type(c)
    fields = dict(read_gemma_body({**c, "rope_scaling": None, "rope_parameters": global_rope}, "hidden_activation",
                                  "hidden_act", every_but_the_nth(6, configurable=True)),
                  post_norms=True, qk_norm=True, query_pre_attn_scalar=c["query_pre_attn_scalar"],
                  final_softcap=c["final_logit_softcapping"], local_rope_theta=local_theta)
    return check_window(c, fields)


def rope_per_layer_type(c: dict) -> tuple[dict, float]:
    """(the global layers' rope parameters, the sliding layers' theta), from either dialect, as transformers 5
    reads them:

        older files:     "rope_theta": 1e6, "rope_local_base_freq": 1e4, "rope_scaling": {"rope_type": "linear", ...}
        transformers 5:  "rope_parameters": {"full_attention": {"rope_type": ..., "rope_theta": 1e6, ...},
                                             "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}

    `rope_scaling` is merged into the global layers' parameters. What transformers 5 would silently ignore (a flat
    rope_parameters, a rope_scaling naming its kind by `type` only) is refused, and so is scaled local RoPE.
    """
    params = c.get("rope_parameters") or {}
    if set(params) - {"full_attention", "sliding_attention"}:
        raise TinyInferError("config.json (gemma3_text): rope_parameters must be given per layer type, "
                             '{"full_attention": {...}, "sliding_attention": {...}} (transformers 5 ignores a flat one)')
    scaling = c.get("rope_scaling") or {}
    if "type" in scaling and "rope_type" not in scaling:
        raise TinyInferError(f"config.json (gemma3_text): rope_scaling names its kind by 'type' ({scaling['type']!r}), "
                             "which transformers 5 ignores for Gemma 3; write it as 'rope_type'")
    global_rope = {"rope_type": "default", **(params.get("full_attention") or {}), **scaling}
    global_rope.setdefault("rope_theta", c.get("rope_theta", GEMMA3_THETAS["global"]))
    local_rope = params.get("sliding_attention") or {}
    if local_rope.get("rope_type", "default") != "default":
        raise TinyInferError(f"config.json (gemma3_text): scaled RoPE on the sliding layers "
                             f"({local_rope['rope_type']!r}) is not supported; only their rope_theta is")
    return global_rope, float(local_rope.get("rope_theta", c.get("rope_local_base_freq", GEMMA3_THETAS["local"])))


def text_config(c: dict) -> dict:
    """The text model's config.json of a multimodal Gemma 3 (its `text_config`, with the file's token ids and
    dtype)."""
    text = c.get("text_config")
    if not isinstance(text, dict) or text.get("model_type", "gemma3_text") != "gemma3_text":
        raise TinyInferError("config.json (gemma3): this multimodal config has no Gemma 3 text_config; only the "
                             "text-only Gemma 3 (gemma3_text), or the text model of a multimodal one, is supported")
    if c.get("tie_word_embeddings", True) != text.get("tie_word_embeddings", True):
        raise TinyInferError("config.json (gemma3): tie_word_embeddings differs between the file and its text_config; "
                             "make the two the same")
    outer = {key: c[key] for key in ("bos_token_id", "eos_token_id", "dtype", "torch_dtype") if c.get(key) is not None}
    return {**text, **outer, "model_type": "gemma3_text"}


GGUF_LOCAL_THETA = 10_000.0  # llama.cpp's Gemma 3: the sliding layers' RoPE base is fixed, not in the file
GGUF_PATTERN = 6  # and every sixth layer attends globally


def gguf_config(m, names: set) -> dict:
    c = llama_like_config(m, names, "gemma3_text")
    layer_types = ["full_attention" if (i + 1) % GGUF_PATTERN == 0 else "sliding_attention"
                   for i in range(c["num_hidden_layers"])]
    return c | {"hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
                "query_pre_attn_scalar": c["head_dim"], "sliding_window": m["attention.sliding_window"],
                "layer_types": layer_types, "rope_local_base_freq": GGUF_LOCAL_THETA}


FAMILY = Family("gemma3_text", DEFAULTS, read_config, load_body,
                strip_prefixes=("language_model.",),
                gguf=GGUFLayout("gemma3", gguf_config, GEMMA2_TENSORS, relayout=gemma_relayout))  # a multimodal Gemma 3 keeps its text model there
