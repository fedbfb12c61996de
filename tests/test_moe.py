"""Unit tests of tinyinfer/moe.py: the router, grouped dispatch, the shared expert, routing statistics, and the
parameter arithmetic, each against a plain reference written here (the dense "every expert on every token"
computation for dispatch). Parity with transformers on real MoE checkpoints is in test_moe_parity.py."""

from __future__ import annotations

import numpy as np
import pytest

from tinyinfer.config import Config
from tinyinfer.errors import TinyInferError
from tinyinfer.memory import param_count
from tinyinfer.mlp import swiglu
from tinyinfer.moe import RoutingStats, dispatch, entropy_bits, moe_param_counts, route, shared_expert

RNG = np.random.default_rng(0)


def _experts(n: int, d: int = 8, ff: int = 12) -> list[dict]:
    rng = np.random.default_rng(1)
    return [{name: rng.normal(0, 0.5, shape).astype(np.float32)
             for name, shape in (("gate", (d, ff)), ("up", (d, ff)), ("down", (ff, d)))} for _ in range(n)]


def _moe_config(**fields) -> Config:
    base = dict(model_type="mixtral", vocab_size=100, d_model=16, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=4,
                d_ff=32, max_seq_len=64, n_experts=8, n_experts_per_tok=2, moe_d_ff=24)
    return Config(**{**base, **fields})


# -- the router ------------------------------------------------------------------------------------------------

@pytest.mark.exercise("7.1")
def test_route_picks_the_most_probable_experts_best_first():
    h = RNG.normal(size=(10, 8)).astype(np.float32)
    router = RNG.normal(size=(8, 6)).astype(np.float32)
    weights, chosen, probs = route(h, router, 3, norm_topk_prob=False)
    logits = (h @ router).astype(np.float64)
    expected_probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(probs, expected_probs, rtol=1e-5)
    for t in range(10):
        assert chosen[t].tolist() == sorted(range(6), key=lambda e: -expected_probs[t, e])[:3]
    np.testing.assert_allclose(weights, np.take_along_axis(expected_probs, chosen, axis=1), rtol=1e-5)
    assert weights.shape == chosen.shape == (10, 3) and weights.dtype == np.float32


@pytest.mark.exercise("7.1")
def test_route_renormalises_only_when_asked():
    h = RNG.normal(size=(5, 8)).astype(np.float32)
    router = RNG.normal(size=(8, 4)).astype(np.float32)
    raw, chosen_raw, _ = route(h, router, 2, norm_topk_prob=False)
    normed, chosen, _ = route(h, router, 2, norm_topk_prob=True)
    assert (chosen == chosen_raw).all()
    np.testing.assert_allclose(normed.sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(normed, raw / raw.sum(axis=1, keepdims=True), rtol=1e-6)
    assert (raw.sum(axis=1) < 1.0).all()  # the other experts' probability is left out


@pytest.mark.exercise("7.1")
def test_route_with_top_1_of_1_sends_everything_to_the_only_expert():
    weights, chosen, probs = route(np.ones((3, 2), np.float32), np.ones((2, 1), np.float32), 1, norm_topk_prob=False)
    assert chosen.tolist() == [[0], [0], [0]] and weights.tolist() == [[1.0]] * 3 and probs.shape == (3, 1)


# -- grouped dispatch ------------------------------------------------------------------------------------------

def _dense_reference(h, chosen, weights, experts):
    """Every expert on every token, kept where chosen: the wasteful formula dispatch must equal."""
    out = np.zeros_like(h)
    for e, expert in enumerate(experts):
        y = swiglu(h, expert)  # [T, d]: all tokens through expert e
        w = np.where(chosen == e, weights, 0.0).sum(axis=1, keepdims=True)  # [T, 1]
        out += w * y
    return out


@pytest.mark.exercise("7.2")
def test_dispatch_equals_every_expert_on_every_token_with_busy_and_idle_experts():
    experts = _experts(4)
    h = RNG.normal(size=(3, 8)).astype(np.float32)
    chosen = np.array([[0, 2], [2, 1], [0, 2]])  # expert 2 gets all three tokens, expert 3 none
    weights = np.array([[0.7, 0.3], [0.6, 0.4], [0.5, 0.5]], dtype=np.float32)
    out = dispatch(h, chosen, weights, experts)
    np.testing.assert_allclose(out, _dense_reference(h, chosen, weights, experts), rtol=1e-5, atol=1e-6)


@pytest.mark.exercise("7.2")
def test_dispatch_of_routed_tokens_matches_the_reference():
    experts = _experts(6)
    h = RNG.normal(size=(17, 8)).astype(np.float32)
    weights, chosen, _ = route(h, RNG.normal(size=(8, 6)).astype(np.float32), 3, norm_topk_prob=True)
    out = dispatch(h, chosen, weights, experts)
    assert out.shape == h.shape
    np.testing.assert_allclose(out, _dense_reference(h, chosen, weights, experts), rtol=1e-5, atol=1e-6)


@pytest.mark.exercise("7.2")
def test_dispatch_calls_each_chosen_expert_once_on_its_group(monkeypatch):
    import tinyinfer.moe as moe

    calls = []
    monkeypatch.setattr(moe, "swiglu", lambda x, mlp, act="silu": calls.append((id(mlp), x.shape[0])) or swiglu(x, mlp, act))
    experts = _experts(5)
    chosen = np.array([[0, 1], [1, 0], [4, 1], [0, 4]])  # expert 0: 3 tokens, 1: 3, 4: 2, experts 2 and 3: none
    dispatch(RNG.normal(size=(4, 8)).astype(np.float32), chosen, np.full((4, 2), 0.5, np.float32), experts)
    assert sorted(calls) == sorted([(id(experts[0]), 3), (id(experts[1]), 3), (id(experts[4]), 2)])


# -- the shared expert -----------------------------------------------------------------------------------------

@pytest.mark.exercise("7.3")
def test_shared_expert_is_scaled_by_a_sigmoid_gate_per_token():
    d = 8
    h = RNG.normal(size=(4, d)).astype(np.float32)
    mlp = {"shared": _experts(1, d)[0], "shared_gate": RNG.normal(size=(d, 1)).astype(np.float32)}
    full = swiglu(h, mlp["shared"])
    gate = 1 / (1 + np.exp(-(h.astype(np.float64) @ mlp["shared_gate"])))  # [T, 1]
    np.testing.assert_allclose(shared_expert(h, mlp), gate * full, rtol=1e-5, atol=1e-6)
    mlp["shared_gate"] = np.zeros((d, 1), np.float32)  # a zero gate logit lets exactly half through
    np.testing.assert_allclose(shared_expert(h, mlp), 0.5 * full, rtol=1e-6)


# -- statistics and arithmetic ---------------------------------------------------------------------------------

def test_entropy_in_bits():
    np.testing.assert_allclose(entropy_bits(np.array([[0.5, 0.5, 0, 0], [0.25] * 4, [1, 0, 0, 0]])), [1, 2, 0])


def test_routing_stats_count_tokens_and_print_a_table():
    cfg = _moe_config(n_experts=4, n_layers=2)
    stats = RoutingStats(cfg)
    stats.record(1, np.array([[0, 2], [2, 1], [0, 2]]), np.full((3, 4), 0.25))
    assert stats.tokens[1].tolist() == [2, 1, 3, 0] and stats.tokens[0].tolist() == [0] * 4
    assert stats.mean_entropy(1) == pytest.approx(2.0)
    table = stats.table()
    assert "top-2 of 4 experts" in table
    row = next(line for line in table.splitlines() if line.strip().startswith("1 |"))
    assert row.split("|")[1].split() == ["2", "1", "3", "0"] and row.split("|")[2].strip() == "1"  # one idle


def test_routing_table_with_many_experts_shows_the_busiest():
    cfg = _moe_config(n_experts=64, n_layers=1)
    stats = RoutingStats(cfg)
    stats.record(0, np.array([[5, 9], [5, 40]]), np.full((2, 64), 1 / 64))
    assert "5:2 9:1 40:1" in stats.table(max_columns=3)


def test_param_counts_total_and_active():
    cfg = _moe_config(shared_expert_d_ff=10)
    d = cfg.d_model
    total, active = moe_param_counts(cfg)
    always = d * 8 + 3 * d * 10 + d  # router, shared expert, its gate
    assert (total, active) == (always + 8 * 3 * d * 24, always + 2 * 3 * d * 24)
    dense = param_count(Config(**{**cfg.__dict__, "n_experts": 0, "n_experts_per_tok": 0, "shared_expert_d_ff": 0}))
    dense_mlp = 3 * d * cfg.d_ff
    assert param_count(cfg) - dense == cfg.n_layers * (total - dense_mlp)
    assert param_count(cfg) - param_count(cfg, active=True) == cfg.n_layers * (total - active)


def test_config_rejects_top_k_above_expert_count_and_selects_moe_layers():
    with pytest.raises(TinyInferError, match="num_experts_per_tok=9"):
        _moe_config(n_experts_per_tok=9)
    with pytest.raises(TinyInferError, match="num_experts_per_tok=0"):
        _moe_config(n_experts_per_tok=0)
    assert [_moe_config(moe_layers=[1]).is_moe_layer(i) for i in range(3)] == [False, True, False]
    assert not _moe_config(n_experts=0, n_experts_per_tok=0).is_moe_layer(0)
