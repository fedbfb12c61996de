"""The same code on CuPy: run on an NVIDIA GPU machine; skipped (with the reason) everywhere else."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import tinyinfer
from tinyinfer.backend import cuda_available, get_xp
from tinyinfer.errors import TinyInferError

from conftest import REAL_GPU, shared_data
from tolerances import assert_close, logits_bound




def test_asking_for_cuda_without_a_gpu_is_a_clear_error():
    if cuda_available():
        pytest.skip("a GPU is present")
    with pytest.raises(TinyInferError, match="cuda"):
        get_xp("cuda")


def test_unknown_device_is_a_clear_error():
    with pytest.raises(TinyInferError, match="unknown device 'tpu'"):
        get_xp("tpu")


@pytest.mark.gpu
def test_gpu_logits_match_cpu_on_trained_model():
    path = shared_data("models/stories260K/stories260K.bin")
    ids = [1, 403, 407, 261, 378, 432, 383, 286]
    cpu = tinyinfer.load(path).logits(ids)
    gpu = tinyinfer.load(path, device="cuda").logits(ids)
    assert isinstance(gpu, np.ndarray)
    assert_close(gpu, cpu, logits_bound(tinyinfer.load(path).config, cpu))


@pytest.mark.gpu
def test_gpu_greedy_generation_matches_cpu():
    path = shared_data("models/stories260K/stories260K.bin")
    cpu = tinyinfer.load(path).generate([1], max_tokens=64, temperature=0.0).token_ids
    gpu = tinyinfer.load(path, device="cuda").generate([1], max_tokens=64, temperature=0.0).token_ids
    assert gpu == cpu


@pytest.mark.gpu
def test_gpu_tiled_attention_and_lora_match_cpu(monkeypatch):
    """The tiled attention path (forced for every prompt, in tiles of 8 positions) and the built-in LoRA adapter,
    on both devices, over the built-in model's whole 128-token window."""
    from tinyinfer.lora import load_adapter  # noqa: PLC0415

    from tiny_models import tiled_attention_calls  # noqa: PLC0415

    calls = tiled_attention_calls(monkeypatch)
    ids = np.random.default_rng(0).integers(0, 2000, 100).tolist()
    models = [tinyinfer.load("shakespeare", device=device) for device in ("cpu", "cuda")]
    for model in models:
        load_adapter(model, "shout", "shakespeare-shout")
    cpu, gpu = (m.logits(ids) for m in models)
    assert_close(gpu, cpu, logits_bound(models[0].config, cpu))
    assert calls, "the tiled path did not run"
    cpu, gpu = (m.generate(ids[:20], max_tokens=32, temperature=0.0, lora="shout").token_ids for m in models)
    assert gpu == cpu


@pytest.mark.gpu
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
    assert_close(gpu, cpu, logits_bound(models[0].config, cpu))
    params = tinyinfer.SamplingParams(temperature=0.0, max_tokens=12)
    cpu, gpu = ([out.token_ids for out in LLM(m).generate([ids[:10], ids[10:30]], params)] for m in models)
    assert gpu == cpu


# --- every part of the runtime on the device: sampling, constraints, speculation, quantised weights, engine -------

SAMPLING_CONTROLS = [
    dict(temperature=0.8, seed=3),
    dict(temperature=1.0, top_k=12, seed=4),
    dict(temperature=0.9, top_p=0.8, seed=5),
    dict(temperature=1.1, min_p=0.05, seed=6),
    dict(temperature=0.7, repetition_penalty=1.3, presence_penalty=0.4, frequency_penalty=0.3, seed=7),
    dict(temperature=0.9, logit_bias={10: 3.0, 11: -100.0}, logprobs=3, seed=8),
]


@pytest.fixture(scope="module")
def cpu_model():
    return tinyinfer.load("shakespeare")


@pytest.mark.gpu
@pytest.mark.parametrize("controls", SAMPLING_CONTROLS, ids=lambda c: "-".join(k for k in c if k != "seed"))
def test_gpu_sampling_controls_give_the_cpu_tokens(cpu_model, controls):
    """Each control applied on the device where the logits live draws the very tokens the CPU draws."""
    gpu_model = tinyinfer.load("shakespeare", device="cuda")
    cpu, gpu = (m.generate("ROMEO:", max_tokens=24, **controls) for m in (cpu_model, gpu_model))
    assert gpu.token_ids == cpu.token_ids
    if controls.get("logprobs"):
        np.testing.assert_allclose([t.logprob for t in gpu.logprobs], [t.logprob for t in cpu.logprobs], atol=1e-4)


@pytest.mark.gpu
def test_gpu_json_schema_constraint_and_engine_match_cpu(cpu_model):
    from tinyinfer.constrain import build_constraint  # noqa: PLC0415
    from tinyinfer.engine import LLM  # noqa: PLC0415

    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}}, "required": ["name"]}
    gpu_model = tinyinfer.load("shakespeare", device="cuda")
    cpu, gpu = (m.generate("A person:", max_tokens=30, temperature=0.9, seed=2,
                           constraint=lambda m=m: build_constraint("json_schema", schema, m.tokenizer))
                for m in (cpu_model, gpu_model))
    assert gpu.token_ids == cpu.token_ids
    params = tinyinfer.SamplingParams(temperature=0.8, top_p=0.9, max_tokens=16, seed=11)
    prompts = ["ROMEO:", "JULIET:\nO Romeo", "KING:"]
    cpu, gpu = ([o.token_ids for o in LLM(m).generate(prompts, params)] for m in (cpu_model, gpu_model))
    assert gpu == cpu


@pytest.mark.gpu
def test_gpu_speculative_decoding_gives_the_cpu_tokens(cpu_model):
    draft_cpu, draft_gpu = tinyinfer.load("shakespeare-draft"), tinyinfer.load("shakespeare-draft", device="cuda")
    gpu_model = tinyinfer.load("shakespeare", device="cuda")
    for controls in (dict(temperature=0.0), dict(temperature=0.8, seed=9)):
        cpu = cpu_model.generate("ROMEO:", max_tokens=24, draft=draft_cpu, num_speculative_tokens=3, **controls)
        gpu = gpu_model.generate("ROMEO:", max_tokens=24, draft=draft_gpu, num_speculative_tokens=3, **controls)
        assert gpu.token_ids == cpu.token_ids


@pytest.mark.gpu
def test_gpu_quantised_weights_give_the_cpu_tokens(cpu_model):
    from tinyinfer.quantize import quantize_model  # noqa: PLC0415

    for scheme in ("int8", "int4"):
        cpu = quantize_model(tinyinfer.load("shakespeare"), scheme)
        gpu = quantize_model(tinyinfer.load("shakespeare", device="cuda"), scheme)
        assert gpu.generate("ROMEO:", max_tokens=24, temperature=0).token_ids == \
            cpu.generate("ROMEO:", max_tokens=24, temperature=0).token_ids


# --- what crosses between host and device per decode step ----------------------------------------------------------

def _transfers_per_token(model, n_tokens: int, **controls):
    """(transfers of a 1-token run, of an n-token run): their difference is what the n - 1 decode steps cost."""
    from tinyinfer import backend  # noqa: PLC0415

    counter = backend.get_xp("cuda").transfers
    runs = []
    for max_tokens in (1, n_tokens):
        counter.reset()
        model.generate("ROMEO:", max_tokens=max_tokens, ignore_eos=True, **controls)
        runs.append(dataclasses.replace(counter))
    return runs


@pytest.mark.gpu
def test_gpu_decode_step_moves_ids_in_and_one_choice_out():
    """Per decode step: the new token's id (and its position) in; out, one scalar for a greedy pick, or one row of
    probabilities [vocab] for a sampled one. Never the whole logits, never a layer's weights, nothing per layer."""
    if REAL_GPU:
        pytest.skip("transfers are counted by the strict stand-in")
    model = tinyinfer.load("shakespeare", device="cuda")
    vocab, steps = model.config.vocab_size, 15
    one, many = _transfers_per_token(model, steps + 1, temperature=0)
    per_step_in = (many.to_device_calls - one.to_device_calls) / steps
    assert per_step_in <= 6, f"{per_step_in} host-to-device copies per decode step"  # ids, RoPE cos/sin, mask, rows
    assert many.to_host_bytes == one.to_host_bytes  # greedy: the argmax comes back as a scalar
    assert (many.scalar_syncs - one.scalar_syncs) / steps <= 1
    one, many = _transfers_per_token(model, steps + 1, temperature=0.8, top_p=0.9, seed=1)
    assert (many.to_host_bytes - one.to_host_bytes) / steps <= 8 * vocab  # one float64 row
    assert (many.to_host_calls - one.to_host_calls) / steps <= 1


# --- the benches on the device -------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_bench_decode_on_the_device_reports_the_gpu_memory_bound(capsys):
    from tinyinfer.cli import main  # noqa: PLC0415

    assert main(["bench", "decode", "--device", "cuda", "--dtype", "float16", "--prompt-tokens", "8",
                 "--tokens", "4", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "GPU memory bandwidth (measured" in out and "of the bandwidth bound" in out
    assert "float16" in out
    assert "tokens/s with CUDA graphs" in out and "eager (--enforce-eager)" in out  # the engine's decode, both ways


@pytest.mark.gpu
def test_bench_serve_on_the_device_prints_the_batching_ratios(capsys):
    from tinyinfer.cli import main  # noqa: PLC0415

    assert main(["bench", "serve", "--device", "cuda", "--requests", "6", "--concurrency", "3", "--rounds", "1",
                 "--prompt-len", "8:16", "--output-len", "4:8", "--prefix-len", "32", "--prefix-requests", "2"]) == 0
    out = capsys.readouterr().out
    assert "continuous" in out and "same tokens" in out.lower()
    assert "continuous, eager" in out and "CUDA graphs: continuous batching with / without them" in out


# --- the parallel splits on the device (ranks as threads: the communicator's test double) -------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("model_name, splits", [
    ("shakespeare", [dict(tensor_parallel_size=2), dict(pipeline_parallel_size=2)]),
    ("shakespeare-moe", [dict(tensor_parallel_size=2, enable_expert_parallel=True)]),
])
def test_gpu_parallel_splits_give_the_single_device_logits_and_tokens(model_name, splits):
    from tinyinfer.distribute import distribute  # noqa: PLC0415
    from tinyinfer.distributed import run_ranks  # noqa: PLC0415

    from tolerances import logits_bound  # noqa: PLC0415

    whole = tinyinfer.load(model_name)
    ids = whole.tokenizer.encode("ROMEO:\nWhat light through yonder window breaks?")
    reference = whole.logits(ids)
    greedy = whole.generate(ids, max_tokens=12, temperature=0.0, ignore_eos=True).token_ids
    for split in splits:
        def on_rank(comm, split=split):
            part = distribute(tinyinfer.load(model_name, device="cuda"), comm, **split)
            return part.logits(ids), part.generate(ids, max_tokens=12, temperature=0.0, ignore_eos=True).token_ids

        for logits, tokens in run_ranks(2, on_rank, timeout_s=60):
            assert isinstance(logits, np.ndarray)
            np.testing.assert_allclose(logits, reference, rtol=0, atol=logits_bound(whole.config, reference))
            assert tokens == greedy


@pytest.mark.gpu
def test_gpu_float16_weights_are_as_close_to_float32_as_the_cpu_float16_run():
    """Weights and compute in float16 on the device. Float16 rounds every activation to 11 bits, so no fixed bound
    is principled (see tests/test_dtypes.py): the device's float16 logits must be as close to the float32 logits as
    the CPU's float16 run of the same weights is (within twice its largest deviation), and pick the same tokens."""
    ids = tinyinfer.load("shakespeare").tokenizer.encode("ROMEO:\nWhat light through yonder window breaks?")
    full = tinyinfer.load("shakespeare").logits(ids)
    half_cpu, half_gpu = (tinyinfer.load("shakespeare", device=d, dtype="float16") for d in ("cpu", "cuda"))
    assert half_gpu.params["embed"].dtype == np.float16
    cpu, gpu = half_cpu.logits(ids).astype(np.float32), half_gpu.logits(ids).astype(np.float32)
    assert np.abs(gpu - full).max() <= 2 * np.abs(cpu - full).max()
    assert (gpu.argmax(-1) == cpu.argmax(-1)).mean() >= 0.9


@pytest.mark.gpu
def test_gpu_engine_step_moves_ids_in_and_each_rows_choice_out():
    """Per engine step over 4 sequences: greedy, only the 4 chosen ids come back (argmax on the device); sampled,
    one float64 row of probabilities per sequence. The copies in do not grow with the number of layers."""
    if REAL_GPU:
        pytest.skip("transfers are counted by the strict stand-in")
    from tinyinfer.engine import LLM  # noqa: PLC0415

    prompts, steps = ["ROMEO:", "JULIET:", "KING:", "QUEEN:"], 20
    counter = get_xp("cuda").transfers
    per_step_in = {}
    for name in ("shakespeare", "shakespeare-draft"):  # 4 layers against 2 layers
        model = tinyinfer.load(name, device="cuda")
        llm, vocab = LLM(model), model.config.vocab_size
        for temperature, out_bytes in ((0.0, 8 * len(prompts)), (0.8, 8 * vocab * len(prompts))):
            runs = []
            for max_tokens in (steps, 2 * steps):
                counter.reset()
                llm.generate(prompts, tinyinfer.SamplingParams(temperature=temperature, max_tokens=max_tokens,
                                                               ignore_eos=True, seed=1))
                runs.append(dataclasses.replace(counter))
            assert (runs[1].to_host_bytes - runs[0].to_host_bytes) / steps == out_bytes
            assert (runs[1].to_host_calls - runs[0].to_host_calls) / steps == 1
            per_step_in[name, temperature] = (runs[1].to_device_calls - runs[0].to_device_calls) / steps
    assert per_step_in["shakespeare", 0.0] == per_step_in["shakespeare-draft", 0.0] <= 12


@pytest.mark.gpu
def test_gpu_penalties_send_the_output_ids_not_a_vocabulary_of_counts():
    """Presence and frequency penalties count the output on the device: per step, the ids cross (8 bytes each),
    never a [vocab] array."""
    if REAL_GPU:
        pytest.skip("transfers are counted by the strict stand-in")
    model = tinyinfer.load("shakespeare", device="cuda")
    one, many = _transfers_per_token(model, 16, temperature=0.8, seed=1, frequency_penalty=0.5, presence_penalty=0.3,
                                     repetition_penalty=1.2)
    assert (many.to_device_bytes - one.to_device_bytes) / 15 < 4 * model.config.vocab_size / 2
