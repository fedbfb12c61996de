"""What one model family is, as one record: how to read its config.json, where its tensors are, and what its
loader reorders (for the LoRA adapters trained on the file's layout).

Every module in tinyinfer/families/ builds one `Family` named `FAMILY`; tinyinfer/families/__init__.py lists them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from tinyinfer.config import Config
from tinyinfer.gguf.architectures import GGUFLayout
from tinyinfer.weights import Getter


@dataclass(frozen=True)
class Family:
    model_type: str  # config.json's "model_type"
    # What transformers takes for a field config.json leaves out: its config class's defaults (files written by
    # older versions lack the fields added since, and the defaults differ between families). The reader sees
    # them filled in; tests/test_config_variants.py checks them against the classes.
    defaults: dict
    read_config: Callable[[dict], dict]  # config.json (defaults filled in) -> Config's fields
    load_params: Callable[[Getter, Config], dict]  # tensors -> tinyinfer's parameters (tinyinfer/weights.py)
    strip_prefixes: tuple[str, ...] = ()  # name prefixes some checkpoints add ("transformer.", "language_model.")
    embedding_name: str = "model.embed_tokens.weight"
    head_names: tuple[str, ...] = ("lm_head.weight",)  # the output layer's tensor: the first one the file has
    # the quantization_config methods ("quant_method") of the files its loader reads: gpt-oss's "mxfp4" experts
    quantizations: tuple[str, ...] = ()
    # tinyinfer weight ("q", "k", "v", "qkv") -> the order the loader puts the file's output rows in, so a LoRA
    # adapter's lora_B rows (trained on the file's order) follow them (tinyinfer/lora.py); absent: kept in place
    lora_rows: Mapping[str, Callable[[Config], object]] = field(default_factory=dict)
    # GGUF: how llama.cpp's converter stores the family (tinyinfer/gguf/architectures.py): the file's
    # general.architecture, its metadata -> config.json, its tensor names -> the Hugging Face names this family's
    # loader reads ("blk.{i}.attn_q" -> "model.layers.{i}.self_attn.q_proj"), the re-layouts to undo.
    # None: no GGUF layout for this family.
    gguf: GGUFLayout | None = None
