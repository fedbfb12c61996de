"""Disaggregated prefill and decode: one rank computes prompts, another generates, the prompt's KV blocks sent
from the first to the second.

Sharing one worker, a long prompt's prefill stalls every running sequence's next token (chunked prefill
limits the stall, it cannot remove it): TPOT suffers from other users' prompts. Split the two phases:

    rank 0 (prefill)                               rank 1 (decode: the engine, tinyinfer/engine/llm.py)
    a request arrives
    its prompt's full blocks through the model
    --send the request, then K and V of its blocks [L, KV, m, block, hd]-->
                                                   write them into free blocks of its pool, named as the
                                                   prefix cache names them; add the request
                                                   admission finds the blocks in the prefix cache: only the
                                                   last (partial) block's tokens run here, then the first
                                                   token is sampled and decoding goes on, streaming tokens

The decode engine never learns that the blocks came from elsewhere: to it they are a prefix-cache hit. So its
outputs are the combined engine's (same sampler, same seed), and if the pool must reuse the blocks before the
request is admitted, the engine simply computes the prompt itself. The cost is the transfer: prompt tokens x
the KV bytes per token of chapter 05, m blocks of 2 x n_layers x KV x block x hd numbers.

    mpirun -n 2 python -m tinyinfer bench serve --disaggregated --prompt-len 300:400 --output-len 32:64
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

from tinyinfer.engine.block_manager import prefix_hashes
from tinyinfer.engine.paged_cache import PagedKVCache
from tinyinfer.errors import TinyInferError
from tinyinfer.kv_quant import QuantizedKV
from tinyinfer.model import SeqChunk
from tinyinfer.sampling import SamplingParams

PREFILL_RANK, DECODE_RANK = 0, 1


@dataclass
class Handoff:
    """A request on its way from the prefill rank to the decode rank; its blocks follow in two arrays."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    arrival: float  # time.perf_counter() at arrival (the same clock in every process of a machine)
    n_blocks: int


def prefix_blocks(n_prompt: int, block_size: int) -> int:
    """How many of a prompt's blocks the decode engine can take from its prefix cache: the full blocks before
    the last token's (whose logits must be computed where the first token is sampled).

    >>> prefix_blocks(33, 16), prefix_blocks(32, 16), prefix_blocks(10, 16)
    (2, 1, 0)
    """
    return (n_prompt - 1) // block_size


def prefill(model, prompt_ids: list[int], block_size: int):
    """K and V of the prompt's prefix blocks, computed by one forward pass.  -> 2 x [L, KV, m, block, hd]"""
    m = prefix_blocks(len(prompt_ids), block_size)
    cache = PagedKVCache(model.config, m, block_size, model.dtype, model.xp)
    cache.tables[0] = list(range(m))
    if m:
        model.forward([SeqChunk(0, 0, prompt_ids[:m * block_size])], cache)
    return model.xp.stack(cache.k), model.xp.stack(cache.v)


def send_request(comm, handoff: Handoff, keys, values) -> None:
    comm.send_object(handoff, DECODE_RANK)
    comm.send(keys, DECODE_RANK)
    comm.send(values, DECODE_RANK)


def insert_prefix(llm, prompt_ids: list[int], keys, values) -> None:
    """Write a prompt's blocks into free blocks of the engine's pool and name them as its prefix cache does;
    held by nobody, they wait there for the request's admission. No room: nothing is inserted."""
    allocator, cache, bs = llm.scheduler.allocator, llm.cache, llm.cache.block_size
    m = keys.shape[2]
    if m == 0 or allocator.num_free < m:
        return
    blocks = [allocator.allocate() for _ in range(m)]
    for layer in range(len(cache.k)):
        cache.k[layer][:, blocks] = keys[layer]  # [KV, m, bs, hd] into the pool [KV, N, bs, hd]
        cache.v[layer][:, blocks] = values[layer]
    for i, (block, name) in enumerate(zip(blocks, prefix_hashes(prompt_ids[:m * bs], bs))):
        allocator.register(block, name, prompt_ids[i * bs:(i + 1) * bs])
    allocator.free(blocks)


def receive_requests(comm, model, block_size: int, inbox: queue.Queue) -> None:
    """The decode rank's receiving thread: each handoff and its blocks into `inbox`, then None at the end."""
    cfg = model.config
    with comm.patience(float("inf")):  # the next request may be long in coming
        while (handoff := comm.recv_object(PREFILL_RANK)) is not None:
            shape = (cfg.n_layers, cfg.n_kv_heads, handoff.n_blocks, block_size, cfg.head_dim)
            keys, values = (comm.recv(shape, model.dtype, PREFILL_RANK) for _ in range(2))
            inbox.put((handoff, keys, values))
    inbox.put(None)


def decode_worker(comm, llm, on_output=None) -> list:
    """Rank 1: the engine, fed with what the prefill rank sends, until it says the workload is over. Every
    output of every step goes to on_output (a stream); returns the finished outputs, in the order they ended."""
    if llm.cache.v is llm.cache.k or isinstance(llm.cache.k[0], QuantizedKV):
        raise TinyInferError("disaggregated serving moves plain K and V blocks: use --kv-cache-dtype auto and a "
                             "model with keys and values per head")
    inbox: queue.Queue = queue.Queue()
    receiver = threading.Thread(target=receive_requests, args=(comm, llm.model, llm.cache.block_size, inbox),
                                daemon=True)
    receiver.start()
    finished, more = [], True
    while more or llm.has_unfinished():
        while more and (not inbox.empty() or not llm.has_unfinished()):
            item = inbox.get()  # blocks only when there is nothing to step
            if item is None:
                more = False
                break
            handoff, keys, values = item
            insert_prefix(llm, handoff.prompt_ids, keys, values)
            llm.add_request(handoff.prompt_ids, handoff.params, request_id=handoff.request_id, arrival=handoff.arrival)
        for out in llm.step():
            if on_output is not None:
                on_output(out)
            if out.finished:
                finished.append(out)
    receiver.join()
    return finished


def prefill_worker(comm, model, requests, block_size: int, start: float) -> None:
    """Rank 0: each request (request_id, prompt_ids, params, arrival seconds after `start`) prefilled when it
    has arrived, in order, and handed to the decode rank; then None, the end of the workload."""
    for request_id, prompt_ids, params, arrival in requests:
        time.sleep(max(0.0, start + arrival - time.perf_counter()))
        keys, values = prefill(model, prompt_ids, block_size)
        handoff = Handoff(request_id, prompt_ids, params, start + arrival, int(keys.shape[2]))
        send_request(comm, handoff, keys, values)
    comm.send_object(None, DECODE_RANK)
