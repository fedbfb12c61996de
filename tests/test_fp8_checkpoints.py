"""FP8 checkpoints in transformers' "fp8" format (Qwen3-*-FP8, DeepSeek-V3) load, dequantised exactly.

A tiny checkpoint written by transformers is quantised here the way transformers' Fp8Quantize does it: each
Linear weight cut into 128 x 128 blocks (the last ones short where a size is not a multiple of 128), each block
divided by scale_inv = max|block| / 448 and rounded to float8_e4m3fn, saved as F8_E4M3 beside
`<name>_scale_inv`, with config.json's quantization_config. Its dequantisation by PyTorch, w_fp8.float() *
scale_inv (one float32 rounding per weight), is saved as a float32 folder: tinyinfer's weights must equal it to
the bit, and its logits on the FP8 folder transformers' on that one within the float32 rounding bound
(tests/tolerances.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import safetensors.torch
import torch
from tiny_models import ROOT, TINY_CONFIG, build_with_transformers, hf_logits, make_tiny_models, prompt_ids
from test_deepseek import DEEPSEEK_V3
from tolerances import assert_close, logits_bound

import tinyinfer
from tinyinfer import fp8
from tinyinfer.errors import TinyInferError
from tinyinfer.safetensors_io import Checkpoint

BLOCK = 128
FP8_MAX = 448.0  # the largest float8_e4m3fn
QUANTIZATION = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [BLOCK, BLOCK]}
# (config class, fields over TINY_CONFIG, modules left unquantised). Qwen3's sizes 160, 200, 80 and its vocabulary
# of 300 leave short edge blocks, its output layer quantised too; the Llama one's sizes are all multiples of 128,
# its output layer left in float32 as transformers' quantiser always leaves it
MODELS = {
    "qwen3_edges": ("Qwen3Config", dict(hidden_size=160, intermediate_size=200, num_attention_heads=4,
                                         num_key_value_heads=2, head_dim=40, tie_word_embeddings=False), []),
    "llama_aligned": ("LlamaConfig", dict(hidden_size=128, intermediate_size=256, num_attention_heads=2,
                                          num_key_value_heads=1, tie_word_embeddings=False), ["lm_head"]),
    "deepseek_v3": ("DeepseekV3Config", DEEPSEEK_V3, ["lm_head"]),  # latent attention, one file tensor per expert
}


def quantise_blocks(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [out, in] -> (float8_e4m3fn codes [out, in], float32 scale_inv [ceil(out/128), ceil(in/128)])."""
    out, d_in = w.shape
    grid = (-(-out // BLOCK), -(-d_in // BLOCK))
    padded = torch.zeros(grid[0] * BLOCK, grid[1] * BLOCK)
    padded[:out, :d_in] = w
    amax = padded.reshape(grid[0], BLOCK, grid[1], BLOCK).abs().amax(dim=(1, 3))  # [gout, gin]
    scale_inv = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    codes = (w / expand(scale_inv, w.shape)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return codes, scale_inv


def expand(scale_inv: torch.Tensor, shape) -> torch.Tensor:
    """Each block's scale over its block, cut to the weight.  [gout, gin] -> [out, in]"""
    return scale_inv.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:shape[0], :shape[1]]


def is_quantised(name: str, tensor: torch.Tensor, skip: list[str]) -> bool:
    """What replace_with_fp8_linear turns into FP8Linear: every nn.Linear but modules_to_not_convert."""
    return (tensor.ndim == 2 and name.endswith(".weight") and "embed_tokens" not in name
            and not name.endswith("mlp.gate.weight")  # a MoE router (DeepSeek's is no nn.Linear)
            and not any(name.startswith(module) for module in skip))


def write_pair(name: str, root: Path) -> tuple[Path, Path]:
    """(the FP8 folder, the float32 folder of its dequantisation by PyTorch) of MODELS[name]."""
    config_class, fields, skip = MODELS[name]
    source = build_with_transformers(root / f"{name}_source", config_class, {**TINY_CONFIG, **fields})
    tensors = safetensors.torch.load_file(source / "model.safetensors")
    quantised, dequantised = {}, {}
    for key, tensor in tensors.items():
        quantised[key] = dequantised[key] = tensor
        if is_quantised(key, tensor, skip):
            codes, scale_inv = quantise_blocks(tensor)
            quantised[key], quantised[key + "_scale_inv"] = codes, scale_inv
            dequantised[key] = codes.float() * expand(scale_inv, tensor.shape)  # one float32 rounding each
    config = json.loads((source / "config.json").read_text())
    folders = root / f"{name}_fp8", root / f"{name}_dequantised"
    for folder, weights, extra in zip(folders, (quantised, dequantised), (
            {"quantization_config": {**QUANTIZATION, "modules_to_not_convert": skip}}, {})):
        folder.mkdir()
        safetensors.torch.save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
        (folder / "config.json").write_text(json.dumps({**config, **extra}))
        make_tiny_models.make_tokenizer().save(str(folder / "tokenizer.json"))
        (folder / "generation_config.json").write_text((source / "generation_config.json").read_text())
    return folders


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("fp8")
    return {name: write_pair(name, root) for name in MODELS}


def test_e4m3_decoder_matches_torch_on_all_256_codes():
    ours = fp8.e4m3_to_f32(np.arange(256, dtype=np.uint8))
    theirs = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    nan = np.isnan(theirs)
    assert np.flatnonzero(nan).tolist() == [0x7F, 0xFF] and np.array_equal(np.isnan(ours), nan)
    assert np.array_equal(ours[~nan].view(np.uint32), theirs[~nan].view(np.uint32))  # bits: -0.0 and subnormals too


def test_e8m0_scales_match_torch_on_all_256_codes():
    ours = fp8.e8m0_to_f32(np.arange(256, dtype=np.uint8))
    theirs = torch.arange(256, dtype=torch.uint8).view(torch.float8_e8m0fnu).float().numpy()
    assert np.array_equal(ours, theirs, equal_nan=True)


def test_fused_experts_and_per_tensor_scales_dequantise_as_their_matrices_do():
    """A fused expert tensor [E, out, in] (FP8Experts' gate_up_proj) is E matrices with E grids of scales; with
    weight_block_size null one scale covers a whole matrix (a scalar for FP8Linear, [E, 1, 1] for experts)."""
    rng = np.random.default_rng(0)
    codes = rng.normal(size=(3, 200, 130)).astype(np.float32)  # [E, out, in]
    scales = rng.uniform(0.5, 2, size=(3, 2, 2)).astype(np.float32)  # [E, ceil(200/128), ceil(130/128)]
    fused = fp8.dequantize(codes, scales, [BLOCK, BLOCK], "experts.gate_up_proj")
    for e in range(3):
        assert np.array_equal(fused[e], codes[e] * expand(torch.from_numpy(scales[e]), codes[e].shape).numpy())
    per_tensor = fp8.dequantize(codes, scales[:, :1, :1], None, "experts.down_proj")  # [E, 1, 1]
    assert np.array_equal(per_tensor, codes * scales[:, :1, :1])
    assert np.array_equal(fp8.dequantize(codes[0], scales[0, 0, 0], None, "o_proj.weight"), codes[0] * scales[0, 0, 0])


@pytest.mark.parametrize("name", MODELS)
def test_weights_equal_the_exact_dequantisation_to_the_bit(pairs, name):
    quantised, dequantised = (Checkpoint(folder) for folder in pairs[name])
    scaled = [key for key in quantised.names() if quantised.dtype(key) == "F8_E4M3"]
    assert len(scaled) >= 7 * 2 and all(key + "_scale_inv" in quantised for key in scaled)
    for key in scaled:
        assert np.array_equal(fp8.read_weight(quantised, key, [BLOCK, BLOCK]), dequantised.get(key)), key


@pytest.mark.parametrize("name", MODELS)
def test_logits_equal_transformers_on_the_dequantised_weights(pairs, name):
    quantised, dequantised = pairs[name]
    ids = prompt_ids(20)
    model = tinyinfer.load(quantised)
    assert model.config.quantization_config["weight_block_size"] == [BLOCK, BLOCK]
    theirs = hf_logits(dequantised, ids)  # [T, V]
    assert_close(model.logits(ids), theirs, logits_bound(model.config, theirs))


def test_logits_equal_transformers_reading_the_fp8_folder_itself(pairs):
    """transformers on a CPU dequantises an FP8 checkpoint at load too (FineGrainedFP8Config(dequantize=True)):
    with whole blocks its weights are the same numbers. (With short edge blocks they are not: its dequantiser
    takes the block to be the weight's size over the scales' count, 200 / 2 = 100 rows, where the FP8 kernels
    and FP8Linear's scale shape, ceil(200 / 128), mean 128 and 72; tinyinfer reads them as the kernels do.)"""
    quantised, _ = pairs["llama_aligned"]
    ids = prompt_ids(20)
    model = tinyinfer.load(quantised)
    theirs = hf_logits(quantised, ids)  # [T, V]
    assert_close(model.logits(ids), theirs, logits_bound(model.config, theirs))


def test_the_cli_generates_from_an_fp8_folder_what_the_dequantised_weights_give(pairs):
    """What the user runs: `python -m tinyinfer generate --model <FP8 folder>` prints the greedy text that the
    float32 folder of the same weights gives, and exits 0."""
    quantised, dequantised = pairs["qwen3_edges"]
    run = subprocess.run([sys.executable, "-m", "tinyinfer", "generate", "--model", str(quantised), "ROMEO:",
                          "--max-tokens", "12", "--temperature", "0", "--ignore-eos"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    expected = tinyinfer.load(dequantised).generate("ROMEO:", max_tokens=12, temperature=0, ignore_eos=True)
    assert run.stdout.strip() == expected.text.strip() and expected.text.strip()


@pytest.fixture
def damaged(pairs, tmp_path):
    """A private copy of the edge-block FP8 folder, free to damage."""
    folder = tmp_path / "model"
    shutil.copytree(pairs["qwen3_edges"][0], folder)
    return folder


def edit_tensors(folder: Path, edit) -> None:
    tensors = safetensors.torch.load_file(folder / "model.safetensors")
    edit(tensors)
    safetensors.torch.save_file(tensors, folder / "model.safetensors")


def load_error(folder: Path) -> str:
    with pytest.raises(TinyInferError) as error:
        tinyinfer.load(folder)
    return str(error.value)


DOWN = "model.layers.1.mlp.down_proj.weight"  # [160, 200]: scales [2, 2]


@pytest.mark.parametrize("part, damage, words", [
    ("tensors", {"scale": torch.ones(1, 1)}, [DOWN + "_scale_inv", "[1, 1]", "[2, 2]", "weight_block_size"]),
    ("tensors", {"scale": None}, [DOWN + "_scale_inv", "no scales"]),
    ("tensors", {"weight": torch.float8_e5m2}, [DOWN, "F8_E5M2", "F8_E4M3"]),
    ("config", {"quantization_config": None}, ["F8_E4M3", "quantization_config"]),
    ("quantization", {"weight_block_size": [64, 64]}, ["_scale_inv", "[64, 64]", "weight_block_size"]),
    ("quantization", {"fmt": "e5m2"}, ["fmt 'e5m2'", "E4M3"]),
    ("quantization", {"weight_block_size": [128]}, ["weight_block_size [128]"]),
    ("quantization", {"expert_dtype": "fp4"}, ["expert_dtype 'fp4'"]),
    ("quantization", {"quant_method": "gptq"}, ["'gptq'", "not supported"]),
], ids=["scale shape", "scale missing", "E5M2 weight", "no quantization_config", "block size", "fmt", "block rank",
        "fp4 experts", "other method"])
def test_a_damaged_or_unsupported_fp8_checkpoint_is_refused_by_name(damaged, part, damage, words):
    if part == "tensors":
        edit_tensors(damaged, lambda tensors: damage_tensor(tensors, **damage))
    else:
        config = json.loads((damaged / "config.json").read_text())
        if part == "quantization":
            config["quantization_config"] = {**config["quantization_config"], **damage}
        else:
            config |= damage
        (damaged / "config.json").write_text(json.dumps(config))
    message = load_error(damaged)
    assert all(word in message for word in words), message


def damage_tensor(tensors: dict, scale="keep", weight=None) -> None:
    """Replace DOWN's scales (None: delete them), or re-encode its codes as `weight` (another FP8 dtype)."""
    if scale is None:
        del tensors[DOWN + "_scale_inv"]
    elif scale != "keep":
        tensors[DOWN + "_scale_inv"] = scale
    if weight is not None:
        tensors[DOWN] = tensors[DOWN].float().to(weight)


def test_static_activation_scales_are_not_read_and_ue8m0_scales_are_powers_of_two(pairs, tmp_path):
    """activation_scheme "static" adds a per-tensor activation_scale beside each weight, which only an FP8 kernel
    uses (to round its inputs): the model loads and computes in float32 all the same. scale_fmt "ue8m0" stores
    each scale as a byte b meaning 2^(b - 127)."""
    folder = tmp_path / "model"
    shutil.copytree(pairs["qwen3_edges"][0], folder)
    tensors = safetensors.torch.load_file(folder / "model.safetensors")
    for key in [key for key in tensors if key.endswith("_scale_inv")]:
        exponents = torch.ceil(torch.log2(tensors[key]))  # ue8m0 rounds each scale up to a power of two
        tensors[key] = (exponents + 127).to(torch.uint8)
        tensors[key.removesuffix("weight_scale_inv") + "activation_scale"] = torch.tensor(0.5)
    safetensors.torch.save_file(tensors, folder / "model.safetensors")
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] |= {"activation_scheme": "static", "scale_fmt": "ue8m0"}
    (folder / "config.json").write_text(json.dumps(config))

    codes, exponents = tensors[DOWN].float(), tensors[DOWN + "_scale_inv"].float() - 127  # [160, 200], [2, 2]
    expected = (codes * expand(torch.exp2(exponents), codes.shape)).numpy()  # exact: power-of-two scales
    model = tinyinfer.load(folder)
    assert np.array_equal(model.params["layers"][1]["mlp"]["down"], expected.T)  # stored [in, out]
    assert np.isfinite(model.logits(prompt_ids(8))).all()
