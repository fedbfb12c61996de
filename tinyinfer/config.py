"""One dataclass that describes an architecture, whatever file it came from, and the checks every family shares.

A Hugging Face `config.json` and a llama2.c header say the same things in different words; both are
translated into `Config`, so the model code reads one vocabulary of names. Each model family's translation of
its config.json lives in its own module, tinyinfer/families/<model_type>.py; `tinyinfer.families.config_from_hf`
picks it by `model_type`. This module knows no family: it holds the fields, the checks on them, and the checks
on a config.json's size fields that every family shares.

The fields come in groups: the sizes; norms and the MLP; positions (RoPE); attention; the block's wiring;
Mixture-of-Experts; latent attention (DeepSeek); gpt-oss's sinks and clamped experts.

    >>> cfg = Config("llama", vocab_size=32, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=4, d_ff=40,
    ...              max_seq_len=64)
    >>> cfg.head_dim, cfg.n_kv_heads, cfg.rope_theta
    (4, 2, 10000.0)
"""

from __future__ import annotations

import json
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
    # -- norms and the MLP
    norm: str = "rmsnorm"  # a kind in tinyinfer/norms.py NORM_PARAMS: "rmsnorm", "layernorm", "rmsnorm_plus_one"...
    norm_eps: float = 1e-5
    activation: str = "silu"  # a name in tinyinfer/mlp.py ACTIVATIONS: "silu", "gelu_tanh", "gelu", "relu", ...
    mlp: str = "swiglu"  # "swiglu" (gate, up, down) | "gelu_mlp" (up, down: GPT-2)
    # -- positions (tinyinfer/rope.py)
    position: str = "rope"  # "rope" | "learned" (GPT-2's position table)
    rope_theta: float = 10000.0
    # {"rope_type": "linear"|"llama3"|"yarn"|"longrope" (Phi-3)|"frequency_factors" (GGUF), ...} or None
    rope_scaling: dict | None = None
    local_rope_theta: float | None = None  # Gemma 3: sliding layers rotate with this theta, unscaled (None: as all)
    partial_rotary_factor: float = 1.0  # Phi-3: RoPE rotates only the first int(head_dim * factor) coordinates
    nope_layers: list[int] = field(default_factory=list)  # SmolLM3: layers that do not rotate q and k ("NoPE")
    # -- attention (gathered per layer by `attention_spec`)
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
    # -- scales of the stream and the logits
    embed_scale: float = 1.0  # embeddings are multiplied by it: sqrt(d_model) (Gemma), embedding_multiplier (Granite)
    residual_scale: float = 1.0  # Granite: each sublayer's output times residual_multiplier before the residual add
    attn_multiplier: float | None = None  # the score scale itself, not head_dim^-1/2: Granite's attention_multiplier,
    # DeepSeek's (qk_nope_head_dim + qk_rope_head_dim)^-1/2, times YaRN's mscale(mscale_all_dim)^2
    logits_divisor: float = 1.0  # Granite: the logits are divided by logits_scaling (Cohere: by 1 / logit_scale)
    # -- the block: how a layer wires its sublayers (tinyinfer/model.py `choose_block`)
    pre_norms: bool = True  # each sublayer's input is normed (all but OLMo 2)
    post_norms: bool = False  # each sublayer's output is normed before the residual add (Gemma 2: again; OLMo 2)
    parallel_residual: bool = False  # GPT-NeoX, Phi-2: x + attn(norm(x)) + mlp(norm'(x)), both read the layer's input
    shared_input_norm: bool = False  # Phi-2 (parallel): one norm per layer, its output read by attention and MLP alike
    lm_head_bias: bool = False  # Phi-2: the output layer adds a bias to the logits
    # -- per layer, and what the files say
    layer_types: list[str] = field(default_factory=list)  # per layer "full_attention" | "sliding_attention"
    tie_word_embeddings: bool = False
    bos_token_id: int | None = None
    eos_token_ids: list[int] = field(default_factory=list)
    torch_dtype: str | None = None  # the dtype the checkpoint was saved in, as the file says
    # config.json's quantization_config, checked, when its weights are dequantised at load ({"quant_method": "fp8",
    # "weight_block_size": [128, 128], ...}: tinyinfer/fp8.py; "mxfp4": gpt-oss's experts, families/gpt_oss.py);
    # None: the file stores plain floats
    quantization_config: dict | None = None
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

    def attention_spec(self, layer: int) -> AttentionSpec:
        """How layer `layer` attends: what its Config says, gathered once per model (tinyinfer/model.py)."""
        sliding = self.layer_types[layer] == "sliding_attention"
        rope = None if self.position != "rope" or layer in self.nope_layers else (
            "local" if sliding and self.local_rope_theta is not None else "global")
        return AttentionSpec(scale=self.attention_scale(layer), softcap=self.attn_softcap, window=self.window_of(layer),
                             rope=rope, qk_norm=self.qk_norm, clamp=self.clip_qkv)

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


@dataclass(frozen=True)
class AttentionSpec:
    """How one layer attends (`Config.attention_spec`): the switches its attention reads, in one place."""

    scale: float  # the factor on q.k scores (Config.attention_scale)
    softcap: float | None = None  # Gemma 2: scores become cap * tanh(score / cap) before the mask
    window: int | None = None  # how many past positions it sees (None: the whole context)
    rope: str | None = "global"  # which RoPE rotates q and k: "global", "local" (Gemma 3's sliding layers), None
    qk_norm: bool = False  # q and k normed before RoPE (how: Config.qk_norm_span, qk_norm_kind)
    clamp: float | None = None  # OLMo 1: q, k and v clipped to [-clamp, clamp] after their projections
    # (gpt-oss's attention sinks, a learned logit per head in the softmax's denominator, are a parameter of the
    # layer, "sinks": a layer attends with them when it has them)


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


def check_hf_sizes(c: dict) -> None:
    """Refuse a config.json whose size fields, in any dialect, are not positive integers (or absurdly deep)."""
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
