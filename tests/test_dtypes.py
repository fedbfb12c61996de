"""fp16 and bf16 checkpoints: read exactly, and computed in float32 they match transformers like fp32 ones.

Every fp16 and bf16 number is exactly representable in float32, so a loader that widens correctly gives
tinyinfer the very weights transformers uses when it runs the same checkpoint in float32. The comparison is
therefore as tight as for fp32 checkpoints (1e-4 absolute on the logits, see test_parity_hf.py); a wrong
bf16 conversion (a missing shift, reading the wrong half) would be off by whole units.

Computing in float16 (`dtype="float16"`) rounds every activation to 11 significant bits (relative error
~5e-4 per operation; ~0.03-0.08 on these logits of magnitude ~10). No fixed bound is principled there, so
it is held against transformers' own float16 run of the same weights: its largest deviation from the
float32 reference may be at most twice transformers', and the greedy pick must agree wherever the
reference's top-2 gap exceeds twice that deviation.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import tiny_models
import torch
from tiny_models import VARIANTS, assert_logits_equal_transformers, hf_logits, hf_model, prompt_ids, variant_dtype

import tinyinfer

tiny_checkpoint = tiny_models.tiny_checkpoint  # the session fixture, made usable in this module
LOW_PRECISION_VARIANTS = [name for name in VARIANTS if variant_dtype(name) != "float32"]
FP16_ERROR_RATIO = 2.0


@pytest.mark.parametrize("name", LOW_PRECISION_VARIANTS)
def test_low_precision_checkpoint_matches_transformers_in_float32(name, tiny_checkpoint):
    folder = tiny_checkpoint(name)
    model = tinyinfer.load(folder)
    assert model.config.torch_dtype == variant_dtype(name)
    ids = prompt_ids(20)
    assert_logits_equal_transformers(model, folder, ids)


@pytest.mark.parametrize("name", LOW_PRECISION_VARIANTS)
def test_low_precision_weights_are_widened_exactly(name, tiny_checkpoint):
    """The embedding table, read by tinyinfer, equals transformers' float32 copy bit for bit."""
    folder = tiny_checkpoint(name)
    model = tinyinfer.load(folder)
    reference = hf_model(folder).get_input_embeddings().weight.detach().numpy()  # [V, d]
    stored = torch.tensor(reference).to(getattr(torch, variant_dtype(name)))
    assert torch.equal(stored.float(), torch.tensor(reference)), "reference holds the rounded values"
    assert model.params["embed"].dtype == np.float32
    np.testing.assert_array_equal(model.params["embed"], reference)


@pytest.mark.parametrize("name", ["llama", "gpt2", "qwen3", "llama_bf16"])
def test_float16_compute_is_as_close_as_transformers_float16(name, tiny_checkpoint):
    folder = tiny_checkpoint(name)
    ids = prompt_ids(20)
    reference = hf_logits(folder, ids)  # [T, V], float32
    ours = tinyinfer.load(folder, dtype="float16").logits(ids).astype(np.float32)  # [T, V]
    their_model = copy.deepcopy(hf_model(folder)).half()  # a copy: the cached reference stays float32
    with torch.no_grad():
        theirs = their_model(torch.tensor([ids])).logits[0].float().numpy()  # [T, V]
    our_error, their_error = np.abs(ours - reference).max(), np.abs(theirs - reference).max()
    assert our_error <= FP16_ERROR_RATIO * their_error, (our_error, their_error)
    top2 = np.sort(reference, axis=-1)[:, -2:]  # [T, 2]
    clear = top2[:, 1] - top2[:, 0] > 2 * our_error  # positions where rounding cannot flip the pick
    assert clear.any()
    np.testing.assert_array_equal(ours.argmax(-1)[clear], reference.argmax(-1)[clear])
