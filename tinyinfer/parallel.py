"""Tensor parallelism: one model split over n devices, simulated exactly in one process.

A model too big for one GPU, or too slow on one, is split *inside* every layer (Megatron-LM's scheme), so that
each device holds 1/n of every weight matrix and does 1/n of the arithmetic of every token:

    attention:  qkv  split by columns = by heads     each device attends with its own heads (no talk needed:
                o    split by rows    = by heads     heads never look at each other), then multiplies its
                                                     heads' output by its rows of o: a partial sum [T, d]
    MLP:        gate, up  split by columns           each device its slice of the hidden width
                down      split by rows              a partial sum [T, d] again
    after each: all-reduce                           the n partial sums are added, every device gets the total

Two all-reduces of a [T, d] activation per layer are the price: that traffic is why tensor parallelism stays
inside one machine, on links like NVLink. The embedding, the norms and the LM head are kept whole on every
device here (big models split the vocabulary too; it changes nothing of the idea).

Here a "device" is a `Model` of its own with n_heads / n heads, n_kv_heads / n KV heads and d_ff / n hidden
units: the same code runs on each shard, as it would on each GPU. `TensorParallelModel` is a Model whose
attention and MLP sublayers fan out to the shards and add their outputs (`all_reduce`), counting the bytes a
ring all-reduce would send; everything else, including `generate`, is the Model's own code.

    tp = TensorParallelModel(tinyinfer.load("shakespeare"), n=2)
    tp.logits(ids)              # equal to the unsplit model's, up to float rounding
    tp.bytes_per_device         # what each device sent so far
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tinyinfer.backend import to_numpy
from tinyinfer.errors import TinyInferError
from tinyinfer.model import Model
from tinyinfer.param_tree import map_arrays


def ring_all_reduce_bytes(nbytes: int, n: int) -> float:
    """Bytes each device sends to sum an array of `nbytes` over n devices with a ring all-reduce: the array
    travels in n pieces, n - 1 steps to add them up (reduce-scatter) and n - 1 to hand the sums round.

    >>> ring_all_reduce_bytes(1000, 4)  # 2 * 3/4 of the array
    1500.0
    """
    return 2 * (n - 1) / n * nbytes


def shard_layer(layer: dict, cfg, n: int, d: int) -> dict:
    """Device d's part of one dense layer (of n): its heads' columns of qkv (and qkv_bias) and rows of o, its
    slice of the MLP's hidden units (columns of gate and up, rows of down). Norms are whole on every device;
    the biases added after a row-split product (o_bias, down_bias) go to device 0 only, so the all-reduce adds
    them once.
    """
    hd, H, KV, ff = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads, cfg.d_ff
    # BEGIN EXERCISE 14.1: split a layer by heads and by hidden units
    q_cols = np.arange(d * H // n * hd, (d + 1) * H // n * hd)  # this device's query heads
    kv_cols = np.arange(d * KV // n * hd, (d + 1) * KV // n * hd)  # and the KV heads they read
    qkv_cols = np.concatenate([q_cols, H * hd + kv_cols, (H + KV) * hd + kv_cols])  # q | k | v in the stacked matrix
    hidden = slice(d * ff // n, (d + 1) * ff // n)
    shard = {key: value for key, value in layer.items() if key not in ("qkv", "qkv_bias", "o", "o_bias", "mlp")}
    shard["qkv"] = layer["qkv"][:, qkv_cols]  # [d, (H + 2 KV) hd] -> [d, (H + 2 KV) hd / n]
    shard["o"] = layer["o"][q_cols]  # [H hd, d] -> [H hd / n, d]
    if "qkv_bias" in layer:
        shard["qkv_bias"] = layer["qkv_bias"][qkv_cols]
    mlp = layer["mlp"]
    shard["mlp"] = {name: mlp[name][:, hidden] for name in ("gate", "up") if name in mlp}  # [d, ff] -> [d, ff / n]
    shard["mlp"] |= {f"{name}_bias": mlp[f"{name}_bias"][hidden] for name in ("gate", "up") if f"{name}_bias" in mlp}
    shard["mlp"]["down"] = mlp["down"][hidden]  # [ff, d] -> [ff / n, d]
    if d == 0:  # added once, after the partial sums are added
        shard |= {"o_bias": layer["o_bias"]} if "o_bias" in layer else {}
        shard["mlp"] |= {"down_bias": mlp["down_bias"]} if "down_bias" in mlp else {}
    return shard
    # END EXERCISE 14.1


def split_head_gains(shard: dict, layer: dict, cfg, n: int, d: int) -> dict:
    """Per-head q/k norm gains ([heads, hd]: StableLM 2, Cohere) go with their heads to device d; a gain shared
    by every head ([hd]: Qwen3) stays whole, as the other norms do."""
    for key, heads in (("q_norm", cfg.n_heads), ("k_norm", cfg.n_kv_heads)):
        if key in layer and layer[key].ndim == 2:
            shard[key] = layer[key][d * heads // n:(d + 1) * heads // n]  # [heads, hd] -> [heads / n, hd]
    return shard


class ShardedCache:
    """One KV cache per device, each holding its own heads' keys and values."""

    def __init__(self, parts: list):
        self.parts = parts


class TensorParallelModel(Model):
    """`model` split over n simulated devices (see the module docstring). Its forward pass is Model.forward;
    only the two sublayers and the cache are per device."""

    def __init__(self, model: Model, n: int):
        _check_splittable(model, n)
        self.__dict__.update(model.__dict__)  # the whole model's config, embedding, norms and head, shared
        self.n = n
        shard_config = dataclasses.replace(model.config, n_heads=model.config.n_heads // n,
                                           n_kv_heads=model.config.n_kv_heads // n, d_ff=model.config.d_ff // n)
        host = map_arrays(model.params, to_numpy)  # each shard is built from host arrays, as a Model is

        def layers_of(d: int) -> list[dict]:  # device d's part of every layer
            return [split_head_gains(shard_layer(layer, model.config, n, d), layer, model.config, n, d)
                    for layer in host["layers"]]

        self.shards = [Model(shard_config, dict(host, layers=layers_of(d)),
                             device=model.device, dtype=model.dtype, kv_cache_dtype=model.kv_cache_dtype) for d in range(n)]
        self.bytes_per_device = 0.0  # sent by each device in all-reduces so far

    def attention_block(self, i, layer, h, chunks, plan, rope, cache):
        """Each device attends with its heads through its own cache; the partial outputs are summed."""
        return self.all_reduce([shard.attention_block(i, shard.params["layers"][i], h, chunks, plan, rope, part)
                                for shard, part in zip(self.shards, cache.parts)])

    def feed_forward(self, i, layer, h):
        """Each device runs its slice of the hidden units; the partial outputs are summed."""
        return self.all_reduce([shard.feed_forward(i, shard.params["layers"][i], h) for shard in self.shards])

    def new_cache(self, max_seqs: int = 1, max_len: int | None = None) -> ShardedCache:
        return ShardedCache([shard.new_cache(max_seqs, max_len) for shard in self.shards])

    def all_reduce(self, partials: list):
        """The sum of the devices' partial outputs, which every device receives. [T, d] each -> [T, d]"""
        self.bytes_per_device += ring_all_reduce_bytes(partials[0].nbytes, self.n)
        total = partials[0]
        for partial in partials[1:]:
            total = total + partial
        return total


def _check_splittable(model: Model, n: int) -> None:
    cfg = model.config
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise TinyInferError(f"tensor parallelism over n={n!r} devices: give an integer >= 1")
    if cfg.n_experts:
        raise TinyInferError("tensor parallelism here splits dense layers only; a Mixture-of-Experts model is "
                             "spread by experts instead (expert parallelism, chapter 14)")
    if cfg.qk_norm and cfg.qk_norm_span == "full":
        raise TinyInferError("this model normalises q and k over all heads at once, which a split by heads cannot do "
                             "without more communication")
    if model.quantization is not None or model.adapters is not None:
        raise TinyInferError("split the plain model: quantise or load adapters on the shards is not supported")
    for what, count in (("num_key_value_heads", cfg.n_kv_heads), ("intermediate_size", cfg.d_ff)):
        if count % n:
            raise TinyInferError(f"{what}={count} does not split over {n} devices: choose n dividing it "
                                 f"(and num_attention_heads={cfg.n_heads})")

