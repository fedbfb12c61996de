"""SmolLM3: a Llama whose layers listed 0 in `no_rope_layers` skip RoPE (NoPE: they see no positions, only the
causal order; by default every `no_rope_layer_interval`-th layer, the 4th, 8th...), with a window on the layers
`layer_types` names (by default the NoPE ones, when `use_sliding_window` and `sliding_window` are set: whatever
`use_sliding_window` says, transformers' masks follow the list).

GGUF (llama.cpp's "smollm3"): Llama's file (q/k permuted alike). llama.cpp skips RoPE on every 4th layer and
slides no window, whatever the checkpoint's config.json said (the converter writes neither): so does a file here."""

from __future__ import annotations

from tinyinfer.errors import TinyInferError, is_integer_at_least
from tinyinfer.families.common import LLAMA_BIASES, check_window
from tinyinfer.families.family import Family
from tinyinfer.families.llama import LLAMA_LIKE, load_body, read_body
from tinyinfer.families.llama import gguf_config as llama_gguf_config  # the converters are LlamaModel's
from tinyinfer.gguf.architectures import LLAMA_TENSORS, GGUFLayout, llama_relayout

DEFAULTS = dict(LLAMA_LIKE, max_position_embeddings=32768, rope_theta=2_000_000.0, num_key_value_heads=4,
                tie_word_embeddings=True, attention_bias=False, mlp_bias=False, use_sliding_window=False,
                sliding_window=None, no_rope_layers=None, no_rope_layer_interval=4, layer_types=None)


def read_config(c: dict) -> dict:
    return check_window(c, dict(read_body(c, LLAMA_BIASES, sliding), nope_layers=nope_layers(c)))


def sliding(c: dict) -> tuple[int | None, list[str]]:
    """The layers `layer_types` names; by default, with `use_sliding_window`, the NoPE layers."""
    window, nope = c.get("sliding_window"), nope_layers(c)
    slides = [c["use_sliding_window"] and window is not None and i in nope for i in range(c["num_hidden_layers"])]
    return window, list(c.get("layer_types") or ["sliding_attention" if s else "full_attention" for s in slides])


def nope_layers(c: dict) -> list[int]:
    """The layers that skip RoPE, as SmolLM3Config decides: a 0 in `no_rope_layers` (one flag per layer, 1 = RoPE),
    or, without that list, every `no_rope_layer_interval`-th layer.

        >>> nope_layers({"num_hidden_layers": 8, "no_rope_layers": None, "no_rope_layer_interval": 4})
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


LLAMA_CPP_NOPE_INTERVAL = 4  # llama.cpp's smollm3: n_no_rope_layer_step


def gguf_config(m, names: set) -> dict:
    return llama_gguf_config(m, names) | {"model_type": "smollm3", "no_rope_layers": None,
                                          "no_rope_layer_interval": LLAMA_CPP_NOPE_INTERVAL,
                                          "use_sliding_window": False}


FAMILY = Family("smollm3", DEFAULTS, read_config, load_body,
                gguf=GGUFLayout("smollm3", gguf_config, LLAMA_TENSORS, relayout=llama_relayout))
