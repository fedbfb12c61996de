"""CUDA graphs of the decode step: a replay equals the eager step, follows its static inputs, and is captured once.

The tests marked `gpu` run on CuPy where a GPU is present, and on the strict CuPy stand-in everywhere else
(tests/strict_cupy.py), whose stream capture refuses what CUDA and CuPy refuse and whose replay recomputes the
recorded work from the static buffers. Tolerances: a replay against an eager run of the very step it captured is
bit-identical (the same kernels on the same shapes, none of them with atomics or an order that depends on timing);
the graphs against the plain engine differ only by the order their products are summed in (the graph's products are
not cuBLAS, tinyinfer/kernels.py): within `logits_bound` (tests/tolerances.py), with the same greedy tokens.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import REAL_GPU
from tolerances import assert_close, logits_bound

import tinyinfer
from tinyinfer.backend import get_xp, to_numpy
from tinyinfer.engine import LLM
from tinyinfer.engine.cuda_graphs import BATCH_SIZES_TO_CAPTURE, capture_sizes, graph_unsupported
from tinyinfer.kernels import PLAIN_OPS
from tinyinfer.model import SeqChunk
from tinyinfer.quantize import quantize_model

PROMPTS = ["ROMEO:", "JULIET:\nO Romeo", "KING:", "QUEEN:\nMy lord", "First Citizen:"]


def checked_engine(model, **engine_args):
    """An engine whose every graph step is also computed twice more and compared: by an eager run of the captured
    step on the same static inputs (bit for bit), and by the plain forward pass (within the rounding bound)."""
    llm = LLM(model, **engine_args)
    graphs, seen = llm.graphs, []

    def execute_model(chunks):
        if not graphs.serves(chunks):
            return model.forward(chunks, llm.cache)
        logits = graphs.execute(chunks)  # [n, V], the graph's static output
        replayed = to_numpy(logits).copy()
        bucket = graphs.runners[next(b for b in graphs.buckets if b >= len(chunks))].batch_size
        again = to_numpy(graphs.model.decode_step(*graphs.inputs.step(bucket), llm.cache))[:len(chunks)]
        eager = to_numpy(model.forward(chunks, llm.cache))
        np.testing.assert_array_equal(replayed, again)  # the replay is the captured step, on this step's inputs
        assert_close(replayed, eager, logits_bound(model.config, eager, positions=max(c.start for c in chunks) + 1))
        seen.append(len(chunks))
        return logits

    llm.execute_model = execute_model
    return llm, seen


@pytest.mark.gpu
def test_graph_replays_equal_the_eager_step_as_sequences_join_and_finish():
    """Continuous batching on the paged cache: five requests of different lengths, two joining mid-way, so the batch
    grows and shrinks through the buckets 1, 2, 4 and 8 (padding rows included); at every decode step the replay
    equals the eager step (see checked_engine); each bucket is captured once and replayed many times; the tokens are
    the eager engine's."""
    model = tinyinfer.load("shakespeare", device="cuda")
    params = [tinyinfer.SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (6, 20, 12, 16, 9)]
    llm, seen = checked_engine(model, max_num_seqs=8, block_size=8)
    outputs: dict[str, list[int]] = {}
    for prompt, p in zip(PROMPTS[:3], params):
        llm.add_request(prompt, p, request_id=prompt)
    for step in range(40):
        if step == 3:  # two join while the first three decode
            for prompt, p in zip(PROMPTS[3:], params[3:]):
                llm.add_request(prompt, p, request_id=prompt)
        for out in llm.step():
            outputs.setdefault(out.request_id, []).extend(out.new_token_ids)
        if not llm.has_unfinished():
            break
    eager = LLM(model, enforce_eager=True).generate(PROMPTS, params)
    assert [outputs[p] for p in PROMPTS] == [o.token_ids for o in eager]
    assert {1, 2, 4, 8} >= {next(b for b in llm.graphs.buckets if b >= n) for n in seen} >= {4, 8}
    assert set(seen) & {3, 5}, "no step padded its batch up to a bucket"
    graphs = llm.graphs
    assert graphs.captures == len(graphs.runners) == len({next(b for b in graphs.buckets if b >= n) for n in seen})
    assert graphs.replays == len(seen) > 3 * graphs.captures  # captured once per bucket, then replayed
    if not REAL_GPU:
        assert get_xp("cuda").transfers.captures == graphs.captures


@pytest.mark.gpu
def test_graph_engine_gives_the_eager_engines_tokens_greedy_and_sampled():
    model = tinyinfer.load("shakespeare", device="cuda")
    params = [tinyinfer.SamplingParams(temperature=0, max_tokens=24),
              tinyinfer.SamplingParams(temperature=0.8, top_p=0.9, max_tokens=24, seed=3)]
    for p in params:
        graphs, eager = (LLM(model, enforce_eager=e).generate(PROMPTS, p) for e in (False, True))
        assert [o.token_ids for o in graphs] == [o.token_ids for o in eager]


@pytest.mark.gpu
def test_a_replay_reads_the_static_inputs_copied_in_before_it():
    """Two different steps through one captured graph: each replay's logits are those of its own inputs."""
    model = tinyinfer.load("shakespeare", device="cuda")
    llm = LLM(model, max_num_seqs=4)  # blocks of 16: the prompts' next position is in a block they hold
    for prompt in PROMPTS[:2]:
        llm.add_request(prompt, tinyinfer.SamplingParams(temperature=0, max_tokens=8))
    llm.step()  # the prefills (eager)
    chunks = [SeqChunk(seq.seq_id, seq.num_computed, [seq.tokens[-1]]) for seq in llm.scheduler.running]
    first = to_numpy(llm.graphs.execute(chunks)).copy()
    other = [SeqChunk(c.seq_id, c.start, [(c.tokens[0] + 7) % model.config.vocab_size]) for c in chunks]
    second = to_numpy(llm.graphs.execute(other)).copy()
    assert llm.graphs.captures == 1 and llm.graphs.replays == 2
    for logits, step in ((first, chunks), (second, other)):
        eager = to_numpy(model.forward(step, llm.cache))
        assert_close(logits, eager, logits_bound(model.config, eager, positions=chunks[0].start + 1))
    assert np.abs(first - second).max() > 0.1  # the token changed, and so did the logits


@pytest.mark.gpu
def test_a_host_sync_inside_the_captured_step_makes_capture_fail():
    """A Python scalar pulled from the device inside the step (a device-to-host synchronisation): CUDA refuses it
    while the stream captures, so the capture fails instead of recording a graph that would replay stale values."""
    model = tinyinfer.load("shakespeare", device="cuda")
    llm = LLM(model)
    llm.add_request("ROMEO:", tinyinfer.SamplingParams(temperature=0, max_tokens=4))
    llm.step()
    step = llm.graphs.model.decode_step

    def step_with_a_sync(*args):
        logits = step(*args)
        if float(logits.max()) > 1e9:  # a host decision on a device value: a synchronisation
            return logits * 0
        return logits

    llm.graphs.model.decode_step = step_with_a_sync
    with pytest.raises(RuntimeError, match="[Cc]aptur"):
        llm.step()


@pytest.mark.gpu
def test_cublas_products_cannot_be_captured_so_the_graph_step_does_without():
    """CuPy refuses cuBLAS while a stream captures: the decode step with the plain ops (`x @ w`) fails to capture;
    the graphs' own ops (tinyinfer/kernels.py, capturable=True) are what makes the step capturable."""
    model = tinyinfer.load("shakespeare", device="cuda")
    llm = LLM(model)
    llm.add_request("ROMEO:", tinyinfer.SamplingParams(temperature=0, max_tokens=4))
    llm.step()
    llm.graphs.model.ops = PLAIN_OPS
    with pytest.raises(NotImplementedError, match="cuBLAS"):
        llm.step()


@pytest.mark.gpu
def test_steps_a_graph_cannot_serve_run_eager():
    model = tinyinfer.load("shakespeare", device="cuda")
    assert LLM(model, enforce_eager=True).graphs is None  # vLLM's switch
    llm = LLM(model, max_num_seqs=2)
    graphs = llm.graphs
    assert graphs.buckets == [1, 2] and graphs.unsupported is None
    assert not graphs.serves([SeqChunk(0, 0, [1, 2, 3])])  # a prefill chunk
    assert not graphs.serves([SeqChunk(i, 4, [1]) for i in range(3)])  # more rows than the largest bucket
    assert not graphs.serves([SeqChunk(0, graphs.max_len, [1])])  # longer than a captured block table
    assert not graphs.serves([SeqChunk(0, 4, [1], adapter="shout")])  # a LoRA request
    assert graphs.serves([SeqChunk(0, 4, [1]), SeqChunk(1, 9, [2])])
    llm.generate(["ROMEO:"], tinyinfer.SamplingParams(temperature=0, max_tokens=1))  # a prefill only: no graph
    assert graphs.captures == 0
    eager_only = {"Mixture-of-Experts": tinyinfer.load("shakespeare-moe", device="cuda"),
                  "int8 KV cache": tinyinfer.load("shakespeare", device="cuda", kv_cache_dtype="int8"),
                  "quantised": quantize_model(tinyinfer.load("shakespeare", device="cuda"), "int8")}
    for reason, other in eager_only.items():
        assert reason in graph_unsupported(other)
        engine = LLM(other)
        assert engine.generate(["ROMEO:"], tinyinfer.SamplingParams(temperature=0, max_tokens=4))[0].token_ids
        assert engine.graphs.captures == 0


@pytest.mark.gpu
def test_enforce_eager_on_the_command_line_runs_the_engine_without_graphs(capsys):
    from tinyinfer.cli import main  # noqa: PLC0415

    assert main(["bench", "serve", "--device", "cuda", "--enforce-eager", "--requests", "4", "--concurrency", "2",
                 "--rounds", "1", "--prompt-len", "8:12", "--output-len", "3:5", "--prefix-len", "16",
                 "--prefix-requests", "2"]) == 0
    out = capsys.readouterr().out
    assert "continuous batching" in out and "continuous, eager" not in out and "CUDA graphs" not in out
    if not REAL_GPU:
        assert get_xp("cuda").transfers.captures == 0


def test_the_cpu_never_captures_graphs():
    model = tinyinfer.load("shakespeare")
    assert LLM(model).graphs is None
    assert "cuda" in graph_unsupported(model)


def test_batches_are_padded_to_vllms_buckets():
    assert capture_sizes(3) == [1, 2, 4] and capture_sizes(8) == [1, 2, 4, 8] and capture_sizes(9)[-1] == 16
    assert capture_sizes(1000) == BATCH_SIZES_TO_CAPTURE and BATCH_SIZES_TO_CAPTURE[-1] == 256


# --- the stand-in's model of stream capture (as CuPy's own tests/cupy_tests/cuda_tests/test_graph.py checks CuPy) -----

def _standin():
    import strict_cupy  # noqa: PLC0415 - the stand-in itself, not the device

    return strict_cupy


def test_standin_replays_the_recorded_work_from_the_static_inputs_into_the_same_output():
    cp = _standin()
    cp.transfers.reset()
    x, out = cp.asarray(np.arange(4.0)), cp.zeros(4)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        temporary = x * 2.0 + 1.0
        out[...] = temporary.sum() + temporary
        graph = stream.end_capture()
    assert np.isnan(temporary.get()).all()  # nothing has run yet: what the capture allocated holds no values
    graph.launch(stream)
    np.testing.assert_array_equal(out.get(), 16.0 + np.arange(4.0) * 2 + 1)
    x.set(np.full(4, 10.0))  # a new input, copied into the same buffer
    graph.launch(stream)
    np.testing.assert_array_equal(out.get(), np.full(4, 105.0))
    assert (cp.transfers.captures, cp.transfers.graph_launches) == (1, 2)


@pytest.mark.parametrize("sync", [lambda a: float(a.sum()), lambda a: a.get(), lambda a: bool(a[0] > 0),
                                  lambda a: _standin().asarray(np.ones(2)),
                                  lambda a: _standin().cuda.get_current_stream().synchronize()],
                         ids=["scalar", "get", "bool", "host-to-device", "synchronize"])
def test_standin_refuses_a_sync_or_a_copy_in_while_capturing_and_invalidates_the_capture(sync):
    cp = _standin()
    a, stream = cp.ones(3), cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        with pytest.raises(cp.CUDARuntimeError, match="cudaErrorStreamCaptureUnsupported"):
            sync(a)
        with pytest.raises(cp.CUDARuntimeError, match="cudaErrorStreamCaptureInvalidated"):
            stream.end_capture()
    assert not stream.is_capturing() and float(a.sum()) == 3.0  # out of capture mode, usable as before


def test_standin_refuses_cublas_and_data_dependent_shapes_while_capturing():
    cp = _standin()
    a, stream = cp.ones((3, 3)), cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        with pytest.raises(NotImplementedError, match="cuBLAS"):
            a @ a
        with pytest.raises(NotImplementedError, match="cuBLAS"):
            cp.matmul(a, a)
        integers = cp.ones((2, 2), dtype=np.int64) @ cp.ones((2, 2), dtype=np.int64)  # CuPy's own kernel: fine
        with pytest.raises(RuntimeError, match="capturing"):
            cp.nonzero(a)
        with pytest.raises(RuntimeError, match="capturing"):
            a[a > 0]
        graph = stream.end_capture()
    graph.launch()
    assert integers.get().tolist() == [[2, 2], [2, 2]]
    with pytest.raises(RuntimeError, match="default"):
        cp.cuda.Stream.null.begin_capture()
    with stream:
        stream.begin_capture()
        with cp.cuda.Stream.null, pytest.raises(RuntimeError, match="missing from the graph"):
            a + 1  # queued off the capturing stream: on a GPU it would run now, not in the graph
        stream.end_capture()
