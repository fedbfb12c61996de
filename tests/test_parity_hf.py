"""Parity with Hugging Face transformers on tiny random-weight fp32 checkpoints of every architecture.

Each variant (weights_scripts/make_tiny_models.py) is loaded by tinyinfer and by transformers (eager
attention, float32) and must agree on:
- the logits at every position of a 20-token prompt, within the float32 rounding bound of tests/tolerances.py
  (~2e-4 here: two independent float32 roundings of logits up to ~10 through 2 layers; observed 5e-6 to 3e-5),
  while any wrong mapping moves logits by ~1 or more;
- the KV-cached path (prefill, chunked prefill, one token at a time, two sequences in one batch) against
  tinyinfer's own full recompute, within the same bound. Same arithmetic, but a one-token matrix product sums in
  another order than a many-token one, and each BLAS kernel in its own (observed 4e-6 to 4.5e-5 across machines
  and kernels), while a cache bug (a wrong position, slot or window) moves logits by 0.01 or more;
- 32 greedy tokens, identical to transformers' `generate(do_sample=False)` with EOS disabled.

Guard tests check that these comparisons have teeth: every stored tensor is randomised, two swapped tensors
move the logits over 100x past the rounding bound, and the sliding-window variant really changes transformers' output.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import safetensors.torch
import tiny_models
import torch
import transformers
from safetensors.numpy import load_file, save_file
from tolerances import assert_close, logits_bound, rounding_bound
from tiny_models import (
    ROOT,
    VARIANTS,
    hf_greedy,
    hf_logits,
    hf_model,
    make_tiny_models,
    prompt_ids,
    variant_dtype,
)

import tinyinfer
from tinyinfer.model import SeqChunk

tiny_checkpoint = tiny_models.tiny_checkpoint  # the session fixture, made usable in this module
FP32_VARIANTS = [name for name in VARIANTS if variant_dtype(name) == "float32"]


@pytest.fixture(params=FP32_VARIANTS)
def variant(request, tiny_checkpoint):
    """(folder, tinyinfer model) of one fp32 variant."""
    folder = tiny_checkpoint(request.param)
    return folder, tinyinfer.load(folder)


def test_logits_match_transformers_at_every_position(variant):
    folder, model = variant
    ids = prompt_ids(20)
    ours = model.logits(ids)
    theirs = hf_logits(folder, ids)
    assert ours.shape == theirs.shape == (20, model.config.vocab_size)
    assert_close(ours, theirs, logits_bound(model.config, theirs))


@pytest.mark.parametrize("arch, overrides", [
    pytest.param("gpt2", {"n_positions": 512}, id="gpt2"),
    pytest.param("llama", {"max_position_embeddings": 512, "num_key_value_heads": 2}, id="llama_gqa"),
    pytest.param("llama", {"max_position_embeddings": 512, "rope_parameters": make_tiny_models.LLAMA3_ROPE},
                 id="llama_rope_llama3"),
    pytest.param("qwen2", {"max_position_embeddings": 512, "num_key_value_heads": 2}, id="qwen2"),
    pytest.param("mistral", {"max_position_embeddings": 512, "sliding_window": 100}, id="mistral_window"),
])
def test_logits_match_transformers_on_a_long_prompt(arch, overrides, tmp_path):
    """Position-dependent arithmetic (RoPE angles, learned positions, windows) must agree far from position 0 too.
    transformers forms RoPE angles in float32 (inv_freq from a float32 exponent, then a float32 product with the
    position); any other rounding drifts with the position: ~1e-5 at 20 tokens, 1-2e-4 here, 5e-4 at 1000."""
    folder = make_tiny_models.build_tiny_checkpoint(arch, tmp_path / arch, **overrides)
    ids = prompt_ids(300, seed=7)
    model, theirs = tinyinfer.load(folder), hf_logits(folder, ids)
    assert_close(model.logits(ids), theirs, logits_bound(model.config, theirs))


def test_cached_decode_equals_full_recompute(variant):
    """Prefill 6 tokens, then a 5-token chunk at position 6, then one token at a time."""
    _, model = variant
    ids = prompt_ids(20, seed=1)
    full = model.logits(ids)  # [20, V]
    cache = model.new_cache()
    prefill = model.forward([SeqChunk(0, 0, ids[:6])], cache, all_logits=True)  # [6, V]
    chunk = model.forward([SeqChunk(0, 6, ids[6:11])], cache, all_logits=True)  # [5, V]
    steps = [model.forward([SeqChunk(0, pos, ids[pos : pos + 1])], cache)[0] for pos in range(11, 20)]  # 9 x [V]
    assert_close(np.concatenate([prefill, chunk, np.stack(steps)]), full, logits_bound(model.config, full, own_angles=False))


def test_last_token_logits_without_all_logits(variant):
    _, model = variant
    ids = prompt_ids(20, seed=2)
    last = model.forward([SeqChunk(0, 0, ids)], model.new_cache())
    assert last.shape == (1, model.config.vocab_size)
    full = model.logits(ids)  # [20, V]
    # the same layers on the same rows: only the output head's product (d_model terms) may sum in another order
    assert_close(last[0], full[-1], rounding_bound(np.float32, np.abs(full).max(), model.config.d_model))


def test_two_sequences_in_one_batch_equal_each_alone(variant):
    """Two sequences of different lengths share one forward call: both prefill, then a step that mixes a 6-token
    chunk of one with a single decode token of the other."""
    _, model = variant
    a, b = prompt_ids(20, seed=3), prompt_ids(15, seed=4)
    full_a, full_b = model.logits(a), model.logits(b)
    cache = model.new_cache(max_seqs=2)
    prefill = model.forward([SeqChunk(0, 0, a[:12]), SeqChunk(1, 0, b[:9])], cache, all_logits=True)  # [21, V]
    bound = logits_bound(model.config, np.concatenate([full_a, full_b]), positions=len(a), own_angles=False)
    assert_close(prefill[:12], full_a[:12], bound)
    assert_close(prefill[12:], full_b[:9], bound)
    # sequence 1 first this time: slots are found by seq_id, not by position in the batch
    step = model.forward([SeqChunk(1, 9, b[9:15]), SeqChunk(0, 12, a[12:13])], cache)  # [2, V]
    assert_close(step[0], full_b[14], bound)
    assert_close(step[1], full_a[12], bound)


def test_greedy_tokens_match_transformers_generate(variant):
    folder, model = variant
    ids = prompt_ids(20, seed=5)
    result = model.generate(ids, max_tokens=32, temperature=0.0, ignore_eos=True)
    assert list(result.token_ids) == hf_greedy(folder, ids, 32)


@pytest.mark.parametrize("flag, value", [("scale_attn_by_inverse_layer_idx", True), ("scale_attn_weights", False)])
def test_gpt2_attention_scaling_flags(flag, value, tmp_path):
    """GPT-2 configs may change the attention-score scale; honour the flag or refuse it by name."""
    folder = make_tiny_models.build_tiny_checkpoint("gpt2", tmp_path / "gpt2", **{flag: value})
    try:
        model = tinyinfer.load(folder)
    except tinyinfer.TinyInferError as e:
        assert flag in str(e)
        return
    ids = prompt_ids(20)
    theirs = hf_logits(folder, ids)
    assert_close(model.logits(ids), theirs, logits_bound(model.config, theirs))


def test_generation_stops_at_eos_from_generation_config(tiny_checkpoint, tmp_path):
    """With the 6th greedy token declared EOS in generation_config.json, generation ends there."""
    folder = tmp_path / "llama"
    shutil.copytree(tiny_checkpoint("llama"), folder)
    ids = prompt_ids(20, seed=6)
    greedy = hf_greedy(folder, ids, 32)
    eos = greedy[5]
    assert eos not in greedy[:5], "pick a prompt whose 6th greedy token is new"
    gen_path = folder / "generation_config.json"
    gen_path.write_text(json.dumps({**json.loads(gen_path.read_text()), "eos_token_id": eos}))
    model = tinyinfer.load(folder)
    assert eos in model.config.eos_token_ids
    tokens = list(model.generate(ids, max_tokens=32, temperature=0.0).token_ids)
    assert tokens in (greedy[:5], greedy[:6])  # with or without the EOS token itself


@pytest.mark.parametrize("name", VARIANTS)
def test_every_stored_tensor_is_randomised(name, tiny_checkpoint):
    """Guard on the fixture: no tensor keeps a fresh init's constant ones or zeros (see make_tiny_models)."""
    folder = tiny_checkpoint(name)
    for path in folder.glob("*.safetensors"):
        for tensor_name, tensor in safetensors.torch.load_file(path).items():  # torch reads bf16 too
            assert tensor.float().std() > 0.1, tensor_name


@pytest.mark.parametrize("name, swap", [
    ("llama", ("model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight")),
    ("qwen3", ("model.layers.1.self_attn.q_norm.weight", "model.layers.1.self_attn.k_norm.weight")),
    ("llama_gqa", ("model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight")),
    ("gpt2", ("transformer.h.1.ln_1.bias", "transformer.h.1.ln_2.bias")),
])
def test_parity_tolerance_catches_a_swapped_tensor(name, swap, tiny_checkpoint, tmp_path):
    """Guard on the test's power: loading two same-shaped tensors in each other's place moves the logits far
    beyond the rounding bound, so a wrong name map cannot pass test_logits_match_transformers_at_every_position."""
    folder = tmp_path / name
    shutil.copytree(tiny_checkpoint(name), folder)
    tensors = load_file(folder / "model.safetensors")
    a, b = swap
    tensors[a], tensors[b] = tensors[b], tensors[a]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    ids = prompt_ids(20)
    theirs = hf_logits(tiny_checkpoint(name), ids)
    model = tinyinfer.load(folder)
    assert np.abs(model.logits(ids) - theirs).max() > 100 * logits_bound(model.config, theirs)


def test_sliding_window_variant_really_slides(tiny_checkpoint):
    """Guard on the fixture: the Mistral window (8 keys) changes transformers' logits from position 8 on, so
    the parity of `mistral_window` proves tinyinfer applies it, and `mistral_no_window` that it does not."""
    reference = hf_model(tiny_checkpoint("mistral_window"))
    assert reference.config.sliding_window == 8
    config = copy.deepcopy(reference.config)
    config.sliding_window = None
    unwindowed = type(reference)(config).eval()
    unwindowed.load_state_dict(reference.state_dict())
    ids = torch.tensor([prompt_ids(20)])
    with torch.no_grad():
        windowed_logits, full_logits = reference(ids).logits[0], unwindowed(ids).logits[0]  # 2 x [20, V]
    torch.testing.assert_close(windowed_logits[:8], full_logits[:8], rtol=0, atol=1e-5)
    assert (windowed_logits[8:] - full_logits[8:]).abs().amax(dim=-1).min() > 0.01


@pytest.mark.parametrize("name", ["gpt2", "qwen3"])
def test_cli_generate_prints_transformers_greedy_text(name, tiny_checkpoint):
    """End to end: tokenizer.json, model, greedy loop, EOS from generation_config, streamed detokenization."""
    folder = tiny_checkpoint(name)
    prompt = "Once upon a time"
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    ids = tokenizer(prompt).input_ids
    with torch.no_grad():
        out = hf_model(folder).generate(torch.tensor([ids]), do_sample=False, max_new_tokens=24, pad_token_id=0)
    expected = tokenizer.decode(out[0, len(ids):])
    run = subprocess.run(
        [sys.executable, "-m", "tinyinfer", "generate", "--model", str(folder), "--temperature", "0",
         "--max-tokens", "24", prompt],
        check=False, capture_output=True, encoding="utf-8", env={**os.environ, "PYTHONIOENCODING": "utf-8"}, cwd=ROOT, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout in (expected, expected + "\n")
