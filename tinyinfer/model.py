"""The transformer forward pass: token ids in, next-token logits out, one story for every architecture.

    x = embed(ids)  (+ positions: GPT-2; x sqrt(d): Gemma)
    for each layer:
        x = x + attention(norm(x))       # tokens look at each other (through the KV cache)
        x = x + feed_forward(norm(x))    # each token alone (a dense MLP, or a Mixture-of-Experts)
    logits = norm(x) @ lm_head

Architectures differ by switches in their Config, not by code paths: Gemma 2 norms each sublayer's output
again before adding it (`post_norms`: x = x + norm(attention(norm(x)))) and soft-caps attention scores and
logits; OLMo 2 norms the output only (`pre_norms` off: x = x + norm(attention(x))); GPT-NeoX feeds the layer's
input to both sublayers (`parallel_residual`: x = x + attention(norm(x)) + mlp(norm'(x))), Phi-2 and Cohere
through one norm (`shared_input_norm`); OLMo 1 clamps q, k and v (`clip_qkv`); Granite scales the embeddings,
each sublayer's output (`residual_scale`), the scores and the logits by numbers from its config.json. Phi-3 rotates part of each head; Gemma's norms scale by
1 + weight (tinyinfer/norms.py); Gemma 3's sliding layers rotate with a RoPE of their own (`local_rope_theta`),
so a pass computes one (cos, sin) pair per RoPE setting and each layer takes its own (SmolLM3's layers without
RoPE take none). DeepSeek's attention caches one latent vector per token instead of keys and values per head
(`kv_lora_rank`, tinyinfer/mla.py), and its experts are chosen by a router of its own (`router`, tinyinfer/moe.py).
gpt-oss gives each attention head a learned sink logit (the layer's "sinks", tinyinfer/attention.py) and runs
experts with biases through a clamped SwiGLU (tinyinfer/moe.py).

One function serves prefill (a whole prompt) and decode (one token), for one sequence or many at once:
`forward` takes a list of `SeqChunk`s, each some new tokens of one sequence. Linear layers run on all
tokens of all chunks together ([T, d]); only attention goes sequence by sequence, asking the cache for that
sequence's keys and values. The batched serving engine calls this same function.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tinyinfer.attention import attention, causal_mask, decode_attention, soft_cap
from tinyinfer.backend import get_xp, to_device, to_numpy
from tinyinfer.config import Config
from tinyinfer.errors import TinyInferError
from tinyinfer.flash_attention import tiled_attention
from tinyinfer.kv_cache import ContiguousKVCache
from tinyinfer.kv_quant import check_kv_cache_dtype
from tinyinfer.mla import expand_values, latent_qkv
from tinyinfer.mlp import gelu_mlp, linear, swiglu
from tinyinfer.moe import moe_feed_forward
from tinyinfer.norms import apply_norm
from tinyinfer.rope import apply_partial_rope, inv_frequencies, rope_angles, rope_attention_factor
from tinyinfer.weights import arrange_for_matvec


DECODE_GROUP_SIZE = 8  # batched decode attention: sequences of similar length, about this many per batch
TILED_ATTENTION_MIN_SCORES = 2**18  # a chunk with more scores (heads x n x L) than a CPU cache holds is tiled


@dataclass
class SeqChunk:
    """New tokens of sequence `seq_id`; the first is at position `start` (= tokens already cached)."""

    seq_id: int
    start: int
    tokens: list[int]
    adapter: str | None = None  # the LoRA adapter the sequence asked for (tinyinfer/lora.py), if any


@dataclass
class AttentionPlan:
    """How a forward pass attends, worked out once since it is the same in every layer: the row of each
    chunk's first token, the one-token chunks attended in batches (their rows and the cache's slots for
    them, see `Model.decode_block`), and the chunks that take the loop one by one."""

    first_rows: np.ndarray  # [n_chunks + 1]
    decode_groups: list[tuple]  # [(rows [B] on the device, the cache's DecodeSlots)]
    looped: list[int]  # indices of the other chunks
    masks: dict = field(default_factory=dict)  # (chunk index, window) -> its causal mask on the device

    def mask(self, j: int, chunk: SeqChunk, window: int | None, device: str):
        """Chunk j's causal mask [n, end] for `window`: built on the host and copied to the device once per
        pass, not once per layer (every layer with the same window attends under the same mask)."""
        if (j, window) not in self.masks:
            self.masks[j, window] = to_device(causal_mask(len(chunk.tokens), chunk.start, window), device)
        return self.masks[j, window]


class Model:
    """A loaded model: config, parameters on a device, and (when found) its tokenizer."""

    def __init__(self, config: Config, params: dict, tokenizer=None, device: str = "cpu",
                 generation_config: dict | None = None, dtype=np.float32, kv_cache_dtype: str = "auto"):
        self.config = config
        self.tokenizer = tokenizer
        self.device = device
        self.dtype = np.dtype(dtype)
        self.xp = get_xp(device)
        self.params = map_arrays(arrange_for_matvec(params, config.tie_word_embeddings), lambda a: to_device(a, device))
        self.generation_config = generation_config or {}
        self.inv_freq = inv_frequencies(config.rotary_dim, config.rope_theta, config.rope_scaling)
        self.rope_factor = rope_attention_factor(config.rope_scaling)  # YaRN, longrope: q and k scaled (via cos, sin)
        self.local_inv_freq = (None if config.local_rope_theta is None  # Gemma 3's sliding layers: their own theta
                               else inv_frequencies(config.rotary_dim, config.local_rope_theta))
        self.expert_load = None  # filled by Mixture-of-Experts layers when routing statistics are asked for
        self.quantization = None  # the Scheme its weights were quantised with (tinyinfer/quantize.py), if any
        self.adapters = None  # the LoRA adapters loaded on its weights (tinyinfer/lora.py), if any
        self.kv_cache_dtype = check_kv_cache_dtype(kv_cache_dtype)  # how its caches store keys and values

    # -- the forward pass ----------------------------------------------------------------------------------

    def forward(self, chunks: list[SeqChunk], cache, all_logits: bool = False):
        """Logits of the last token of each chunk [len(chunks), V], or of every token [T, V] if all_logits."""
        cfg, p = self.config, self.params
        ids = np.concatenate([np.asarray(c.tokens, dtype=np.int64) for c in chunks])  # [T]
        positions = np.concatenate([np.arange(c.start, c.start + len(c.tokens)) for c in chunks])  # [T]
        self._check_ids(ids, positions)
        x = p["embed"][to_device(ids, self.device)]  # [T] -> [T, d]
        if cfg.embed_scale != 1.0:  # Gemma: sqrt(d), Granite: its multiplier, rounded to the embedding's dtype first
            x = x * self.dtype.type(np.float32(cfg.embed_scale))
        if cfg.position == "learned":
            x = x + p["pos_embed"][to_device(positions, self.device)]  # GPT-2 adds a learned position vector
        rope = self._rope(positions, self.inv_freq, self.rope_factor) if cfg.position == "rope" else None
        local_rope = rope if self.local_inv_freq is None else self._rope(positions, self.local_inv_freq)
        if self.adapters is not None:
            self.adapters.route(chunks, self.xp)  # which rows take which LoRA adapter, in every layer of this pass
        plan = self._plan_attention(chunks, cache)
        x = self.run_layers(x, range(cfg.n_layers), chunks, plan, (rope, local_rope), cache)  # [T, d]
        if not all_logits:
            last = np.cumsum([len(c.tokens) for c in chunks]) - 1
            x = x[to_device(last, self.device)]  # [T, d] -> [n_chunks, d]: only what sampling needs
        return self.output_logits(x)

    def run_layers(self, x, layers: range, chunks: list[SeqChunk], plan: AttentionPlan, ropes: tuple, cache):
        """x through the decoder layers numbered `layers` (all of them; a pipeline stage's share: tinyinfer/
        pipeline.py). `ropes`: the (cos, sin) of the global and of the sliding layers.  [T, d] -> [T, d]"""
        cfg, (rope, local_rope) = self.config, ropes
        for i in layers:
            layer = self.params["layers"][i]
            normed = apply_norm(x, layer["attn_norm"], cfg.norm, cfg.norm_eps) if cfg.pre_norms else x  # OLMo 2: x
            layer_rope = local_rope if cfg.layer_types[i] == "sliding_attention" else rope
            if i in cfg.nope_layers:  # SmolLM3: this layer sees no positions, only the causal order
                layer_rope = None
            h = self.attention_block(i, layer, normed, chunks, plan, layer_rope, cache)  # [T, d]
            layer_input, x = x, x + self._residual(h, layer, "post_attn_norm")
            if not cfg.shared_input_norm:  # Phi-2's MLP reads `normed` too: what attention read
                h = layer_input if cfg.parallel_residual else x  # GPT-NeoX: the layer's input, as attention did
                normed = apply_norm(h, layer["mlp_norm"], cfg.norm, cfg.norm_eps) if cfg.pre_norms else h
            h = self.feed_forward(i, layer, normed)  # [T, d]
            x = x + self._residual(h, layer, "post_mlp_norm")
        return x

    def output_logits(self, x):
        """The final norm and the LM head (split by vocabulary over ranks: tinyinfer/parallel.py).  [*, d] -> [*, V]"""
        cfg = self.config
        x = apply_norm(x, self.params["final_norm"], cfg.norm, cfg.norm_eps)
        logits = linear(x, self.params, "lm_head")  # [*, d] -> [*, V] (+ Phi-2's bias)
        if cfg.logits_divisor != 1.0:  # Granite
            logits = logits / self.dtype.type(cfg.logits_divisor)
        return soft_cap(logits, cfg.final_softcap)

    def _residual(self, h, layer: dict, post_norm: str):
        """What a sublayer's output h adds to the residual stream: h itself, or h normed by the norm named
        `post_norm` (`post_norms`: Gemma 2, OLMo 2), times `residual_scale` (Granite).  [T, d] -> [T, d]"""
        cfg = self.config
        if cfg.post_norms:
            h = apply_norm(h, layer[post_norm], cfg.norm, cfg.norm_eps)
        return h * self.dtype.type(cfg.residual_scale) if cfg.residual_scale != 1.0 else h

    def attention_block(self, i: int, layer: dict, h, chunks: list[SeqChunk], plan: AttentionPlan, rope, cache):
        """Project to q, k, v for all tokens; attend sequence by sequence through the cache; project out.
        DeepSeek's latent attention (`kv_lora_rank`) projects into its latent space instead, attends over one
        latent key/value head in the same loops, and expands each head's value afterwards (tinyinfer/mla.py)."""
        cfg = self.config
        T = h.shape[0]
        q, k, v = latent_qkv(h, layer, cfg, rope) if cfg.kv_lora_rank else self._qkv(layer, h, rope)
        out = self.xp.empty((T, cfg.n_heads * cfg.head_dim), dtype=q.dtype)  # [T, H*hd]
        for rows, slots in plan.decode_groups:
            self.decode_block(i, rows, slots, q, k, v, out, cache)
        for j in plan.looped:
            chunk = chunks[j]
            n, end = len(chunk.tokens), chunk.start + len(chunk.tokens)
            rows = slice(plan.first_rows[j], plan.first_rows[j] + n)
            cache.write(i, chunk.seq_id, chunk.start, k[rows], v[rows])
            keys, values = cache.read(i, chunk.seq_id, end)  # 2 x [KV, end, hd]
            window, scale, softcap = cfg.window_of(i), cfg.attention_scale(i), cfg.attn_softcap
            sinks = layer.get("sinks")  # gpt-oss: one sink logit per head [H] (None: no sinks)
            if cfg.n_heads * n * end > TILED_ATTENTION_MIN_SCORES:  # a long prefill: never hold all its scores
                out[rows] = tiled_attention(q[rows], keys, values, chunk.start, window, scale,
                                            softcap=softcap, sinks=sinks)  # -> [n, H*hd]
            else:
                mask = plan.mask(j, chunk, window, self.device)  # [n, end]
                out[rows] = attention(q[rows], keys, values, mask, scale, softcap, sinks)  # -> [n, H*hd]
        if cfg.kv_lora_rank:
            out = expand_values(out, layer, cfg)  # [T, H*(r + dr)] -> [T, H*dv]
        return linear(out, layer, "o")  # [T, H*hd] (latent attention: [T, H*dv]) -> [T, d]

    def _qkv(self, layer: dict, h, rope):
        """q [T, H, hd], k and v [T, KV, hd] of every token: one product, then OLMo's clamp, q/k norms, RoPE."""
        cfg = self.config
        T, q_dim, kv_dim = h.shape[0], cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        qkv = linear(h, layer, "qkv")  # [T, d] -> [T, q_dim + 2 kv_dim]: three projections in one product
        if cfg.clip_qkv is not None:  # OLMo 1: every coordinate of q, k and v within +-clip_qkv
            qkv = self.xp.clip(qkv, -cfg.clip_qkv, cfg.clip_qkv)
        q = qkv[:, :q_dim].reshape(T, cfg.n_heads, cfg.head_dim)  # -> [T, H, hd]
        k = qkv[:, q_dim:q_dim + kv_dim].reshape(T, cfg.n_kv_heads, cfg.head_dim)  # -> [T, KV, hd]
        v = qkv[:, q_dim + kv_dim:].reshape(T, cfg.n_kv_heads, cfg.head_dim)  # -> [T, KV, hd]
        if cfg.qk_norm:  # normalise q and k before rotating them: each head (Qwen3), all heads as one (OLMoE)
            q, k = _qk_norm(q, layer["q_norm"], cfg), _qk_norm(k, layer["k_norm"], cfg)
        if rope is not None:
            q, k = apply_partial_rope(q, *rope), apply_partial_rope(k, *rope)
        return q, k, v

    def decode_block(self, i: int, rows, slots, q, k, v, out, cache) -> None:
        """Attention of many one-token chunks at once (`rows` of q, k, v), through a cache that reads a batch
        of sequences (the paged cache of the serving engine): one gather and one batched product instead of
        a loop. `slots` (from the cache's `decode_slots`, once per forward pass) say where they write and read."""
        cache.write_batch(i, slots, k[rows], v[rows])
        keys, values = cache.read_batch(i, slots)  # 2 x [KV, B, L, hd], padded to the longest
        mask = slots.mask(self.config.window_of(i))  # [B, L]
        scale, softcap = self.config.attention_scale(i), self.config.attn_softcap
        sinks = self.params["layers"][i].get("sinks")  # gpt-oss: [H]
        out[rows] = decode_attention(q[rows], keys, values, mask, scale, softcap, sinks)  # -> [B, H*hd]

    def feed_forward(self, i: int, layer: dict, h):
        """The MLP of layer i: SwiGLU, GPT-2's GELU MLP, or a Mixture-of-Experts (tinyinfer/moe.py).  [T, d] -> [T, d]"""
        if self.config.is_moe_layer(i):
            return moe_feed_forward(h, layer["mlp"], self.config, self.expert_load, i)
        if self.config.mlp == "swiglu":
            return swiglu(h, layer["mlp"], self.config.activation)
        return gelu_mlp(h, layer["mlp"], self.config.activation)

    def _plan_attention(self, chunks: list[SeqChunk], cache) -> AttentionPlan:
        """Which one-token chunks to attend in batches, when the cache can read many sequences at once
        (`decode_slots`) and there are several; every other chunk takes the loop.

        A batch is padded to its longest sequence, so the chunks are sorted by length and cut into groups of
        about DECODE_GROUP_SIZE: short sequences do not pay for the padding of long ones, and a group's
        gathered keys and values stay small enough to remain in the CPU cache from the gather to the products
        (one batch of 32 sequences of 256 tokens costs about twice as much as four batches of 8). Each group
        also costs a fixed number of array operations per layer, so a few sequences make one group, not
        several of one.
        """
        first_rows = np.cumsum([0] + [len(c.tokens) for c in chunks])  # row of each chunk's first token
        decodes = sorted((j for j, c in enumerate(chunks) if len(c.tokens) == 1), key=lambda j: chunks[j].start)
        if len(decodes) < 2 or not hasattr(cache, "decode_slots"):
            return AttentionPlan(first_rows, [], list(range(len(chunks))))
        n_groups = -(-len(decodes) // DECODE_GROUP_SIZE)
        size = -(-len(decodes) // n_groups)  # as even as possible: 12 decodes -> 2 groups of 6, not 8 + 4
        groups = [decodes[g:g + size] for g in range(0, len(decodes), size)]
        decode_groups = [(to_device(first_rows[group], self.device),
                          cache.decode_slots([chunks[j].seq_id for j in group], [chunks[j].start for j in group]))
                         for group in groups]
        looped = [j for j, c in enumerate(chunks) if len(c.tokens) != 1]
        return AttentionPlan(first_rows, decode_groups, looped)

    def _rope(self, positions: np.ndarray, inv_freq: np.ndarray, attention_factor: float = 1.0):
        cos, sin = rope_angles(positions, inv_freq, self.dtype, attention_factor)  # 2 x [T, hd/2]
        return to_device(cos, self.device), to_device(sin, self.device)

    def _check_ids(self, ids: np.ndarray, positions: np.ndarray) -> None:
        if ids.size and (ids.min() < 0 or ids.max() >= self.config.vocab_size):
            bad = int(ids[(ids < 0) | (ids >= self.config.vocab_size)][0])
            raise TinyInferError(f"token id {bad} is outside the vocabulary (0..{self.config.vocab_size - 1})")
        if positions.size and positions.max() >= self.config.max_seq_len:
            raise TinyInferError(
                f"position {int(positions.max())} is beyond the context window of {self.config.max_seq_len} tokens"
                f"{self.config.context_note}"
            )

    # -- conveniences ----------------------------------------------------------------------------------------

    def new_cache(self, max_seqs: int = 1, max_len: int | None = None) -> ContiguousKVCache:
        """A contiguous KV cache on this model's device, for `max_seqs` sequences of up to `max_len` tokens."""
        return ContiguousKVCache(self.config, max_seqs, min(max_len or self.config.max_seq_len, self.config.max_seq_len),
                                 self.dtype, self.xp, self.kv_cache_dtype)

    def logits(self, ids: list[int]) -> np.ndarray:
        """Logits at every position of one token sequence, without a lasting cache.  [T] -> [T, V] (NumPy)"""
        from tinyinfer.generation import check_token_ids  # noqa: PLC0415 - generation builds on the model

        ids = check_token_ids(self, ids, "the input of logits()")
        return to_numpy(self.forward([SeqChunk(0, 0, ids)], self.new_cache(1, len(ids)), all_logits=True))

    def generate(self, prompt, *args, **kwargs):
        """Generate a continuation of `prompt` (text or token ids); see `tinyinfer.generation.generate`."""
        from tinyinfer.generation import generate  # noqa: PLC0415 - generation builds on the model

        return generate(self, prompt, *args, **kwargs)

    @property
    def vocab_limit(self) -> int:
        """How many ids can be sampled: the tokenizer's vocabulary when the output layer has padding rows
        beyond it (checkpoints round the vocabulary up to a multiple of 64 or so for speed)."""
        n_tokens = self.tokenizer.vocab_size if self.tokenizer is not None else self.config.vocab_size
        return min(n_tokens, self.config.vocab_size)

    @property
    def n_params(self) -> int:
        """Number of parameters, a tied LM head counted once (it is the embedding table)."""
        total = sum(array.size for array in leaves(self.params))
        return total - (self.params["lm_head"].size if self.config.tie_word_embeddings else 0)


def _qk_norm(x, weight, cfg: Config):
    """The model's norm (or `qk_norm_kind`: StableLM's LayerNorm without bias) of q or k [T, heads, hd]: over each
    head (Qwen3, Gemma 3; StableLM and Cohere with a gain per head, weight [heads, hd]), or over the whole
    projection (OLMoE)."""
    kind = cfg.qk_norm_kind or cfg.norm
    if cfg.qk_norm_span == "full":
        flat = x.reshape(x.shape[0], -1)  # [T, heads, hd] -> [T, heads*hd], normed as one
        return apply_norm(flat, {"weight": weight}, kind, cfg.norm_eps).reshape(x.shape)
    return apply_norm(x, {"weight": weight}, kind, cfg.norm_eps)


def leaves(tree):
    """Every array of a parameter tree (nested dicts and lists), in order."""
    if isinstance(tree, dict):
        for value in tree.values():
            yield from leaves(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from leaves(value)
    else:
        yield tree


def map_arrays(tree, fn):
    """The same parameter tree (nested dicts and lists) with fn applied to every array."""
    if isinstance(tree, dict):
        return {key: map_arrays(value, fn) for key, value in tree.items()}
    if isinstance(tree, list):
        return [map_arrays(value, fn) for value in tree]
    return fn(tree)
