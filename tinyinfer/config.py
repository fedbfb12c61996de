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
    sliding_window: int | None = None
    layer_types: list[str] = field(default_factory=list)  # per layer "full_attention" | "sliding_attention"
    tie_word_embeddings: bool = False
    bos_token_id: int | None = None
    eos_token_ids: list[int] = field(default_factory=list)
    torch_dtype: str | None = None  # the dtype the checkpoint was saved in, as the file says

    def __post_init__(self):
        if not self.layer_types:
            kind = "sliding_attention" if self.sliding_window else "full_attention"
            self.layer_types = [kind] * self.n_layers
        if self.n_heads % self.n_kv_heads:
            raise TinyInferError(
                f"config: num_attention_heads={self.n_heads} is not a multiple of num_key_value_heads={self.n_kv_heads}"
            )

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
        qkv_bias=True, o_bias=True, mlp_bias=True, tie_word_embeddings=True,
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


def _sliding(c: dict) -> tuple[int | None, list[str]]:
    """Mistral slides every layer when `sliding_window` is set; Qwen only with `use_sliding_window`,
    from layer `max_window_layers` on. An explicit `layer_types` list (transformers 5) wins."""
    window = c.get("sliding_window")
    if c["model_type"] in ("qwen2", "qwen3") and not c.get("use_sliding_window", False):
        window = None
    if c.get("layer_types"):
        return window, list(c["layer_types"])
    n = c["num_hidden_layers"]
    if window is None:
        return None, ["full_attention"] * n
    first = c.get("max_window_layers", 0) if c["model_type"] in ("qwen2", "qwen3") else 0
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


# model_type -> function translating its config.json into Config fields
HF_CONFIG_READERS = {
    "gpt2": _gpt2,
    "llama": _llama_family,
    "mistral": _llama_family,
    "qwen2": _llama_family,
    "qwen3": _llama_family,
}


def config_from_hf(c: dict) -> Config:
    """Translate a parsed HF config.json into a Config (see the module docstring for the dialects)."""
    model_type = c.get("model_type")
    if model_type not in HF_CONFIG_READERS:
        raise TinyInferError(
            f"config.json: model_type {model_type!r} is not supported; supported: {', '.join(sorted(HF_CONFIG_READERS))}"
        )
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
