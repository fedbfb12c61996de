"""The parallelism flags shared by the commands that run a model (vLLM's names), and running as one rank of many.

    mpirun -n 2 python -m tinyinfer generate --model M --tensor-parallel-size 2 "prompt"

Every rank runs the command; rank 0 alone prints (the others' stdout and stderr go nowhere, except an error,
which every rank prints: a rank that cannot go on says why).
"""

from __future__ import annotations

import contextlib
import os

from tinyinfer.distribute import distribute
from tinyinfer.distributed import DEFAULT_TIMEOUT_S, connect
from tinyinfer.errors import TinyInferError


def add_parallel_arguments(parser) -> None:
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1, metavar="N",
                        help="split every layer over N ranks (start with `mpirun -n N`); see chapters/14-parallelism.md")
    parser.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1, metavar="N",
                        help="split the layers over N stages (start with `mpirun -n N`)")
    parser.add_argument("--enable-expert-parallel", action="store_true",
                        help="with --tensor-parallel-size: place whole MoE experts on the ranks instead of "
                             "splitting each expert")
    parser.add_argument("--distributed-timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
                        help="a collective that has not completed after S seconds is an error on every rank "
                             f"(a rank died or runs with other sizes; default {DEFAULT_TIMEOUT_S:g})")


def connect_ranks(args):
    """This job's communicator, checked against the parallel sizes asked, before any model is loaded."""
    sizes = {"--tensor-parallel-size": args.tensor_parallel_size, "--pipeline-parallel-size": args.pipeline_parallel_size}
    for flag, size in sizes.items():
        if size < 1:
            raise TinyInferError(f"{flag} {size}: give a number of ranks >= 1")
    if not args.distributed_timeout > 0:
        raise TinyInferError(f"--distributed-timeout {args.distributed_timeout:g}: give a number of seconds > 0")
    return connect(args.tensor_parallel_size * args.pipeline_parallel_size, args.device, args.distributed_timeout)


def parallel_model(model, comm, args):
    """This rank's part of the loaded model."""
    return distribute(model, comm, args.tensor_parallel_size, args.pipeline_parallel_size, args.enable_expert_parallel)


@contextlib.contextmanager
def rank_zero_output(comm):
    """Inside: stdout and stderr as usual on rank 0, discarded on the others. An exception leaves the block
    (and is printed by the CLI, on every rank)."""
    if comm.rank == 0:
        yield
        return
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull), contextlib.redirect_stderr(devnull):
        yield
