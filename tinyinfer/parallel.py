"""Tensor parallelism: one model split over n ranks (processes, one per device), Megatron-LM's scheme.

A model too big for one GPU, or too slow on one, is split *inside* every layer, so that each rank holds 1/n of
every weight matrix and does 1/n of the arithmetic of every token:

    attention:  qkv  split by columns = by heads     each rank attends with its own heads (no talk needed:
                o    split by rows    = by heads     heads never look at each other), then multiplies its
                                                     heads' output by its rows of o: a partial sum [T, d]
    MLP:        gate, up  split by columns           each rank its slice of the hidden width
                down      split by rows              a partial sum [T, d] again
    after each: all-reduce                           the n partial sums are added, every rank gets the total
    LM head:    split by columns = by vocabulary     each rank the logits of V/n tokens; an all-gather joins them

The KV cache splits with the heads: each rank caches its own KV heads only. A Mixture-of-Experts layer splits
every expert's hidden units the same way (the router stays whole, so every rank routes every token alike);
placing whole experts on ranks instead is expert parallelism (tinyinfer/expert_parallel.py).

Two all-reduces of a [T, d] activation per layer, and one all-gather of the [n_chunks, V / n] logits per step,
are the price: that traffic is why tensor parallelism stays inside one machine, on links like NVLink.

Every rank runs the same program (`mpirun -n 2 python -m tinyinfer generate --tensor-parallel-size 2 ...`):
`TensorParallelModel(model, comm)` is rank comm.rank's part of a loaded model, a Model whose config has
n_heads / n heads, n_kv_heads / n KV heads and d_ff / n hidden units, so the ordinary forward pass runs on
each shard; it only adds the all-reduces and the gather. The sums come out bit for bit the same on every rank,
so every rank samples the same token from the same seed and the ranks never disagree about what comes next.

    comm = tinyinfer.distributed.connect(2)                  # under mpirun -n 2
    tp = TensorParallelModel(tinyinfer.load("shakespeare"), comm)
    tp.generate("ROMEO:", max_tokens=20)                      # the unsplit model's tokens, on every rank
    comm.stats.bytes["all_reduce"]                            # n_layers x 2 x [T, d] per forward pass

Without MPI, `tinyinfer.distributed.run_ranks(2, lambda comm: TensorParallelModel(model, comm).logits(ids))`
runs the two ranks as threads of one process.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tinyinfer.backend import is_array, to_device, to_numpy
from tinyinfer.distributed import Communicator
from tinyinfer.errors import TinyInferError
from tinyinfer.model import Model
from tinyinfer.param_tree import leaves, map_arrays
from tinyinfer.weights import arrange_for_matvec


def shard_layer(layer: dict, cfg, n: int, d: int) -> dict:
    """Rank d's part of one layer's attention (of n): its heads' columns of qkv (and qkv_bias) and rows of o;
    the feed-forward is left out (`shard_feed_forward`). Norms are whole on every rank; o's bias (added after a
    row-split product) goes to rank 0 only, so the all-reduce adds it once.
    """
    hd, H, KV = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    # BEGIN EXERCISE 14.1: split attention by heads
    q_cols = np.arange(d * H // n * hd, (d + 1) * H // n * hd)  # this rank's query heads
    kv_cols = np.arange(d * KV // n * hd, (d + 1) * KV // n * hd)  # and the KV heads they read
    qkv_cols = np.concatenate([q_cols, H * hd + kv_cols, (H + KV) * hd + kv_cols])  # q | k | v in the stacked matrix
    shard = {key: value for key, value in layer.items() if key not in ("qkv", "qkv_bias", "o", "o_bias", "mlp")}
    shard["qkv"] = layer["qkv"][:, qkv_cols]  # [d, (H + 2 KV) hd] -> [d, (H + 2 KV) hd / n]
    shard["o"] = layer["o"][q_cols]  # [H hd, d] -> [H hd / n, d]
    if "qkv_bias" in layer:
        shard["qkv_bias"] = layer["qkv_bias"][qkv_cols]
    if d == 0 and "o_bias" in layer:  # added once, after the partial sums are added
        shard["o_bias"] = layer["o_bias"]
    # END EXERCISE 14.1
    return split_head_parameters(shard, layer, cfg, n, d)


def shard_mlp(mlp: dict, width: int, n: int, d: int) -> dict:
    """Rank d's slice of an MLP of `width` hidden units: columns of gate and up (and their biases), rows of down;
    down's bias on rank 0 only (it is added after the row-split product, so once, by the all-reduce)."""
    # BEGIN EXERCISE 14.2: split an MLP by hidden units
    hidden = slice(d * width // n, (d + 1) * width // n)
    shard = {name: mlp[name][:, hidden] for name in ("gate", "up") if name in mlp}  # [d, ff] -> [d, ff / n]
    shard |= {f"{name}_bias": mlp[f"{name}_bias"][hidden] for name in ("gate", "up") if f"{name}_bias" in mlp}
    shard["down"] = mlp["down"][hidden]  # [ff, d] -> [ff / n, d]
    if d == 0 and "down_bias" in mlp:
        shard["down_bias"] = mlp["down_bias"]
    return shard
    # END EXERCISE 14.2


def shard_feed_forward(mlp: dict, cfg, n: int, d: int) -> dict:
    """Rank d's part of a dense MLP, or of a Mixture-of-Experts layer: every expert's (and the shared expert's)
    slice of hidden units, with the router (and the shared expert's gate) whole, so every rank routes alike."""
    if "experts" not in mlp:
        return shard_mlp(mlp, cfg.d_ff, n, d)
    shard = {key: value for key, value in mlp.items() if key not in ("experts", "shared")}
    shard["experts"] = [shard_mlp(expert, cfg.moe_d_ff, n, d) for expert in mlp["experts"]]
    if "shared" in mlp:
        shard["shared"] = shard_mlp(mlp["shared"], cfg.shared_expert_d_ff, n, d)
    return shard


def split_head_parameters(shard: dict, layer: dict, cfg, n: int, d: int) -> dict:
    """What belongs to single heads goes with its heads to rank d: per-head q/k norm gains ([heads, hd]: StableLM
    2, Cohere) and attention sinks ([H]: gpt-oss). A gain shared by every head ([hd]: Qwen3) stays whole."""
    for key, heads in (("q_norm", cfg.n_heads), ("k_norm", cfg.n_kv_heads)):
        if key in layer and layer[key].ndim == 2:
            shard[key] = layer[key][d * heads // n:(d + 1) * heads // n]  # [heads, hd] -> [heads / n, hd]
    if "sinks" in layer:
        shard["sinks"] = layer["sinks"][d * cfg.n_heads // n:(d + 1) * cfg.n_heads // n]  # [H] -> [H / n]
    return shard


def shard_lm_head(params: dict, vocab_size: int, n: int, d: int) -> dict:
    """Rank d's columns of the LM head (and its bias), the vocabulary padded with zero columns to a multiple of n
    so that every rank holds as many.  [d, V] -> [d, ceil(V / n)]"""
    per_rank = -(-vocab_size // n)
    columns = slice(d * per_rank, (d + 1) * per_rank)
    pad = [(0, 0)] * (params["lm_head"].ndim - 1) + [(0, per_rank * n - vocab_size)]
    head = {"lm_head": np.pad(params["lm_head"], pad)[..., columns]}  # [d, V] -> [d, V / n]
    if "lm_head_bias" in params:
        head["lm_head_bias"] = np.pad(params["lm_head_bias"], pad[-1:])[columns]
    return head


def shard_config(cfg, n: int, split_experts: bool = True):
    """The config a rank's forward pass runs with: n times fewer heads, KV heads and hidden units (of the
    experts too, unless whole experts are placed on ranks: tinyinfer/expert_parallel.py)."""
    shard = dataclasses.replace(cfg, n_heads=cfg.n_heads // n, n_kv_heads=cfg.n_kv_heads // n, d_ff=cfg.d_ff // n)
    if split_experts:
        shard = dataclasses.replace(shard, moe_d_ff=cfg.moe_d_ff // n, shared_expert_d_ff=cfg.shared_expert_d_ff // n)
    return shard


class CountsTokens:
    """A Model that counts the tokens and the logits rows of its forward passes, which the formulas for the
    traffic of a split are written in (`traffic_formula`)."""

    tokens = rows = shares = 0  # shares: each pass's tokens over the ranks, rounded up (expert parallelism's)

    def forward(self, chunks, cache, all_logits: bool = False):
        n_tokens = sum(len(c.tokens) for c in chunks)
        self.tokens, self.rows = self.tokens + n_tokens, self.rows + (n_tokens if all_logits else len(chunks))
        self.shares += -(-n_tokens // self.comm.size)
        return super().forward(chunks, cache, all_logits)


class TensorParallelModel(CountsTokens, Model):
    """Rank comm.rank's part of `model` (see the module docstring): the Model's forward pass on a shard, an
    all-reduce after attention and after the feed-forward, and an all-gather of the logits."""

    split_experts = True  # every expert's hidden units over the ranks (ExpertParallelModel: whole experts)
    computes_logits = True  # a pipeline stage before the last does not (tinyinfer/pipeline.py)

    def __init__(self, model: Model, comm: Communicator):
        n, d, cfg = comm.size, comm.rank, model.config
        check_splittable(model, n, self.split_experts)
        self.__dict__.update(model.__dict__)  # tokenizer, device, dtype, generation config of the whole model
        host = map_arrays(model.params, to_numpy)
        layers = [dict(shard_layer(layer, cfg, n, d), mlp=self.shard_feed_forward(layer["mlp"], cfg, n, d))
                  for layer in host["layers"]]
        params = dict(host, layers=layers, **shard_lm_head(host, cfg.vocab_size, n, d))
        self.config, self.comm, self.layers = shard_config(cfg, n, self.split_experts), comm, range(cfg.n_layers)
        self.params = map_arrays(arrange_for_matvec(params, tied=False), lambda a: to_device(a, model.device))

    @staticmethod
    def shard_feed_forward(mlp: dict, cfg, n: int, d: int) -> dict:
        return shard_feed_forward(mlp, cfg, n, d)

    def attention_block(self, i, layer, h, chunks, plan, rope, cache):
        """This rank's heads attend through its cache; the partial outputs are summed.  [T, d] -> [T, d]"""
        return self.comm.all_reduce(super().attention_block(i, layer, h, chunks, plan, rope, cache))

    def feed_forward(self, i, layer, h):
        """This rank's hidden units (of the MLP, or of every expert); the partial outputs are summed.  [T, d] -> [T, d]"""
        return self.comm.all_reduce(super().feed_forward(i, layer, h))

    def output_logits(self, x):
        """This rank's V/n logits, gathered from every rank (the padding cut off).  [*, d] -> [*, V]"""
        local = super().output_logits(x)  # [*, V/n]: the final divisor and soft cap work logit by logit
        return self.comm.all_gather(local, axis=-1)[..., :self.config.vocab_size]  # -> [*, V]

    def traffic_formula(self) -> dict[str, tuple[float, str]]:
        """What this rank hands each operation for the tokens and rows so far: op -> (bytes, the formula)."""
        cfg, T, b, L = self.config, self.tokens, self.dtype.itemsize, len(self.layers)
        vocab = -(-cfg.vocab_size // self.comm.size)
        formula = {"all_reduce": (2 * L * T * cfg.d_model * b, f"2 x {L} layers x {T} tokens x d {cfg.d_model} x {b} B")}
        if self.computes_logits:
            formula["all_gather"] = (self.rows * vocab * b, f"{self.rows} rows x V/n {vocab} x {b} B")
        return formula


def check_splittable(model: Model, n: int, split_experts: bool = True) -> None:
    cfg = model.config
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise TinyInferError(f"tensor parallelism over {n!r} ranks: give an integer >= 1")
    if cfg.kv_lora_rank:
        raise TinyInferError("tensor parallelism here splits ordinary attention heads; DeepSeek's latent attention "
                             "(one latent KV head) is not split: run it with --tensor-parallel-size 1")
    if cfg.qk_norm and cfg.qk_norm_span == "full":
        raise TinyInferError("this model normalises q and k over all heads at once, which a split by heads cannot do "
                             "without more communication: run it with --tensor-parallel-size 1")
    if model.quantization is not None or model.adapters is not None or not all(map(is_array, leaves(model.params))):
        raise TinyInferError("tensor parallelism splits plain weight arrays: quantised weights (--quantize, or a "
                             "GGUF file's blocks) and LoRA adapters are not supported with it; load the model's "
                             "Hugging Face folder, or use --pipeline-parallel-size")
    counts = [("num_key_value_heads", cfg.n_kv_heads), ("intermediate_size", cfg.d_ff)]
    if split_experts:
        counts += [("moe_intermediate_size", cfg.moe_d_ff), ("shared_expert_intermediate_size", cfg.shared_expert_d_ff)]
    for what, count in counts:
        if count % n:
            raise TinyInferError(f"{what}={count} does not split over {n} ranks: choose a tensor parallel size "
                                 f"dividing it (and num_attention_heads={cfg.n_heads})")
