"""The communicator seam and the parallel splits over real MPI ranks (tinyinfer/distributed/, parallel.py,
pipeline.py, expert_parallel.py, distribute.py).

Every MPI test starts `mpirun -n 2` as a subprocess (with the oversubscription flag where the launcher needs it:
CI has 2 cores) and is skipped, with the reason, only where MPI cannot start. The splits are checked against the
single-process run of the same checkpoint, on a dense (llama) and a MoE (qwen2_moe: a gated shared expert too)
tiny checkpoint:

- greedy tokens identical;
- float64 logits within 1e-9: the split computes the same function (what is left is float64 rounding);
- float32 logits within SPLIT_ULPS units of float32 rounding of the largest logit: a split reorders float32 sums
  (n partial sums of a d_model- or d_ff-long dot product added by the all-reduce), each reordering moves a sum
  by about sqrt(length) eps of its terms, and the logits carry the moves of every layer; a pipeline split
  reorders nothing and must be bit for bit equal.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.request
from functools import cache
from pathlib import Path

import numpy as np
import pytest

import tinyinfer
from tinyinfer.distribute import distribute
from tinyinfer.distributed import CommunicationError, SingleProcess, ring_all_reduce_bytes, run_ranks
from tinyinfer.engine import LLM
from tinyinfer.engine.disaggregated import DECODE_RANK, PREFILL_RANK, decode_worker, prefill_worker, prefix_blocks
from tinyinfer.engine.ranks import engine_on_ranks
from tinyinfer.errors import TinyInferError
from tinyinfer.quantize import quantize_model
from tinyinfer.sampling import SamplingParams

from mpi_program import MAX_TOKENS, OPS, PROMPT, float64, single_process_engine_tokens
from test_moe_parity import moe_checkpoint  # noqa: F401 - a fixture
from tiny_models import ROOT, tiny_checkpoint  # noqa: F401 - a fixture

PROGRAM = ROOT / "tests" / "mpi_program.py"
SPLIT_ULPS = 64  # float32 units of rounding of the largest logit (see the module docstring)
EPS32 = float(np.finfo(np.float32).eps)
MPI_TIMEOUT_S = 60  # a run past this is a hang: the test fails, it never waits for ever


@cache
def mpirun_command() -> list[str] | None:
    """`mpirun` with the flags this MPI needs to start 2 processes here, or None when it cannot."""
    launcher = find_mpirun()
    if launcher is None:
        return None
    for flags in ([], ["--oversubscribe"], ["--oversubscribe", "--allow-run-as-root"]):  # Open MPI's, where needed
        command = [launcher, *flags]
        probe = subprocess.run([*command, "-n", "2", sys.executable, "-c",
                                "from mpi4py import MPI; print(MPI.COMM_WORLD.size)"],
                               capture_output=True, text=True, timeout=MPI_TIMEOUT_S)
        if probe.returncode == 0 and "".join(probe.stdout.split()) == "22":  # two ranks' lines, maybe interleaved
            return command
    return None


def find_mpirun() -> str | None:
    """mpirun on the PATH, or beside this Python (the mpich wheel installs it there: a venv not activated)."""
    path = os.pathsep.join([sysconfig.get_path("scripts"), os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    return shutil.which("mpirun", path=path) or shutil.which("mpiexec", path=path)


def mpirun(*args, ranks: int = 2, timeout: float = MPI_TIMEOUT_S) -> subprocess.CompletedProcess:
    command = mpirun_command()
    if command is None:
        pytest.skip("MPI cannot start 2 processes here (no mpirun, or no mpi4py: pip install tinyinfer[mpi])")
    return subprocess.run([*command, "-n", str(ranks), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


# -- the communicator -------------------------------------------------------------------------------------------

def check_collectives(results: list[dict]) -> None:
    for rank, result in enumerate(results):
        assert result["all_reduce"] == [3.0, 10.0]  # (1 + 2, 0 + 10)
        assert result["all_gather"] == [[0, 0, 1, 1]]  # two [1, 2] arrays joined along axis 1
        assert result["broadcast"] == [7.0]  # from rank 1
        assert result["broadcast_object"] == {"from": 0, "tokens": [1, 2]}
    assert results[0]["all_to_all"] == [[], [[10.0, 10.0]]]  # rank 0 gave rank 0 no rows, rank 1 gave it 1
    assert results[1]["all_to_all"] == [[[1.0, 1.0]], [[11.0, 11.0], [11.0, 11.0]]]
    assert results[1]["recv"] == [0.0, 1.0, 2.0]
    assert results[0]["bytes"]["all_reduce"] == 8 and results[0]["calls"]["all_reduce"] == 1  # 2 float32
    assert results[0]["bytes"]["send"] == 24 and "send" not in results[1]["bytes"]
    assert results[1]["bytes"]["all_to_all"] == 8  # what rank 1 sent away: its one row for rank 0


def test_collectives_over_mpi(tmp_path):
    run = mpirun(sys.executable, PROGRAM, "collectives", tmp_path)
    assert run.returncode == 0, run.stderr
    check_collectives([json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)])


def test_collectives_of_the_thread_double():
    """The test double (ranks as threads) answers as MPI does: the same checks on the same calls."""
    check_collectives(run_ranks(2, collectives_on_threads, timeout_s=20))


def collectives_on_threads(comm) -> dict:
    """tests/mpi_program.py's `collectives` on a thread rank: its communicator given, what it writes kept."""
    import mpi_program  # noqa: PLC0415

    written = {}

    class Capture:
        def __truediv__(self, name):
            return self

        def write_text(self, text):
            written["text"] = text

    original = mpi_program.connect
    mpi_program.connect = lambda *args, **kwargs: comm
    try:
        mpi_program.collectives(Capture())
    finally:
        mpi_program.connect = original
    return json.loads(written["text"])


def test_single_process_is_the_identity_and_counts():
    comm = SingleProcess()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert comm.all_reduce(x) is x and comm.all_gather(x, axis=1) is x and comm.broadcast_object([1]) == [1]
    assert comm.stats.calls["all_reduce"] == 1 and comm.stats.bytes["all_reduce"] == 24
    with pytest.raises(TinyInferError, match="no other rank"):
        comm.send(x, 1)


def test_a_dead_rank_is_an_error_not_a_hang(tmp_path):
    """Rank 1 leaves; rank 0's next all-reduce gives up after its 2 s timeout, says so, and mpirun exits non-zero."""
    run = mpirun(sys.executable, PROGRAM, "dead-rank", tmp_path, timeout=30)
    assert run.returncode != 0
    assert "rank 0 of 2: MPI all_reduce did not complete within 2 s" in run.stderr


def test_a_rank_that_never_arrives_breaks_the_thread_double():
    def program(comm):
        if comm.rank == 0:
            comm.all_reduce(np.ones(2))

    with pytest.raises(CommunicationError, match="rank 0 of 2: all_reduce did not complete within 0.5 s"):
        run_ranks(2, program, timeout_s=0.5)


# -- the splits over MPI ----------------------------------------------------------------------------------------

def single_process_reference(folder) -> dict:
    model = tinyinfer.load(folder)
    return {"logits": model.logits(PROMPT), "logits64": float64(model).logits(PROMPT),
            "tokens": model.generate(PROMPT, max_tokens=MAX_TOKENS, temperature=0, ignore_eos=True).token_ids,
            "engine": single_process_engine_tokens(model)}


def assert_split_equals_single_process(ranks: list, reference: dict, mode: str, out: Path) -> None:
    """Greedy tokens, both logits (module docstring), and the engine's outputs of a mixed batch, on every rank."""
    assert json.loads((out / f"{mode}_engine.json").read_text()) == reference["engine"], mode
    scale = float(np.abs(reference["logits"]).max())
    for rank, result in enumerate(ranks):
        assert result[f"{mode}_tokens"].tolist() == reference["tokens"], (mode, rank)
        np.testing.assert_allclose(result[f"{mode}_logits64"], reference["logits64"], rtol=0, atol=1e-9)
        tolerance = 0.0 if mode == "pp" else SPLIT_ULPS * EPS32 * scale
        np.testing.assert_allclose(result[f"{mode}_logits"], reference["logits"], rtol=0, atol=tolerance)
    assert (ranks[0][f"{mode}_logits"] == ranks[1][f"{mode}_logits"]).all(), "the ranks must agree bit for bit"


def run_splits(folder, tmp_path, modes) -> list:
    run = mpirun(sys.executable, PROGRAM, "splits", folder, tmp_path, *modes)
    assert run.returncode == 0, run.stderr[-3000:]
    return [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(2)]


def test_tensor_and_pipeline_parallel_on_a_dense_model(tiny_checkpoint, tmp_path):
    folder = tiny_checkpoint("llama_gqa")
    ranks, reference = run_splits(folder, tmp_path, ["tp", "pp"]), single_process_reference(folder)
    for mode in ("tp", "pp"):
        assert_split_equals_single_process(ranks, reference, mode, tmp_path)
    cfg = tinyinfer.load(folder).config
    activation = len(PROMPT) * cfg.d_model * 4  # one [T, d] float32 activation
    tp = dict(zip(OPS, ranks[0]["tp_bytes"].tolist()))
    assert tp["all_reduce"] == 2 * cfg.n_layers * activation  # 2 all-reduces of [T, d] per layer
    assert tp["all_gather"] == len(PROMPT) * (-(-cfg.vocab_size // 2)) * 4  # this rank's [T, V/2] logits
    pp = [dict(zip(OPS, rank["pp_bytes"].tolist())) for rank in ranks]
    assert pp[0]["send"] == activation and pp[1]["send"] == 0  # one [T, d] across the one cut
    assert pp[1]["broadcast"] == len(PROMPT) * cfg.vocab_size * 4  # the last stage's logits


def test_tensor_pipeline_and_expert_parallel_on_a_moe_model(moe_checkpoint, tmp_path):
    folder = moe_checkpoint("qwen2_moe")
    ranks, reference = run_splits(folder, tmp_path, ["tp", "pp", "ep"]), single_process_reference(folder)
    for mode in ("tp", "pp", "ep"):
        assert_split_equals_single_process(ranks, reference, mode, tmp_path)
    ep = dict(zip(OPS, ranks[0]["ep_calls"].tolist()))
    n_layers = tinyinfer.load(folder).config.n_layers
    assert ep["all_to_all"] == 3 * n_layers  # per MoE layer: the tokens out, their expert ids, the outputs back


# -- the CLI under mpirun ---------------------------------------------------------------------------------------

def tinyinfer_command(*args, model: str = "shakespeare") -> list:
    return [sys.executable, "-m", "tinyinfer", "generate", "--model", model, "ROMEO:", "--max-tokens", "16",
            "--temperature", "0", *args]


@cache
def single_process_stdout(model: str) -> str:
    return subprocess.run(tinyinfer_command(model=model), capture_output=True, text=True, timeout=MPI_TIMEOUT_S).stdout


CLI_SPLITS = {  # flags -> (model, ranks, the operations rank 0 reports)
    "--tensor-parallel-size 2": ("shakespeare", 2, {"all_reduce", "all_gather"}),
    "--pipeline-parallel-size 2": ("shakespeare", 2, {"send", "broadcast"}),
    "--tensor-parallel-size 2 --pipeline-parallel-size 2": ("shakespeare", 4, {"all_reduce", "send", "broadcast"}),
    "--tensor-parallel-size 2 --enable-expert-parallel": ("shakespeare-moe", 2, {"all_reduce", "all_gather",
                                                                                 "all_to_all"}),
}


@pytest.mark.parametrize("flags", CLI_SPLITS)
def test_cli_under_mpirun_prints_what_one_process_prints(flags):
    """Rank 0's text, once, as one process prints it; its traffic, each operation equal to its formula (expert
    parallelism's exchange follows the router's choices: its formula assumes even routing, so it is left out)."""
    model, ranks, ops = CLI_SPLITS[flags]
    together = mpirun(*tinyinfer_command(*flags.split(), model=model), ranks=ranks)
    assert together.returncode == 0, together.stderr
    alone = single_process_stdout(model)
    assert alone.strip() and together.stdout == alone
    assert together.stderr.count("prompt tokens") == 1  # the statistics line: rank 0's only
    traffic = re.findall(r"(\w+): +\d+ calls +([\d,]+) B = .* = ([\d,]+) B$", together.stderr, re.MULTILINE)
    assert {op for op, _, _ in traffic} == ops
    for op, measured, formula in traffic:  # what rank 0 handed each operation, and the chapter's formula for it
        assert op == "all_to_all" or measured == formula, (op, together.stderr)


def test_serve_over_tensor_parallel_ranks_answers_as_one_process_and_stops_on_ctrl_c():
    command = mpirun_command()
    if command is None:
        pytest.skip("MPI cannot start 2 processes here (no mpirun, or no mpi4py: pip install tinyinfer[mpi])")
    server = subprocess.Popen([*command, "-n", "2", sys.executable, "-m", "tinyinfer", "serve", "--port", "0",
                               "--tensor-parallel-size", "2"], stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        while " at http" not in line:  # rank 0's "tinyinfer: serving 'shakespeare' at http://127.0.0.1:PORT/v1 ..."
            line = server.stderr.readline()
            assert line, "the server ended before it listened"
        url = line.split(" at ")[1].split()[0]
        body = json.dumps({"prompt": "ROMEO:", "max_tokens": 16, "temperature": 0}).encode()
        request = urllib.request.Request(url + "/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=MPI_TIMEOUT_S) as response:
            text = json.load(response)["choices"][0]["text"]
        assert text == tinyinfer.load("shakespeare").generate("ROMEO:", max_tokens=16, temperature=0).text
        server.send_signal(signal.SIGINT)  # mpirun hands it to both ranks
        assert server.wait(timeout=30) == 0
        assert "Traceback" not in server.stderr.read()
    finally:
        server.kill()


def test_wrong_world_size_is_an_error_on_every_rank():
    run = mpirun(*tinyinfer_command("--tensor-parallel-size", "4"), timeout=30)
    assert run.returncode != 0 and "Traceback" not in run.stderr
    for rank in (0, 1):
        assert f"needs 4 processes, but this job has 2 (rank {rank})" in run.stderr


def test_parallel_sizes_without_mpirun_say_how_to_start():
    run = subprocess.run(tinyinfer_command("--tensor-parallel-size", "2"), capture_output=True, text=True,
                         timeout=MPI_TIMEOUT_S, env={k: v for k, v in os.environ.items() if not k.startswith("PMI")})
    assert run.returncode == 1 and "start it with `mpirun -n 2 python -m tinyinfer ...`" in run.stderr


# -- disaggregated prefill and decode ---------------------------------------------------------------------------

def test_disaggregated_decode_rank_gives_the_combined_engines_tokens():
    """Two thread ranks: the prefill rank's blocks reach the decode engine's prefix cache (every full block
    before each prompt's last token), and every sample equals the combined engine's."""
    model = tinyinfer.load("shakespeare")
    prompts = [model.tokenizer.encode(text) for text in ("ROMEO:\n" * 9, "JULIET: O Romeo, Romeo! " * 4, "KING:")]
    params = [SamplingParams(max_tokens=12, temperature=0.8, seed=i) for i in range(len(prompts))]
    engine = dict(block_size=4, max_num_batched_tokens=16)
    combined = [r.token_ids for r in LLM(model, **engine).generate(prompts, params)]

    def rank(comm):
        if comm.rank == PREFILL_RANK:
            prefill_worker(comm, model, [(str(i), p, q, 0.0) for i, (p, q) in enumerate(zip(prompts, params))], 4,
                           time.perf_counter())
            return None
        llm = LLM(model, **engine)
        outputs = {int(out.request_id): out.token_ids for out in decode_worker(comm, llm)}
        return [outputs[i] for i in range(len(prompts))], llm.scheduler.prompt_tokens_hit

    tokens, hits = run_ranks(2, rank, timeout_s=60)[DECODE_RANK]
    assert tokens == combined
    assert hits == sum(prefix_blocks(len(p), 4) * 4 for p in prompts) > 0


def test_bench_serve_disaggregated_under_mpirun():
    run = mpirun(sys.executable, "-m", "tinyinfer", "bench", "serve", "--disaggregated", "--requests", "4", "--rate",
                 "20", "--prompt-len", "60:90", "--output-len", "6:10", "--concurrency", "4", timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "same tokens in both: yes" in run.stdout and "TPOT p50" in run.stdout
    assert re.search(r"decode rank: ([1-9]\d*)% of the prompt tokens came as KV blocks", run.stdout), run.stdout


# -- the splits' rules, in one process --------------------------------------------------------------------------

@pytest.mark.parametrize("expert_parallel", [False, True])
def test_tensor_and_pipeline_parallel_together_over_four_ranks(expert_parallel):
    """Two stages of two tensor-parallel ranks each (ranks as threads): every rank's logits and the engine's
    outputs of a mixed batch are the single process's."""
    model = tinyinfer.load("shakespeare-moe")
    ids = PROMPT * 2
    engine_options = dict(max_num_batched_tokens=16, block_size=4)
    prompts, params = ["ROMEO:", "JULIET: O Romeo, Romeo", "KING"], SamplingParams(max_tokens=8, temperature=0.8, seed=2)
    alone = [r.token_ids for r in LLM(model, **engine_options).generate(prompts, params)]

    def rank(comm):
        part = distribute(model, comm, 2, 2, enable_expert_parallel=expert_parallel)
        logits = part.logits(ids)
        with engine_on_ranks(part, comm, **engine_options) as llm:
            tokens = None if llm is None else [r.token_ids for r in llm.generate(prompts, params)]
        return logits, tokens

    ranks = run_ranks(4, rank, timeout_s=60)
    whole = model.logits(ids)
    for logits, _ in ranks:
        np.testing.assert_allclose(logits, whole, rtol=0, atol=SPLIT_ULPS * EPS32 * float(np.abs(whole).max()))
    assert ranks[0][1] == alone


def test_what_cannot_be_split_is_a_clear_error():
    model = tinyinfer.load("shakespeare")  # 2 KV heads, 512 hidden units
    with pytest.raises(TinyInferError, match="num_key_value_heads=2 does not split over 4 ranks"):
        run_ranks(4, lambda comm: distribute(model, comm, tensor_parallel_size=4), timeout_s=10)
    with pytest.raises(TinyInferError, match="needs a Mixture-of-Experts model"):
        run_ranks(2, lambda comm: distribute(model, comm, 2, enable_expert_parallel=True), timeout_s=10)
    with pytest.raises(TinyInferError, match="needs 2 processes, but this job has 1"):
        distribute(model, SingleProcess(), tensor_parallel_size=2)
    quantised = tinyinfer.load("shakespeare")
    quantize_model(quantised, "int8")
    with pytest.raises(TinyInferError, match="splits plain weight arrays"):
        run_ranks(2, lambda comm: distribute(quantised, comm, tensor_parallel_size=2), timeout_s=10)


def test_ring_all_reduce_sends_twice_n_minus_one_over_n():
    assert ring_all_reduce_bytes(1000, 2) == 1000 and ring_all_reduce_bytes(1000, 8) == 1750
