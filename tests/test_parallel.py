"""Tensor parallelism (tinyinfer/parallel.py): the split model against the whole one, its ranks run as threads of
this process (tinyinfer.distributed.run_ranks, the communicator's test double; tests/test_distributed.py runs the
same splits over real MPI ranks). Every rank must compute the same logits as the unsplit model."""

from __future__ import annotations

import numpy as np
import pytest

import tinyinfer
from tinyinfer.distributed import run_ranks
from tinyinfer.parallel import TensorParallelModel

from tolerances import assert_close, logits_bound
from tiny_models import TINY_CONFIG, build_with_transformers, prompt_ids, tiny_checkpoint  # noqa: F401 - a fixture


def split_logits(model, n: int, ids: list[int]) -> list[np.ndarray]:
    """Every rank's logits of `ids`, the model split over n ranks."""
    return run_ranks(n, lambda comm: TensorParallelModel(model, comm).logits(ids), timeout_s=60)


def assert_split_logits_match(model, n: int, ids: list[int]) -> None:
    whole = model.logits(ids)  # [T, V]
    for logits in split_logits(model, n, ids):  # the shards' sums add up in another order: float32 rounding
        assert_close(logits, whole, logits_bound(model.config, whole, own_angles=False))


@pytest.mark.exercise("14.1", "14.2")
@pytest.mark.parametrize("name", ["shakespeare", "shakespeare-moe"])
@pytest.mark.parametrize("n", [1, 2])
def test_split_builtin_model_gives_the_same_logits_and_tokens(name, n):
    model = tinyinfer.load(name)
    ids = np.random.default_rng(0).integers(0, 2000, 40).tolist()
    assert_split_logits_match(model, n, ids)
    params = dict(max_tokens=24, temperature=0, ignore_eos=True)
    tokens = run_ranks(n, lambda comm: TensorParallelModel(model, comm).generate(ids, **params).token_ids)
    assert tokens == [model.generate(ids, **params).token_ids] * n


@pytest.mark.exercise("14.1", "14.2")
@pytest.mark.parametrize("variant", ["gpt2", "llama_bias", "qwen3", "mistral_window", "llama_mqa"])
def test_split_every_architecture(tiny_checkpoint, variant):
    """Biases, per-head q/k norms, sliding windows, GPT-2's stacked c_attn; MQA only splits over 1 rank."""
    model = tinyinfer.load(tiny_checkpoint(variant))
    assert_split_logits_match(model, 1 if model.config.n_kv_heads == 1 else 2, prompt_ids(20))


# transformers config class -> fields over tests/tiny_models.TINY_CONFIG: the blocks and norms of newer families
SPLIT_FAMILIES = {
    "StableLmConfig": {"qk_layernorm": True, "use_parallel_residual": True, "hidden_size": 64},  # a gain per head
    "CohereConfig": {"use_qk_norm": True, "logit_scale": 0.8},  # per-head gains, RoPE pairs reordered at load
    "FalconConfig": {"new_decoder_architecture": True, "num_kv_heads": 2, "bias": True},
    "GPTNeoXConfig": {"rotary_pct": 0.5},
    "PhiConfig": {"partial_rotary_factor": 0.5},
    "GraniteConfig": {"embedding_multiplier": 2.0, "residual_multiplier": 0.5, "attention_multiplier": 0.2,
                      "logits_scaling": 2.0},
}


@pytest.mark.parametrize("config_class", SPLIT_FAMILIES)
def test_split_newer_families(config_class, tmp_path):
    """Parallel blocks, multipliers, fused rows reordered at load and per-head q/k norm gains (which go with
    their heads) split like the rest."""
    folder = build_with_transformers(tmp_path / "m", config_class, {**TINY_CONFIG, **SPLIT_FAMILIES[config_class]})
    assert_split_logits_match(tinyinfer.load(folder), 2, prompt_ids(20))


def test_two_all_reduces_per_layer_and_one_gather_are_counted():
    model = tinyinfer.load("shakespeare")

    def bytes_sent(comm):
        TensorParallelModel(model, comm).logits(list(range(10)))
        return dict(comm.stats.bytes)

    activation = 10 * model.config.d_model * 4  # [T, d] in float32
    expected = {"all_reduce": model.config.n_layers * 2 * activation, "all_gather": 10 * model.config.vocab_size // 2 * 4}
    assert run_ranks(2, bytes_sent) == [expected, expected]
