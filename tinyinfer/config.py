"""One dataclass that describes an architecture, whatever file it came from.

A Hugging Face `config.json` and a llama2.c header say the same things in different words; both are
translated into `Config` here, so the model code reads one vocabulary of names. Two config.json dialects
exist in the wild and both are accepted:

    older transformers / most Hub files:  "rope_theta": 10000.0, "rope_scaling": {...}, "torch_dtype": "bfloat16"
    transformers 5:                       "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, "dtype": ...

    >>> cfg = config_from_hf({"model_type": "llama", "vocab_size": 32, "hidden_size": 16,
    ...     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 40})
    >>> cfg.head_dim, cfg.n_kv_heads, cfg.rope_theta
    (4, 2, 10000.0)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tinyinfer.errors import TinyInferError


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
    norm: str = "rmsnorm"  # "rmsnorm" | "layernorm"
    norm_eps: float = 1e-5
    activation: str = "silu"  # "silu" | "gelu_tanh"
    mlp: str = "swiglu"  # "swiglu" (gate, up, down) | "gelu_mlp" (up, down: GPT-2)
    position: str = "rope"  # "rope" | "learned" (GPT-2's position table)
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # {"rope_type": "linear"|"llama3", ...} or None
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False  # Qwen3: RMSNorm over each head of q and k before RoPE
    qk_norm_span: str = "head"  # "head" (Qwen3: each head alone) | "full" (OLMoE: the whole projection at once)
    sliding_window: int | None = None
    attn_scale_weights: bool = True  # GPT-2's scale_attn_weights: divide scores by sqrt(head_dim)
    attn_scale_inverse_layer: bool = False  # GPT-2's scale_attn_by_inverse_layer_idx: also by (layer + 1)
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

    def __post_init__(self):
        if not self.layer_types:
            kind = "sliding_attention" if self.sliding_window else "full_attention"
            self.layer_types = [kind] * self.n_layers
        if self.n_heads % self.n_kv_heads:
            raise TinyInferError(
                f"config: num_attention_heads={self.n_heads} is not a multiple of num_key_value_heads={self.n_kv_heads}"
            )
        if self.n_experts and not 1 <= self.n_experts_per_tok <= self.n_experts:
            raise TinyInferError(
                f"config: num_experts_per_tok={self.n_experts_per_tok} must be between 1 and the number of experts "
                f"({self.n_experts}); fix num_experts_per_tok or num_experts/num_local_experts in config.json"
            )

    def is_moe_layer(self, layer: int) -> bool:
        """Whether layer i's feed-forward is a Mixture-of-Experts (else a dense MLP of width d_ff)."""
        return self.n_experts > 0 and (self.moe_layers is None or layer in self.moe_layers)

    def attention_scale(self, layer: int) -> float:
        """The factor on layer `layer`'s q.k scores: 1/sqrt(head_dim), unless a GPT-2 config says otherwise."""
        scale = self.head_dim**-0.5 if self.attn_scale_weights else 1.0
        return scale / (layer + 1) if self.attn_scale_inverse_layer else scale

    def window_of(self, layer: int) -> int | None:
        """How many past positions a layer may attend to (None = the whole context)."""
        return self.sliding_window if self.layer_types[layer] == "sliding_attention" else None

    @property
    def kv_bytes_per_token(self) -> int:
        """fp32 bytes of K and V one token adds to the cache: 2 x layers x kv_heads x head_dim x 4."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * 4


# ---------------------------------------------------------------------------------------------------------------
# Hugging Face config.json
# ---------------------------------------------------------------------------------------------------------------

def _gpt2(c: dict) -> dict:
    d = c["n_embd"]
    return dict(
        vocab_size=c["vocab_size"], d_model=d, n_layers=c["n_layer"], n_heads=c["n_head"],
        n_kv_heads=c["n_head"], head_dim=d // c["n_head"], d_ff=c.get("n_inner") or 4 * d,
        max_seq_len=c.get("n_positions", 1024), norm="layernorm", norm_eps=c.get("layer_norm_epsilon", 1e-5),
        activation=_activation(c.get("activation_function", "gelu_new")), mlp="gelu_mlp", position="learned",
        qkv_bias=True, o_bias=True, mlp_bias=True, tie_word_embeddings=c.get("tie_word_embeddings", True),
        attn_scale_weights=c.get("scale_attn_weights", True),
        attn_scale_inverse_layer=c.get("scale_attn_by_inverse_layer_idx", False),
    )


def _llama_family(c: dict) -> dict:
    """llama, mistral, qwen2, qwen3: RMSNorm, RoPE, SwiGLU; they differ in biases, q/k norm and windows."""
    model_type = c["model_type"]
    n_heads = c["num_attention_heads"]
    n_kv = c.get("num_key_value_heads") or n_heads
    theta, scaling = _rope(c)
    fields = dict(
        vocab_size=c["vocab_size"], d_model=c["hidden_size"], n_layers=c["num_hidden_layers"], n_heads=n_heads,
        n_kv_heads=n_kv, head_dim=c.get("head_dim") or c["hidden_size"] // n_heads, d_ff=c["intermediate_size"],
        max_seq_len=c.get("max_position_embeddings", 2048), norm="rmsnorm", norm_eps=c.get("rms_norm_eps", 1e-6),
        activation=_activation(c.get("hidden_act", "silu")), mlp="swiglu", position="rope",
        rope_theta=theta, rope_scaling=scaling,
        qkv_bias=c.get("attention_bias", model_type == "qwen2"), o_bias=c.get("attention_bias", False),
        mlp_bias=c.get("mlp_bias", False), qk_norm=model_type == "qwen3",
        tie_word_embeddings=c.get("tie_word_embeddings", False),
    )
    fields["sliding_window"], fields["layer_types"] = _sliding(c)
    return fields


QWEN_TYPES = ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe")


def _sliding(c: dict) -> tuple[int | None, list[str]]:
    """Mistral slides every layer when `sliding_window` is set; Qwen only with `use_sliding_window`,
    from layer `max_window_layers` on. An explicit `layer_types` list (transformers 5) wins."""
    window = c.get("sliding_window")
    if c["model_type"] in QWEN_TYPES and not c.get("use_sliding_window", False):
        window = None
    if c.get("layer_types"):
        return window, list(c["layer_types"])
    n = c["num_hidden_layers"]
    if window is None:
        return None, ["full_attention"] * n
    first = c.get("max_window_layers", 0) if c["model_type"] in QWEN_TYPES else 0
    return window, ["sliding_attention" if i >= first else "full_attention" for i in range(n)]


def _rope(c: dict) -> tuple[float, dict | None]:
    """(theta, scaling) from either dialect; scaling is None for plain RoPE."""
    params = dict(c.get("rope_parameters") or {})
    if c.get("rope_scaling"):
        params = {**params, **c["rope_scaling"]}
    theta = float(params.get("rope_theta", c.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return theta, None
    if kind not in ("linear", "llama3"):
        raise TinyInferError(
            f"config: rope scaling type {kind!r} is not supported (supported: default, linear, llama3)"
        )
    scaling = {k: v for k, v in params.items() if k not in ("rope_theta", "type")}
    scaling["rope_type"] = kind
    scaling.setdefault("original_max_position_embeddings", c.get("max_position_embeddings"))
    return theta, scaling


def _activation(name: str) -> str:
    names = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
             "silu": "silu", "swish": "silu"}
    if name not in names:
        raise TinyInferError(f"config: activation {name!r} is not supported (supported: {', '.join(sorted(names))})")
    return names[name]


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
    """Qwen2-MoE (with a gated shared expert, q/k/v biases) and Qwen3-MoE (q/k norm per head, no bias).
    Layers in `mlp_only_layers`, or off the `decoder_sparse_step` grid, keep a dense MLP."""
    n, step, dense = c["num_hidden_layers"], c.get("decoder_sparse_step", 1), set(c.get("mlp_only_layers") or [])
    fields = _moe(c, moe_d_ff=c["moe_intermediate_size"], norm_topk_prob=c.get("norm_topk_prob", False),
                  shared_expert_d_ff=c.get("shared_expert_intermediate_size") or 0,
                  moe_layers=[i for i in range(n) if i not in dense and (i + 1) % step == 0])
    if c["model_type"] == "qwen2_moe":
        fields["qkv_bias"] = c.get("qkv_bias", True)  # older files leave it out: Qwen1.5-MoE always has them
    fields["qk_norm"] = c["model_type"] == "qwen3_moe"
    return fields


def _olmoe(c: dict) -> dict:
    """OLMoE: q and k each pass one RMSNorm spanning the whole projection (all heads), before RoPE."""
    if c.get("clip_qkv") is not None:
        raise TinyInferError(f"config.json (olmoe): clip_qkv={c['clip_qkv']} is not supported; only clip_qkv null is")
    return _moe(c, moe_d_ff=c["intermediate_size"], norm_topk_prob=c.get("norm_topk_prob", False),
                qk_norm=True, qk_norm_span="full")


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
}


def config_from_hf(c: dict) -> Config:
    """Translate a parsed HF config.json into a Config (see the module docstring for the dialects)."""
    model_type = c.get("model_type")
    if model_type not in HF_CONFIG_READERS:
        raise TinyInferError(
            f"config.json: model_type {model_type!r} is not supported; supported: {', '.join(sorted(HF_CONFIG_READERS))}"
        )
    if c.get("quantization_config"):
        method = c["quantization_config"].get("quant_method", "unknown")
        raise TinyInferError(f"config.json: weights quantised with {method!r} are not supported; "
                             "use an fp32, fp16 or bf16 checkpoint of the model")
    try:
        fields = HF_CONFIG_READERS[model_type](c)
    except KeyError as e:
        raise TinyInferError(f"config.json ({model_type}): required field {e.args[0]!r} is missing") from e
    eos = c.get("eos_token_id")
    return Config(
        model_type=model_type, **fields, bos_token_id=c.get("bos_token_id"),
        eos_token_ids=list(eos) if isinstance(eos, list) else ([] if eos is None else [eos]),
        torch_dtype=c.get("dtype") or c.get("torch_dtype"),
    )


def read_json(path: Path, what: str) -> dict:
    """Parse a JSON file, naming it in the error when it is missing or malformed."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise TinyInferError(f"{what} not found: {path}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TinyInferError(f"{what} is not valid JSON: {path} ({e})") from e


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
