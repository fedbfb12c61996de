"""One dataclass that describes an architecture, whatever file it came from.

A Hugging Face `config.json` and a llama2.c header say the same things in different words; both are
translated into `Config` here, so the model code reads one vocabulary of names. Two config.json dialects
exist in the wild and both are accepted:

    older transformers / most Hub files:  "rope_theta": 10000.0, "rope_scaling": {...}, "torch_dtype": "bfloat16"
    transformers 5:                       "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, "dtype": ...

Each family is read as its transformers code reads it: a field the file leaves out takes that family's config
class default (`HF_DEFAULTS`), and fields the architecture ignores stay ignored (`BIAS_FIELDS`, `_sliding`).

    >>> cfg = config_from_hf({"model_type": "llama", "vocab_size": 32, "hidden_size": 16,
    ...     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 40})
    >>> cfg.head_dim, cfg.n_kv_heads, cfg.rope_theta
    (4, 2, 10000.0)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from tinyinfer.errors import TinyInferError, is_integer_at_least


@dataclass
class Config:
    model_type: str
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int  # hidden width of the MLP
    max_seq_len: int
    norm: str = "rmsnorm"  # a kind in tinyinfer/norms.py NORM_PARAMS: "rmsnorm", "layernorm", "rmsnorm_plus_one"...
    norm_eps: float = 1e-5
    activation: str = "silu"  # a name in tinyinfer/mlp.py ACTIVATIONS: "silu", "gelu_tanh", "gelu", "relu", ...
    mlp: str = "swiglu"  # "swiglu" (gate, up, down) | "gelu_mlp" (up, down: GPT-2)
    position: str = "rope"  # "rope" | "learned" (GPT-2's position table)
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # {"rope_type": "linear"|"llama3"|"yarn"|"longrope" (Phi-3), ...} or None
    local_rope_theta: float | None = None  # Gemma 3: sliding layers rotate with this theta, unscaled (None: as all)
    partial_rotary_factor: float = 1.0  # Phi-3: RoPE rotates only the first int(head_dim * factor) coordinates
    nope_layers: list[int] = field(default_factory=list)  # SmolLM3: layers that do not rotate q and k ("NoPE")
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False  # Qwen3: RMSNorm over each head of q and k before RoPE
    # what q's and k's norms span: "head" (Qwen3: each head alone, one gain for all), "full" (OLMoE: the whole
    # projection at once), "each_head" (StableLM, Cohere: each head alone, each with a gain of its own)
    qk_norm_span: str = "head"
    qk_norm_kind: str | None = None  # the q/k norms' kind, when not `norm` (StableLM: LayerNorms without bias)
    sliding_window: int | None = None
    clip_qkv: float | None = None  # OLMo 1: q, k and v clamped to [-clip_qkv, clip_qkv] after their projections
    attn_scale_weights: bool = True  # GPT-2's scale_attn_weights: divide scores by sqrt(head_dim)
    attn_scale_inverse_layer: bool = False  # GPT-2's scale_attn_by_inverse_layer_idx: also by (layer + 1)
    query_pre_attn_scalar: float | None = None  # Gemma 2: scores scaled by its -1/2 power instead of head_dim's
    attn_softcap: float | None = None  # Gemma 2: scores become cap * tanh(score / cap) before the mask (every layer)
    final_softcap: float | None = None  # Gemma 2: the logits too
    embed_scale: float = 1.0  # embeddings are multiplied by it: sqrt(d_model) (Gemma), embedding_multiplier (Granite)
    residual_scale: float = 1.0  # Granite: each sublayer's output times residual_multiplier before the residual add
    attn_multiplier: float | None = None  # the score scale itself, not head_dim^-1/2: Granite's attention_multiplier,
    # DeepSeek's (qk_nope_head_dim + qk_rope_head_dim)^-1/2, times YaRN's mscale(mscale_all_dim)^2
    logits_divisor: float = 1.0  # Granite: the logits are divided by logits_scaling (Cohere: by 1 / logit_scale)
    pre_norms: bool = True  # each sublayer's input is normed (all but OLMo 2)
    post_norms: bool = False  # each sublayer's output is normed before the residual add (Gemma 2: again; OLMo 2)
    parallel_residual: bool = False  # GPT-NeoX, Phi-2: x + attn(norm(x)) + mlp(norm'(x)), both read the layer's input
    shared_input_norm: bool = False  # Phi-2 (parallel): one norm per layer, its output read by attention and MLP alike
    lm_head_bias: bool = False  # Phi-2: the output layer adds a bias to the logits
    layer_types: list[str] = field(default_factory=list)  # per layer "full_attention" | "sliding_attention"
    tie_word_embeddings: bool = False
    bos_token_id: int | None = None
    eos_token_ids: list[int] = field(default_factory=list)
    torch_dtype: str | None = None  # the dtype the checkpoint was saved in, as the file says
    # Mixture-of-Experts (tinyinfer/moe.py); n_experts == 0 means a dense model
    n_experts: int = 0
    n_experts_per_tok: int = 0  # top-k: experts each token is sent to
    moe_d_ff: int = 0  # hidden width of one expert
    norm_topk_prob: bool = True  # rescale the chosen experts' weights to sum to 1
    shared_expert_d_ff: int = 0  # Qwen2-MoE: an always-on expert behind a sigmoid gate (0 = none)
    moe_layers: list[int] | None = None  # layers whose MLP is a MoE (None = all of them, when n_experts)
    shared_expert_gated: bool = True  # Qwen2-MoE's shared expert is scaled by a sigmoid gate; DeepSeek's is not
    # how the router chooses (tinyinfer/moe.py): "softmax" (Mixtral, Qwen, OLMoE), "sigmoid_grouped" (DeepSeek-V3:
    # sigmoid scores, a bias steering the choice, n_groups groups), "softmax_grouped" (DeepSeek-V2; greedy: 1 group),
    # "topk_softmax" (gpt-oss: the top-k of the biased logits, then a softmax over those k alone)
    router: str = "softmax"
    n_groups: int = 1  # experts come in n_groups groups; a token picks among those of its best topk_groups groups
    topk_groups: int = 1
    routed_scaling: float = 1.0  # DeepSeek: the chosen experts' weights times routed_scaling_factor
    # DeepSeek's multi-head latent attention (tinyinfer/mla.py) when kv_lora_rank > 0. The cache then holds one
    # key/value head (n_kv_heads 1) of head_dim = kv_lora_rank + qk_rope_head_dim numbers per token and layer.
    kv_lora_rank: int = 0
    q_lora_rank: int | None = None  # queries through a low-rank bottleneck (q_a_proj, a norm, q_b_proj); None: q_proj
    qk_nope_head_dim: int = 0  # a query head: qk_nope_head_dim coordinates without RoPE, then qk_rope_head_dim with
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    interleaved_rope: bool = False  # the file's rotary coordinates pair neighbours (DeepSeek): reordered at load
    # gpt-oss: every attention head has a learned sink logit in its softmax's denominator (tinyinfer/attention.py);
    # its experts have biases and a clamped SwiGLU, (clip(up, +-limit) + 1) * g sigmoid(alpha g), g = min(gate, limit)
    attention_sinks: bool = False
    expert_bias: bool = False
    swiglu_limit: float | None = None  # None: the experts are plain SwiGLUs
    swiglu_alpha: float = 1.0

    def __post_init__(self):
        _check_numbers(self)
        if not self.layer_types:
            kind = "sliding_attention" if self.sliding_window else "full_attention"
            self.layer_types = [kind] * self.n_layers
        if len(self.layer_types) != self.n_layers:
            raise TinyInferError(f"config: layer_types has {len(self.layer_types)} entries for {self.n_layers} layers; "
                                 "give one per layer (or leave layer_types out)")
        if any(not isinstance(i, int) or not 0 <= i < self.n_layers for i in self.nope_layers):
            raise TinyInferError(f"config: nope_layers={self.nope_layers} must list layer indices below "
                                 f"{self.n_layers}")
        unknown = sorted(set(self.layer_types) - {"full_attention", "sliding_attention"})
        if unknown:
            raise TinyInferError(f"config: layer type {unknown[0]!r} is not supported (supported: full_attention, "
                                 "sliding_attention)")
        if self.n_heads % self.n_kv_heads:
            raise TinyInferError(
                f"config: num_attention_heads={self.n_heads} is not a multiple of num_key_value_heads={self.n_kv_heads}"
            )
        if self.router not in ROUTERS:
            raise TinyInferError(f"config: router {self.router!r} is not one of {', '.join(ROUTERS)}")
        if self.n_experts and not 1 <= self.n_experts_per_tok <= self.n_experts:
            raise TinyInferError(
                f"config: num_experts_per_tok={self.n_experts_per_tok} must be between 1 and the number of experts "
                f"({self.n_experts}); fix num_experts_per_tok or num_experts/num_local_experts in config.json"
            )

    def is_moe_layer(self, layer: int) -> bool:
        """Whether layer i's feed-forward is a Mixture-of-Experts (else a dense MLP of width d_ff)."""
        return self.n_experts > 0 and (self.moe_layers is None or layer in self.moe_layers)

    def attention_scale(self, layer: int) -> float:
        """The factor on layer `layer`'s q.k scores: 1/sqrt(head_dim), unless a GPT-2 config says otherwise
        (or Gemma 2's query_pre_attn_scalar replaces head_dim, or Granite gives the factor itself). YaRN's and
        longrope's attention factor is not here: it scales the rotated coordinates of q and k only, through cos
        and sin (tinyinfer/rope.py)."""
        if self.attn_multiplier is not None:
            return self.attn_multiplier
        scale = (self.query_pre_attn_scalar or self.head_dim) ** -0.5 if self.attn_scale_weights else 1.0
        return scale / (layer + 1) if self.attn_scale_inverse_layer else scale

    @property
    def context_note(self) -> str:
        """Why the context window is shorter than config.json says, for error messages ("" when it is not)."""
        allowed = (self.rope_scaling or {}).get("max_position_embeddings", 0)
        if (self.rope_scaling or {}).get("rope_type") == "longrope" and allowed > self.max_seq_len:
            return (f" (longrope runs here in its short-sequence regime only, exact up to original_max_position_embeddings"
                    f" = {self.max_seq_len}; config.json allows {allowed})")
        return ""

    @property
    def rotary_dim(self) -> int:
        """How many coordinates of each head RoPE rotates: all of them, or a leading part (Phi-3's factor); with
        latent attention, qk_rope_head_dim."""
        if self.kv_lora_rank:
            return self.qk_rope_head_dim
        return int(self.head_dim * self.partial_rotary_factor)

    def window_of(self, layer: int) -> int | None:
        """How many past positions a layer may attend to (None = the whole context)."""
        return self.sliding_window if self.layer_types[layer] == "sliding_attention" else None

    @property
    def values_are_keys(self) -> bool:
        """Whether a token's cached value is its cached key (latent attention: one latent vector serves as both),
        so a cache keeps one array for the two."""
        return bool(self.kv_lora_rank)

    @property
    def kv_bytes_per_token(self) -> int:
        """fp32 bytes of K and V one token adds to the cache: 2 x layers x kv_heads x head_dim x 4 (once, not
        twice, when the values are the keys)."""
        return (1 if self.values_are_keys else 2) * self.n_layers * self.n_kv_heads * self.head_dim * 4


ROUTERS = ("softmax", "sigmoid_grouped", "softmax_grouped", "topk_softmax")  # tinyinfer/moe.py


# Bad input: the fields that size arrays, and the numbers and ids the model computes with, checked before any
# of them is used (a config.json with "four" layers, -1 heads or a null context length)
SIZE_FIELDS = {"vocab_size": "vocab_size", "d_model": "hidden_size / n_embd", "n_layers": "num_hidden_layers / n_layer",
               "n_heads": "num_attention_heads / n_head", "n_kv_heads": "num_key_value_heads", "head_dim": "head_dim",
               "d_ff": "intermediate_size / n_inner", "max_seq_len": "max_position_embeddings / n_positions"}


# config.json keys that size arrays, in every dialect; None (null) means "derive it" for the optional ones
HF_SIZE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "max_position_embeddings", "n_embd", "n_layer", "n_head", "n_positions")
HF_OPTIONAL_SIZE_KEYS = ("num_key_value_heads", "head_dim", "n_inner", "num_kv_heads", "ffn_hidden_size",
                         "decoder_sparse_step")
MAX_LAYERS = 100_000  # the deepest released models have about 150; per-layer settings of more would not fit memory


def _check_hf_sizes(c: dict) -> None:
    for key in (*HF_SIZE_KEYS, *HF_OPTIONAL_SIZE_KEYS):
        value = c.get(key)
        if key in c and not (value is None and key in HF_OPTIONAL_SIZE_KEYS) and not is_integer_at_least(value):
            raise TinyInferError(f"config.json: {key}={value!r} must be an integer >= 1; fix config.json")
    for key in ("num_hidden_layers", "n_layer"):
        if c.get(key, 0) > MAX_LAYERS:
            raise TinyInferError(f"config.json: {key}={c[key]} layers is beyond any real model (at most {MAX_LAYERS:,} "
                                 "are accepted); fix config.json")


def _check_numbers(cfg: Config) -> None:
    for name, keys in SIZE_FIELDS.items():
        value = getattr(cfg, name)
        if not is_integer_at_least(value):
            raise TinyInferError(f"config: {name}={value!r} must be an integer >= 1: fix {keys} in config.json "
                                 "(or the llama2.c header)")
    for name in ("n_experts", "n_experts_per_tok"):  # 0: a dense model
        if not is_integer_at_least(getattr(cfg, name), low=0):
            raise TinyInferError(f"config: {name}={getattr(cfg, name)!r} must be an integer >= 0: fix the expert counts "
                                 "in config.json")
    optional = ("query_pre_attn_scalar", "attn_softcap", "final_softcap", "local_rope_theta",
                "attn_multiplier", "clip_qkv", "swiglu_limit")  # None: not used
    scales = ("embed_scale", "residual_scale", "logits_divisor", "routed_scaling", "swiglu_alpha")
    for name in ("norm_eps", "rope_theta", "partial_rotary_factor", *scales, *optional):
        value = getattr(cfg, name)
        if value is None and name in optional:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise TinyInferError(f"config: {name}={value!r} must be a positive number: fix config.json")
    if cfg.partial_rotary_factor != 1.0 and not 2 <= cfg.rotary_dim <= cfg.head_dim:
        raise TinyInferError(f"config: partial_rotary_factor={cfg.partial_rotary_factor} rotates {cfg.rotary_dim} of "
                             f"{cfg.head_dim} coordinates per head; it must be in (0, 1] and leave at least 2")
    for token_id in [cfg.bos_token_id, *cfg.eos_token_ids]:
        if token_id is not None and not is_integer_at_least(token_id, 0):
            raise TinyInferError(f"config: token id {token_id!r} (bos_token_id / eos_token_id) must be an integer "
                                 ">= 0: fix config.json or generation_config.json")


# ---------------------------------------------------------------------------------------------------------------
# Hugging Face config.json
# ---------------------------------------------------------------------------------------------------------------

def _gpt2(c: dict) -> dict:
    d = c["n_embd"]
    return dict(
        vocab_size=c["vocab_size"], d_model=d, n_layers=c["n_layer"], n_heads=c["n_head"],
        n_kv_heads=c["n_head"], head_dim=d // c["n_head"], d_ff=c["n_inner"] or 4 * d,
        max_seq_len=c["n_positions"], norm="layernorm", norm_eps=c["layer_norm_epsilon"],
        activation=_activation(c["activation_function"]), mlp="gelu_mlp", position="learned",
        qkv_bias=True, o_bias=True, mlp_bias=True, tie_word_embeddings=c["tie_word_embeddings"],
        attn_scale_weights=c["scale_attn_weights"], attn_scale_inverse_layer=c["scale_attn_by_inverse_layer_idx"],
    )


def _llama_family(c: dict) -> dict:
    """llama, mistral, qwen2, qwen3: RMSNorm, RoPE, SwiGLU; they differ in biases, q/k norm and windows."""
    model_type = c["model_type"]
    n_heads = c["num_attention_heads"]
    n_kv = c.get("num_key_value_heads") or n_heads  # null: as many as the query heads
    theta, scaling = _rope(c)
    qkv_bias, o_bias, mlp_bias = (c[field] if isinstance(field, str) else field for field in BIAS_FIELDS[model_type])
    fields = dict(
        vocab_size=c["vocab_size"], d_model=c["hidden_size"], n_layers=c["num_hidden_layers"], n_heads=n_heads,
        n_kv_heads=n_kv, head_dim=c.get("head_dim") or c["hidden_size"] // n_heads, d_ff=c["intermediate_size"],
        max_seq_len=c["max_position_embeddings"], norm="rmsnorm", norm_eps=c["rms_norm_eps"],
        activation=_activation(c["hidden_act"]), mlp="swiglu", position="rope", rope_theta=theta, rope_scaling=scaling,
        qkv_bias=qkv_bias, o_bias=o_bias, mlp_bias=mlp_bias, qk_norm=model_type in ("qwen3", "qwen3_moe"),
        tie_word_embeddings=c["tie_word_embeddings"],
    )
    fields["sliding_window"], fields["layer_types"] = _sliding(c)
    return fields


# model_type -> the config.json field that switches on its (q/k/v, o, MLP) biases, or True/False where the
# architecture hard-wires them whatever the file says (Qwen2 always biases q, k and v and never o).
BIAS_FIELDS = {
    "llama": ("attention_bias", "attention_bias", "mlp_bias"),
    "mistral": (False, False, False),
    "qwen2": (True, False, False),
    "qwen3": ("attention_bias", "attention_bias", False),
    "mixtral": (False, False, False),
    "qwen2_moe": ("qkv_bias", False, False),
    "qwen3_moe": ("attention_bias", "attention_bias", False),
    "olmoe": ("attention_bias", "attention_bias", False),
    "phi3": (False, False, False),
    "gemma": ("attention_bias", "attention_bias", False),
    "gemma2": ("attention_bias", "attention_bias", False),
    "gemma3_text": ("attention_bias", "attention_bias", False),
    "granite": ("attention_bias", "attention_bias", "mlp_bias"),
    "smollm3": ("attention_bias", "attention_bias", "mlp_bias"),
    "olmo2": ("attention_bias", "attention_bias", False),
    "stablelm": ("use_qkv_bias", False, False),
    "starcoder2": ("use_bias", "use_bias", "use_bias"),
    "cohere": ("attention_bias", "attention_bias", False),
    "cohere2": ("attention_bias", "attention_bias", False),
    "olmo": ("attention_bias", "attention_bias", False),
    "phi": (True, True, True),
    "gpt_oss": ("attention_bias", "attention_bias", False),  # the experts' biases: always (_gpt_oss)
    "deepseek_v2": (False, False, False),  # attention_bias, mlp_bias: refused (_mla, _deepseek)
    "deepseek_v3": (False, False, False),
}


def _sliding(c: dict) -> tuple[int | None, list[str]]:
    """The window and which layers slide through it, as each family's transformers code decides:

        mistral, mixtral,  every layer, whenever `sliding_window` is set
        phi3, starcoder2
        qwen2, qwen3       with `use_sliding_window`: layers from `max_window_layers` on
        qwen2_moe          with `use_sliding_window`: the even layers below `max_window_layers`
        qwen3_moe          with `use_sliding_window`: every layer
        llama, olmoe,      never (a `sliding_window` field is ignored)
        gemma, granite,
        olmo2, phi,
        stablelm, cohere,
        olmo, deepseek_v2,
        deepseek_v3
        gemma2, gemma3,    the layers `layer_types` names; by default all but every `pattern`-th: the even
        cohere2, gpt_oss   ones (Gemma 2, gpt-oss: 2), five layers of six (Gemma 3: `sliding_window_pattern`, 6), three
                           of four (Cohere 2: `sliding_window_pattern`, 4)
        smollm3            the layers `layer_types` names (whatever `use_sliding_window` says: transformers'
                           masks follow the list); by default, with `use_sliding_window`, the NoPE layers

    Qwen2, Qwen3 and Qwen2-MoE follow an explicit `layer_types` list instead (transformers 5 writes one).
    """
    model_type, n = c["model_type"], c["num_hidden_layers"]
    if model_type == "smollm3":
        window, nope = c.get("sliding_window"), _smollm3_nope_layers(c)
        slides = [c["use_sliding_window"] and window is not None and i in nope for i in range(n)]
        return window, list(c.get("layer_types") or ["sliding_attention" if s else "full_attention" for s in slides])
    if model_type in ("gemma2", "gemma3_text", "cohere2", "gpt_oss"):
        default = {"gemma2": 2, "gemma3_text": 6, "cohere2": 4, "gpt_oss": 2}[model_type]
        pattern = default if model_type in ("gemma2", "gpt_oss") else c.get("sliding_window_pattern", default)  # as transformers
        return c.get("sliding_window"), list(c.get("layer_types") or ["full_attention" if (i + 1) % pattern == 0
                                                                      else "sliding_attention" for i in range(n)])
    switched = model_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe")  # off unless use_sliding_window
    window = c.get("sliding_window") if not switched or c["use_sliding_window"] else None
    if model_type in ("llama", "olmoe", "gemma", "granite", "olmo2", "phi", "stablelm", "cohere", "olmo",
                      "deepseek_v2", "deepseek_v3") or not window:
        return None, ["full_attention"] * n
    if model_type in ("mistral", "mixtral", "qwen3_moe", "phi3", "starcoder2"):
        return window, ["sliding_attention"] * n
    if c.get("layer_types"):
        return window, list(c["layer_types"])
    first = c["max_window_layers"]
    slides = [i % 2 == 0 and i < first if model_type == "qwen2_moe" else i >= first for i in range(n)]
    return window, ["sliding_attention" if slide else "full_attention" for slide in slides]


def _rope(c: dict) -> tuple[float, dict | None]:
    """(theta, scaling) from either dialect; scaling is None for plain RoPE.

    As in transformers, an old-style `rope_scaling` replaces `rope_parameters` whole, its kind may be spelled
    `type`, and a top-level `original_max_position_embeddings` (Phi-3 style) wins over the one inside.
    "dynamic" (NTK) RoPE only changes the frequencies for sequences longer than `max_position_embeddings`,
    which tinyinfer refuses anyway, so inside the context window it is plain RoPE.
    """
    params = dict(c.get("rope_scaling") or c.get("rope_parameters") or {})
    if set(params) & {"full_attention", "sliding_attention"}:
        raise TinyInferError(f"config.json ({c['model_type']}): RoPE parameters per layer type are not supported "
                             "(only Gemma 3 has them); give one rope_parameters dict for all layers")
    theta = float(params.get("rope_theta") or c["rope_theta"])
    kind = params.get("rope_type", params.get("type", "default"))
    if kind in ("default", "dynamic"):
        return theta, None
    if kind not in SCALED_ROPE_TYPES:
        raise TinyInferError(
            f"config.json: rope scaling type {kind!r} is not supported (supported: default, dynamic, "
            f"{', '.join(SCALED_ROPE_TYPES)}); use a checkpoint whose rope_scaling/rope_parameters has one of them"
        )
    scaling = {k: v for k, v in params.items() if k not in ("rope_theta", "type")}
    scaling["rope_type"] = kind
    scaling["original_max_position_embeddings"] = c.get("original_max_position_embeddings") or params.get(
        "original_max_position_embeddings") or c["max_position_embeddings"]
    if kind == "yarn" and scaling.get("factor") is None:  # the stretch the two lengths imply (DeepSeek-V3 style)
        scaling["factor"] = c["max_position_embeddings"] / scaling["original_max_position_embeddings"]
    missing = [key for key in SCALED_ROPE_TYPES[kind] if scaling.get(key) is None]
    if missing:
        raise TinyInferError(f"config.json: rope scaling type {kind!r} needs {', '.join(missing)}; "
                             "add it to rope_scaling (or rope_parameters)")
    return theta, scaling


# the RoPE scalings tinyinfer/rope.py implements, and the fields each one needs
SCALED_ROPE_TYPES = {"linear": ("factor",), "llama3": ("factor", "low_freq_factor", "high_freq_factor"), "yarn": ()}


def _activation(name: str) -> str:
    """tinyinfer's name (tinyinfer/mlp.py ACTIVATIONS) for a transformers activation name."""
    if name not in HF_ACTIVATIONS:
        raise TinyInferError(f"config.json: activation {name!r} is not supported "
                             f"(supported: {', '.join(sorted(HF_ACTIVATIONS))})")
    return HF_ACTIVATIONS[name]


# transformers' activation names (ACT2FN) -> tinyinfer's: several names are the same function
HF_ACTIVATIONS = {
    "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh", "gelu_accurate": "gelu_tanh",
    "gelu": "gelu", "gelu_python": "gelu", "quick_gelu": "quick_gelu", "relu": "relu", "silu": "silu", "swish": "silu",
}


# ---------------------------------------------------------------------------------------------------------------
# Llama bodies with a twist: Granite's multipliers, SmolLM3's layers without RoPE, OLMo's norms without parameters
# and clamped q/k/v, OLMo 2's norms after
# ---------------------------------------------------------------------------------------------------------------

def _granite(c: dict) -> dict:
    """Granite (IBM Granite 3.x dense): a Llama with four multipliers, so that a model trained at one width
    transfers to others (muP-style): the embeddings times `embedding_multiplier`, each sublayer's output times
    `residual_multiplier` before the residual add, the attention scores times `attention_multiplier` (instead of
    head_dim^-1/2: its default is 1.0) and the logits divided by `logits_scaling`. `attention_bias` puts biases
    on q, k, v and o alike, `mlp_bias` on the MLP."""
    return dict(_llama_family(c), embed_scale=c["embedding_multiplier"], residual_scale=c["residual_multiplier"],
                attn_multiplier=c["attention_multiplier"], logits_divisor=c["logits_scaling"])


def _smollm3(c: dict) -> dict:
    """SmolLM3: a Llama whose layers listed 0 in `no_rope_layers` skip RoPE (NoPE: they see no positions, only
    the causal order; by default every `no_rope_layer_interval`-th layer, the 4th, 8th...), with a window on the
    layers `layer_types` names (by default the NoPE ones, when `use_sliding_window` and `sliding_window` are set)."""
    return _check_window(c, dict(_llama_family(c), nope_layers=_smollm3_nope_layers(c)))


def _smollm3_nope_layers(c: dict) -> list[int]:
    """The layers that skip RoPE, as SmolLM3Config decides: a 0 in `no_rope_layers` (one flag per layer, 1 = RoPE),
    or, without that list, every `no_rope_layer_interval`-th layer.

        >>> _smollm3_nope_layers({"num_hidden_layers": 8, "no_rope_layers": None, "no_rope_layer_interval": 4})
        [3, 7]
    """
    n, flags, interval = c["num_hidden_layers"], c["no_rope_layers"], c["no_rope_layer_interval"]
    if flags is None:
        if not is_integer_at_least(interval):
            raise TinyInferError(f"config.json (smollm3): no_rope_layer_interval={interval!r} must be an integer >= 1")
        flags = [int((i + 1) % interval != 0) for i in range(n)]
    if not isinstance(flags, list) or len(flags) < n or any(flag not in (0, 1) for flag in flags):
        raise TinyInferError(f"config.json (smollm3): no_rope_layers={flags!r} must be a list of {n} flags, 1 (RoPE) "
                             "or 0 (no RoPE), one per layer (or null, to take every no_rope_layer_interval-th layer)")
    return [i for i in range(n) if not flags[i]]


def _olmo(c: dict) -> dict:
    """OLMo (OLMo 1, AI2): a Llama whose LayerNorms learn nothing, no gain and no bias (their epsilon is 1e-5
    whatever the file says: transformers' OlmoLayerNorm hard-wires it), and whose q, k and v are clamped to
    [-clip_qkv, clip_qkv] right after their projections when `clip_qkv` is set (a guard against loss spikes in
    training, kept at inference since the model learned with it). `attention_bias` puts biases on q, k, v and o."""
    fields = _llama_family({**c, "rms_norm_eps": OLMO_NORM_EPS})
    return dict(fields, norm="layernorm_no_params", clip_qkv=c["clip_qkv"])


OLMO_NORM_EPS = 1e-5  # OlmoLayerNorm's epsilon, not a config field


def _olmo2(c: dict) -> dict:
    """OLMo 2: the norms moved from each sublayer's input to its output, x = x + norm(attention(x)) and
    x = x + norm(mlp(x)), and q and k each normed over the whole projection (all heads as one, as OLMoE) before
    RoPE. `attention_bias` puts biases on q, k, v and o; the MLP has none."""
    return dict(_llama_family(c), pre_norms=False, post_norms=True, qk_norm=True, qk_norm_span="full")


# ---------------------------------------------------------------------------------------------------------------
# LayerNorm families, most with parallel blocks: GPT-NeoX (Pythia), Phi (Phi-1.5, Phi-2), StableLM, StarCoder2,
# Falcon, Cohere
# ---------------------------------------------------------------------------------------------------------------

def _gpt_neox(c: dict) -> dict:
    """GPT-NeoX (Pythia): LayerNorm with biases, q/k/v fused per head in the file (reordered at load,
    tinyinfer/weights.py), RoPE on the first `partial_rotary_factor` (`rotary_pct`, 0.25) of each head with theta
    `rotary_emb_base`, a biased GELU MLP, and by default a parallel residual (`use_parallel_residual`): attention and
    MLP both read the layer's input, each through its own norm, and both outputs join the stream at once."""
    rope = dict(c.get("rope_scaling") or c.get("rope_parameters") or {})  # as GPTNeoXConfig reads the dialects
    rope.setdefault("rope_theta", c.get("rotary_emb_base", GPT_NEOX_ROPE["rope_theta"]))
    rope.setdefault("partial_rotary_factor", c.get("rotary_pct", GPT_NEOX_ROPE["partial_rotary_factor"]))
    theta, scaling = _rope({**c, "rope_scaling": None, "rope_parameters": rope})
    d, n_heads = c["hidden_size"], c["num_attention_heads"]
    if d % n_heads:
        raise TinyInferError(f"config.json (gpt_neox): hidden_size={d} is not a multiple of "
                             f"num_attention_heads={n_heads}")
    return dict(
        vocab_size=c["vocab_size"], d_model=d, n_layers=c["num_hidden_layers"], n_heads=n_heads, n_kv_heads=n_heads,
        head_dim=d // n_heads, d_ff=c["intermediate_size"], max_seq_len=c["max_position_embeddings"],
        norm="layernorm", norm_eps=c["layer_norm_eps"], activation=_activation(c["hidden_act"]), mlp="gelu_mlp",
        rope_theta=theta, rope_scaling=scaling, partial_rotary_factor=rope["partial_rotary_factor"],
        qkv_bias=c["attention_bias"], o_bias=c["attention_bias"], mlp_bias=True,
        parallel_residual=c["use_parallel_residual"], tie_word_embeddings=c["tie_word_embeddings"],
    )


GPT_NEOX_ROPE = {"rope_theta": 10000.0, "partial_rotary_factor": 0.25}  # GPTNeoXConfig: default_theta, rotary_pct


def _phi(c: dict) -> dict:
    """Phi (Phi-1, Phi-1.5, Phi-2): one LayerNorm (with bias) per layer whose output both sublayers read, side by
    side (x = x + attention(norm(x)) + mlp(norm(x))), biases on q, k, v, the output projection `dense`, the GELU
    MLP (fc1, fc2) and the LM head, and RoPE on the first `partial_rotary_factor` of each head (0.4 on Phi-2; 0.5
    when the file says nothing). `qk_layernorm` (LayerNorms on q and k per head) is not implemented: refused."""
    if c.get("qk_layernorm"):
        raise TinyInferError("config.json (phi): qk_layernorm=true (LayerNorms on q and k) is not supported; only "
                             "qk_layernorm false, as in Phi-1, Phi-1.5 and Phi-2, is")
    rope = dict(c.get("rope_scaling") or c.get("rope_parameters") or {})  # as PhiConfig reads the dialects
    factor = rope.get("partial_rotary_factor", c.get("partial_rotary_factor", PHI_PARTIAL_ROTARY_FACTOR))
    fields = _llama_family({**c, "rms_norm_eps": c["layer_norm_eps"]})  # the Llama reading, LayerNorm's epsilon
    return dict(fields, norm="layernorm", mlp="gelu_mlp", partial_rotary_factor=factor, parallel_residual=True,
                shared_input_norm=True, lm_head_bias=True)


PHI_PARTIAL_ROTARY_FACTOR = 0.5  # PhiConfig's default when config.json gives none (not a field of the class)


def _stablelm(c: dict) -> dict:
    """StableLM (StableLM-3B-4E1T, StableLM 2): a Llama body with LayerNorms (with bias), RoPE on the first
    `partial_rotary_factor` of each head (0.25 when the file says nothing), q/k/v biases with `use_qkv_bias`, and
    head_dim always hidden_size / heads. Two options of StableLM 2 12B: `qk_layernorm`, a LayerNorm (no bias) on
    each head of q and k, every head with its own weight, before RoPE; and `use_parallel_residual`, Phi-2's block
    (one norm whose output attention and MLP both read, x = x + attention(norm(x)) + mlp(norm(x)))."""
    rope = dict(c.get("rope_scaling") or c.get("rope_parameters") or {})  # as StableLmConfig reads the dialects
    factor = rope.get("partial_rotary_factor", c.get("partial_rotary_factor", STABLELM_PARTIAL_ROTARY_FACTOR))
    fields = _llama_family({**c, "rms_norm_eps": c["layer_norm_eps"], "head_dim": None})  # LayerNorm's epsilon
    parallel = c["use_parallel_residual"]
    return dict(fields, norm="layernorm", partial_rotary_factor=factor, qk_norm=c["qk_layernorm"],
                qk_norm_span="each_head", qk_norm_kind="layernorm_no_bias", parallel_residual=parallel,
                shared_input_norm=parallel)


STABLELM_PARTIAL_ROTARY_FACTOR = 0.25  # StableLmConfig's default (not a field of the class)


def _falcon(c: dict) -> dict:
    """Falcon: LayerNorms with biases, RoPE on whole heads, an ungated MLP (dense_h_to_4h, GELU, dense_4h_to_h),
    with `bias` biases on every linear layer but the head, q/k/v fused in groups (tinyinfer/weights.py), and three
    blocks:

        new_decoder_architecture  (Falcon-40B, 180B)  parallel; `num_kv_heads` groups; two norms per layer
                                  (ln_attn, ln_mlp), or one when num_ln_in_parallel_attn is 1 (Falcon-11B)
        parallel_attn             (Falcon-7B)         parallel through one norm; one key/value head when
                                                      `multi_query`, else one per query head
        neither                                       sequential, two norms per layer

    What transformers itself cannot run (a new-architecture block that is not parallel, two parallel norms in the
    old one, grouped heads without the new architecture) and ALiBi are refused by name."""
    if c["alibi"]:
        raise TinyInferError("config.json (falcon): alibi=true (ALiBi position biases instead of RoPE, as in "
                             "Falcon-RW) is not supported; only the rotary Falcon models are")
    new, parallel, n_norms = c["new_decoder_architecture"], c["parallel_attn"], c["num_ln_in_parallel_attn"]
    n_norms = 2 if n_norms is None and new else n_norms
    if new and not parallel:
        raise TinyInferError("config.json (falcon): new_decoder_architecture=true needs parallel_attn=true "
                             "(transformers cannot run the other combination); fix config.json")
    if n_norms not in ((1, 2) if new else (None, 1)):
        raise TinyInferError(f"config.json (falcon): num_ln_in_parallel_attn={c['num_ln_in_parallel_attn']!r} is not "
                             "supported; use 1 or 2 with new_decoder_architecture, null (or 1) without")
    d, n_heads = c["hidden_size"], c["num_attention_heads"]
    n_kv = (c["num_kv_heads"] or n_heads) if new else (1 if c["multi_query"] else n_heads)
    if not new and not c["multi_query"] and c["num_kv_heads"] not in (None, n_heads):
        raise TinyInferError(f"config.json (falcon): num_kv_heads={c['num_kv_heads']} needs "
                             "new_decoder_architecture=true (the old block has one key/value head per query head, "
                             "or one in all with multi_query)")
    if d % n_heads:
        raise TinyInferError(f"config.json (falcon): hidden_size={d} is not a multiple of "
                             f"num_attention_heads={n_heads}")
    theta, scaling = _rope(c)
    return dict(
        vocab_size=c["vocab_size"], d_model=d, n_layers=c["num_hidden_layers"], n_heads=n_heads, n_kv_heads=n_kv,
        head_dim=d // n_heads, d_ff=c["ffn_hidden_size"] or 4 * d, max_seq_len=c["max_position_embeddings"],
        norm="layernorm", norm_eps=c["layer_norm_epsilon"], activation=_activation(c["activation"]), mlp="gelu_mlp",
        rope_theta=theta, rope_scaling=scaling, qkv_bias=c["bias"], o_bias=c["bias"], mlp_bias=c["bias"],
        parallel_residual=parallel, shared_input_norm=parallel and n_norms != 2,
        tie_word_embeddings=c["tie_word_embeddings"],
    )


def _starcoder2(c: dict) -> dict:
    """StarCoder2: a Mistral-like attention (GQA, RoPE on whole heads, a window over every layer when
    `sliding_window` is set) in a GPT-2-like body: LayerNorms with biases (epsilon `norm_epsilon`), an ungated
    MLP (c_fc, then c_proj) with the tanh GELU, and with `use_bias` biases on q, k, v, o and both MLP layers."""
    return _check_window(c, dict(_llama_family({**c, "rms_norm_eps": c["norm_epsilon"]}), norm="layernorm",
                                 mlp="gelu_mlp"))


def _cohere(c: dict) -> dict:
    """Cohere (Command-R, Command-R+): Phi-2's parallel block through one norm, x = x + attention(norm(x)) +
    mlp(norm(x)), with a LayerNorm that learns no bias, a SwiGLU MLP, the logits multiplied by `logit_scale`
    (tinyinfer divides by its inverse), a tied head by default, and with `use_qk_norm` a LayerNorm (no bias) on each
    head of q and k, each head with its own gain. Its RoPE rotates neighbouring pairs (x[2i], x[2i+1]): the loader
    permutes q's and k's coordinates into tinyinfer's halves (tinyinfer/weights.py), which leaves q.k unchanged."""
    scale = c["logit_scale"]
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < float("inf"):
        raise TinyInferError(f"config.json ({c['model_type']}): logit_scale={scale!r} must be a positive number (the "
                             "logits are multiplied by it); fix config.json")
    fields = _llama_family({**c, "rms_norm_eps": c["layer_norm_eps"]})  # LayerNorm's epsilon
    return dict(fields, norm="layernorm_no_bias", parallel_residual=True, shared_input_norm=True,
                qk_norm=c["use_qk_norm"], qk_norm_span="each_head", logits_divisor=1 / scale)


def _cohere2(c: dict) -> dict:
    """Cohere 2 (Command R7B, Command A): Cohere's block without q/k norms, head_dim always hidden_size / heads, and
    two kinds of layer: those `layer_types` names sliding (by default three of four) attend through a window and
    rotate q and k; the others see the whole context and rotate nothing (NoPE, as SmolLM3's layers)."""
    fields = dict(_cohere({**c, "use_qk_norm": False, "head_dim": None}))
    fields["nope_layers"] = [i for i, kind in enumerate(fields["layer_types"]) if kind == "full_attention"]
    return _check_window(c, fields)


# ---------------------------------------------------------------------------------------------------------------
# Mixture-of-Experts families: a Llama-family attention, a routed MLP (tinyinfer/moe.py)
# ---------------------------------------------------------------------------------------------------------------

def _expert_count(c: dict) -> int:
    """The number of experts, whichever name the file uses (transformers renamed it back and forth)."""
    counts = {key: c[key] for key in ("num_local_experts", "num_experts") if c.get(key) is not None}
    if len(set(counts.values())) > 1:
        raise TinyInferError(f"config.json: the expert counts disagree: {counts}; keep one of them")
    if not counts:
        raise TinyInferError("config.json: a Mixture-of-Experts config needs num_local_experts (or num_experts)")
    return next(iter(counts.values()))


def _moe(c: dict, **fields) -> dict:
    return dict(_llama_family(c), n_experts=_expert_count(c), n_experts_per_tok=c["num_experts_per_tok"], **fields)


def _mixtral(c: dict) -> dict:
    """Mixtral: every layer routed, experts as wide as `intermediate_size`, chosen weights always renormalised."""
    return _moe(c, moe_d_ff=c["intermediate_size"], norm_topk_prob=True)


def _qwen_moe(c: dict) -> dict:
    """Qwen2-MoE (with a gated shared expert, q/k/v biases) and Qwen3-MoE (q/k norm per head).
    Layers in `mlp_only_layers`, or off the `decoder_sparse_step` grid, keep a dense MLP."""
    n, step, dense = c["num_hidden_layers"], c["decoder_sparse_step"], set(c["mlp_only_layers"] or [])
    return _moe(c, moe_d_ff=c["moe_intermediate_size"], norm_topk_prob=c["norm_topk_prob"],
                shared_expert_d_ff=c.get("shared_expert_intermediate_size") or 0,
                moe_layers=[i for i in range(n) if i not in dense and (i + 1) % step == 0])


def _olmoe(c: dict) -> dict:
    """OLMoE: q and k each pass one RMSNorm spanning the whole projection (all heads), before RoPE."""
    if c.get("clip_qkv") is not None:
        raise TinyInferError(f"config.json (olmoe): clip_qkv={c['clip_qkv']} is not supported; only clip_qkv null is")
    return _moe(c, moe_d_ff=c["intermediate_size"], norm_topk_prob=c["norm_topk_prob"], qk_norm=True,
                qk_norm_span="full")


def _deepseek(c: dict) -> dict:
    """DeepSeek-V2 (V2-Lite) and V3 (R1, Kimi-K2, Moonlight): a Llama body with multi-head latent attention
    (tinyinfer/mla.py) and, from layer `first_k_dense_replace` on, a Mixture-of-Experts beside `n_shared_experts`
    always-on experts, fused into one ungated SwiGLU of n_shared_experts x moe_intermediate_size. Their routers
    (tinyinfer/moe.py) differ:

        deepseek_v3  sigmoid scores, e_score_correction_bias steering the choice, groups ranked by their two
                     best scores; weights normalised with `norm_topk_prob`
        deepseek_v2  softmax probabilities; `topk_method` "greedy" (the top-k of all) or "group_limited_greedy"
                     (groups ranked by their best); never normalised

    and both multiply the weights by `routed_scaling_factor`. V3 rotates neighbouring pairs with `rope_interleave`,
    V2 always (its complex-number RoPE); the loader reorders them (tinyinfer/weights.py). `attention_bias`, V2's
    `mlp_bias`, and the fields of DeepSeek's own files that transformers ignores, when not at the value it assumes
    (`DEEPSEEK_IGNORED`), are refused."""
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
    return dict(_mla(c), n_experts=E, n_experts_per_tok=k, moe_d_ff=c["moe_intermediate_size"],
                norm_topk_prob=bool(v3 and c["norm_topk_prob"]),
                shared_expert_d_ff=c["moe_intermediate_size"] * c["n_shared_experts"], shared_expert_gated=False,
                router="sigmoid_grouped" if v3 else "softmax_grouped", n_groups=n_groups, topk_groups=topk_groups,
                routed_scaling=c["routed_scaling_factor"], moe_layers=list(range(c["first_k_dense_replace"] or 0, n)))


def _gpt_oss(c: dict) -> dict:
    """gpt-oss (OpenAI's 20b and 120b): a Llama body whose every attention head has a learned sink logit
    (tinyinfer/attention.py), biases on q, k, v and o (`attention_bias`), a window on the layers `layer_types`
    names (by default the even ones, 0, 2, 4...), YaRN RoPE (by default factor 32 over 4096 positions, theta
    150000), and in every layer a Mixture-of-Experts (tinyinfer/moe.py): a router with a bias whose top-k logits
    are softmaxed among themselves, experts `intermediate_size` wide with biases, their SwiGLU clamped by
    `swiglu_limit` and sharpened by `swiglu_alpha`. `hidden_act` is not read (transformers' experts ignore it)."""
    if c["swiglu_limit"] is None:  # GptOssExperts clamps by it whatever it is (and fails on None)
        raise TinyInferError("config.json (gpt_oss): swiglu_limit=null is not supported: the experts clamp their gate "
                             "and up projections by it; give the number (7.0 in the gpt-oss releases)")
    params = c.get("rope_scaling") or c.get("rope_parameters") or GPT_OSS_ROPE  # GptOssConfig's default
    fields = _llama_family({**c, "rope_parameters": params, "rope_scaling": None, "hidden_act": "silu"})
    return dict(_check_window(c, fields), n_experts=_expert_count(c), n_experts_per_tok=c["num_experts_per_tok"],
                moe_d_ff=c["intermediate_size"], router="topk_softmax", expert_bias=True, attention_sinks=True,
                swiglu_limit=c["swiglu_limit"], swiglu_alpha=c["swiglu_alpha"])


GPT_OSS_ROPE = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                "original_max_position_embeddings": 4096}  # GptOssConfig's rope_parameters when the file has none


# Fields of DeepSeek's original config.json files that transformers ignores, and the value it behaves as if they had
# (the releases' values): another value is refused, since DeepSeek's own code and transformers would differ
DEEPSEEK_IGNORED = {
    "deepseek_v2": {"scoring_func": "softmax", "norm_topk_prob": False, "moe_layer_freq": 1},
    "deepseek_v3": {"scoring_func": "sigmoid", "topk_method": "noaux_tc", "moe_layer_freq": 1},
}


def _mla(c: dict) -> dict:
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
    theta, scaling = _rope(c)
    params = c.get("rope_scaling") or c.get("rope_parameters") or {}
    scale = (sizes["qk_nope_head_dim"] + sizes["qk_rope_head_dim"]) ** -0.5
    if params.get("rope_type", params.get("type", "default")) != "default" and params.get("mscale_all_dim"):
        factor = (scaling or params)["factor"]
        mscale = 1.0 if factor <= 1 else 0.1 * params["mscale_all_dim"] * math.log(factor) + 1.0
        scale = scale * mscale * mscale
    fields = _llama_family({**c, "num_key_value_heads": n_heads, "head_dim": 1})  # the body's reading
    return dict(fields, n_kv_heads=1, head_dim=sizes["kv_lora_rank"] + sizes["qk_rope_head_dim"], rope_theta=theta,
                rope_scaling=scaling, attn_multiplier=scale, q_lora_rank=c["q_lora_rank"], **{
                    key: sizes[key] for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")},
                interleaved_rope=c.get("rope_interleave", True))  # V2: always


# ---------------------------------------------------------------------------------------------------------------
# Phi-3 and Gemma: a Llama-family body with a few switches (fused weights, partial RoPE, 1 + w norms, soft caps)
# ---------------------------------------------------------------------------------------------------------------

def _phi3(c: dict) -> dict:
    """Phi-3: a Llama with q/k/v and gate/up fused in the file (split at load, tinyinfer/weights.py), RoPE on
    the first `partial_rotary_factor` of each head, and a window over every layer when `sliding_window` is set.

    The long-context models (Phi-3-128k, Phi-3.5, Phi-4-mini) use "longrope" ("su" and "yarn" are its old names
    for Phi-3): transformers rotates with `short_factor`-stretched frequencies while a sequence fits in
    `original_max_position_embeddings`, and past that recomputes everything with `long_factor` (both times an
    attention factor). tinyinfer implements the first regime only, so the context window of such a model is
    `original_max_position_embeddings` (4096 for Phi-3-mini-128k): longer sequences are refused.
    """
    params = c.get("rope_scaling") or c.get("rope_parameters") or {}
    params = params if isinstance(params, dict) else {}
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in ("default", "longrope", "su", "yarn"):  # what transformers' Phi3Config accepts
        raise TinyInferError(f"config.json (phi3): rope scaling type {kind!r} is not supported; Phi-3 models use "
                             "default RoPE or longrope")
    plain_rope = {key: value for key, value in params.items() if key not in ("type", "rope_type")}
    fields = _llama_family({**c, "rope_scaling": None, "rope_parameters": plain_rope})  # (theta, no scaling)
    fields["partial_rotary_factor"] = params.get("partial_rotary_factor") or c.get("partial_rotary_factor") or 1.0
    if kind != "default":
        rotary_dim = int(fields["head_dim"] * fields["partial_rotary_factor"])  # as Config.rotary_dim
        n_pairs = (rotary_dim + 1) // 2  # frequencies (as inv_frequencies)
        fields |= _phi3_longrope(c, params, n_pairs)
    return fields


def _phi3_longrope(c: dict, params: dict, n_pairs: int) -> dict:
    """The short-sequence regime of longrope: `short_factor` (one per rotated pair) divides the frequencies,
    and q and k are scaled by the attention factor, sqrt(1 + ln(stretch) / ln(original length)), where the
    stretch is `factor` or max_position_embeddings / original_max_position_embeddings (as transformers does)."""
    original = c["original_max_position_embeddings"]
    for key in ("short_factor", "long_factor"):
        if not isinstance(params.get(key), list) or len(params[key]) != n_pairs:
            raise TinyInferError(f"config.json (phi3): longrope needs {key}, a list of {n_pairs} numbers (one per "
                                 f"rotated pair of a head); it has {params.get(key)!r}")
    stretch = params.get("factor") or c["max_position_embeddings"] / original
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        attention_factor = 1.0 if stretch <= 1 else math.sqrt(1 + math.log(stretch) / math.log(original))
    scaling = {"rope_type": "longrope", "short_factor": params["short_factor"], "attention_factor": attention_factor,
               "max_position_embeddings": c["max_position_embeddings"]}  # what the file allows, for error messages
    return {"rope_scaling": scaling, "max_seq_len": min(c["max_position_embeddings"], original)}


def _gemma_base(c: dict, activation: str, other: str) -> dict:
    """What Gemma and Gemma 2 share: embeddings times sqrt(hidden_size), RMSNorm scaling by (1 + weight), a GELU-
    gated MLP (GeGLU) whose activation is the config field `activation`, tied head. `other` is the activation field
    the family ignores; a file whose two fields disagree is ambiguous (transformers 4 and 5 differ) and refused."""
    if c.get("use_bidirectional_attention"):
        raise TinyInferError(f"config.json ({c['model_type']}): use_bidirectional_attention is not supported; "
                             "tinyinfer attends causally only")
    name = c[activation]
    if c.get(other) is not None and _activation(c[other]) != _activation(name):
        raise TinyInferError(f"config.json ({c['model_type']}): {activation}={name!r} and {other}={c[other]!r} "
                             f"disagree; transformers 5 uses {activation}: make the two the same")
    return dict(_llama_family({**c, "hidden_act": name}), norm="rmsnorm_plus_one", embed_scale=c["hidden_size"] ** 0.5)


def _gemma(c: dict) -> dict:
    """Gemma: the activation is `hidden_act`, where transformers 5 reads "gelu" (what the Gemma releases say) as
    the tanh approximation "gelu_pytorch_tanh"; `hidden_activation` is not read."""
    hidden_act = "gelu_pytorch_tanh" if c["hidden_act"] == "gelu" else c["hidden_act"]
    return _gemma_base({**c, "hidden_act": hidden_act}, "hidden_act", "hidden_activation")


def _gemma2(c: dict) -> dict:
    """Gemma 2: Gemma plus four norms per layer (each sublayer's output normed before the residual add), the
    scores scaled by query_pre_attn_scalar^-1/2 and soft-capped (attn_logit_softcapping), the logits soft-capped
    (final_logit_softcapping), and a sliding window on the layers `layer_types` names (by default the even ones,
    0, 2, 4...). Its activation is `hidden_activation` ("gelu" is the exact GELU here); `hidden_act` is not read."""
    fields = dict(_gemma_base(c, "hidden_activation", "hidden_act"), post_norms=True,
                  query_pre_attn_scalar=c["query_pre_attn_scalar"], attn_softcap=c["attn_logit_softcapping"],
                  final_softcap=c["final_logit_softcapping"])
    return _check_window(c, fields)


def _check_window(c: dict, fields: dict) -> dict:
    if "sliding_attention" in fields["layer_types"] and fields["sliding_window"] is None:
        raise TinyInferError(f"config.json ({c['model_type']}): layers slide (layer_types) but sliding_window is null; "
                             "give the window's size")
    return fields


def _gemma3(c: dict) -> dict:
    """Gemma 3 (text): Gemma 2's body (four norms per layer, query_pre_attn_scalar, soft-capped logits when
    final_logit_softcapping is set) with q and k each normed per head (scaling by 1 + weight) before RoPE, no
    attention soft cap, a window on five layers of six, and two RoPEs: the global layers rotate with rope_theta
    (1e6) and its scaling (linear x8 on the 4B and larger), the sliding ones with rope_local_base_freq (1e4),
    unscaled. Its activation is `hidden_activation`."""
    if c.get("attn_logit_softcapping") is not None:  # Gemma3Attention never passes it to the attention
        raise TinyInferError(f"config.json (gemma3_text): attn_logit_softcapping={c['attn_logit_softcapping']} is not "
                             "supported: transformers' Gemma 3 ignores it, so its meaning is unclear; set it to null")
    global_rope, local_theta = _gemma3_rope(c)
    fields = dict(_gemma_base({**c, "rope_scaling": None, "rope_parameters": global_rope}, "hidden_activation",
                              "hidden_act"),
                  post_norms=True, qk_norm=True, query_pre_attn_scalar=c["query_pre_attn_scalar"],
                  final_softcap=c["final_logit_softcapping"], local_rope_theta=local_theta)
    return _check_window(c, fields)


GEMMA3_THETAS = {"global": 1_000_000.0, "local": 10_000.0}  # transformers' Gemma3TextConfig.default_theta


def _gemma3_rope(c: dict) -> tuple[dict, float]:
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


# What transformers takes for a field that config.json leaves out: its config class's default. Files written by
# older versions lack the fields added since (head_dim, attention_bias, mlp_bias, ...), and the defaults differ
# between families (Mixtral's rope_theta is 1e6, Qwen3's head_dim 128, Mistral's window 4096), so each reader
# sees these filled in. Checked against the classes by tests/test_config_variants.py.
_LLAMA_LIKE = dict(max_position_embeddings=2048, rms_norm_eps=1e-6, hidden_act="silu", rope_theta=10000.0,
                   tie_word_embeddings=False)
_QWEN_WINDOW = dict(use_sliding_window=False, sliding_window=4096, max_window_layers=28)
_GEMMA_LIKE = dict(max_position_embeddings=8192, rms_norm_eps=1e-6, rope_theta=10000.0, head_dim=256,
                   tie_word_embeddings=True, attention_bias=False, use_bidirectional_attention=None)
HF_DEFAULTS = {
    "gpt2": dict(n_positions=1024, n_inner=None, layer_norm_epsilon=1e-5, activation_function="gelu_new",
                 scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False, tie_word_embeddings=True),
    "llama": dict(_LLAMA_LIKE, attention_bias=False, mlp_bias=False),
    "mistral": dict(_LLAMA_LIKE, max_position_embeddings=131072, num_key_value_heads=8, sliding_window=4096),
    "qwen2": dict(_LLAMA_LIKE | _QWEN_WINDOW, max_position_embeddings=32768, num_key_value_heads=32),
    "qwen3": dict(_LLAMA_LIKE | _QWEN_WINDOW, max_position_embeddings=32768, num_key_value_heads=32, head_dim=128,
                  attention_bias=False),
    "mixtral": dict(_LLAMA_LIKE, max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=1e6,
                    num_key_value_heads=8, sliding_window=None),
    "qwen2_moe": dict(_LLAMA_LIKE | _QWEN_WINDOW, max_position_embeddings=32768, num_key_value_heads=16,
                      qkv_bias=True, norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=None,
                      shared_expert_intermediate_size=5632),
    "qwen3_moe": dict(_LLAMA_LIKE, max_position_embeddings=32768, num_key_value_heads=4, attention_bias=False,
                      use_sliding_window=False, sliding_window=4096, norm_topk_prob=False, decoder_sparse_step=1,
                      mlp_only_layers=None),
    "olmoe": dict(_LLAMA_LIKE, max_position_embeddings=4096, rms_norm_eps=1e-5, attention_bias=False,
                  norm_topk_prob=False, clip_qkv=None),
    "phi3": dict(_LLAMA_LIKE, max_position_embeddings=4096, rms_norm_eps=1e-5, num_key_value_heads=None,
                 sliding_window=None, original_max_position_embeddings=4096),
    "gemma": dict(_GEMMA_LIKE, hidden_act="gelu_pytorch_tanh", num_key_value_heads=16),
    "gemma2": dict(_GEMMA_LIKE, hidden_activation="gelu_pytorch_tanh", num_key_value_heads=4,
                   query_pre_attn_scalar=256, sliding_window=4096, layer_types=None, final_logit_softcapping=30.0,
                   attn_logit_softcapping=50.0),
    # rope_theta: per layer type, GEMMA3_THETAS
    "gemma3_text": dict({k: v for k, v in _GEMMA_LIKE.items() if k != "rope_theta"}, max_position_embeddings=131072,
                        hidden_activation="gelu_pytorch_tanh", num_key_value_heads=4, query_pre_attn_scalar=256,
                        sliding_window=4096, layer_types=None, final_logit_softcapping=None,
                        attn_logit_softcapping=None, use_bidirectional_attention=False),
    "granite": dict(_LLAMA_LIKE, attention_bias=False, mlp_bias=False, num_key_value_heads=None,
                    embedding_multiplier=1.0, residual_multiplier=1.0, attention_multiplier=1.0, logits_scaling=1.0),
    "smollm3": dict(_LLAMA_LIKE, max_position_embeddings=32768, rope_theta=2_000_000.0, num_key_value_heads=4,
                    tie_word_embeddings=True, attention_bias=False, mlp_bias=False, use_sliding_window=False,
                    sliding_window=None, no_rope_layers=None, no_rope_layer_interval=4, layer_types=None),
    "olmo": dict({k: v for k, v in _LLAMA_LIKE.items() if k != "rms_norm_eps"}, attention_bias=False,
                 num_key_value_heads=None, clip_qkv=None),
    "olmo2": dict(_LLAMA_LIKE, rms_norm_eps=1e-5, attention_bias=False, num_key_value_heads=None),
    "phi": dict(max_position_embeddings=2048, layer_norm_eps=1e-5, hidden_act="gelu_new", rope_theta=10000.0,
                tie_word_embeddings=False, num_key_value_heads=None, qk_layernorm=False),
    # rotary_emb_base and rotary_pct: GPT_NEOX_ROPE
    "gpt_neox": dict(max_position_embeddings=2048, layer_norm_eps=1e-5, hidden_act="gelu", tie_word_embeddings=False,
                     use_parallel_residual=True, attention_bias=True),
    "stablelm": dict(max_position_embeddings=4096, layer_norm_eps=1e-5, hidden_act="silu", rope_theta=10000.0,
                     tie_word_embeddings=False, num_key_value_heads=32, use_qkv_bias=False, qk_layernorm=False,
                     use_parallel_residual=False),
    "starcoder2": dict(max_position_embeddings=4096, norm_epsilon=1e-5, hidden_act="gelu_pytorch_tanh",
                       rope_theta=10000.0, tie_word_embeddings=True, num_key_value_heads=2, sliding_window=None,
                       use_bias=True),
    "falcon": dict(max_position_embeddings=2048, layer_norm_epsilon=1e-5, rope_theta=10000.0, num_kv_heads=None,
                   alibi=False, new_decoder_architecture=False, multi_query=True, parallel_attn=True, bias=False,
                   ffn_hidden_size=None, activation="gelu", tie_word_embeddings=True, num_ln_in_parallel_attn=None),
    "cohere": dict(max_position_embeddings=8192, layer_norm_eps=1e-5, hidden_act="silu", rope_theta=500000.0,
                   tie_word_embeddings=True, num_key_value_heads=None, attention_bias=False, use_qk_norm=False,
                   logit_scale=0.0625),
    "cohere2": dict(max_position_embeddings=8192, layer_norm_eps=1e-5, hidden_act="silu", rope_theta=10000.0,
                    tie_word_embeddings=True, num_key_value_heads=None, attention_bias=False, logit_scale=0.0625,
                    sliding_window=4096, layer_types=None),
    "deepseek_v2": dict(_LLAMA_LIKE, vocab_size=102400, num_key_value_heads=None, attention_bias=False, mlp_bias=False,
                        first_k_dense_replace=0, kv_lora_rank=512, q_lora_rank=1536, n_group=None, n_routed_experts=64,
                        n_shared_experts=2, qk_nope_head_dim=128, qk_rope_head_dim=64, routed_scaling_factor=1.0,
                        topk_group=None, topk_method="greedy", norm_topk_prob=False, v_head_dim=128,
                        num_experts_per_tok=None, moe_intermediate_size=1407),
    # rope_parameters: GPT_OSS_ROPE
    "gpt_oss": dict(max_position_embeddings=131072, rms_norm_eps=1e-5, hidden_act="silu", rope_theta=150000.0,
                    tie_word_embeddings=False, head_dim=64, num_key_value_heads=8, sliding_window=128,
                    layer_types=None, attention_bias=True, num_local_experts=128, num_experts_per_tok=4,
                    swiglu_alpha=1.702, swiglu_limit=7.0),
    "deepseek_v3": dict(_LLAMA_LIKE, vocab_size=129280, hidden_size=7168, intermediate_size=18432,
                        moe_intermediate_size=2048, num_hidden_layers=61, num_attention_heads=128,
                        num_key_value_heads=128, n_shared_experts=1, n_routed_experts=256, routed_scaling_factor=2.5,
                        kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128,
                        n_group=8, topk_group=4, num_experts_per_tok=8, first_k_dense_replace=3, norm_topk_prob=True,
                        max_position_embeddings=4096, rope_interleave=True, attention_bias=False),
}

# model_type -> function translating its config.json into Config fields
HF_CONFIG_READERS = {
    "gpt2": _gpt2,
    "llama": _llama_family,
    "mistral": _llama_family,
    "qwen2": _llama_family,
    "qwen3": _llama_family,
    "mixtral": _mixtral,
    "qwen2_moe": _qwen_moe,
    "qwen3_moe": _qwen_moe,
    "olmoe": _olmoe,
    "phi3": _phi3,
    "gemma": _gemma,
    "gemma2": _gemma2,
    "gemma3_text": _gemma3,
    "granite": _granite,
    "smollm3": _smollm3,
    "olmo": _olmo,
    "olmo2": _olmo2,
    "gpt_neox": _gpt_neox,
    "phi": _phi,
    "stablelm": _stablelm,
    "starcoder2": _starcoder2,
    "falcon": _falcon,
    "cohere": _cohere,
    "cohere2": _cohere2,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "gpt_oss": _gpt_oss,
}


def config_from_hf(c: dict) -> Config:
    """Translate a parsed HF config.json into a Config (see the module docstring for the dialects)."""
    model_type = c.get("model_type")
    if model_type == "gemma3":  # Gemma 3 4B and larger: a vision tower beside the text model
        return config_from_hf(_gemma3_text_config(c))
    if model_type not in HF_CONFIG_READERS:
        raise TinyInferError(
            f"config.json: model_type {model_type!r} is not supported; supported: {', '.join(HF_CONFIG_READERS)}"
        )
    if c.get("quantization_config"):
        method = c["quantization_config"].get("quant_method", "unknown")
        raise TinyInferError(f"config.json: weights quantised with {method!r} are not supported; "
                             + QUANTIZATION_FIXES.get(method, "use an fp32, fp16 or bf16 checkpoint of the model"))
    _check_hf_sizes(c)
    try:
        fields = HF_CONFIG_READERS[model_type]({**HF_DEFAULTS[model_type], **c})
    except KeyError as e:
        raise TinyInferError(f"config.json ({model_type}): required field {e.args[0]!r} is missing") from e
    except (TypeError, ValueError, AttributeError) as e:  # e.g. "hidden_size": "big", "rope_parameters": "x"
        raise TinyInferError(f"config.json ({model_type}): a field has the wrong type ({e}); fix it to match the "
                             "model's original config.json") from e
    eos = c.get("eos_token_id")
    return Config(
        model_type=model_type, **fields, bos_token_id=c.get("bos_token_id"),
        eos_token_ids=list(eos) if isinstance(eos, list) else ([] if eos is None else [eos]),
        torch_dtype=c.get("dtype") or c.get("torch_dtype"),
    )


# What to do instead, for the quantised formats known to ship as a model's main files
QUANTIZATION_FIXES = {
    "mxfp4": "gpt-oss's Hub files store the experts in MXFP4 (4-bit floats); convert the checkpoint to bf16 first: "
             "transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, "
             "quantization_config=transformers.Mxfp4Config(dequantize=True)).save_pretrained(out)",
}


def _gemma3_text_config(c: dict) -> dict:
    """The text model's config.json of a multimodal Gemma 3 (its `text_config`, with the file's token ids and
    dtype): tinyinfer runs the text model alone, its tensors read from under `language_model.` (weights.py)."""
    text = c.get("text_config")
    if not isinstance(text, dict) or text.get("model_type", "gemma3_text") != "gemma3_text":
        raise TinyInferError("config.json (gemma3): this multimodal config has no Gemma 3 text_config; only the "
                             "text-only Gemma 3 (gemma3_text), or the text model of a multimodal one, is supported")
    if c.get("tie_word_embeddings", True) != text.get("tie_word_embeddings", True):
        raise TinyInferError("config.json (gemma3): tie_word_embeddings differs between the file and its text_config; "
                             "make the two the same")
    outer = {key: c[key] for key in ("bos_token_id", "eos_token_id", "dtype", "torch_dtype") if c.get(key) is not None}
    return {**text, **outer, "model_type": "gemma3_text"}


def read_json(path: Path, what: str) -> dict:
    """Parse a JSON file holding an object, naming it in the error when it is missing or malformed."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise TinyInferError(f"{what} not found: {path}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TinyInferError(f"{what} is not valid JSON: {path} ({e})") from e
    except OSError as e:  # a folder, no permission, a path through a file
        raise TinyInferError(f"cannot read {what} at {path} ({e.strerror}): check the path and its permissions") from e
    if not isinstance(data, dict):
        raise TinyInferError(f"{what} holds a JSON {type(data).__name__}, not an object: {path}; fix or re-download it")
    return data


def load_hf_config(folder: Path) -> Config:
    """Config of a Hugging Face model folder, with EOS ids from generation_config.json when it has them."""
    c = read_json(Path(folder) / "config.json", "config.json")
    gen_path = Path(folder) / "generation_config.json"
    if gen_path.exists():
        gen = read_json(gen_path, "generation_config.json")
        for key in ("eos_token_id", "bos_token_id"):
            if gen.get(key) is not None:
                c[key] = gen[key]
    return config_from_hf(c)
