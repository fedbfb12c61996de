"""LoRA adapters (tinyinfer/lora.py) against the peft library on tiny random checkpoints, alone and mixed in a batch."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

import tinyinfer
from tinyinfer.engine import LLM
from tinyinfer.errors import TinyInferError
from tinyinfer.lora import load_adapter
from tinyinfer.model import SeqChunk
from tinyinfer.quantize import quantize_model
from tinyinfer.sampling import SamplingParams

from tolerances import assert_close, logits_bound
from tiny_models import build_with_transformers, hf_model, make_tiny_models, prompt_ids, tiny_checkpoint  # noqa: F401 - a fixture

import peft  # noqa: E402 - a dev dependency: missing is a failure, not a skip

LLAMA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_adapter(base_folder, out, seed: int, targets=None, **options):
    """A PEFT LoRA adapter for the checkpoint in `base_folder`, with random A and B (B starts at zero when
    trained, which would hide a wrong mapping), saved to `out`. Returns the peft model in float64: the reference."""
    base = copy.deepcopy(hf_model(base_folder))
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets or LLAMA_TARGETS, **options)
    model = peft.get_peft_model(base, config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if "lora_" in name:
                tensor.copy_(torch.randn(tensor.shape, generator=generator) * 0.2)
    model.save_pretrained(out)
    return model.double().eval()


def peft_logits(model, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def assert_close_logits(model, ours, exact) -> None:
    """Equal up to float32 rounding, which grows with the logits' scale (these adapters are strong): within the
    rounding bound of tests/tolerances.py for `model`'s shape and these logits."""
    assert_close(ours, exact, logits_bound(model.config, exact))


@pytest.fixture(scope="module")
def llama(tiny_checkpoint, tmp_path_factory):
    """The tiny GQA Llama with two adapters, "a" (every projection) and "b" (rsLoRA, per-module rank and alpha)."""
    folder = tiny_checkpoint("llama_gqa")
    root = tmp_path_factory.mktemp("adapters")
    reference = {
        "a": make_adapter(folder, root / "a", seed=1),
        "b": make_adapter(folder, root / "b", seed=2, targets=["q_proj", "v_proj", "down_proj"], use_rslora=True,
                          rank_pattern={"v_proj": 2}, alpha_pattern={"down_proj": 3}),
    }
    model = tinyinfer.load(folder)
    for name in reference:
        load_adapter(model, name, root / name)
    return model, reference, folder, root


@pytest.mark.exercise("13.1")
def test_adapters_match_peft_and_leave_the_base_unchanged(llama):
    model, reference, folder, _ = llama
    ids = prompt_ids(20)
    for name, peft_model in reference.items():
        ours = model.forward([SeqChunk(0, 0, ids, name)], model.new_cache(), all_logits=True)
        assert_close_logits(model, ours, peft_logits(peft_model, ids))
    assert_close_logits(model, model.logits(ids), peft_logits(hf_model(folder), ids))  # no adapter


def test_rows_of_different_adapters_in_one_forward_pass(llama):
    """A batch mixing adapters (and the plain base) gives each sequence what it gets alone."""
    model, _, _, _ = llama
    prompts = [prompt_ids(12, seed=s) for s in range(3)]
    adapters = ["b", None, "a"]
    cache = model.new_cache(3)
    together = model.forward([SeqChunk(i, 0, p, a) for i, (p, a) in enumerate(zip(prompts, adapters))], cache)
    for i, (p, a) in enumerate(zip(prompts, adapters)):
        alone = model.forward([SeqChunk(0, 0, p, a)], model.new_cache())
        assert_close(together[i], alone[0], logits_bound(model.config, alone, positions=len(p), own_angles=False))


def test_generate_and_the_engine_follow_each_requests_adapter(llama):
    """Greedy continuations: model.generate(lora=...) equals peft's; the engine gives each request its solo output
    in a batch of mixed adapters; and the prefix cache reuses a prompt's blocks only under the same adapter
    (under another one the same tokens have other keys and values)."""
    model, reference, _, _ = llama
    ids = prompt_ids(40, seed=7)
    solo = {name: model.generate(ids, max_tokens=8, temperature=0, ignore_eos=True, lora=name).token_ids
            for name in ("a", "b", None)}
    with torch.no_grad():
        want = reference["a"].generate(input_ids=torch.tensor([ids]), do_sample=False, max_new_tokens=8,
                                       eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist()
    assert solo["a"] == want
    assert len({tuple(t) for t in solo.values()}) == 3  # the adapters really change the output
    llm = LLM(model, block_size=4)
    params = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)
    first = llm.generate([ids], params, lora="a")  # fills the prefix cache with adapter a's blocks
    names = ["b", None, "a"]
    served = llm.generate([ids] * 3, params, lora=names)
    assert [r.token_ids for r in first + served] == [solo[name] for name in ["a"] + names]
    assert [r.metrics.cached_prompt_tokens for r in served] == [0, 0, 36]  # 9 full blocks of 4, only for a


def test_mixed_adapters_under_preemption_chunked_prefill_and_prefix_hits(llama):
    """A small pool forces preemptions (recomputed later), a small token budget chunks the prefills, and prompts
    share prefixes across and within adapters: every request still gets its solo output, and no block leaks."""
    model, _, _, _ = llama
    rng = np.random.default_rng(3)
    shared = prompt_ids(24, seed=11)
    prompts = [shared + prompt_ids(int(rng.integers(2, 20)), seed=20 + i) for i in range(12)]
    names = [["a", "b", None][i % 3] for i in range(12)]
    params = [SamplingParams(max_tokens=int(rng.integers(4, 16)), temperature=0.8, seed=i, ignore_eos=True)
              for i in range(12)]
    llm = LLM(model, block_size=4, n_blocks=40, max_num_seqs=6, max_num_batched_tokens=24)
    served = llm.generate(prompts, params, lora=names)
    assert llm.stats().preemptions > 0 and llm.stats().prefix_cache_hit_rate > 0
    for out, prompt, p, name in zip(served, prompts, params, names):
        assert out.token_ids == model.generate(prompt, p, lora=name).token_ids
    assert llm.scheduler.allocator.num_free == llm.cache.n_blocks


def test_cli_generate_with_an_adapter(llama, capsys):
    model, _, folder, root = llama
    from tinyinfer.cli import main  # noqa: PLC0415

    assert main(["generate", "--model", str(folder), "--lora", str(root / "a"), "hello", "--max-tokens", "6",
                 "--temperature", "0", "--ignore-eos"]) == 0
    ids = model.tokenizer.encode("hello")
    want = model.generate(ids, max_tokens=6, temperature=0, ignore_eos=True, lora="a")
    assert capsys.readouterr().out == want.text + "\n"


def test_adapters_on_quantised_weights(llama):
    """Adapters load on top of int8 weights (quantise first; the other order is refused) and add exactly their
    update: the same as on a float model holding the dequantised weights."""
    _, _, folder, root = llama
    model, reference = tinyinfer.load(folder), tinyinfer.load(folder)
    quantize_model(model, "int8")
    for quantised, plain in zip(model.params["layers"], reference.params["layers"]):
        for key in ("qkv", "o"):
            plain[key] = quantised[key].dequantize()
        for key in ("gate", "up", "down"):
            plain["mlp"][key] = quantised["mlp"][key].dequantize()
    for m in (model, reference):
        load_adapter(m, "a", root / "a")
    ids = prompt_ids(16)
    adapted, want = (m.forward([SeqChunk(0, 0, ids, "a")], m.new_cache(), all_logits=True) for m in (model, reference))
    assert_close(adapted, want, logits_bound(model.config, want, own_angles=False))
    with pytest.raises(TinyInferError, match="quantise it first"):
        quantize_model(reference, "int8")


def test_gpt2_conv1d_adapter_matches_peft(tiny_checkpoint, tmp_path):
    folder = tiny_checkpoint("gpt2")
    reference = make_adapter(folder, tmp_path / "g", seed=3, targets=["c_attn", "c_proj", "c_fc"], fan_in_fan_out=True)
    model = tinyinfer.load(folder)
    load_adapter(model, "g", tmp_path / "g")
    ids = prompt_ids(16)
    assert_close_logits(model, model.forward([SeqChunk(0, 0, ids, "g")], model.new_cache(), all_logits=True),
                        peft_logits(reference, ids))


# family -> (transformers config class, its fields, PEFT target modules under the family's own names)
FAMILY_ADAPTERS = {
    "phi": ("PhiConfig", {"partial_rotary_factor": 0.5}, ["q_proj", "k_proj", "v_proj", "dense", "fc1", "fc2"]),
    "phi3": ("Phi3Config", {"num_key_value_heads": 2}, ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]),
    "gpt_neox": ("GPTNeoXConfig", {"rotary_pct": 0.5}, ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"]),
    "falcon": ("FalconConfig", {"new_decoder_architecture": True, "num_kv_heads": 2},
               ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"]),
    "cohere": ("CohereConfig", {"num_key_value_heads": 2, "use_qk_norm": True}, LLAMA_TARGETS),
    "starcoder2": ("Starcoder2Config", {"num_key_value_heads": 2}, ["q_proj", "k_proj", "v_proj", "o_proj", "c_fc", "c_proj"]),
}


@pytest.mark.parametrize("family", FAMILY_ADAPTERS)
def test_adapters_under_each_familys_module_names_match_peft(family, tmp_path):
    """Phi's dense/fc1/fc2, Phi-3's fused qkv_proj and gate_up_proj (split into tinyinfer's separate gate and up),
    StarCoder2's c_fc/c_proj, and the projections whose rows the loader reorders, lora_B's rows with them:
    GPT-NeoX's query_key_value (by head), Falcon's (by group), Cohere's q_proj and k_proj (RoPE pairs)."""
    config_class, fields, targets = FAMILY_ADAPTERS[family]
    folder = build_with_transformers(tmp_path / family, config_class, dict(
        vocab_size=make_tiny_models.VOCAB_SIZE, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0, **fields))
    reference = make_adapter(folder, tmp_path / "adapter", seed=5, targets=targets)
    model = tinyinfer.load(folder)
    load_adapter(model, "x", tmp_path / "adapter")
    ids = prompt_ids(16)
    ours = model.forward([SeqChunk(0, 0, ids, "x")], model.new_cache(), all_logits=True)
    assert_close_logits(model, ours, peft_logits(reference, ids))
    base = model.forward([SeqChunk(0, 0, ids)], model.new_cache(), all_logits=True)
    assert np.abs(ours - base).max() > 0.5  # the adapter bites, so the match above is not the base's


def test_bad_adapters_are_clear_errors(llama, tiny_checkpoint, tmp_path):
    model, _, _, root = llama
    with pytest.raises(TinyInferError, match="no LoRA adapter named 'c'"):
        model.generate([5, 6], max_tokens=2, lora="c")
    with pytest.raises(TinyInferError, match="already loaded"):
        load_adapter(model, "a", root / "a")
    with pytest.raises(TinyInferError, match="no adapter_config.json"):
        load_adapter(model, "x", tmp_path)
    make_adapter(tiny_checkpoint("llama_head_dim"), tmp_path / "other", seed=4)  # another model's shapes
    with pytest.raises(TinyInferError, match="trained on another model"):
        load_adapter(model, "other", tmp_path / "other")
    dora = tmp_path / "dora"
    dora.mkdir()
    config = json.loads((root / "a" / "adapter_config.json").read_text()) | {"use_dora": True}
    (dora / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(TinyInferError, match="use_dora"):
        load_adapter(model, "dora", dora)
    assert model.adapters.names == ["a", "b"]  # nothing half-loaded
    make_adapter(tiny_checkpoint("llama_gqa"), tmp_path / "head", seed=5, targets=["lm_head"])
    with pytest.raises(TinyInferError, match="lm_head"):
        load_adapter(model, "head", tmp_path / "head")


def test_built_in_adapter_is_listed_and_loads_by_name(capsys):
    from tinyinfer.cli import main  # noqa: PLC0415

    assert main(["models", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    shout = next(row for row in rows if row["name"] == "shakespeare-shout")
    model = tinyinfer.load("shakespeare")
    load_adapter(model, "shout", "shakespeare-shout")
    trained = sum(u.a.size + u.b.size for layer in model.params["layers"]
                  for w in (layer["qkv"], layer["o"], *layer["mlp"].values()) for u in w.updates["shout"])
    assert shout["architecture"] == "LoRA r=8 on shakespeare" and shout["params"] == trained
