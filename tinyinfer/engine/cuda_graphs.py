"""CUDA graphs: a decode step's hundreds of kernel launches, recorded once and replayed as one.

Every array operation on a GPU is a kernel launch, and each launch costs the CPU a few microseconds of Python and
driver work (CuPy: about 5-10 us) whatever the kernel does. A decode step of a Llama block launches about 25
kernels per layer (norms, three products, RoPE, the cache write, attention, the gated MLP, the adds): for a 16-layer
1B model about 400 launches, 2-4 ms of CPU per step, while reading its 2.5 GB of bfloat16 weights at 3.35 TB/s (an
H100) takes the GPU 0.75 ms. The GPU waits for the CPU: launch overhead, not memory, sets the decode speed. A CUDA graph records
the launches of one step once (stream capture) and replays them with one call, `graph.launch()`: the step then
costs one launch of CPU work and the GPU's own time.

What a graph fixes: its kernels, their shapes and the addresses they read and write. So the runner keeps
*static* device buffers for everything that changes from step to step (the token ids, their positions, RoPE's
cos and sin, where each new token's key goes, the block tables, the lengths), copies each step's values into
them (`ndarray.set`, host to device), replays the graph, and reads the logits from the graph's static output.
Shapes are fixed by bucketing, as vLLM does: a graph per batch size in BATCH_SIZES_TO_CAPTURE, a batch padded up
to the next one (padding rows decode token 0 at position 0 into the cache's padding block, and their logits are
dropped), block tables padded to the widest a captured sequence can have (max_seq_len_to_capture tokens). Steps
a graph cannot serve run eager, the plain `Model.forward`: prefill chunks, batches larger than the largest bucket,
sequences longer than max_seq_len_to_capture, LoRA requests, and models whose step is not capturable (below).

Capture has rules CUDA enforces: no synchronisation and no host-to-device copy while a stream captures (the
runner fills the static inputs before), work on a non-default stream, memory the graph writes kept alive for as
long as it may be replayed (the capture allocates from a memory pool of the runners' own, which eager work never
reuses), and, in CuPy, no cuBLAS (so the step runs the capturable ops of tinyinfer/kernels.py: its products are
not `@`). The eager warm-up before each capture compiles the kernels and sizes the pool.

    graphs = DecodeGraphs(model, cache, max_num_seqs=32)
    if graphs.serves(chunks):
        logits = graphs.execute(chunks)   # [len(chunks), V], the same as model.forward(chunks, cache) within rounding

The graphs' logits equal the eager step's within float32 rounding (their products sum in another order:
tests/tolerances.py's `logits_bound`); a replay equals an eager run of the very step it captured bit for bit.
"""

from __future__ import annotations

import copy

import numpy as np

from tinyinfer.backend import is_array
from tinyinfer.engine.paged_cache import DecodeSlots, PagedKVCache
from tinyinfer.kernels import C_TYPES, choose_ops
from tinyinfer.model import Model, SeqChunk

BATCH_SIZES_TO_CAPTURE = [1, 2, 4] + [8 * i for i in range(1, 33)]  # vLLM's buckets: 1, 2, 4, 8, 16, ..., 256
MAX_SEQ_LEN_TO_CAPTURE = 8192  # vLLM's default: a longer sequence's step runs eager


def graph_unsupported(model) -> str | None:
    """Why `model`'s decode step cannot be captured as a CUDA graph (None: it can)."""
    cfg = model.config
    if model.device != "cuda":
        return "CUDA graphs need device 'cuda'"
    if type(model) is not Model:
        return f"a {type(model).__name__} (split over ranks) runs eager"
    if str(model.dtype) not in C_TYPES:
        return f"the capturable kernels take float32 or float16, not {model.dtype}"
    if cfg.kv_lora_rank or cfg.mlp != "swiglu" or any(cfg.is_moe_layer(i) for i in range(cfg.n_layers)):
        return "latent attention, GELU MLPs and Mixture-of-Experts layers run eager (their products are `@`)"
    if model.kv_cache_dtype == "int8":
        return "an int8 KV cache runs eager (the paged-attention kernel reads float pools)"
    if model.quantization is not None or not _plain_weights(model.params):
        return "quantised or adapted weights run eager (their products are not capturable kernels)"
    return None


def _plain_weights(params: dict) -> bool:
    """Whether every linear weight of the decoder and the LM head is a plain array (not quantised blocks)."""
    layers = params["layers"]
    weights = [params["lm_head"]] + [layer[n] for layer in layers for n in ("qkv", "o") if n in layer] + [
        w for layer in layers for w in layer.get("mlp", {}).values()]
    return all(is_array(w) for w in weights)


class StaticInputs:
    """The device buffers a decode graph reads, sized for the largest batch; a graph of B rows reads rows :B."""

    def __init__(self, model: Model, cache: PagedKVCache, max_batch: int, max_blocks: int):
        xp, half = model.xp, model.config.rotary_dim // 2
        self.model, self.cache, self.xp = model, cache, xp
        self.ids = xp.zeros(max_batch, dtype=np.int64)
        self.positions = xp.zeros(max_batch, dtype=np.int64)
        rotary = model.config.position == "rope"
        self.ropes = [[xp.zeros((max_batch, half), dtype=model.dtype) for _ in range(2)] if rotary else None
                      for _ in range(1 if model.local_inv_freq is None else 2)]
        self.blocks = xp.zeros(max_batch, dtype=np.int64)
        self.offsets = xp.zeros(max_batch, dtype=np.int64)
        self.tables = xp.zeros((max_batch, max_blocks), dtype=np.int64)
        self.lengths = xp.ones(max_batch, dtype=np.int64)

    def fill(self, chunks: list[SeqChunk], B: int) -> None:
        """Copy the step of `chunks` (one new token each) into rows :B, the rows past them padding."""
        cache, bs = self.cache, self.cache.block_size
        n = len(chunks)
        positions = np.zeros(B, dtype=np.int64)  # [B]; padding rows: token 0 at position 0
        positions[:n] = [c.start for c in chunks]
        ids = np.zeros(B, dtype=np.int64)
        ids[:n] = [c.tokens[0] for c in chunks]
        tables = np.full((B, self.tables.shape[1]), cache.pad_block, dtype=np.int64)  # [B, W]
        for row, chunk in enumerate(chunks):
            table = cache._table(chunk.seq_id, chunk.start + 1)[:-(-(chunk.start + 1) // bs)]  # checked: it holds them
            tables[row, :len(table)] = table
        for buffer, host in ((self.ids, ids), (self.positions, positions), (self.tables, tables),
                             (self.blocks, tables[np.arange(B), positions // bs]), (self.offsets, positions % bs),
                             (self.lengths, positions + 1)):
            buffer[:B].set(host)
        for buffers, host in zip(self.ropes, self.model.rope_tables(positions)):
            if buffers is not None:
                for buffer, table in zip(buffers, host):
                    buffer[:B].set(np.ascontiguousarray(table))

    def step(self, B: int):
        """The arguments of `Model.decode_step` over rows :B: views of the static buffers (fixed addresses)."""
        ropes = [None if r is None else (r[0][:B], r[1][:B]) for r in self.ropes]
        slots = DecodeSlots(self.blocks[:B], self.offsets[:B], self.tables[:B], self.lengths[:B],
                            self.tables.shape[1] * self.cache.block_size, self.xp)
        return self.ids[:B], self.positions[:B], (ropes[0], ropes[-1]), slots


class CUDAGraphRunner:
    """The decode step of `batch_size` rows, captured once as a CUDA graph and replayed with new inputs."""

    def __init__(self, model: Model, cache: PagedKVCache, inputs: StaticInputs, batch_size: int, pool):
        self.model, self.cache, self.inputs, self.batch_size = model, cache, inputs, batch_size
        self.pool = pool  # the memory pool the capture allocates from (shared by the runners, never by eager work)
        self.graph = None
        self.output = None  # [batch_size, V]: the logits the graph writes
        self.replays = 0

    def run_step(self):
        """The captured work: the decode step over the static inputs, its logits into the static output."""
        self.output[...] = self.model.decode_step(*self.inputs.step(self.batch_size), self.cache)  # [B, V]

    def capture(self) -> None:
        """Warm up (one eager run: compiles the kernels, sizes the memory pool), then record the step as a graph."""
        xp = self.model.xp
        self.output = self.model.decode_step(*self.inputs.step(self.batch_size), self.cache).copy()  # warm-up
        stream = xp.cuda.Stream(non_blocking=True)  # the legacy default stream cannot capture
        with stream, xp.cuda.using_allocator(self.pool.malloc):
            stream.begin_capture()
            try:
                self.run_step()
            except BaseException:
                try:
                    stream.end_capture()  # leave capture mode; CUDA invalidated it, which end_capture reports
                except RuntimeError:
                    pass  # the error that broke the capture is the one to raise
                raise
            self.graph = stream.end_capture()

    def replay(self):
        """Launch the graph on the current stream (ordered after the input copies and before what reads the
        logits).  -> the static logits [batch_size, V], overwritten by the next replay"""
        self.graph.launch(self.model.xp.cuda.get_current_stream())
        self.replays += 1
        return self.output


def capture_sizes(max_num_seqs: int) -> list[int]:
    """The buckets a batch of up to `max_num_seqs` rows is padded to: [1, 2, 4] for 3, [1, 2, 4, 8] for 5 to 8;
    past 256, the buckets up to 256 (a larger batch runs eager)."""
    return [b for b in BATCH_SIZES_TO_CAPTURE if b < max_num_seqs] + [
        b for b in BATCH_SIZES_TO_CAPTURE if b >= max_num_seqs][:1]


class DecodeGraphs:
    """The engine's decode steps through CUDA graphs: a runner per batch-size bucket, captured on first use."""

    def __init__(self, model: Model, cache: PagedKVCache, max_num_seqs: int,
                 max_seq_len_to_capture: int = MAX_SEQ_LEN_TO_CAPTURE):
        self.unsupported = graph_unsupported(model)  # why graphs never serve this model (None: they can)
        self.source = model
        self.buckets = capture_sizes(max_num_seqs)
        self.max_len = min(model.config.max_seq_len, max_seq_len_to_capture)
        self.runners: dict[int, CUDAGraphRunner] = {}
        if self.unsupported:
            return
        self.model = copy.copy(model)  # the model as the graphs run it: the same parameters, capturable ops
        self.model.ops = choose_ops(model.kernels, model.xp, capturable=True)
        self.cache = cache
        self.inputs = StaticInputs(self.model, cache, self.buckets[-1], -(-self.max_len // cache.block_size))
        self.pool = model.xp.cuda.MemoryPool()

    @property
    def captures(self) -> int:
        """Graphs captured so far (one per bucket used)."""
        return len(self.runners)

    @property
    def replays(self) -> int:
        return sum(r.replays for r in self.runners.values())

    def serves(self, chunks: list[SeqChunk]) -> bool:
        """Whether a graph serves this step: one-token chunks only, without LoRA, few and short enough."""
        return (not self.unsupported and self.source.adapters is None and 0 < len(chunks) <= self.buckets[-1]
                and all(len(c.tokens) == 1 and c.adapter is None and c.start < self.max_len for c in chunks))

    def execute(self, chunks: list[SeqChunk]):
        """The logits of the step of `chunks` [len(chunks), V] through the graph of its bucket, captured the first
        time the bucket is used. A view of the graph's static output: read it before the next step."""
        self.model._check_ids(np.array([c.tokens[0] for c in chunks]), np.array([c.start for c in chunks]))
        B = next(b for b in self.buckets if b >= len(chunks))
        self.inputs.fill(chunks, B)
        if B not in self.runners:
            runner = CUDAGraphRunner(self.model, self.cache, self.inputs, B, self.pool)
            runner.capture()
            self.runners[B] = runner
        return self.runners[B].replay()[:len(chunks)]
