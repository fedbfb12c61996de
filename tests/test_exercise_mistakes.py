"""Each exercise's plausible mistakes, and proof that its graded tests catch them.

An exercise is graded by several tests (tests/test_course.py requires at least three). The tests here each
pin down one plausible wrong answer, named in the test's docstring, that the exercise's other tests might
let through; they use only tiny arrays and the built-in model, so they run in a second.

Then MISTAKES gives every exercise one plausible mistake (the error a student would really make), and it is
planted: in a copy of the project, the reference text is replaced by the mistake, and the exercise's graded
tests (`pytest --exercise N.M`, only the files holding them) must fail. An exercise without a mistake, or a
mistake whose text moved out of its exercise, fails a fast test.
"""

from __future__ import annotations

import ast
import functools
import os
import queue
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from mutate import ROOT, check_imports_the_copy, copy_project, run_tests, verdict  # the mutation list's machinery

import tinyinfer
from tinyinfer.attention import attention, causal_mask
from tinyinfer.course.exercises import find_exercises, parse_id
from tinyinfer.families import config_from_hf
from tinyinfer.engine.block_manager import block_hash, prefix_hashes
from tinyinfer.flash_attention import online_softmax_step
from tinyinfer.kv_cache import ContiguousKVCache
from tinyinfer.lora import LoraUpdate, lora_delta
from tinyinfer.memory import kv_bytes_per_token
from tinyinfer.mlp import swiglu
from tinyinfer.moe import shared_expert
from tinyinfer.norms import rms_norm
from tinyinfer.quantize import pack_int4
from tinyinfer.rope import apply_rope
from tinyinfer.sampling import draw
from tinyinfer.safetensors_io import bf16_to_f32
from tinyinfer.speculative import residual, verify

RNG = np.random.default_rng(23)


@pytest.mark.exercise("2.1")
def test_bf16_keeps_sign_exponent_and_the_top_mantissa_bits():
    """Wrong answer: shifting by 8, or widening without the shift (a bf16 is the *top* half of a float32)."""
    values = np.array([1.0, -2.0, 0.15625, 3.0e38, -1.0e-38], dtype=np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)  # these values fit bf16 exactly or truncate
    np.testing.assert_array_equal(bf16_to_f32(bits), (bits.astype(np.uint32) << 16).view(np.float32))
    assert bf16_to_f32(np.array([0x7F80, 0xFF80], dtype=np.uint16)).tolist() == [np.inf, -np.inf]
    assert bf16_to_f32(np.array([0x3F80], dtype=np.uint16)).dtype == np.float32


@pytest.mark.exercise("2.1")
def test_bf16_widening_keeps_the_array_shape():
    """Wrong answer: flattening or viewing the wrong width changes the shape."""
    bits = np.full((3, 4), 0x4000, dtype=np.uint16)  # 2.0
    out = bf16_to_f32(bits)
    assert out.shape == (3, 4) and (out == 2.0).all()


@pytest.mark.exercise("2.2")
def test_kv_bytes_count_keys_and_values_and_only_kv_heads():
    """Wrong answers: forgetting the 2 (keys *and* values), or using the query heads instead of KV heads."""
    assert kv_bytes_per_token(1, 1, 1, 1) == 2
    assert kv_bytes_per_token(32, 8, 128, 2) == 131072  # Llama-3-8B in fp16: 128 KiB per token
    assert kv_bytes_per_token(2, 4, 64, 0.5) == 512  # int4: half a byte per number


@pytest.mark.exercise("3.1")
def test_the_diagonal_is_visible_and_nothing_beyond_it():
    """Wrong answer: `<` instead of `<=` (a token must see itself), or a mask that ignores `start`."""
    mask = causal_mask(3, 0)
    assert (np.diag(mask) == 0).all() and np.isneginf(mask[0, 1]) and mask.dtype == np.float32
    after_cache = causal_mask(1, 4)  # one decode step after 4 cached tokens sees all 5 positions
    assert after_cache.shape == (1, 5) and (after_cache == 0).all()


@pytest.mark.exercise("3.1")
def test_sliding_window_keeps_exactly_window_tokens():
    """Wrong answer: an off-by-one window that keeps window + 1 tokens (or window - 1)."""
    mask = causal_mask(6, 0, window=3)
    assert ((mask == 0).sum(axis=1) == [1, 2, 3, 3, 3, 3]).all()
    assert (mask[5, 3:] == 0).all() and np.isneginf(mask[5, 2])


def _attention_by_loops(q, k, v, mask):
    """Plain softmax attention, one query head at a time, head h reading KV head h // (H / KV)."""
    n, n_heads, hd = q.shape
    group = n_heads // k.shape[0]
    out = np.zeros((n, n_heads, hd))
    for h in range(n_heads):
        scores = q[:, h] @ k[h // group].T / np.sqrt(hd) + mask  # [n, L]
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        out[:, h] = weights / weights.sum(axis=1, keepdims=True) @ v[h // group]
    return out.reshape(n, n_heads * hd)


@pytest.mark.exercise("3.2")
def test_query_heads_share_kv_heads_in_consecutive_groups():
    """Wrong answer: head h reading KV head h % KV (tiled) instead of h // group (repeated, as in HF)."""
    n, L, n_heads, n_kv, hd = 2, 4, 4, 2, 3
    q, k, v = RNG.normal(size=(n, n_heads, hd)), RNG.normal(size=(n_kv, L, hd)), RNG.normal(size=(n_kv, L, hd))
    mask = causal_mask(n, L - n)
    np.testing.assert_allclose(attention(q, k, v, mask), _attention_by_loops(q, k, v, mask), rtol=1e-10)


@pytest.mark.exercise("3.2")
def test_scores_are_scaled_and_masked_keys_get_no_weight():
    """Wrong answers: forgetting the 1/sqrt(hd) scale, or adding the mask after the softmax."""
    q = np.ones((1, 1, 4)) * 3.0
    k = np.array([[[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [9.0, 9.0, 9.0, 9.0]]])
    v = np.array([[[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 1.0, 0]]])
    mask = np.array([[0.0, 0.0, -np.inf]])
    out = attention(q, k, v, mask)
    weight_0 = 1 / (1 + np.exp(-12 / 2))  # scores 12 / sqrt(4) = 6 and 0
    np.testing.assert_allclose(out, [[weight_0, 1 - weight_0, 0.0, 0.0]], rtol=1e-12)


@pytest.mark.exercise("3.3")
def test_online_softmax_rescales_what_was_summed_under_the_old_max():
    """Wrong answer: forgetting to rescale l and o when a later tile raises the max."""
    m, l, o = np.full((1, 1), -np.inf), np.zeros((1, 1)), np.zeros((1, 2))
    m, l, o = online_softmax_step(m, l, o, np.array([[0.0, 1.0]]), np.array([[1.0, 0.0], [0.0, 1.0]]))
    m, l, o = online_softmax_step(m, l, o, np.array([[5.0]]), np.array([[2.0, 2.0]]))
    scores = np.array([0.0, 1.0, 5.0])
    weights = np.exp(scores) / np.exp(scores).sum()
    np.testing.assert_allclose(o / l, [[weights[0] + 2 * weights[2], weights[1] + 2 * weights[2]]], rtol=1e-12)
    assert m[0, 0] == 5.0


@pytest.mark.exercise("3.3")
def test_online_softmax_of_an_all_masked_tile_changes_nothing():
    """Wrong answer: exp(-inf - (-inf)) = nan when a query has seen only masked keys."""
    m, l, o = np.full((1, 1), -np.inf), np.zeros((1, 1)), np.zeros((1, 1))
    m, l, o = online_softmax_step(m, l, o, np.array([[-np.inf, -np.inf]]), np.ones((2, 1)))
    assert np.isneginf(m[0, 0]) and l[0, 0] == 0 and o[0, 0] == 0
    m, l, o = online_softmax_step(m, l, o, np.array([[0.0]]), np.array([[7.0]]))
    assert (o / l)[0, 0] == 7.0


@pytest.mark.exercise("4.1")
def test_rms_norm_puts_eps_inside_the_root_and_scales_by_weight():
    """Wrong answers: dividing by sqrt(mean) + eps, subtracting the mean (that is LayerNorm), dropping the weight."""
    x = np.array([[1.0, -1.0, 1.0, -1.0]]) * 1e-3  # rms 1e-3, comparable to sqrt(eps)
    eps = 1e-6
    np.testing.assert_allclose(rms_norm(x, np.ones(4), eps), x / np.sqrt(1e-6 + eps), rtol=1e-12)
    shifted = np.array([[1.0, 2.0, 3.0]])
    np.testing.assert_allclose(rms_norm(shifted, np.array([1.0, 2.0, 0.5]), 0.0),
                               shifted / np.sqrt(14 / 3) * [1.0, 2.0, 0.5], rtol=1e-12)


@pytest.mark.exercise("4.1")
def test_rms_norm_normalises_each_row_on_its_own():
    """Wrong answer: taking the mean over every axis instead of the last one."""
    x = np.array([[3.0, 4.0], [30.0, 40.0]])
    out = rms_norm(x, np.ones(2), 0.0)
    np.testing.assert_allclose(out[0], out[1], rtol=1e-12)


@pytest.mark.exercise("4.2")
def test_rope_pairs_dimension_i_with_i_plus_half():
    """Wrong answer: rotating interleaved pairs (x[2i], x[2i+1]) instead of HF's halves (x[i], x[i + hd/2])."""
    x = np.array([[[1.0, 2.0, 3.0, 4.0]]])  # [T=1, H=1, hd=4]
    angle = np.array([[np.pi / 2, 0.0]])  # pair 0 turns a quarter, pair 1 stays
    out = apply_rope(x, np.cos(angle), np.sin(angle))
    np.testing.assert_allclose(out, [[[-3.0, 2.0, 1.0, 4.0]]], atol=1e-12)
    assert x.tolist() == [[[1.0, 2.0, 3.0, 4.0]]]  # the input is not rotated in place


@pytest.mark.exercise("4.3")
def test_swiglu_gates_with_the_activation_of_gate_not_of_up():
    """Wrong answer: silu(up) * gate instead of silu(gate) * up."""
    d, f = 3, 5
    mlp = {"gate": RNG.normal(size=(d, f)), "up": RNG.normal(size=(d, f)), "down": RNG.normal(size=(f, d))}
    x = RNG.normal(size=(2, d))
    gate = x @ mlp["gate"]
    want = (gate / (1 + np.exp(-gate)) * (x @ mlp["up"])) @ mlp["down"]
    np.testing.assert_allclose(swiglu(x, mlp), want, rtol=1e-10)


@pytest.mark.exercise("4.3")
def test_swiglu_adds_biases_where_the_checkpoint_has_them():
    """Wrong answer: `x @ w` by hand instead of `linear`, which drops the biases some families have."""
    d, f = 2, 3
    mlp = {"gate": np.zeros((d, f)), "up": np.zeros((d, f)), "down": np.zeros((f, d)),
           "gate_bias": np.full(f, 10.0), "up_bias": np.ones(f), "down_bias": np.array([0.5, -0.5])}
    mlp["down"][:, 0] = 1.0
    silu_10 = 10 / (1 + np.exp(-10))
    np.testing.assert_allclose(swiglu(np.zeros((1, d)), mlp), [[3 * silu_10 + 0.5, -0.5]], rtol=1e-12)


def _tiny_cache(max_seqs=2, max_len=6):
    cfg = config_from_hf({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 2,
                          "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 16})
    return ContiguousKVCache(cfg, max_seqs=max_seqs, max_len=max_len)


@pytest.mark.exercise("5.1")
def test_chunks_written_one_after_another_read_back_in_order():
    """Wrong answers: writing every chunk at position 0, or keys where the values go."""
    cache = _tiny_cache()
    first, second = RNG.normal(size=(3, 2, 4)), RNG.normal(size=(2, 2, 4))  # [n, KV, hd]
    cache.write(1, 0, 0, first, -first)
    cache.write(1, 0, 3, second, -second)
    keys, values = cache.read(1, 0, 5)  # [KV, 5, hd]
    np.testing.assert_allclose(keys, np.concatenate([first, second]).transpose(1, 0, 2), rtol=1e-6)
    np.testing.assert_allclose(values, -keys)
    assert not cache.k[0].any() and not cache.k[1, 1].any()  # other layers and other sequences untouched


@pytest.mark.exercise("5.2")
def test_decoding_through_the_cache_equals_recomputing_the_whole_sequence():
    """Wrong answer: a decode step at the wrong position (RoPE and the cache slot both shift), caught by
    comparing every greedy token with a full forward pass over the whole sequence so far."""
    model = tinyinfer.load("shakespeare")
    prompt = model.tokenizer.encode("ROMEO:")
    tokens = model.generate(prompt, max_tokens=8, temperature=0.0, ignore_eos=True).token_ids
    assert len(tokens) == 8
    from tinyinfer.model import SeqChunk

    sequence = list(prompt)
    for token in tokens:
        logits = model.forward([SeqChunk(0, 0, sequence, None)], model.new_cache(max_seqs=1, max_len=len(sequence)))
        assert int(np.argmax(logits[0])) == token
        sequence.append(token)


@pytest.mark.exercise("5.2")
def test_max_tokens_is_exactly_the_number_of_tokens_made():
    """Wrong answer: one decode step too many or too few (the loop yields after prefill, then per step)."""
    model = tinyinfer.load("shakespeare")
    for n in (1, 2, 5):
        assert len(model.generate("ROMEO:", max_tokens=n, temperature=0.0, ignore_eos=True).token_ids) == n


class _FixedUniform:
    """A generator whose one uniform number is chosen: to put u exactly on the edge between two tokens."""

    def __init__(self, u: float):
        self.u = u

    def random(self) -> float:
        return self.u


@pytest.mark.exercise("6.1")
def test_a_draw_on_the_edge_of_an_interval_takes_the_token_that_starts_there():
    """Wrong answer: `np.searchsorted`'s default side ("left"): u == cdf[i] then picks token i, although its
    interval [cdf[i-1], cdf[i]) stops short of u, and u = 0 picks a first token of probability 0. The token
    drawn is the first whose cumulative probability *exceeds* u."""
    probs = np.array([0.0, 0.25, 0.0, 0.5, 0.25])
    cdf = np.cumsum(probs)  # 0, 0.25, 0.25, 0.75, 1: exact in binary
    for u in (0.0, 0.25, 0.75, 0.5):
        assert draw(probs, _FixedUniform(u)) == int(np.flatnonzero(cdf > u)[0]), u


@pytest.mark.exercise("7.3")
def test_the_shared_gate_is_a_sigmoid_of_each_token():
    """Wrong answer: one gate for the whole batch, or a softmax over the single gate logit (always 1)."""
    d = 4
    mlp = {"shared": {"gate": np.eye(d), "up": np.eye(d), "down": np.eye(d)}, "shared_gate": np.ones((d, 1))}
    h = np.array([[10.0, 10.0, 10.0, 10.0], [-10.0, -10.0, -10.0, -10.0]])  # gate logits +40 and -40
    out = shared_expert(h, mlp)
    np.testing.assert_allclose(out[0], swiglu(h[:1], mlp["shared"])[0], rtol=1e-12)
    assert np.abs(out[1]).max() < 1e-15


@pytest.mark.exercise("9.1")
def test_a_sequence_of_whole_blocks_hashes_every_block():
    """Wrong answer: `range(len(tokens) // block_size - 1)`, dropping the last full block."""
    tokens = list(range(12))
    hashes = prefix_hashes(tokens, 4)
    assert len(hashes) == 3 and len(set(hashes)) == 3
    assert hashes[2] == block_hash(hashes[1], tokens[8:12])


@pytest.mark.exercise("11.1")
def test_residual_is_renormalised_and_falls_back_to_p():
    """Wrong answers: max(0, p - q) not renormalised, or q - p; when p == q there is no residual: p."""
    p, q = np.array([0.6, 0.3, 0.1]), np.array([0.2, 0.5, 0.3])
    np.testing.assert_allclose(residual(p, q), [1.0, 0.0, 0.0])
    p2 = np.array([0.5, 0.4, 0.1])
    np.testing.assert_allclose(residual(p2, np.array([0.3, 0.2, 0.5])), [0.5, 0.5, 0.0])
    np.testing.assert_array_equal(residual(p, p), p)


@pytest.mark.exercise("11.1")
def test_residual_is_a_distribution_over_where_the_target_exceeds_the_draft():
    """Wrong answer: |p - q| instead of max(0, p - q) (tokens the draft over-proposed get mass)."""
    rng = np.random.default_rng(5)
    for _ in range(20):
        p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
        r = residual(p, q)
        assert r.sum() == pytest.approx(1.0) and (r >= 0).all()
        assert (r[p <= q] == 0).all()


@pytest.mark.exercise("11.2")
def test_a_guess_the_target_rules_out_is_always_rejected():
    """Wrong answers: accepting with probability q/p, or keeping the guesses after the first rejection."""
    p = np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]])  # the target never says token 0 first
    q = np.array([[1.0, 0.0], [0.0, 1.0]])
    for seed in range(20):
        assert verify(p, q, [0, 1], np.random.default_rng(seed)) == [1]  # rejected, then the residual: token 1


@pytest.mark.exercise("11.2")
def test_guesses_the_target_is_sure_of_are_kept_then_a_bonus_token():
    """Wrong answer: no bonus token when every guess is kept (k + 1 tokens per round)."""
    p = np.array([[0.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    q = np.array([[0.0, 1.0], [0.0, 1.0]])
    assert verify(p, q, [1, 1], np.random.default_rng(0)) == [1, 1, 0]


@pytest.mark.exercise("12.3")
def test_pack_int4_puts_the_even_row_in_the_low_nibble():
    """Wrong answer: even rows in the high nibble, or codes stored without the +8 offset."""
    codes = np.array([[-7, 0], [1, 7]], dtype=np.int8)
    packed = pack_int4(codes)
    assert packed.dtype == np.uint8 and packed.shape == (1, 2)
    assert packed.tolist() == [[(9 << 4) | 1, (15 << 4) | 8]]  # column 0: -7+8=1 low, 1+8=9 high; column 1: 8 low, 15 high


@pytest.mark.exercise("12.3")
def test_pack_int4_unpacks_to_the_same_codes():
    """Round trip: the low and high nibbles, minus 8, are rows 2i and 2i+1."""
    codes = RNG.integers(-7, 8, size=(6, 3)).astype(np.int8)
    packed = pack_int4(codes)
    low, high = (packed & 0xF).astype(np.int8) - 8, (packed >> 4).astype(np.int8) - 8
    np.testing.assert_array_equal(low, codes[0::2])
    np.testing.assert_array_equal(high, codes[1::2])


@pytest.mark.exercise("13.1")
def test_lora_delta_goes_through_the_bottleneck_and_scales_once():
    """Wrong answers: (x @ b) @ a (shapes only agree when square), or scale applied twice or not at all."""
    x = RNG.normal(size=(3, 4))
    update = LoraUpdate(slice(None), a=RNG.normal(size=(4, 2)), b=RNG.normal(size=(2, 5)), scale=0.25)
    out = lora_delta(x, update)
    assert out.shape == (3, 5)
    np.testing.assert_allclose(out, 0.25 * x @ (update.a @ update.b), rtol=1e-10)


@pytest.mark.exercise("13.1")
def test_a_zero_b_adds_nothing():
    """A freshly initialised LoRA (B = 0) must leave the base model's output unchanged."""
    update = LoraUpdate(slice(None), a=np.ones((4, 2)), b=np.zeros((2, 3)), scale=2.0)
    assert not lora_delta(np.ones((5, 4)), update).any()


# --- every exercise: a plausible mistake planted in its reference, caught by its own graded tests -------------

# exercise -> (text of its reference, found once between its markers; the plausible mistake put in its place)
MISTAKES = {
    "1.1": ("            i += 2", "            i += 1"),  # the pair's second id is kept as well
    "1.2": ("if found is None or found[0] != rank:", "if found is None:"),  # a stale entry merges out of rank order
    "2.1": ("<< 16", "<< 8"),  # half a bf16's width
    "2.2": ("2 * n_layers", "n_layers"),  # keys only, no values
    "3.1": ("visible = key_pos <= query_pos", "visible = key_pos < query_pos"),  # a token cannot see itself
    "3.2": ("scale = hd**-0.5 if", "scale = 1.0 if"),  # scores not divided by sqrt(head_dim)
    "3.3": ("o = o * rescale +", "o = o +"),  # the output summed under the old max is not rescaled
    "4.1": ("return x * (mean_square + eps) ** -0.5 * weight", "return x / (mean_square ** 0.5 + eps) * weight"),
    "4.2": ("= x1 * cos - x2 * sin", "= x1 * cos + x2 * sin"),  # the first half rotated the wrong way
    "4.3": ('ACTIVATIONS[activation](linear(x, mlp, "gate")) * linear(x, mlp, "up")',
            'linear(x, mlp, "gate") * ACTIVATIONS[activation](linear(x, mlp, "up"))'),  # silu(up) * gate
    "5.1": ("= k.transpose(1, 0, 2)", "= k.reshape(k.shape[1], k.shape[0], -1)"),  # reshape is not a transpose
    "5.2": ("position = len(prompt_ids)", "position = len(prompt_ids) - 1"),  # the first decode step one place early
    "6.1": ('np.searchsorted(cdf, u, side="right")', "np.searchsorted(cdf, u)"),  # the default side: u = cdf[i] picks i
    "6.2": ("mass_above = xp.cumsum(probs) - probs", "mass_above = xp.cumsum(probs)"),  # drops the token crossing p
    "6.3": ("text.endswith(stop[:length])", "text.endswith(stop[-length:])"),  # a stop's end, not its start
    "7.1": ("weights.sum(axis=-1, keepdims=True)", "weights.sum(axis=0, keepdims=True)"),  # renormalised over tokens
    "7.2": ("out[rows] += y * weight_of_pair[start:end, None]", "out[rows] += y"),  # the router's weight forgotten
    "7.3": ('gate = 1.0 / (1.0 + np.exp(-(h @ mlp["shared_gate"])))', 'gate = softmax(h @ mlp["shared_gate"])'),
    "8.1": ("if lo <= byte <= hi:", "if lo <= byte < hi:"),  # misses every one-byte range
    "8.2": ("nodes, states = children[live], following[live]", "nodes, states = children, following"),  # refused kept
    "8.3": ('seq(Literal(hi[0]), _same_length_range("0" * rest, hi[1:]))',
            "seq(Literal(hi[0]), Repeat(CharClass(((48, 57),)), rest, rest))"),  # the top digit takes any tail
    "9.1": ("len(token_ids) - block_size + 1,", "len(token_ids) - block_size,"),  # the last full block lost
    "9.2": ("            del self.free_blocks[block]", "            pass"),  # the revived block stays on the free list
    "9.3": ("self.slots(seq_id, start, start + k.shape[0])", "self.slots(seq_id, 0, k.shape[0])"),  # from slot 0
    "10.1": ("return min(missing, budget)", "return missing"),  # a chunk ignores the step's token budget
    "10.2": ("victim = self.running[-1]", "victim = self.running[0]"),  # the oldest sequence preempted
    "10.3": ("if seq.num_computed == seq.num_tokens and seq.status", "if seq.status"),  # samples after every chunk
    "11.1": ("np.maximum(p - q, 0.0)", "np.abs(p - q)"),  # over-proposed tokens get mass too
    "11.2": ("return guesses + [draw(p[len(guesses)], rng)]", "return guesses"),  # no bonus token
    "12.1": ("xp.abs(groups).max(axis=1)", "groups.max(axis=1)"),  # the largest weight, not the largest magnitude
    "12.2": ("groups.reshape(-1, n_out)[:n_rows]", "groups.reshape(-1, n_out)"),  # the padding rows kept
    "12.3": ("nibbles[0::2] | (nibbles[1::2] << 4)", "(nibbles[0::2] << 4) | nibbles[1::2]"),  # even row high
    "12.4": ("blocks[:, 2:34].view(np.int8)", "blocks[:, 2:34]"),  # codes read unsigned
    "12.5": ("(c >> 4) | ((b >> 6) << 4)", "(c & 0x0F) | ((b >> 6) << 4)"),  # the mins read from the scales' nibble
    "13.1": ("@ update.b * update.scale", "@ update.b"),  # the alpha / r scale forgotten
    "14.1": ('if d == 0 and "o_bias" in layer:', 'if "o_bias" in layer:'),  # every rank adds the bias
    "14.2": ('if d == 0 and "down_bias" in mlp:', 'if "down_bias" in mlp:'),  # every rank adds the bias
    "15.1": ('sum(r["tinyinfer:num_requests_waiting"] for r in replicas) / n',
             'sum(r["tinyinfer:num_requests_waiting"] for r in replicas)'),  # the total queue, not each replica's
}


def plant(root: Path, exercise) -> str:
    """Put the exercise's mistake in place of its reference text, in its file under `root`; returns the file's
    text before, to restore it. The text replaced must occur once between the exercise's markers."""
    right, wrong = MISTAKES[exercise.id]
    path = root / exercise.path
    original = path.read_text(encoding="utf-8")
    lines = original.splitlines()
    region = "\n".join(lines[exercise.begin : exercise.end - 1])
    assert region.count(right) == 1, (f"the reference of exercise {exercise.id} no longer holds {right!r} once: give it a "
                                      "plausible mistake again in MISTAKES, tests/test_exercise_mistakes.py")
    lines[exercise.begin : exercise.end - 1] = region.replace(right, wrong).splitlines()
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return original


@functools.cache
def graded_test_files() -> dict[str, list[str]]:
    """Exercise id -> the test files with a test marked `@pytest.mark.exercise(..., id, ...)`."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        ids = {a.value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "exercise"
               for a in node.args if isinstance(a, ast.Constant)}
        for exercise_id in ids:
            found.setdefault(exercise_id, []).append(f"tests/{path.name}")
    return found


@functools.cache
def exercises() -> dict:
    """The project's exercises by id (not at import: the grader's probed copy of a workspace imports this file,
    and there the markers share their lines with the probe)."""
    return {e.id: e for e in find_exercises(ROOT)}


def test_every_exercise_has_a_planted_mistake():
    assert sorted(MISTAKES, key=parse_id) == list(exercises()), "give each exercise (and only those) one in MISTAKES"


@pytest.mark.parametrize("exercise_id", MISTAKES)
def test_each_mistake_is_planted_inside_its_exercise(exercise_id, tmp_path):
    exercise = exercises()[exercise_id]
    (tmp_path / exercise.path).parent.mkdir(parents=True)
    shutil.copy(ROOT / exercise.path, tmp_path / exercise.path)
    assert plant(tmp_path, exercise) != (tmp_path / exercise.path).read_text(encoding="utf-8")
    assert graded_test_files().get(exercise_id), f"no test file grades exercise {exercise_id}"


WORKERS = min(2, os.cpu_count() or 1)  # the exercises' pytest processes run side by side, each in its own copy


def plant_and_run(workspace: Path, exercise_id: str) -> tuple[int, str]:
    """pytest's exit status on the exercise's graded tests, with its mistake planted in `workspace`, and what
    pytest said; the file is restored afterwards."""
    exercise = exercises()[exercise_id]
    original = plant(workspace, exercise)
    try:
        return run_tests(workspace, ("--exercise", exercise_id, *graded_test_files()[exercise_id]))
    finally:
        (workspace / exercise.path).write_text(original, encoding="utf-8")


@pytest.fixture(scope="module")
def planted(request, tmp_path_factory) -> dict[str, tuple[int, str]]:
    """Exercise id -> plant_and_run's answer, for every exercise this session's tests ask about."""
    wanted = [item.callspec.params["exercise_id"] for item in request.session.items
              if item.originalname == test_each_planted_mistake_fails_the_exercise_own_tests.__name__]
    copies = queue.SimpleQueue()  # the copies of the project not in use
    for _ in range(WORKERS):
        workspace = tmp_path_factory.mktemp("mistakes")
        copy_project(workspace)
        check_imports_the_copy(workspace)
        copies.put(workspace)

    def run(exercise_id):
        workspace = copies.get()
        try:
            return plant_and_run(workspace, exercise_id)
        finally:
            copies.put(workspace)

    with ThreadPoolExecutor(WORKERS) as pool:
        return dict(zip(wanted, pool.map(run, wanted)))


@pytest.mark.slow  # one pytest process per exercise, each running only that exercise's graded tests
@pytest.mark.parametrize("exercise_id", MISTAKES)
def test_each_planted_mistake_fails_the_exercise_own_tests(exercise_id, planted):
    """The reference with the mistake in place runs, and fails one of the exercise's graded tests."""
    status, said = planted[exercise_id]
    assert verdict(status) == "caught", f"{exercise_id} with {MISTAKES[exercise_id][1]!r}: {verdict(status)}: {said}"
