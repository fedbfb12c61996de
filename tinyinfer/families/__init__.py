"""Model families: one module per `model_type`, each holding everything tinyinfer knows of that family, and the
one table that lists them (`FAMILIES`).

A family module (say tinyinfer/families/mistral.py) holds, in this order:

    DEFAULTS          what transformers takes for a field its config.json leaves out (its config class's defaults)
    read_config(c)    config.json, DEFAULTS filled in -> the fields of tinyinfer.config.Config
    load_params(...)  its tensor names and load-time re-layouts -> tinyinfer's parameters (tinyinfer/weights.py)
    FAMILY            a `Family` (tinyinfer/families/family.py) naming those, its checkpoint name prefixes, its
                      embedding and output tensors, the rows its loader reorders (`lora_rows`, for LoRA adapters)
                      and its GGUF layout (`gguf`: metadata, tensor names, re-layouts; None for families GGUF does not store)

Families reuse each other's readers where transformers' code does: most are a Llama body with a twist
(tinyinfer/families/llama.py `read_body`, `load_body`); the config.json parts several share (RoPE dialects,
activations, window rules) are in tinyinfer/families/common.py. The model code never asks which family it runs:
everything a family is becomes Config fields and one layout of parameters at load.

Adding a family is one new file here and one line in `FAMILIES`.

    >>> cfg = config_from_hf({"model_type": "llama", "vocab_size": 32, "hidden_size": 16,
    ...     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 40})
    >>> cfg.head_dim, cfg.n_kv_heads, cfg.rope_theta
    (4, 2, 10000.0)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from tinyinfer import fp8
from tinyinfer.config import Config, check_hf_sizes, read_json
from tinyinfer.errors import TinyInferError
from tinyinfer.families import (cohere, cohere2, deepseek_v2, deepseek_v3, falcon, gemma, gemma2, gemma3_text,
                                gpt2, gpt_neox, gpt_oss, granite, llama, mistral, mixtral, olmo, olmo2, olmoe, phi,
                                phi3, qwen2, qwen2_moe, qwen3, qwen3_moe, smollm3, stablelm, starcoder2)
from tinyinfer.families.family import Family
from tinyinfer.safetensors_io import Checkpoint
from tinyinfer.weights import first_present, tensor_getter

# model_type -> its family; one line per family
FAMILIES: dict[str, Family] = {family.model_type: family for family in (
    gpt2.FAMILY,
    llama.FAMILY,
    mistral.FAMILY,
    qwen2.FAMILY,
    qwen3.FAMILY,
    mixtral.FAMILY,
    qwen2_moe.FAMILY,
    qwen3_moe.FAMILY,
    olmoe.FAMILY,
    phi3.FAMILY,
    gemma.FAMILY,
    gemma2.FAMILY,
    gemma3_text.FAMILY,
    granite.FAMILY,
    smollm3.FAMILY,
    olmo.FAMILY,
    olmo2.FAMILY,
    gpt_neox.FAMILY,
    phi.FAMILY,
    stablelm.FAMILY,
    starcoder2.FAMILY,
    falcon.FAMILY,
    cohere.FAMILY,
    cohere2.FAMILY,
    deepseek_v2.FAMILY,
    deepseek_v3.FAMILY,
    gpt_oss.FAMILY,
)}

# model_types whose config.json wraps one of a family's: model_type -> the inner config.json
WRAPPERS = {"gemma3": gemma3_text.text_config}  # Gemma 3 4B and larger: a vision tower beside the text model

# The quantised formats read at load, dequantised to floats, in any family: quant_method -> the check of its
# quantization_config. A family's loader may read others itself (Family.quantizations: gpt-oss's MXFP4 experts).
DEQUANTISED = {"fp8": fp8.check_config}  # transformers' fine-grained FP8 (Qwen3-*-FP8, DeepSeek-V3)


def family_of(model_type: str) -> Family:
    if model_type not in FAMILIES:
        raise TinyInferError(f"model_type {model_type!r} is not supported; supported: {', '.join(FAMILIES)}")
    return FAMILIES[model_type]


def config_from_hf(c: dict) -> Config:
    """Translate a parsed HF config.json into a Config (tinyinfer/families/common.py describes the dialects)."""
    model_type = c.get("model_type")
    if model_type in WRAPPERS:
        return config_from_hf(WRAPPERS[model_type](c))
    if model_type not in FAMILIES:
        raise TinyInferError(f"config.json: model_type {model_type!r} is not supported; supported: {', '.join(FAMILIES)}")
    family = FAMILIES[model_type]
    quantization = read_quantization(c.get("quantization_config"), family)
    check_hf_sizes(c)
    try:
        fields = family.read_config({**family.defaults, **c})
    except KeyError as e:
        raise TinyInferError(f"config.json ({model_type}): required field {e.args[0]!r} is missing") from e
    except (TypeError, ValueError, AttributeError) as e:  # e.g. "hidden_size": "big", "rope_parameters": "x"
        raise TinyInferError(f"config.json ({model_type}): a field has the wrong type ({e}); fix it to match the "
                             "model's original config.json") from e
    eos = c.get("eos_token_id")
    return Config(
        model_type=model_type, **fields, bos_token_id=c.get("bos_token_id"),
        eos_token_ids=list(eos) if isinstance(eos, list) else ([] if eos is None else [eos]),
        torch_dtype=c.get("dtype") or c.get("torch_dtype"), quantization_config=quantization,
    )


def read_quantization(qc, family: Family) -> dict | None:
    """config.json's quantization_config, checked by its method's reader (DEQUANTISED), or as it is when the
    family's loader reads the method itself (Family.quantizations); other methods refused by name."""
    if not qc:
        return None
    method = qc.get("quant_method", "unknown") if isinstance(qc, dict) else "unknown"
    if method in family.quantizations:
        return qc
    if method not in DEQUANTISED:
        readers = {f"{m} ({f.model_type})" for f in FAMILIES.values() for m in f.quantizations}
        raise TinyInferError(f"config.json: weights quantised with {method!r} are not supported by "
                             f"{family.model_type} (supported: {', '.join([*DEQUANTISED, *sorted(readers)])}); use "
                             "an fp32, fp16 or bf16 checkpoint of the model")
    return DEQUANTISED[method](qc)


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


def load_params(checkpoint: Checkpoint, cfg: Config, dtype=np.float32) -> dict:
    """Read every parameter of `cfg`'s architecture from `checkpoint`, as `dtype` arrays on the host."""
    if cfg.model_type not in FAMILIES:
        raise TinyInferError(f"no weight mapping for model_type {cfg.model_type!r}; supported: {', '.join(sorted(FAMILIES))}")
    family = FAMILIES[cfg.model_type]
    return family.load_params(tensor_getter(checkpoint, dtype, family.strip_prefixes, cfg.quantization_config), cfg)


def untie_if_the_file_disagrees(checkpoint: Checkpoint, cfg: Config) -> Config:
    """`cfg`, untied when config.json says tie_word_embeddings but the file holds its own, different output layer.

    transformers 5 trusts the file then: it keeps the two tensors apart (and warns that the config is wrong);
    older versions tied them regardless. tinyinfer follows transformers 5. A file saved tied holds one of the two
    (save_pretrained drops the duplicate), or both equal (converted PyTorch files): those stay tied.
    """
    family = FAMILIES[cfg.model_type]
    get = tensor_getter(checkpoint, np.float32, family.strip_prefixes, cfg.quantization_config)
    head, embedding = first_present(get, family.head_names), family.embedding_name
    if not (cfg.tie_word_embeddings and get.has(head) and get.has(embedding)):
        return cfg
    shape = (cfg.vocab_size, cfg.d_model)
    same = np.array_equal(get(head, shape), get(embedding, shape))
    return cfg if same else dataclasses.replace(cfg, tie_word_embeddings=False)
