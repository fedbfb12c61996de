"""The parts of reading a config.json that several families share: RoPE in both dialects, activation names, the
biases and the sliding window rules, expert counts.

Two config.json dialects exist in the wild and both are accepted:

    older transformers / most Hub files:  "rope_theta": 10000.0, "rope_scaling": {...}, "torch_dtype": "bfloat16"
    transformers 5:                       "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, "dtype": ...

Each family is read as its transformers code reads it: a field the file leaves out takes that family's config
class default (`Family.defaults`), and fields the architecture ignores stay ignored (its biases and its window
rule, below).
"""

from __future__ import annotations

from typing import Callable

from tinyinfer.errors import TinyInferError

# (q/k/v, o, MLP) biases: the config.json field that switches each one on, or True/False where the architecture
# hard-wires it whatever the file says (Qwen2 always biases q, k and v and never o)
Biases = tuple[str | bool, str | bool, str | bool]
LLAMA_BIASES: Biases = ("attention_bias", "attention_bias", "mlp_bias")
ATTENTION_BIASES: Biases = ("attention_bias", "attention_bias", False)
NO_BIASES: Biases = (False, False, False)


def biases(c: dict, which: Biases) -> tuple[bool, bool, bool]:
    """(qkv_bias, o_bias, mlp_bias) of config.json `c`, as its family reads them (`which`)."""
    return tuple(c[flag] if isinstance(flag, str) else flag for flag in which)


# The window and which layers slide through it, as each family's transformers code decides: a function
# config.json -> (sliding_window, layer_types). Qwen2, Qwen3 and Qwen2-MoE follow an explicit `layer_types` list
# (transformers 5 writes one); Gemma 2 and 3, Cohere 2, gpt-oss and SmolLM3 have rules of their own.
Sliding = Callable[[dict], tuple[int | None, list[str]]]


def no_window(c: dict) -> tuple[None, list[str]]:
    """Never a window (llama, olmoe, gemma, granite, olmo, olmo2, phi, stablelm, cohere, deepseek): a
    `sliding_window` field is ignored."""
    return None, ["full_attention"] * c["num_hidden_layers"]


def window_on_every_layer(c: dict) -> tuple[int | None, list[str]]:
    """Every layer, whenever `sliding_window` is set (mistral, mixtral, phi3, starcoder2)."""
    window = c.get("sliding_window")
    return (window, ["sliding_attention"] * c["num_hidden_layers"]) if window else no_window(c)


def switched_window_on_every_layer(c: dict) -> tuple[int | None, list[str]]:
    """Every layer, with `use_sliding_window` (qwen3_moe)."""
    return window_on_every_layer(c) if c["use_sliding_window"] else no_window(c)


def switched_window_from(first_slides: Callable[[int, int], bool]) -> Sliding:
    """With `use_sliding_window`: the layers `layer_types` names, by default those where `first_slides(i, first)`
    holds, first = `max_window_layers` (qwen2, qwen3: from it on; qwen2_moe: the even layers below it)."""
    def sliding(c: dict) -> tuple[int | None, list[str]]:
        window = c.get("sliding_window") if c["use_sliding_window"] else None
        if not window:
            return no_window(c)
        if c.get("layer_types"):
            return window, list(c["layer_types"])
        first = c["max_window_layers"]
        return window, ["sliding_attention" if first_slides(i, first) else "full_attention"
                        for i in range(c["num_hidden_layers"])]
    return sliding


def every_but_the_nth(default: int, configurable: bool) -> Sliding:
    """The layers `layer_types` names; by default all but every `pattern`-th: the even ones (Gemma 2, gpt-oss: 2,
    fixed), five layers of six (Gemma 3: `sliding_window_pattern`, 6), three of four (Cohere 2:
    `sliding_window_pattern`, 4)."""
    def sliding(c: dict) -> tuple[int | None, list[str]]:
        pattern = c.get("sliding_window_pattern", default) if configurable else default  # as transformers
        return c.get("sliding_window"), list(c.get("layer_types") or [
            "full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(c["num_hidden_layers"])])
    return sliding


def check_window(c: dict, fields: dict) -> dict:
    if "sliding_attention" in fields["layer_types"] and fields["sliding_window"] is None:
        raise TinyInferError(f"config.json ({c['model_type']}): layers slide (layer_types) but sliding_window is null; "
                             "give the window's size")
    return fields


def rope(c: dict) -> tuple[float, dict | None]:
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
SCALED_ROPE_TYPES = {"linear": ("factor",), "llama3": ("factor", "low_freq_factor", "high_freq_factor"), "yarn": (),
                     "frequency_factors": ("factors",)}  # the last: GGUF's rope_freqs (gguf/architectures.py)


def activation(name: str) -> str:
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


def expert_count(c: dict) -> int:
    """The number of experts, whichever name the file uses (transformers renamed it back and forth)."""
    counts = {key: c[key] for key in ("num_local_experts", "num_experts") if c.get(key) is not None}
    if len(set(counts.values())) > 1:
        raise TinyInferError(f"config.json: the expert counts disagree: {counts}; keep one of them")
    if not counts:
        raise TinyInferError("config.json: a Mixture-of-Experts config needs num_local_experts (or num_experts)")
    return next(iter(counts.values()))
