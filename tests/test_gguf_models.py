"""GGUF files as models: tiny random checkpoints converted as llama.cpp does (tests/gguf_files.py), in every
quantisation type and every supported architecture, and the real SmolLM2-135M-Instruct Q4_1, against transformers
reading the same file (`from_pretrained(folder, gguf_file=name)`, which dequantises with gguf.quants).

Logits must agree within 1e-4 of the logit scale (the largest |logit|): float32 sums of a few hundred products,
not a model-specific tolerance. Architectures transformers cannot read from GGUF (Gemma 1; Mixtral, which GGUF
calls llama with experts; phi2, gptneox, olmo2, granite, smollm3; Falcon-40B's grouped q/k/v and StableLM 2 12B's
per-head norms, which its reader mislays; gpt-oss, whose reader takes a metadata key's length for its value and has no
place for llama.cpp's split experts and sinks) are checked against transformers on the Hugging Face checkpoint they
were written from, in F32, whose weights the file holds exactly; every architecture is checked so too.
"""

from __future__ import annotations

import dataclasses

import gguf
import numpy as np
import pytest
import transformers
from gguf_files import (
    ALL_TYPES,
    gpt_oss_experts_from_gguf,
    hf_from_gguf,
    logits_of,
    real_model_or_skip,
    write_gguf,
)
from tiny_models import build_with_transformers, hf_logits, prompt_ids

import tinyinfer
from tinyinfer.families import FAMILIES as REGISTRY
from tinyinfer.gguf import model_file
from tinyinfer.gguf.model_file import QuantizedRows
from tinyinfer.model import leaves

RELATIVE = 1e-4  # of the logit scale
SHAPE = dict(vocab_size=300, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=64, max_position_embeddings=128, rms_norm_eps=1e-5, bos_token_id=1,
             eos_token_id=2, pad_token_id=0)
MOE = dict(num_experts_per_tok=2, moe_intermediate_size=256)
LLAMA3_ROPE = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=16)  # pairs of wavelength 4..16 blended, longer ones / 8
LONGROPE = dict(rope_type="longrope", short_factor=[1.0 + 0.1 * i for i in range(32)],
                long_factor=[2.0 + i for i in range(32)])  # a context of 128 stretched from 32
GPT_OSS_YARN = dict(rope_type="yarn", rope_theta=150000.0, factor=4.0, original_max_position_embeddings=32,
                    beta_fast=32.0, beta_slow=1.0, truncate=False)  # gpt-oss's YaRN, the context stretched from 32
FAMILIES = {  # name: (transformers config class, fields, norm offset, read by transformers from GGUF)
    "llama": ("LlamaConfig", {}, 0.0, True),
    "qwen2": ("Qwen2Config", {}, 0.0, True),
    "qwen3": ("Qwen3Config", {}, 0.0, True),
    "qwen2_moe": ("Qwen2MoeConfig", dict(MOE, num_experts=4, shared_expert_intermediate_size=512), 0.0, True),
    "qwen3_moe": ("Qwen3MoeConfig", dict(MOE, num_experts=4, norm_topk_prob=True), 0.0, True),
    "mixtral": ("MixtralConfig", dict(num_local_experts=4, num_experts_per_tok=2), 0.0, False),
    "phi3": ("Phi3Config", {}, 0.0, True),
    "gemma": ("GemmaConfig", dict(hidden_act="gelu_pytorch_tanh"), 1.0, False),
    "gemma2": ("Gemma2Config", dict(query_pre_attn_scalar=64, sliding_window=8), 1.0, True),
    "gemma3": ("Gemma3TextConfig", dict(query_pre_attn_scalar=64, sliding_window=8, num_hidden_layers=6), 1.0, True),
    "gpt2": ("GPT2Config", dict(n_embd=256, n_layer=2, n_head=4, n_positions=128), 0.0, True),
    # scaled RoPE stored as tensors (rope_freqs; rope_factors_short/_long), which transformers' reader ignores
    "llama3-rope": ("LlamaConfig", dict(rope_scaling=LLAMA3_ROPE), 0.0, False),
    "phi3-longrope": ("Phi3Config", dict(original_max_position_embeddings=32, rope_scaling=LONGROPE), 0.0, False),
    "falcon": ("FalconConfig", {}, 0.0, True),  # Falcon-7B's block: parallel, one norm, multi-query
    "falcon40b": ("FalconConfig", dict(new_decoder_architecture=True, num_kv_heads=2, tie_word_embeddings=False),
                  0.0, False),  # two norms, q/k/v in 2 groups: transformers reads GGUF's q/k/v as Falcon-7B's
    "stablelm": ("StableLmConfig", dict(use_qkv_bias=True), 0.0, True),  # StableLM 2 1.6B's
    "stablelm2_12b": ("StableLmConfig", dict(partial_rotary_factor=0.5, use_qkv_bias=True, qk_layernorm=True,
                                             use_parallel_residual=True), 0.0, False),  # stacked per-head norms
    "starcoder2": ("Starcoder2Config", {}, 0.0, True),  # biases everywhere, tied
    # phi2's converter writes 4 x hidden_size as the MLP's width and one key/value head per query head
    "phi": ("PhiConfig", dict(intermediate_size=1024, num_key_value_heads=4, partial_rotary_factor=0.375), 0.0,
            False),
    "gpt_neox": ("GPTNeoXConfig", dict(rotary_pct=0.25), 0.0, False),  # Pythia's: parallel, q/k/v per head
    "gpt_neox_sequential": ("GPTNeoXConfig", dict(rotary_pct=0.25, use_parallel_residual=False), 0.0, False),
    "olmo2": ("Olmo2Config", {}, 0.0, False),
    "granite": ("GraniteConfig", dict(embedding_multiplier=12.0, residual_multiplier=0.22,  # Granite 3's
                                      attention_multiplier=0.0078125, logits_scaling=8.0), 0.0, False),
    "smollm3": ("SmolLM3Config", dict(num_hidden_layers=4), 0.0, False),  # layer 3 without RoPE
    "cohere": ("CohereConfig", dict(logit_scale=0.8), 0.0, False),  # Command-R's; RoPE on neighbouring pairs
    "cohere_qk_norm": ("CohereConfig", dict(logit_scale=0.8, use_qk_norm=True), 0.0, False),  # Command-R+'s
    "cohere2": ("Cohere2Config", dict(num_hidden_layers=4, sliding_window=8, logit_scale=0.8, rotary_pct=1.0), 0.0,
                False),  # Command R7B's: 3 sliding layers of 4 (the prompt is longer than the window), 1 NoPE
    "gpt_oss": ("GptOssConfig", dict(intermediate_size=128, num_local_experts=4, num_experts_per_tok=2,
                                     sliding_window=8, rope_parameters=GPT_OSS_YARN), 0.0, False),
}
# The fields of SHAPE a config class takes, where not all (Falcon's head_dim is a property, its KV heads its own)
SHAPE_FIELDS = {"gpt2": ("vocab_size", "bos_token_id", "eos_token_id"),
                "falcon": ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                           "max_position_embeddings", "bos_token_id", "eos_token_id", "pad_token_id")}
SHAPE_FIELDS["falcon40b"] = SHAPE_FIELDS["falcon"]
# What transformers' GGUF reader does not take from the file (it has no mapping for these keys), given as the file
# states them: qwen3's attention.key_length, the MoE expert_feed_forward_length and expert_shared_feed_forward_length,
# gpt2's vocab_size and context_length; and llama.cpp scales Gemma 2 and 3 scores by head_dim^-1/2.
HF_OVERRIDES = {"gemma2": dict(query_pre_attn_scalar=64), "gemma3": dict(query_pre_attn_scalar=64),
                "qwen3": dict(head_dim=64), "qwen3_moe": dict(head_dim=64, moe_intermediate_size=256),
                "qwen2_moe": dict(moe_intermediate_size=256, shared_expert_intermediate_size=512),
                "gpt2": dict(vocab_size=300, n_positions=128), "phi3": dict(pad_token_id=0),  # Phi3Config's is 32000
                "starcoder2": dict(vocab_size=300)}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """`checkpoint(family) -> folder` of a tiny random Hugging Face checkpoint, built once."""
    root, built = tmp_path_factory.mktemp("gguf_hf"), {}

    def get(family: str):
        if family not in built:
            config_class, fields, offset, _ = FAMILIES[family]
            base = {k: v for k, v in SHAPE.items() if k in SHAPE_FIELDS.get(family, SHAPE)}
            built[family] = build_with_transformers(root / family, config_class, {**base, **fields},
                                                    norm_offset=offset)
        return built[family]
    return get


@pytest.fixture(scope="module")
def gguf_file(checkpoint, tmp_path_factory):
    """`gguf_file(family, type) -> path` of the checkpoint converted to GGUF, its matrices in `type`."""
    root = tmp_path_factory.mktemp("gguf_files")

    def get(family: str, qtype: str):
        path = root / f"{family}-{qtype}.gguf"
        return path if path.exists() else write_gguf(checkpoint(family), path, qtype)
    return get


def assert_close_to(mine: np.ndarray, reference: np.ndarray, relative: float = RELATIVE) -> None:
    scale = np.abs(reference).max()
    assert np.abs(mine - reference).max() <= relative * scale, (np.abs(mine - reference).max(), scale)


@pytest.mark.parametrize("qtype", ALL_TYPES)
def test_llama_in_every_type_matches_transformers_on_the_same_file(gguf_file, qtype):
    path, ids = gguf_file("llama", qtype), prompt_ids(16)
    assert_close_to(tinyinfer.load(path).logits(ids), logits_of(hf_from_gguf(path), ids))


@pytest.mark.parametrize("family", [f for f, spec in FAMILIES.items() if spec[3]])
def test_each_architecture_matches_transformers_on_the_same_file(gguf_file, family):
    path, ids = gguf_file(family, "Q8_0"), prompt_ids(16)
    model = tinyinfer.load(path)
    assert model.config.model_type == {"gemma3": "gemma3_text"}.get(family, family)
    assert_close_to(model.logits(ids), logits_of(hf_from_gguf(path, **HF_OVERRIDES.get(family, {})), ids))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_an_f32_file_gives_the_checkpoint_it_was_converted_from(checkpoint, gguf_file, family):
    ids = prompt_ids(16)
    assert_close_to(tinyinfer.load(gguf_file(family, "F32")).logits(ids), hf_logits(checkpoint(family), ids))


@pytest.mark.parametrize("family", ["llama3-rope", "phi3-longrope"])
def test_rope_factors_stored_as_tensors_are_applied(checkpoint, gguf_file, family, monkeypatch):
    """The factors change the logits at these positions: read as plain RoPE, the same file misses the checkpoint."""
    ids, path = prompt_ids(16), gguf_file(family, "F32")
    assert tinyinfer.load(path).config.rope_scaling["rope_type"] == {"llama3-rope": "frequency_factors"}.get(
        family, "longrope")
    monkeypatch.setattr(model_file, "rope_from_tensors", lambda m, c, factors: {})
    with pytest.raises(AssertionError):
        assert_close_to(tinyinfer.load(path).logits(ids), hf_logits(checkpoint(family), ids))


def test_gpt_oss_experts_in_mxfp4_give_transformers_logits_on_the_weights_they_store(checkpoint, tmp_path):
    """gpt-oss GGUF files keep the Hub's MXFP4 experts (ggml-org/gpt-oss-20b-GGUF): quantised here by gguf, every
    other matrix F32. Against transformers on the checkpoint whose experts are what the file stores (gguf's own
    dequantiser); the MXFP4 rounding itself moves the logits far from the float checkpoint's."""
    folder, ids = checkpoint("gpt_oss"), prompt_ids(16)
    path = write_gguf(folder, tmp_path / "gpt_oss-mxfp4.gguf", "F32", experts="MXFP4")
    kinds = {t.name.split(".")[2]: t.tensor_type.name for t in gguf.GGUFReader(path).tensors
             if t.name.startswith("blk.0.") and t.name.endswith(".weight")}
    assert kinds["ffn_gate_exps"] == kinds["ffn_up_exps"] == kinds["ffn_down_exps"] == "MXFP4"
    assert kinds["attn_q"] == "F32"
    mine = tinyinfer.load(path).logits(ids)
    assert_close_to(mine, hf_logits(gpt_oss_experts_from_gguf(folder, path, tmp_path / "stored"), ids))
    reference = hf_logits(folder, ids)
    assert np.abs(mine - reference).max() > 100 * RELATIVE * np.abs(reference).max()


def without_unpermute(monkeypatch, *model_types: str) -> None:
    """Load llama-layout files as if the q/k rows needed no re-layout (the rows left as GGUF has them)."""
    for model_type in model_types:
        family = REGISTRY[model_type]
        monkeypatch.setitem(REGISTRY, model_type, dataclasses.replace(family, gguf=dataclasses.replace(
            family.gguf, relayout=None)))


@pytest.mark.parametrize("family", ["llama", "mixtral"])
def test_the_q_k_permutation_must_be_undone(gguf_file, checkpoint, family, monkeypatch):
    path, ids = gguf_file(family, "F32"), prompt_ids(16)
    reference = hf_logits(checkpoint(family), ids)
    without_unpermute(monkeypatch, family)
    wrong = tinyinfer.load(path).logits(ids)
    assert np.abs(wrong - reference).max() > 100 * RELATIVE * np.abs(reference).max()


@pytest.mark.parametrize("family, qtype", [("llama", "Q4_K"), ("phi3", "Q8_0"), ("qwen2_moe", "Q5_1"),
                                           ("gpt2", "Q6_K"), ("gemma", "Q4_1"), ("llama", "IQ4_XS"),
                                           ("falcon40b", "Q5_0"), ("gpt_neox", "Q4_0"),
                                           ("gpt_oss", "MXFP4")])
def test_weights_kept_quantised_give_the_same_logits(gguf_file, family, qtype):
    path, ids = gguf_file(family, qtype), prompt_ids(16)
    dequantised, kept = tinyinfer.load(path), tinyinfer.load(path, keep_quantized=True)
    layer_weights = [w for w in leaves(kept.params["layers"]) if isinstance(w, QuantizedRows)]
    assert layer_weights and isinstance(kept.params["lm_head"], QuantizedRows)
    for w, reference in zip(leaves(kept.params), leaves(dequantised.params)):  # exactly the arrays they replace
        if isinstance(w, QuantizedRows):
            np.testing.assert_array_equal(w.dequantize(), reference)
    for rows in (ids, ids[:3]):  # a matrix product, and row-by-row matrix-vector products (`matmul`)
        np.testing.assert_array_equal(kept.logits(rows), dequantised.logits(rows))  # the same products, to the bit


def test_keep_quantized_is_refused_where_it_means_nothing(checkpoint):
    with pytest.raises(tinyinfer.TinyInferError, match="GGUF files only"):
        tinyinfer.load(checkpoint("llama"), keep_quantized=True)


# -- the real model ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real():
    """(path, tinyinfer's model, transformers' model, transformers' tokenizer) of SmolLM2-135M-Instruct Q4_1."""
    path = real_model_or_skip()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return path, tinyinfer.load(path), hf_from_gguf(path), tokenizer


PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, a small robot",
           "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n"]


def test_real_model_logits_match_transformers(real):
    _, model, hf, tokenizer = real
    ids = tokenizer(PROMPTS[3])["input_ids"] + tokenizer(PROMPTS[0])["input_ids"]
    assert_close_to(model.logits(ids), logits_of(hf, ids))


def test_real_model_greedy_tokens_equal_transformers(real):
    _, model, hf, tokenizer = real
    import torch  # noqa: PLC0415

    for prompt in PROMPTS:
        ids = tokenizer(prompt)["input_ids"]
        with torch.no_grad():
            expected = hf.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=12, eos_token_id=None,
                                   pad_token_id=0)[0, len(ids):].tolist()
        got = model.generate(ids, tinyinfer.SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
        assert list(got.token_ids) == expected, prompt


def test_real_model_fails_without_undoing_the_permutation(real, monkeypatch):
    path, model, _, tokenizer = real
    ids = tokenizer(PROMPTS[0])["input_ids"]
    reference = model.logits(ids)
    without_unpermute(monkeypatch, "llama")
    wrong = tinyinfer.load(path).logits(ids)
    assert np.abs(wrong - reference).max() > 0.1 * np.abs(reference).max()


def test_real_model_cli_greedy_text_equals_transformers(real, capsys):
    """What the user runs: `generate --model x.gguf PROMPT --temperature 0` prints transformers' greedy text."""
    from tinyinfer.cli import main  # noqa: PLC0415
    import torch  # noqa: PLC0415

    path, _, hf, tokenizer = real
    for prompt in PROMPTS[1:2]:  # one: each run loads the model again
        ids = tokenizer(prompt)["input_ids"]
        with torch.no_grad():
            expected = hf.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=10, eos_token_id=None,
                                   pad_token_id=0)[0, len(ids):].tolist()
        capsys.readouterr()
        assert main(["generate", "--model", str(path), "--temperature", "0", "--max-tokens", "10", "--ignore-eos",
                     prompt]) == 0
        assert capsys.readouterr().out.rstrip("\n") == tokenizer.decode(expected).rstrip("\n"), prompt
