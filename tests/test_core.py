"""The core runtime on real and hand-made inputs: llama2.c checkpoints, memory arithmetic, errors, the CLI."""

from __future__ import annotations

import struct
import subprocess
import sys

import numpy as np
import pytest

import tinyinfer
from tinyinfer.attention import attention, causal_mask
from tinyinfer.families import config_from_hf
from tinyinfer.errors import TinyInferError
from tinyinfer.kv_cache import ContiguousKVCache
from tinyinfer.memory import kv_bytes_per_token, param_count
from tinyinfer.model import SeqChunk
from tinyinfer.rope import apply_rope, inv_frequencies, rope_angles
from tinyinfer.safetensors_io import bf16_to_f32

from conftest import ROOT, shared_data
from tolerances import assert_close, logits_bound

STORIES = "models/stories260K/stories260K.bin"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tinyinfer", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


# -- llama2.c: the real trained model ------------------------------------------------------------------------

@pytest.mark.exercise("5.2")
def test_stories260k_greedy_matches_llama2c_published_output():
    """run.c at temperature 0 with its default 256 steps: from BOS it prints 256 tokens (stopping early only if
    BOS comes again), dropping the space that follows BOS, then a newline."""
    model = tinyinfer.load(shared_data(STORIES))
    expected = shared_data("models/stories260K/expected_greedy.txt").read_text()
    bos = model.config.bos_token_id
    result = model.generate([bos], max_tokens=256, temperature=0.0, stop_token_ids=[bos])
    assert model.tokenizer.decode([bos] + result.token_ids, skip_special_tokens=True) + "\n" == expected


def test_llama2c_legacy_and_version1_files_hold_the_same_model():
    legacy = tinyinfer.load(shared_data(STORIES))
    v1 = tinyinfer.load(shared_data("models/stories260K/stories260K_v1.bin"))
    ids = [1, 403, 407, 261, 378]
    np.testing.assert_array_equal(legacy.logits(ids), v1.logits(ids))
    assert legacy.n_params == param_count(legacy.config) == 260_032


def test_truncated_llama2c_file_is_a_clear_error(tmp_path):
    data = shared_data(STORIES).read_bytes()
    cut = tmp_path / "cut.bin"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(TinyInferError, match="truncated"):
        tinyinfer.load(cut)


def test_nonsense_llama2c_header_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(struct.pack("<7i", 64, 172, 5, 7, 4, 512, 512) + b"\0" * 100)  # 64 dims over 7 heads
    with pytest.raises(TinyInferError, match="not a llama2.c checkpoint"):
        tinyinfer.load(bad)


@pytest.mark.exercise("5.1")
def test_incremental_decode_equals_full_recompute_on_trained_model():
    """Equal up to float32 summation order: BLAS sums a 4-row and a 10-row product in different orders, which
    moves logits of magnitude ~7 by ~1e-5, within the rounding bound of tests/tolerances.py; a cache bug moves
    them by 1e-2 or more."""
    model = tinyinfer.load(shared_data(STORIES))
    ids = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376]
    full = model.logits(ids)
    cache = model.new_cache(1, len(ids))
    steps = [model.forward([SeqChunk(0, 0, ids[:4])], cache, all_logits=True)]
    steps += [model.forward([SeqChunk(0, t, [ids[t]])], cache) for t in range(4, len(ids))]
    assert_close(np.concatenate(steps), full, logits_bound(model.config, full, own_angles=False))


def test_prompt_beyond_context_window_is_refused_before_work():
    model = tinyinfer.load(shared_data(STORIES))
    with pytest.raises(TinyInferError, match="context window of 512"):
        model.generate([1] * 500, max_tokens=20)


# -- the pieces, on hand-made numbers --------------------------------------------------------------------------

@pytest.mark.exercise("4.1")
def test_rms_norm_matches_torch():
    torch = pytest.importorskip("torch")
    from tinyinfer.norms import rms_norm
    x = np.random.default_rng(2).normal(size=(5, 16)).astype(np.float32) * 3
    weight = np.random.default_rng(3).uniform(0.5, 1.5, size=16).astype(np.float32)
    reference = torch.nn.RMSNorm(16, eps=1e-5)
    reference.weight.data = torch.from_numpy(weight)
    np.testing.assert_allclose(rms_norm(x, weight, 1e-5), reference(torch.from_numpy(x)).detach().numpy(), rtol=1e-5)


@pytest.mark.exercise("4.2")
def test_rope_matches_transformers_rotary_embedding():
    pytest.importorskip("torch")
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    import torch
    rng = np.random.default_rng(4)
    positions = np.array([0, 1, 5, 17, 300])
    q = rng.normal(size=(5, 3, 8)).astype(np.float32)  # [T, H, hd]
    cos, sin = rope_angles(positions, inv_frequencies(8, 10000.0))  # 2 x [T, hd/2]
    full_cos, full_sin = (torch.from_numpy(np.concatenate([c, c], -1))[None] for c in (cos, sin))  # [1, T, hd]
    q_ref, _ = apply_rotary_pos_emb(torch.from_numpy(q).transpose(0, 1)[None], torch.zeros(1, 1, 5, 8), full_cos, full_sin)
    np.testing.assert_allclose(apply_rope(q, cos, sin), q_ref[0].transpose(0, 1).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.exercise("4.3")
def test_swiglu_matches_torch():
    torch = pytest.importorskip("torch")
    from tinyinfer.mlp import swiglu
    rng = np.random.default_rng(5)
    x = rng.normal(size=(4, 8)).astype(np.float32)
    mlp = {"gate": rng.normal(size=(8, 12)).astype(np.float32), "up": rng.normal(size=(8, 12)).astype(np.float32),
           "down": rng.normal(size=(12, 8)).astype(np.float32)}
    t = {name: torch.from_numpy(w) for name, w in mlp.items()}
    xt = torch.from_numpy(x)
    reference = (torch.nn.functional.silu(xt @ t["gate"]) * (xt @ t["up"])) @ t["down"]
    np.testing.assert_allclose(swiglu(x, mlp), reference.numpy(), rtol=1e-4, atol=1e-5)


def test_a_few_rows_multiply_row_by_row_exactly_as_one_row_would():
    """`matmul` takes 2..ROW_BY_ROW_MAX rows as matrix-vector products: each row bit for bit what the one-row
    product (a decode step's) gives, and all rows within float32 rounding of the matrix product."""
    from tinyinfer.mlp import ROW_BY_ROW_MAX, matmul
    rng = np.random.default_rng(6)
    w = rng.normal(size=(96, 160)).astype(np.float32)
    for layout in (w, np.asfortranarray(w)):  # row-major, and column-major (a tall weight as stored)
        for T in range(1, ROW_BY_ROW_MAX + 3):
            x = rng.normal(size=(T, 96)).astype(np.float32)
            y = matmul(x, layout)  # [T, 96] @ [96, 160] -> [T, 160]
            assert y.shape == (T, 160) and y.dtype == np.float32 and y.flags.c_contiguous
            bound = 96 * np.finfo(np.float32).eps * (np.abs(x) @ np.abs(w))  # a float32 sum of 96 products, any order
            assert np.all(np.abs(y - x.astype(np.float64) @ w) <= bound)
            if T <= ROW_BY_ROW_MAX:
                for i in range(T):
                    np.testing.assert_array_equal(y[i], (x[i:i + 1] @ layout)[0])

    class Weight:  # a weight object of its own (quantised, LoRA-routed) keeps its own product
        __array_ufunc__ = None

        def __rmatmul__(self, x):
            return x @ w + 1

    x = rng.normal(size=(3, 96)).astype(np.float32)
    np.testing.assert_allclose(matmul(x, Weight()), x @ w + 1, rtol=1e-5)


@pytest.mark.exercise("2.1")
def test_bf16_widening_is_exact():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bits = np.random.default_rng(0).integers(0, 2**16, size=4096, dtype=np.uint16)
    bits = bits[(bits & 0x7F80) != 0x7F80]  # drop inf/NaN patterns, which never compare equal
    np.testing.assert_array_equal(bf16_to_f32(bits), bits.view(ml_dtypes.bfloat16).astype(np.float32))


@pytest.mark.exercise("3.1")
def test_causal_mask_with_sliding_window():
    mask = causal_mask(3, 2, window=2)  # queries at positions 2, 3, 4 over keys 0..4
    visible = mask == 0
    assert visible.tolist() == [[False, True, True, False, False],
                                [False, False, True, True, False],
                                [False, False, False, True, True]]


@pytest.mark.exercise("3.2")
def test_grouped_query_attention_equals_repeated_heads():
    rng = np.random.default_rng(0)
    n, L, n_heads, n_kv, hd = 3, 5, 6, 2, 4
    q = rng.normal(size=(n, n_heads, hd)).astype(np.float32)
    k, v = rng.normal(size=(2, n_kv, L, hd)).astype(np.float32)
    mask = causal_mask(n, L - n)
    out = attention(q, k, v, mask).reshape(n, n_heads, hd)
    for h in range(n_heads):  # plain multi-head attention, head h reading KV head h // (n_heads // n_kv)
        kh, vh = k[h // 3], v[h // 3]
        scores = q[:, h] @ kh.T / np.sqrt(hd) + mask
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        np.testing.assert_allclose(out[:, h], weights @ vh, rtol=1e-5, atol=1e-6)


@pytest.mark.exercise("4.2")
def test_rope_rotation_preserves_norm_and_encodes_relative_position():
    rng = np.random.default_rng(1)
    inv_freq = inv_frequencies(8, 10000.0)
    q, k = rng.normal(size=(2, 1, 1, 8)).astype(np.float32)
    def rotated(x, pos):
        return apply_rope(x, *rope_angles(np.array([pos]), inv_freq))[0, 0]
    np.testing.assert_allclose(np.linalg.norm(rotated(q, 7)), np.linalg.norm(q), rtol=1e-5)
    # the score depends only on the distance between positions: (3, 1) and (12, 10) agree
    np.testing.assert_allclose(rotated(q, 3) @ rotated(k, 1), rotated(q, 12) @ rotated(k, 10), rtol=1e-4)


@pytest.mark.exercise("5.1")
def test_kv_cache_writes_in_place_and_refuses_overflow():
    cfg = config_from_hf({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
                          "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 16})
    cache = ContiguousKVCache(cfg, max_seqs=2, max_len=4)
    k = np.arange(2 * 1 * 4, dtype=np.float32).reshape(2, 1, 4)
    cache.write(0, 1, 1, k, -k)
    keys, values = cache.read(0, 1, 3)
    assert keys.shape == (1, 3, 4)
    np.testing.assert_array_equal(keys[0, 1:], k[:, 0])
    np.testing.assert_array_equal(values[0, 0], 0)  # position 0 of sequence 1 never written
    with pytest.raises(TinyInferError, match="overflow"):
        cache.write(0, 1, 3, k, k)


# -- configs ---------------------------------------------------------------------------------------------------

LLAMA = {"model_type": "llama", "vocab_size": 32, "hidden_size": 16, "num_hidden_layers": 2,
         "num_attention_heads": 4, "intermediate_size": 40}


def test_both_config_dialects_give_the_same_rope():
    old = config_from_hf({**LLAMA, "rope_theta": 5e5, "torch_dtype": "bfloat16",
                          "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 64}})
    new = config_from_hf({**LLAMA, "dtype": "bfloat16",
                          "rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0,
                                              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                              "original_max_position_embeddings": 64}})
    assert (old.rope_theta, old.rope_scaling, old.torch_dtype) == (new.rope_theta, new.rope_scaling, new.torch_dtype)
    assert old.rope_scaling["factor"] == 8.0


@pytest.mark.parametrize("change, message", [
    ({"model_type": "bert"}, "model_type 'bert' is not supported; supported: gpt2, llama"),
    ({"rope_scaling": {"rope_type": "longrope", "factor": 2.0}}, "rope scaling type 'longrope' is not supported"),
    ({"hidden_act": "relu6"}, "activation 'relu6' is not supported"),
    ({"num_key_value_heads": 3}, "not a multiple of num_key_value_heads=3"),
    ({"quantization_config": {"quant_method": "gptq", "bits": 4}}, "quantised with 'gptq' are not supported"),
])
def test_bad_configs_name_the_problem(change, message):
    with pytest.raises(TinyInferError, match=message.replace("(", r"\(")):
        config_from_hf({**LLAMA, **change})


def test_missing_config_field_is_named():
    config = dict(LLAMA)
    del config["intermediate_size"]
    with pytest.raises(TinyInferError, match="'intermediate_size' is missing"):
        config_from_hf(config)


# -- memory arithmetic and the CLI --------------------------------------------------------------------------

@pytest.mark.exercise("2.2")
def test_kv_bytes_of_the_chapters_70b_example():
    per_token = kv_bytes_per_token(80, 8, 128, 2)
    assert per_token == 327_680  # ~0.31 MiB
    assert per_token * 8000 / 2**30 == pytest.approx(2.44, abs=0.01)  # ~2.5 GB per conversation
    assert per_token * 8000 * 100 / 1e9 == pytest.approx(262, abs=1)  # ~250 GB for 100 of them


@pytest.mark.exercise("2.2")
def test_memory_command_prints_the_worked_example():
    out = run_cli("memory", "--params", "70e9", "--layers", "80", "--kv-heads", "8", "--head-dim", "128",
                  "--context", "8000", "--batch", "100", "--dtype", "fp16")
    assert out.returncode == 0, out.stderr
    assert "327,680 B (0.31 MiB" in out.stdout
    assert "x 8,000 tokens = 2.44 GiB" in out.stdout
    assert "x 100 sequences = 244.14 GiB" in out.stdout
    assert "fp16 130.39 GiB = 140.00 GB" in out.stdout


def test_memory_command_reads_a_models_config():
    out = run_cli("memory", "--model", str(shared_data(STORIES)), "--context", "512", "--dtype", "fp32")
    assert out.returncode == 0, out.stderr
    assert "260,032" in out.stdout and "2 x 5 layers x 4 kv_heads x 8 head_dim x 4 B = 1,280 B" in out.stdout


@pytest.mark.parametrize("args, message", [
    (["generate", "--model", "/no/such/model", "hi"], "'/no/such/model' is not a built-in name"),
    (["memory", "--layers", "3"], "missing --params --kv-heads --head-dim"),
    (["generate", "--model", "STORIES", "--device", "cuda", "hi"], "cuda"),
])
def test_cli_errors_are_one_line_without_traceback(args, message):
    args = [str(shared_data(STORIES)) if a == "STORIES" else a for a in args]
    out = run_cli(*args)
    if "cuda" in args and out.returncode == 0:
        pytest.skip("a GPU is present")
    assert out.returncode == 1
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert message in out.stderr


def test_generate_command_streams_text_and_reports_timings():
    out = run_cli("generate", "--model", str(shared_data(STORIES)), "--max-tokens", "40", "--temperature", "0",
                  "Once upon a time")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.split()) > 5
    for field in ("prompt tokens", "output tokens", "TTFT", "TPOT", "tokens/s"):
        assert field in out.stderr


def test_pytorch_pickles_are_refused_not_unpickled(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "pytorch_model.bin"
    torch.save({"weight": torch.zeros(2)}, path)
    with pytest.raises(TinyInferError, match="never unpickles: convert it to safetensors"):
        tinyinfer.load(path)


def test_sharded_checkpoint_loads_like_a_single_file(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)
    hf = transformers.LlamaForCausalLM(config)
    hf.save_pretrained(tmp_path / "single")
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    ids = [1, 5, 9, 33, 2]
    np.testing.assert_array_equal(tinyinfer.load(tmp_path / "sharded").logits(ids),
                                  tinyinfer.load(tmp_path / "single").logits(ids))


@pytest.mark.exercise("5.2")
def test_padding_rows_of_the_output_layer_are_never_sampled():
    """Checkpoints often have more output rows than tokens (Phi-3: 32,064 for 32,011): those ids cannot be
    decoded, so generation never picks them, greedy or sampled."""
    model = tinyinfer.load(shared_data(STORIES))

    class FewerTokens:  # the real tokenizer, claiming 300 of the 512 ids
        def __init__(self, tokenizer):
            self.tokenizer, self.vocab_size = tokenizer, 300

        def __getattr__(self, name):
            return getattr(self.tokenizer, name)

    free = model.generate([1], max_tokens=60, temperature=0.0, ignore_eos=True).token_ids
    assert max(free) >= 300  # the unconstrained model does use ids beyond 300
    model.tokenizer = FewerTokens(model.tokenizer)
    assert model.vocab_limit == 300
    for temperature in (0.0, 1.5):
        ids = model.generate([1], max_tokens=60, temperature=temperature, seed=0, ignore_eos=True).token_ids
        assert max(ids) < 300


def test_the_runtime_needs_no_development_package():
    """`pip install -e .` has no pytest, torch or transformers: every command must still import and run."""
    blocked = ["pytest", "torch", "transformers", "jsonschema", "matplotlib", "nbclient", "hypothesis"]
    code = ("import sys\n"
            f"for name in {blocked!r}: sys.modules[name] = None  # importing any of them now fails\n"
            "from tinyinfer.cli import build_parser, main\n"
            "build_parser()\n"
            "raise SystemExit(main(['generate', 'ROMEO:', '--max-tokens', '5', '--seed', '0']))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()
