"""The same code on CuPy: run on an NVIDIA GPU machine; skipped (with the reason) everywhere else."""

from __future__ import annotations

import numpy as np
import pytest

import tinyinfer
from tinyinfer.backend import cuda_available, get_xp
from tinyinfer.errors import TinyInferError

from conftest import shared_data

needs_gpu = pytest.mark.skipif(not cuda_available(), reason="needs CuPy and an NVIDIA GPU")


def test_asking_for_cuda_without_a_gpu_is_a_clear_error():
    if cuda_available():
        pytest.skip("a GPU is present")
    with pytest.raises(TinyInferError, match="cuda"):
        get_xp("cuda")


def test_unknown_device_is_a_clear_error():
    with pytest.raises(TinyInferError, match="unknown device 'tpu'"):
        get_xp("tpu")


@pytest.mark.gpu
@needs_gpu
def test_gpu_logits_match_cpu_on_trained_model():
    path = shared_data("models/stories260K/stories260K.bin")
    ids = [1, 403, 407, 261, 378, 432, 383, 286]
    cpu = tinyinfer.load(path).logits(ids)
    gpu = tinyinfer.load(path, device="cuda").logits(ids)
    assert isinstance(gpu, np.ndarray)
    np.testing.assert_allclose(gpu, cpu, atol=1e-4)


@pytest.mark.gpu
@needs_gpu
def test_gpu_greedy_generation_matches_cpu():
    path = shared_data("models/stories260K/stories260K.bin")
    cpu = tinyinfer.load(path).generate([1], max_tokens=64, temperature=0.0).token_ids
    gpu = tinyinfer.load(path, device="cuda").generate([1], max_tokens=64, temperature=0.0).token_ids
    assert gpu == cpu


@pytest.mark.gpu
@needs_gpu
def test_gpu_tiled_attention_and_lora_match_cpu():
    """A prompt long enough to take the tiled attention path, and the built-in LoRA adapter, on both devices."""
    from tinyinfer.lora import load_adapter  # noqa: PLC0415

    ids = np.random.default_rng(0).integers(0, 2000, 400).tolist()
    models = [tinyinfer.load("shakespeare", device=device) for device in ("cpu", "cuda")]
    for model in models:
        load_adapter(model, "shout", "shakespeare-shout")
    cpu, gpu = (m.logits(ids) for m in models)
    np.testing.assert_allclose(gpu, cpu, atol=1e-3)
    cpu, gpu = (m.generate(ids[:20], max_tokens=32, temperature=0.0, lora="shout").token_ids for m in models)
    assert gpu == cpu


@pytest.mark.gpu
@needs_gpu
def test_gpu_int8_kv_cache_matches_cpu_in_generate_and_the_engine():
    from tinyinfer.engine import LLM  # noqa: PLC0415

    ids = np.random.default_rng(1).integers(0, 2000, 60).tolist()
    models = [tinyinfer.load("shakespeare", device=device, kv_cache_dtype="int8") for device in ("cpu", "cuda")]
    cpu, gpu = (m.logits(ids) for m in models)
    np.testing.assert_allclose(gpu, cpu, atol=2e-2)  # a number on a rounding boundary may take the next code
    params = tinyinfer.SamplingParams(temperature=0.0, max_tokens=24)
    cpu, gpu = ([out.token_ids for out in LLM(m).generate([ids[:20], ids[20:50]], params)] for m in models)
    assert gpu == cpu


# test module whose `build_variant` makes the tiny checkpoint -> the variants run here, one or two per family
ARCHITECTURES = {
    "test_architectures_more": ["phi3_partial_rotary_window_tied", "gemma2"],  # soft caps (np.tanh), partial RoPE
    "test_gemma3": ["gemma3"],  # two RoPE settings
    "test_architectures_granite_smollm3_olmo2": ["granite_bias_tied", "smollm3_window_bias", "olmo2", "gpt_neox",
                                                 "phi2_gqa_tied"],
    "test_architectures_stablelm_starcoder2_cohere": ["stablelm2_qk_norm_parallel", "starcoder2", "cohere2",
                                                      "cohere_qk_norm_bias_untied", "olmo_clip", "falcon40b_grouped_bias"],
    "test_deepseek": ["v3_q_lora_yarn_interleaved"],  # latent attention, group-limited sigmoid routing
    "test_gpt_oss": ["gpt_oss_yarn_window"],  # attention sinks in every attention path, the clamped experts
}


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("module, name", [(m, n) for m, names in ARCHITECTURES.items() for n in names])
def test_gpu_architectures_match_cpu(module, name, tmp_path):
    """Soft caps, partial and dual RoPE, parallel blocks, LayerNorm kinds, multipliers, layers without RoPE, q/k/v
    clamps, per-head q/k norms, latent attention on CuPy: the same logits, and the same greedy tokens from the
    engine, on both devices."""
    import importlib  # noqa: PLC0415

    from tinyinfer.engine import LLM  # noqa: PLC0415

    folder = importlib.import_module(module).build_variant(name, tmp_path / name)
    ids = np.random.default_rng(2).integers(3, 100, 40).tolist()
    models = [tinyinfer.load(folder, device=device) for device in ("cpu", "cuda")]
    cpu, gpu = (m.logits(ids) for m in models)
    np.testing.assert_allclose(gpu, cpu, atol=1e-3)
    params = tinyinfer.SamplingParams(temperature=0.0, max_tokens=12)
    cpu, gpu = ([out.token_ids for out in LLM(m).generate([ids[:10], ids[10:30]], params)] for m in models)
    assert gpu == cpu
