"""`tinyinfer memory`: the memory arithmetic of a model, from its config or from explicit numbers.

    python -m tinyinfer memory --model shakespeare --context 2048 --batch 8
    python -m tinyinfer memory --params 70e9 --layers 80 --kv-heads 8 --head-dim 128 --context 8000 --batch 100
"""

from __future__ import annotations

from tinyinfer.commands import at_least, positive_number
from tinyinfer.errors import TinyInferError
from tinyinfer.memory import (BYTES_PER_PARAM, decode_bound_tokens_per_s, kv_bytes_per_token, param_count,
                              weight_bytes)


def add_arguments(parser) -> None:
    parser.add_argument("--model", help="built-in name, model folder, config.json or llama2.c .bin (only the config is read)")
    parser.add_argument("--params", type=positive_number, help="parameter count, when no --model (e.g. 70e9)")
    parser.add_argument("--layers", type=at_least(1), help="number of layers, when no --model")
    parser.add_argument("--kv-heads", type=at_least(1), help="number of KV heads, when no --model")
    parser.add_argument("--head-dim", type=at_least(1), help="head dimension, when no --model")
    parser.add_argument("--context", type=at_least(1), default=None,
                        help="tokens per sequence (default: the context window; at most the context window with --model)")
    parser.add_argument("--batch", type=at_least(1), default=1, help="concurrent sequences")
    parser.add_argument("--dtype", default="fp16", choices=sorted(BYTES_PER_PARAM), help="dtype of weights and KV cache")
    parser.add_argument("--bandwidth", type=positive_number, default=3000.0,
                        help="memory bandwidth in GB/s (default 3000, a datacentre GPU)")


def describe(n_params: int, layers: int, kv_heads: int, head_dim: int, context: int, batch: int, dtype: str,
             bandwidth_gb_s: float, extra: dict | None = None, active_params: int | None = None,
             values_are_keys: bool = False) -> list[str]:
    """The lines `tinyinfer memory` prints.

    `active_params` (Mixture-of-Experts): the parameters one token uses. Memory must hold all `n_params`
    (any token may pick any expert), but one decode step of one stream reads only the active ones.
    `values_are_keys` (latent attention): the cache keeps one latent per token, not a key and a value.
    """
    copies = 1 if values_are_keys else 2
    per_token = kv_bytes_per_token(layers, kv_heads, head_dim, BYTES_PER_PARAM[dtype]) * copies // 2
    weights = weight_bytes(n_params, dtype)
    read_per_token = weight_bytes(active_params or n_params, dtype)
    per_sequence = per_token * context
    lines = [f"parameters:           {n_params:,} ({n_params / 1e9:.3g} B)"]
    lines += [f"  {key + ':':20s}{value}" for key, value in (extra or {}).items()]
    lines.append("weights:              " + ", ".join(f"{d} {_size(weight_bytes(n_params, d))}" for d in BYTES_PER_PARAM))
    lines += [
        f"KV cache ({dtype}):",
        f"  per token:          {copies} x {layers} layers x {kv_heads} kv_heads x {head_dim} head_dim x "
        f"{BYTES_PER_PARAM[dtype]:g} B = {per_token:,} B ({_size(per_token)})",
        f"  per sequence:       x {context:,} tokens = {_size(per_sequence)}",
        f"  for the batch:      x {batch} sequences = {_size(per_sequence * batch)}",
        f"total ({dtype}):         {_size(weights + per_sequence * batch)} (weights + KV cache)",
        f"decode bound:         <= {decode_bound_tokens_per_s(read_per_token, bandwidth_gb_s * 1e9):,.1f} tokens/s per stream at "
        f"{bandwidth_gb_s:g} GB/s ({_size(read_per_token)} of {'active ' if active_params else ''}weights read per token)",
    ]
    return lines


def _size(n_bytes: float) -> str:
    """Binary units, as memory is sized, with the decimal figure beside it: 327680 -> 0.31 MiB = 0.33 MB."""
    units = (("GiB", 2**30, "GB", 1e9), ("MiB", 2**20, "MB", 1e6), ("KiB", 2**10, "kB", 1e3))
    for binary_unit, binary, decimal_unit, decimal in units:
        if n_bytes >= 0.1 * binary:  # 327,680 B reads best as 0.31 MiB
            return f"{n_bytes / binary:,.2f} {binary_unit} = {n_bytes / decimal:,.2f} {decimal_unit}"
    return f"{n_bytes:,.0f} B"


def run(args) -> int:
    if args.model:
        from tinyinfer.loading import read_config  # noqa: PLC0415

        cfg = read_config(args.model)
        numbers = dict(n_params=param_count(cfg), layers=cfg.n_layers, kv_heads=cfg.n_kv_heads, head_dim=cfg.head_dim,
                       values_are_keys=cfg.values_are_keys)
        if cfg.n_experts:  # all experts resident, top-k of them used per token
            active = param_count(cfg, active=True)
            numbers.update(active_params=active, extra={"active per token": f"{active:,} ({active / 1e9:.3g} B; top-"
                           f"{cfg.n_experts_per_tok} of {cfg.n_experts} experts per MoE layer)"})
        context = args.context or cfg.max_seq_len
        if context > cfg.max_seq_len:
            raise TinyInferError(f"--context {context:,} is beyond the model's context window of {cfg.max_seq_len:,} "
                                 f"tokens: give at most {cfg.max_seq_len}, or drop --model to size any context")
    else:
        missing = [flag for flag, value in (("--params", args.params), ("--layers", args.layers),
                                            ("--kv-heads", args.kv_heads), ("--head-dim", args.head_dim)) if value is None]
        if missing:
            raise TinyInferError(f"give --model, or all of --params --layers --kv-heads --head-dim (missing {' '.join(missing)})")
        if args.params < 1:
            raise TinyInferError(f"--params {args.params:g} is below one parameter: give the count, e.g. 70e9")
        numbers = dict(n_params=int(args.params), layers=args.layers, kv_heads=args.kv_heads, head_dim=args.head_dim)
        context = args.context or 4096
    print("\n".join(describe(**numbers, context=context, batch=args.batch, dtype=args.dtype, bandwidth_gb_s=args.bandwidth)))
    return 0
