"""The communicator seam: the only package that knows how processes talk (like backend.py for arrays).

    comm = connect(world_size=2)      # under `mpirun -n 2`: an MPICommunicator (NCCL with device="cuda")
    total = comm.all_reduce(partial)  # [T, d] partial sums of every rank -> their sum, on every rank
    comm.stats.table()                # calls and bytes per operation, so far

Implementations (tinyinfer/distributed/): `SingleProcess` (one rank, every collective the identity),
`MPICommunicator` (mpi4py, the only module importing it), `NCCLCommunicator` (CuPy's NCCL, started through
MPI), and `ThreadCommunicator` (ranks as threads of one process: the test double, and the course's way to
run a split without MPI, `run_ranks`). The splits that use them are tinyinfer/parallel.py (tensor
parallelism), tinyinfer/pipeline.py (pipeline) and tinyinfer/expert_parallel.py (experts).
"""

from __future__ import annotations

import os

from tinyinfer.distributed.communicator import (DEFAULT_TIMEOUT_S, CommStats, CommunicationError, Communicator,
                                                SingleProcess, ring_all_reduce_bytes)
from tinyinfer.distributed.threads import ThreadCommunicator, run_ranks

# what MPI launchers set in every process they start: MPICH's Hydra, Open MPI, PMIx (Slurm, PRRTE)
LAUNCHER_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")

__all__ = ["DEFAULT_TIMEOUT_S", "CommStats", "CommunicationError", "Communicator", "SingleProcess",
           "ThreadCommunicator", "connect", "launched_processes", "ring_all_reduce_bytes", "run_ranks"]


def launched_processes() -> int:
    """How many processes the MPI launcher started (1 without one), read without starting MPI."""
    for name in LAUNCHER_SIZE_VARIABLES:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 1


def connect(world_size: int, device: str = "cpu", timeout_s: float = DEFAULT_TIMEOUT_S) -> Communicator:
    """The communicator of this job, checked to hold `world_size` processes (a clear error on every rank if
    not). One process and no launcher: SingleProcess, without importing MPI."""
    if world_size == 1 and launched_processes() == 1:
        return SingleProcess()
    try:
        from tinyinfer.distributed.mpi import MPICommunicator  # noqa: PLC0415 - MPI only when asked for
    except ImportError as e:
        raise CommunicationError(f"running over {world_size} processes needs mpi4py: install it with "
                                 f"`pip install tinyinfer[mpi]` ({e})") from e
    comm = MPICommunicator(timeout_s)
    comm.check_size(world_size, "this run (tensor x pipeline parallel size)")
    if device == "cuda":
        from tinyinfer.distributed.nccl import NCCLCommunicator  # noqa: PLC0415 - CuPy only when asked for

        return NCCLCommunicator(comm, timeout_s)
    return comm
