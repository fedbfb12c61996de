"""Tiny random-weight Hugging Face checkpoints for tests, and the transformers reference run on them.

The checkpoints come from `weights_scripts/make_tiny_models.py` (see its docstring for why every parameter
is re-randomised); each variant is built once per test session into pytest's temporary folder:

    from tiny_models import VARIANTS, tiny_checkpoint  # the fixture, imported into the test module

    def test_something(tiny_checkpoint):
        folder = tiny_checkpoint("llama_gqa")  # a Path, built on first use
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import tinyinfer
import tinyinfer.model
from tinyinfer.engine import LLM
from tinyinfer.flash_attention import tiled_attention
from tinyinfer.memory import param_count
from tinyinfer.model import Model, SeqChunk
from tinyinfer.param_tree import map_arrays
from tinyinfer.sampling import SamplingParams
from tolerances import assert_close, logits_bound

ROOT = Path(__file__).resolve().parents[1]


def _import_script(path: Path):
    """weights_scripts/ is a folder of scripts, not a package: import one by its path."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


make_tiny_models = _import_script(ROOT / "weights_scripts" / "make_tiny_models.py")
VARIANTS = make_tiny_models.VARIANTS
transformers.utils.logging.disable_progress_bar()
# These models are tiny: thread start-up and contention cost more than the products (~10x on 2 busy cores).
torch.set_num_threads(1)


def built_once(root: Path, build):
    """`get(name) -> Path`: `build(name, root / name)` the first time a name is asked for, its folder after."""
    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            built[name] = build(name, root / name)
        return built[name]

    return get


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """`tiny_checkpoint(name) -> Path`: the folder of VARIANTS[name], built once per session."""
    return built_once(tmp_path_factory.mktemp("tiny_models"), make_tiny_models.build_variant)


# The architecture tests' checkpoints built with transformers: two layers, head_dim 12, grouped-query attention
TINY_CONFIG = dict(vocab_size=make_tiny_models.VOCAB_SIZE, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5,
                   bos_token_id=1, eos_token_id=2, pad_token_id=0)
WINDOW = 6  # keys of a sliding window: far shorter than the tests' 24-token prompts
MISTAKE_MIN = 0.5  # what undoing a switch must move some logit by (logits of these checkpoints reach 3 to 10)


def build_with_transformers(folder: Path, config_class: str, fields: dict, dtype: str = "float32",
                            norm_offset: float = 0.0, random_buffers: tuple[str, ...] = (),
                            wide_params: dict[str, tuple[float, float]] | None = None) -> Path:
    """A checkpoint written by transformers itself (`transformers.<config_class>(**fields)`), every parameter
    re-randomised (norm weights ~ U(0.5, 1.5), less `norm_offset`: Gemma's norms scale by 1 + weight, so 1.0
    gives its gains the same spread), and the saved buffers whose names end in one of `random_buffers` too
    (~ N(0, 0.5^2): DeepSeek-V3's e_score_correction_bias, zero at init), stored as `dtype`, with a greedy
    generation_config.json. `wide_params` redraws the 1-d parameters whose names end in a key from U(low, high)
    (gpt-oss's attention sinks, which randomise_ would take for norm gains)."""
    config = getattr(transformers, config_class)(**fields)
    model = transformers.AutoModelForCausalLM.from_config(config)
    make_tiny_models.randomise_(model, seed=0)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if param_name.endswith("norm.weight"):
                param -= norm_offset
        for buffer_name, buffer in model.named_buffers():
            if buffer_name.endswith(random_buffers):
                buffer.copy_(torch.randn(buffer.shape, generator=generator) * 0.5)
        for param_name, param in model.named_parameters():
            for suffix, (low, high) in (wide_params or {}).items():
                if param_name.endswith(suffix):
                    param.copy_(low + (high - low) * torch.rand(param.shape, generator=generator))
    model.to(getattr(torch, dtype)).save_pretrained(folder)
    transformers.GenerationConfig(bos_token_id=1, eos_token_id=2, do_sample=False).save_pretrained(folder)
    return folder


def variant_dtype(name: str) -> str:
    """The stored weight dtype of a variant: "float32", "float16" or "bfloat16"."""
    return VARIANTS[name][2].get("dtype", "float32")


def prompt_ids(n: int = 20, seed: int = 0, vocab_size: int = make_tiny_models.VOCAB_SIZE) -> list[int]:
    """`n` random token ids, avoiding the special ids 0..2 (pad, BOS, EOS)."""
    return np.random.default_rng(seed).integers(3, vocab_size, size=n).tolist()


@cache
def hf_model(folder: Path) -> transformers.PreTrainedModel:
    """The transformers model of `folder`, in float32 whatever the stored dtype, with eager attention.
    Cached and shared by every test: never modify it in place (deep-copy it first)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager"
    )
    return model.eval()


def hf_logits(folder: Path, ids: list[int]) -> np.ndarray:
    """transformers' logits at every position of `ids`.  [T] -> [T, V]"""
    with torch.no_grad():
        return hf_model(folder)(torch.tensor([ids])).logits[0].numpy()


def hf_greedy(folder: Path, ids: list[int], max_new_tokens: int) -> list[int]:
    """transformers' greedy continuation of `ids`, `max_new_tokens` long (EOS does not stop it)."""
    with torch.no_grad():
        out = hf_model(folder).generate(
            torch.tensor([ids]), do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=None, pad_token_id=0
        )
    return out[0, len(ids):].tolist()


CAUGHT = 3  # a mistake moves some logit past CAUGHT x the parity bound: the parity tests fail on every machine


def parity_bound(folder, ids: list[int]) -> float:
    """The float32 rounding bound (tests/tolerances.py) of tinyinfer's logits of `ids` against transformers'."""
    return logits_bound(tinyinfer.load(folder).config, hf_logits(folder, ids))


def assert_logits_equal_transformers(model, folder, ids: list[int]) -> None:
    """`model`'s logits at every position of `ids`: transformers' (on `folder`) within the float32 rounding bound.
    A bf16 file is read exactly (bf16 widens to float32 without rounding), so it meets the float32 bound too."""
    theirs = hf_logits(folder, ids)  # [T, V]
    assert_close(model.logits(ids), theirs, logits_bound(model.config, theirs))


def assert_logits_match_transformers(folder, n: int = 24) -> None:
    """tinyinfer's logits at every position of an n-token prompt: transformers' within the float32 rounding bound."""
    assert_logits_equal_transformers(tinyinfer.load(folder), folder, prompt_ids(n))


def tiled_attention_calls(monkeypatch, tile: int = 8) -> list[dict]:
    """Send every prompt chunk through `tiled_attention`, in tiles of `tile` positions (so that a short prompt
    crosses tiles and skips those before a window); the list returned fills with each call's arguments by name
    (q, k, v, start, window, scale, softcap, sinks)."""
    import inspect  # noqa: PLC0415

    calls, signature = [], inspect.signature(tiled_attention)

    def small_tiles(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        calls.append(bound.arguments)
        return tiled_attention(*args, **{**kwargs, "tile": tile})

    monkeypatch.setattr(tinyinfer.model, "TILED_ATTENTION_MIN_QUERIES", 0)
    monkeypatch.setattr(tinyinfer.model, "tiled_attention", small_tiles)
    return calls


def assert_greedy_tokens_equal_transformers_generate(folder) -> None:
    """24 greedy tokens after a 16-token prompt: model.generate's are transformers' generate's."""
    ids = prompt_ids(16, seed=2)
    result = tinyinfer.load(folder).generate(ids, max_tokens=24, temperature=0.0, ignore_eos=True)
    assert list(result.token_ids) == hf_greedy(folder, ids, 24)


def assert_serving_engine_gives_the_greedy_tokens_of_generate(folder) -> None:
    """Four sequences batched through the serving engine's paged cache (one-token steps attended as one batch):
    each gets the tokens model.generate gives it alone."""
    model = tinyinfer.load(folder)
    prompts = [prompt_ids(n, seed=seed) for n, seed in ((20, 3), (9, 4), (14, 5), (3, 6))]
    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    results = LLM(model, block_size=4, max_num_batched_tokens=32).generate(prompts, params)
    for prompt, result in zip(prompts, results):
        assert result.token_ids == list(model.generate(prompt, params).token_ids)



def mistake_distance(folder, change: dict, mistaken_params=None) -> float:
    """How far a mistaken reading of the checkpoint at `folder` moves some logit from transformers' (24-token
    prompt): its loaded Config changed by `change`, its parameters by `mistaken_params(params, config)`."""
    model = tinyinfer.load(folder)
    params = model.params if mistaken_params is None else mistaken_params(model.params, model.config)
    mistaken = Model(dataclasses.replace(model.config, **change), params)
    ids = prompt_ids(24)
    return float(np.abs(mistaken.logits(ids) - hf_logits(folder, ids)).max())

def float64_model(folder) -> Model:
    """The checkpoint at `folder` loaded by tinyinfer and widened to float64: rounding out of the way."""
    model = tinyinfer.load(folder)
    return Model(model.config, map_arrays(model.params, lambda a: a.astype(np.float64)), dtype=np.float64)


def assert_cached_decode_equals_full_recompute(folder, n: int = 20) -> None:
    """Prefill 6 tokens, a 5-token chunk at position 6, then one token at a time: the full pass's logits."""
    wide = float64_model(folder)
    ids = prompt_ids(n, seed=1)
    cache = wide.new_cache()
    prefill = wide.forward([SeqChunk(0, 0, ids[:6])], cache, all_logits=True)  # [6, V]
    chunk = wide.forward([SeqChunk(0, 6, ids[6:11])], cache, all_logits=True)  # [5, V]
    steps = [wide.forward([SeqChunk(0, pos, ids[pos:pos + 1])], cache) for pos in range(11, n)]  # (n - 11) x [1, V]
    full = wide.logits(ids)  # [n, V]
    bound = logits_bound(wide.config, full, dtype=np.float64, own_angles=False)
    assert_close(np.concatenate([prefill, chunk, *steps]), full, bound)


# The checks every architecture's tiny checkpoints pass, as test functions for a test module that defines a
# `checkpoint(name) -> Path` fixture; the module takes them under their own names, so pytest collects them:
#
#     test_logits_match_transformers_at_every_position, test_cached_decode_equals_full_recompute = \
#         parity_tests(VARIANTS)
#     test_greedy_tokens_equal_transformers_generate, test_serving_engine_gives_the_greedy_tokens_of_generate = \
#         generation_tests(ONE_PER_FAMILY)
#     test_memory_arithmetic_counts_every_parameter = memory_test(VARIANTS)
#     test_each_loader_mistake_moves_the_logits_far = mistake_test(LOADER_MISTAKES)

def parity_tests(variants, n: int = 24) -> tuple:
    """Logits against transformers, and cached decode against full recompute, on every variant (n-token prompts)."""
    @pytest.mark.parametrize("name", variants)
    def test_logits_match_transformers_at_every_position(name, checkpoint):
        assert_logits_match_transformers(checkpoint(name), n)

    @pytest.mark.parametrize("name", variants)
    def test_cached_decode_equals_full_recompute(name, checkpoint):
        assert_cached_decode_equals_full_recompute(checkpoint(name), n)

    return test_logits_match_transformers_at_every_position, test_cached_decode_equals_full_recompute


def generation_tests(variants) -> tuple:
    """Greedy tokens against transformers' generate, and the serving engine against model.generate."""
    @pytest.mark.parametrize("name", variants)
    def test_greedy_tokens_equal_transformers_generate(name, checkpoint):
        assert_greedy_tokens_equal_transformers_generate(checkpoint(name))

    @pytest.mark.parametrize("name", variants)
    def test_serving_engine_gives_the_greedy_tokens_of_generate(name, checkpoint):
        assert_serving_engine_gives_the_greedy_tokens_of_generate(checkpoint(name))

    return test_greedy_tokens_equal_transformers_generate, test_serving_engine_gives_the_greedy_tokens_of_generate


def memory_test(variants):
    """`tinyinfer memory` counts a model's parameters from its config alone: every variant's loaded count."""
    @pytest.mark.parametrize("name", variants)
    def test_memory_arithmetic_counts_every_parameter(name, checkpoint):
        model = tinyinfer.load(checkpoint(name))
        assert param_count(model.config) == model.n_params

    return test_memory_arithmetic_counts_every_parameter


def mistake_test(mistakes: dict):
    """Each mistake, `name -> (variant, Config change, parameter change or None)` (see `mistake_distance`), moves
    some logit by more than MISTAKE_MIN: the variants would catch a loader that made it."""
    @pytest.mark.parametrize("mistake", mistakes)
    def test_each_mistake_moves_the_logits_far(mistake, checkpoint):
        name, change, mistaken_params = mistakes[mistake]
        assert mistake_distance(checkpoint(name), change, mistaken_params) > MISTAKE_MIN

    return test_each_mistake_moves_the_logits_far
