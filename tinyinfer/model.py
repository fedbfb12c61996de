"""The transformer forward pass: token ids in, next-token logits out, one story for every architecture.

    x = embed(ids)  (+ positions: GPT-2; x sqrt(d): Gemma)
    for each layer:
        x = x + attention(norm(x))       # tokens look at each other (through the KV cache)
        x = x + feed_forward(norm(x))    # each token alone (a dense MLP, or a Mixture-of-Experts)
    logits = norm(x) @ lm_head

Architectures differ by switches in their Config, not by code paths. How a layer wires its sublayers is one
of five small block functions, chosen once per model (`choose_block`), so the loop reads `x = block(x, layer)`:
Gemma 2 norms each sublayer's output again before adding it (`sandwich_block`: x = x + norm(attention(norm(x))));
OLMo 2 norms the output only (`post_norm_block`: x = x + norm(attention(x))); GPT-NeoX feeds the layer's input to
both sublayers (`parallel_block`: x = x + attention(norm(x)) + mlp(norm'(x))), Phi-2 and Cohere through one norm
(`shared_norm_block`). How a layer attends is its `AttentionSpec` (tinyinfer/config.py), also worked out once:
Gemma 2 soft-caps attention scores (and logits); OLMo 1 clamps q, k and v (`clip_qkv`); Granite scales the embeddings,
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

from tinyinfer.attention import attention, causal_mask, soft_cap
from tinyinfer.backend import get_xp, to_device, to_numpy
from tinyinfer.config import AttentionSpec, Config
from tinyinfer.errors import TinyInferError, is_integer_at_least
from tinyinfer.flash_attention import QUERY_TILE, tiled_attention
from tinyinfer.kv_cache import ContiguousKVCache, KVCache
from tinyinfer.kernels import choose_ops
from tinyinfer.kv_quant import check_kv_cache_dtype
from tinyinfer.mla import expand_values, latent_qkv
from tinyinfer.mlp import gelu_mlp
from tinyinfer.moe import moe_feed_forward
from tinyinfer.norms import apply_norm
from tinyinfer.param_tree import leaves, map_arrays
from tinyinfer.rope import inv_frequencies, rope_angles, rope_attention_factor
from tinyinfer.weights import arrange_for_matvec


DECODE_GROUP_SIZE = 8  # batched decode attention: sequences of similar length, about this many per batch
# A prompt chunk's attention is tiled (tinyinfer/flash_attention.py) from two query tiles on, where skipping the
# key tiles in a query tile's future pays for the tiles' overhead, and whatever its length past this many scores
# (heads x n x L, 16 MiB of float32), so that no chunk holds more. Shorter chunks run faster untiled (one CPU
# thread: a 64-token prefill 1.2-1.7x, 16 queries after 2,048 cached tokens 1.1-1.4x; see the chapter).
TILED_ATTENTION_MIN_QUERIES = 2 * QUERY_TILE
TILED_ATTENTION_MAX_SCORES = 2**22


@dataclass
class SeqChunk:
    """New tokens of sequence `seq_id`; the first is at position `start` (= tokens already cached)."""

    seq_id: int
    start: int
    tokens: list[int]
    adapter: str | None = None  # the LoRA adapter the sequence asked for (tinyinfer/lora.py), if any


@dataclass
class AttentionPlan:
    """How a forward pass runs its layers, worked out once since it is the same in every layer: the row of each
    chunk's first token, the one-token chunks attended in batches (their rows and the cache's slots for
    them, see `Model.decode_block`), the chunks that take the loop one by one, and with LoRA adapters which
    rows take which adapter."""

    first_rows: np.ndarray  # [n_chunks + 1]
    decode_groups: list[tuple]  # [(rows [B] on the device, the cache's DecodeSlots)]
    looped: list[int]  # indices of the other chunks
    masks: dict = field(default_factory=dict)  # (chunk index, window) -> its causal mask on the device
    adapter_routes: list = field(default_factory=list)  # LoRA: (adapter, its rows) of this pass (tinyinfer/lora.py)

    def mask(self, j: int, chunk: SeqChunk, window: int | None, device: str):
        """Chunk j's causal mask [n, end] for `window`: built on the host and copied to the device once per
        pass, not once per layer (every layer with the same window attends under the same mask)."""
        if (j, window) not in self.masks:
            self.masks[j, window] = to_device(causal_mask(len(chunk.tokens), chunk.start, window), device)
        return self.masks[j, window]


class Sublayers:
    """Layer i of one forward pass, as a block wires it: its attention (through the cache), its feed-forward, its
    norms, and the residual add."""

    __slots__ = ("model", "i", "params", "chunks", "plan", "rope", "cache")

    def __init__(self, model: Model, i: int, params: dict, chunks: list[SeqChunk], plan: AttentionPlan, rope, cache):
        self.model, self.i, self.params = model, i, params
        self.chunks, self.plan, self.rope, self.cache = chunks, plan, rope, cache

    def attention(self, h):  # [T, d] -> [T, d]
        return self.model.attention_block(self.i, self.params, h, self.chunks, self.plan, self.rope, self.cache)

    def mlp(self, h):  # [T, d] -> [T, d]
        return self.model.feed_forward(self.i, self.params, h)

    def norm(self, h, name: str):  # [T, d] -> [T, d], by the layer's norm `name` ("attn_norm", "post_mlp_norm"...)
        cfg = self.model.config
        return self.model.ops.norm(h, self.params[name], cfg.norm, cfg.norm_eps)

    def add(self, x, h):  # [T, d]: h joins the residual stream
        return self.model.add_residual(x, h)


# The blocks: how a layer wires its two sublayers to the residual stream. Each model runs one of them, chosen
# from its Config once (`choose_block`).  x [T, d] -> [T, d]

def pre_norm_block(x, layer: Sublayers):
    """Llama, GPT-2 and most: each sublayer reads the stream through a norm of its own."""
    x = layer.add(x, layer.attention(layer.norm(x, "attn_norm")))  # x = x + attention(norm(x))
    return layer.add(x, layer.mlp(layer.norm(x, "mlp_norm")))  # x = x + mlp(norm'(x))


def sandwich_block(x, layer: Sublayers):
    """Gemma 2 and 3: a pre-norm block whose sublayers' outputs are normed again before they join the stream."""
    x = layer.add(x, layer.norm(layer.attention(layer.norm(x, "attn_norm")), "post_attn_norm"))
    return layer.add(x, layer.norm(layer.mlp(layer.norm(x, "mlp_norm")), "post_mlp_norm"))


def post_norm_block(x, layer: Sublayers):
    """OLMo 2: the sublayers read the stream as it is; their outputs are normed."""
    x = layer.add(x, layer.norm(layer.attention(x), "post_attn_norm"))  # x = x + norm(attention(x))
    return layer.add(x, layer.norm(layer.mlp(x), "post_mlp_norm"))  # x = x + norm'(mlp(x))


def parallel_block(x, layer: Sublayers):
    """GPT-NeoX, Falcon-40B: both sublayers read the layer's input, each through its own norm, and both outputs
    join the stream at once: x + attention(norm(x)) + mlp(norm'(x))."""
    h = layer.add(x, layer.attention(layer.norm(x, "attn_norm")))
    return layer.add(h, layer.mlp(layer.norm(x, "mlp_norm")))


def shared_norm_block(x, layer: Sublayers):
    """Phi-2, Cohere, Falcon-7B, StableLM 2 12B: one norm whose output both sublayers read side by side:
    x + attention(norm(x)) + mlp(norm(x))."""
    normed = layer.norm(x, "attn_norm")
    return layer.add(layer.add(x, layer.attention(normed)), layer.mlp(normed))


def choose_block(cfg: Config):
    """The block of `cfg`'s layers, from its switches: `shared_input_norm`, `parallel_residual`, `pre_norms`,
    `post_norms`."""
    parallel = cfg.shared_input_norm or cfg.parallel_residual
    if parallel and (cfg.post_norms or not cfg.pre_norms):
        raise TinyInferError("config: a parallel block (parallel_residual, shared_input_norm) norms its sublayers' "
                             "inputs only; pre_norms must be on and post_norms off")
    if not (cfg.pre_norms or cfg.post_norms):
        raise TinyInferError("config: pre_norms and post_norms are both off; a block norms its sublayers' inputs, "
                             "outputs, or both")
    if parallel:
        return shared_norm_block if cfg.shared_input_norm else parallel_block
    if cfg.pre_norms:
        return sandwich_block if cfg.post_norms else pre_norm_block
    return post_norm_block


class Model:
    """A loaded model: config, parameters on a device, and (when found) its tokenizer."""

    def __init__(self, config: Config, params: dict, tokenizer=None, device: str = "cpu",
                 generation_config: dict | None = None, dtype=np.float32, kv_cache_dtype: str = "auto",
                 kernels: str = "plain"):
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
        self.block = choose_block(config)  # how each layer wires its sublayers to the residual stream
        self.kernels = kernels
        self.ops = choose_ops(kernels, self.xp)  # norm, SwiGLU, RoPE: the plain array code or fused kernels
        self.attention_specs = [config.attention_spec(i) for i in range(config.n_layers)]  # how each layer attends

    # -- the forward pass ----------------------------------------------------------------------------------

    def forward(self, chunks: list[SeqChunk], cache: KVCache, all_logits: bool = False):
        """Logits of the last token of each chunk [len(chunks), V], or of every token [T, V] if all_logits."""
        cfg, p = self.config, self.params
        ids = np.concatenate([np.asarray(c.tokens, dtype=np.int64) for c in chunks])  # [T]
        positions = np.concatenate([np.arange(c.start, c.start + len(c.tokens)) for c in chunks])  # [T]
        self._check_ids(ids, positions)
        x = self.embed(to_device(ids, self.device), to_device(positions, self.device) if cfg.position == "learned"
                       else None)  # [T] -> [T, d]
        rope, local_rope = self.rope_tables(positions)
        rope = None if rope is None else tuple(to_device(a, self.device) for a in rope)
        local_rope = rope if self.local_inv_freq is None else tuple(to_device(a, self.device) for a in local_rope)
        plan = self._plan_attention(chunks, cache)
        if self.adapters is not None:  # which rows take which LoRA adapter, in every layer of this pass
            plan.adapter_routes = self.adapters.route(chunks, self.xp)
        x = self.run_layers(x, range(cfg.n_layers), chunks, plan, (rope, local_rope), cache)  # [T, d]
        if not all_logits:
            last = np.cumsum([len(c.tokens) for c in chunks]) - 1
            x = x[to_device(last, self.device)]  # [T, d] -> [n_chunks, d]: only what sampling needs
        return self.output_logits(x)

    def decode_step(self, ids, positions, ropes: tuple, slots, cache: KVCache):
        """One decode step of B sequences (one new token each) from arrays already on the device, with no host work:
        what a CUDA graph captures (tinyinfer/engine/cuda_graphs.py). ids, positions [B]; ropes: the (cos, sin) of
        the global and of the sliding layers; slots: the cache's DecodeSlots of the B sequences.  -> logits [B, V]"""
        x = self.embed(ids, positions if self.config.position == "learned" else None)  # [B] -> [B, d]
        plan = AttentionPlan(None, [(slice(None), slots)], [])  # every row a decode: one batch
        x = self.run_layers(x, range(self.config.n_layers), [], plan, ropes, cache)
        return self.output_logits(x)

    def embed(self, ids, positions=None):
        """The token embeddings of device ids [T] (Gemma's, Granite's scale; GPT-2 adds those of the positions).
        -> [T, d]"""
        cfg, p = self.config, self.params
        x = p["embed"][ids]  # [T] -> [T, d]
        if cfg.embed_scale != 1.0:  # Gemma: sqrt(d), Granite: its multiplier, rounded to the embedding's dtype first
            x = x * self.dtype.type(np.float32(cfg.embed_scale))
        if positions is not None:
            x = x + p["pos_embed"][positions]  # GPT-2 adds a learned position vector
        return x

    def run_layers(self, x, layers: range, chunks: list[SeqChunk], plan: AttentionPlan, ropes: tuple, cache: KVCache):
        """x through the decoder layers numbered `layers` (all of them; a pipeline stage's share: tinyinfer/
        pipeline.py). `ropes`: the (cos, sin) of the global and of the sliding layers.  [T, d] -> [T, d]"""
        rope_of = {"global": ropes[0], "local": ropes[1], None: None}
        for i in layers:
            params = self.params["layers"][i]
            if plan.adapter_routes:  # LoRA: the adapted weights, read with this pass's rows of each adapter
                params = self.adapters.bind(params, plan.adapter_routes)
            layer = Sublayers(self, i, params, chunks, plan, rope_of[self.attention_specs[i].rope], cache)
            x = self.block(x, layer)  # [T, d] -> [T, d]
        return x

    def output_logits(self, x):
        """The final norm and the LM head (split by vocabulary over ranks: tinyinfer/parallel.py).  [*, d] -> [*, V]"""
        cfg = self.config
        x = self.ops.norm(x, self.params["final_norm"], cfg.norm, cfg.norm_eps)
        logits = self.ops.linear(x, self.params, "lm_head")  # [*, d] -> [*, V] (+ Phi-2's bias)
        if cfg.logits_divisor != 1.0:  # Granite
            logits = logits / self.dtype.type(cfg.logits_divisor)
        return soft_cap(logits, cfg.final_softcap)

    def add_residual(self, x, h):
        """x + h, a sublayer's output h joining the residual stream (Granite: times `residual_scale`).  [T, d]"""
        scale = self.config.residual_scale
        return x + (h * self.dtype.type(scale) if scale != 1.0 else h)

    def attention_block(self, i: int, layer: dict, h, chunks: list[SeqChunk], plan: AttentionPlan, rope,
                        cache: KVCache):
        """Project to q, k, v for all tokens; attend sequence by sequence through the cache; project out.
        DeepSeek's latent attention (`kv_lora_rank`) projects into its latent space instead, attends over one
        latent key/value head in the same loops, and expands each head's value afterwards (tinyinfer/mla.py)."""
        cfg, spec = self.config, self.attention_specs[i]
        T = h.shape[0]
        q, k, v = latent_qkv(h, layer, cfg, rope) if cfg.kv_lora_rank else self._qkv(layer, h, rope, spec)
        out = self.xp.empty((T, cfg.n_heads * cfg.head_dim), dtype=q.dtype)  # [T, H*hd]
        for rows, slots in plan.decode_groups:
            self.decode_block(i, rows, slots, q, k, v, out, cache)
        for j in plan.looped:
            chunk = chunks[j]
            n, end = len(chunk.tokens), chunk.start + len(chunk.tokens)
            rows = slice(plan.first_rows[j], plan.first_rows[j] + n)
            cache.write(i, chunk.seq_id, chunk.start, k[rows], v[rows])
            keys, values = cache.read(i, chunk.seq_id, end)  # 2 x [KV, end, hd]
            sinks = layer.get("sinks")  # gpt-oss: one sink logit per head [H] (None: no sinks)
            if n >= TILED_ATTENTION_MIN_QUERIES or cfg.n_heads * n * end > TILED_ATTENTION_MAX_SCORES:
                out[rows] = tiled_attention(q[rows], keys, values, chunk.start, spec.window, spec.scale,
                                            softcap=spec.softcap, sinks=sinks)  # -> [n, H*hd]
            else:
                mask = plan.mask(j, chunk, spec.window, self.device)  # [n, end]
                out[rows] = attention(q[rows], keys, values, mask, spec.scale, spec.softcap, sinks)  # -> [n, H*hd]
        if cfg.kv_lora_rank:
            out = expand_values(out, layer, cfg)  # [T, H*(r + dr)] -> [T, H*dv]
        return self.ops.linear(out, layer, "o")  # [T, H*hd] (latent attention: [T, H*dv]) -> [T, d]

    def _qkv(self, layer: dict, h, rope, spec: AttentionSpec):
        """q [T, H, hd], k and v [T, KV, hd] of every token: one product, then OLMo's clamp, q/k norms, RoPE."""
        cfg = self.config
        T, q_dim, kv_dim = h.shape[0], cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        qkv = self.ops.linear(h, layer, "qkv")  # [T, d] -> [T, q_dim + 2 kv_dim]: three projections in one product
        if spec.clamp is not None:  # OLMo 1: every coordinate of q, k and v within +-clip_qkv
            qkv = self.xp.clip(qkv, -spec.clamp, spec.clamp)
        q = qkv[:, :q_dim].reshape(T, cfg.n_heads, cfg.head_dim)  # -> [T, H, hd]
        k = qkv[:, q_dim:q_dim + kv_dim].reshape(T, cfg.n_kv_heads, cfg.head_dim)  # -> [T, KV, hd]
        v = qkv[:, q_dim + kv_dim:].reshape(T, cfg.n_kv_heads, cfg.head_dim)  # -> [T, KV, hd]
        if spec.qk_norm:  # normalise q and k before rotating them: each head (Qwen3), all heads as one (OLMoE)
            q, k = _qk_norm(q, layer["q_norm"], cfg), _qk_norm(k, layer["k_norm"], cfg)
        if rope is not None:
            q, k = self.ops.rope(q, *rope), self.ops.rope(k, *rope)
        return q, k, v

    def decode_block(self, i: int, rows, slots, q, k, v, out, cache) -> None:
        """Attention of many one-token chunks at once (`rows` of q, k, v), through a cache that reads a batch
        of sequences (the paged cache of the serving engine): one gather and one batched product instead of
        a loop. `slots` (from the cache's `decode_slots`, once per forward pass) say where they write and read."""
        cache.write_batch(i, slots, k[rows], v[rows])
        spec = self.attention_specs[i]
        sinks = self.params["layers"][i].get("sinks")  # gpt-oss: [H]
        pools = cache.pools(i) if self.ops.paged_attention is not None else None
        if pools is not None:  # a GPU kernel reads the blocks where they are (tinyinfer/kernels.py)
            out[rows] = self.ops.paged_attention(q[rows], *pools, slots, spec, sinks)  # -> [B, H*hd]
            return
        keys, values = cache.read_batch(i, slots)  # 2 x [KV, B, L, hd], padded to the longest
        mask = slots.mask(spec.window)  # [B, L]
        out[rows] = self.ops.decode_attention(q[rows], keys, values, mask, spec.scale, spec.softcap, sinks)  # -> [B, H*hd]

    def feed_forward(self, i: int, layer: dict, h):
        """The MLP of layer i: SwiGLU, GPT-2's GELU MLP, or a Mixture-of-Experts (tinyinfer/moe.py).  [T, d] -> [T, d]"""
        if self.config.is_moe_layer(i):
            return moe_feed_forward(h, layer["mlp"], self.config, self.expert_load, i)
        if self.config.mlp == "swiglu":
            return self.ops.swiglu(h, layer["mlp"], self.config.activation)
        return gelu_mlp(h, layer["mlp"], self.config.activation)

    def _plan_attention(self, chunks: list[SeqChunk], cache: KVCache) -> AttentionPlan:
        """Which one-token chunks to attend in batches, when the cache can read many sequences at once
        (`KVCache.reads_batches`) and there are several; every other chunk takes the loop.

        A batch is padded to its longest sequence, so the chunks are sorted by length and cut into groups of
        about DECODE_GROUP_SIZE: short sequences do not pay for the padding of long ones, and a group's
        gathered keys and values stay small enough to remain in the CPU cache from the gather to the products
        (one batch of 32 sequences of 256 tokens costs about twice as much as four batches of 8). Each group
        also costs a fixed number of array operations per layer, so a few sequences make one group, not
        several of one.
        """
        first_rows = np.cumsum([0] + [len(c.tokens) for c in chunks])  # row of each chunk's first token
        decodes = sorted((j for j, c in enumerate(chunks) if len(c.tokens) == 1), key=lambda j: chunks[j].start)
        if len(decodes) < 2 or not cache.reads_batches:
            return AttentionPlan(first_rows, [], list(range(len(chunks))))
        n_groups = -(-len(decodes) // DECODE_GROUP_SIZE)
        size = -(-len(decodes) // n_groups)  # as even as possible: 12 decodes -> 2 groups of 6, not 8 + 4
        groups = [decodes[g:g + size] for g in range(0, len(decodes), size)]
        decode_groups = [(to_device(first_rows[group], self.device),
                          cache.decode_slots([chunks[j].seq_id for j in group], [chunks[j].start for j in group]))
                         for group in groups]
        looped = [j for j, c in enumerate(chunks) if len(c.tokens) != 1]
        return AttentionPlan(first_rows, decode_groups, looped)

    def rope_tables(self, positions: np.ndarray) -> tuple:
        """(cos, sin), each [T, rotary_dim/2] on the host, of the global layers and of the sliding ones at `positions`
        (Gemma 3's sliding layers have a theta of their own; the same pair otherwise). (None, None) without RoPE."""
        if self.config.position != "rope":
            return None, None
        rope = rope_angles(positions, self.inv_freq, self.dtype, self.rope_factor)  # 2 x [T, hd/2]
        return rope, rope if self.local_inv_freq is None else rope_angles(positions, self.local_inv_freq, self.dtype)

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
        ids = check_token_ids(self, ids, "the input of logits()")
        return to_numpy(self.forward([SeqChunk(0, 0, ids)], self.new_cache(1, len(ids)), all_logits=True))

    # model.generate(prompt, ...) is tinyinfer/generation.py's `generate`, which attaches itself to this class:
    # generation builds on the model, so the model does not import it.

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


def check_token_ids(model, ids, what: str) -> list[int]:
    """`ids` as a list of ints, if it is a non-empty sequence of token ids of `model`; else a TinyInferError
    naming `what` was wrong (an id past the vocabulary would index past the embedding table).

    check_token_ids(model, [5, np.int64(6)], "the prompt") -> [5, 6]
    """
    if isinstance(ids, (str, bytes, bytearray)) or not hasattr(ids, "__iter__"):
        raise TinyInferError(f"{what} is a {type(ids).__name__}: give a list of token ids")
    ids = list(ids)
    if not ids:
        raise TinyInferError(f"{what} is empty: give at least one token")
    vocab_size = model.config.vocab_size
    for i in ids:
        if not is_integer_at_least(i, 0) or i >= vocab_size:
            raise TinyInferError(f"{what} holds {i!r}, which is not a token id of this model: "
                                 f"ids must be integers in [0, {vocab_size - 1}]")
    return [int(i) for i in ids]


def _qk_norm(x, weight, cfg: Config):
    """The model's norm (or `qk_norm_kind`: StableLM's LayerNorm without bias) of q or k [T, heads, hd]: over each
    head (Qwen3, Gemma 3; StableLM and Cohere with a gain per head, weight [heads, hd]), or over the whole
    projection (OLMoE)."""
    kind = cfg.qk_norm_kind or cfg.norm
    if cfg.qk_norm_span == "full":
        flat = x.reshape(x.shape[0], -1)  # [T, heads, hd] -> [T, heads*hd], normed as one
        return apply_norm(flat, {"weight": weight}, kind, cfg.norm_eps).reshape(x.shape)
    return apply_norm(x, {"weight": weight}, kind, cfg.norm_eps)
