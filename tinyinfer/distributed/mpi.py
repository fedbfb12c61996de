"""The communicator across processes, on MPI (mpi4py): the only module that imports mpi4py.

Users start an MPI program with `mpirun -n N python -m tinyinfer ...`: N copies of the same program, each told
its rank. mpi4py wraps the C library (MPICH or Open MPI, both installable as wheels: `pip install tinyinfer[mpi]`).

Every operation is MPI's non-blocking form (Iallreduce, Ibcast, Isend, ...) followed by a wait that gives up
after `timeout_s`: a blocking MPI call whose partner died or runs something else waits for ever, and a job that
hangs says nothing. Here every rank that waits raises a CommunicationError naming the operation, which the CLI
prints before it exits non-zero (and mpirun with it). The wait polls (`wait_until`).

Arrays travel through host memory: a CuPy array is copied to NumPy first (the wheel's MPI is not CUDA-aware;
on GPUs the NCCL communicator, tinyinfer/distributed/nccl.py, moves device memory directly).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from tinyinfer.backend import to_numpy, xp_of
from tinyinfer.distributed.communicator import DEFAULT_TIMEOUT_S, Communicator, wait_until


class MPICommunicator(Communicator):
    """The ranks of an MPI job (MPI.COMM_WORLD by default)."""

    name = "MPI"

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S, comm=None):
        super().__init__()
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.timeout_s = timeout_s

    def _wait(self, request, op: str) -> None:
        """Wait for `request`, or raise once timeout_s has passed (on this rank: each rank times out itself)."""
        wait_until(request.Test, self.timeout_s, f"rank {self.rank} of {self.size}: MPI {op}")

    def _all_reduce(self, x):
        host = np.ascontiguousarray(to_numpy(x))
        total = np.empty_like(host)
        self._wait(self.comm.Iallreduce(host, total, op=MPI.SUM), "all_reduce")
        return _like(total, x)

    def _all_gather(self, x, axis):
        host = np.ascontiguousarray(to_numpy(x))
        parts = np.empty((self.size, *host.shape), dtype=host.dtype)  # [size, *x.shape]
        self._wait(self.comm.Iallgather(host, parts), "all_gather")
        return _like(np.concatenate(list(parts), axis=axis), x)

    def _broadcast(self, x, root):
        buffer = np.ascontiguousarray(to_numpy(x)).copy()
        self._wait(self.comm.Ibcast(buffer, root=root), "broadcast")
        return _like(buffer, x)

    def _send(self, x, dest):
        self._wait(self.comm.Isend(np.ascontiguousarray(to_numpy(x)), dest=dest), f"send to rank {dest}")

    def _recv(self, shape, dtype, source):
        buffer = np.empty(shape, dtype=dtype)
        self._wait(self.comm.Irecv(buffer, source=source), f"recv from rank {source}")
        return buffer

    def _split(self, color, key):
        return MPICommunicator(self.timeout_s, self.comm.Split(color, key))

    def _all_to_all(self, parts):
        """Two exchanges: the row counts (so each rank can size what it receives), then the rows, as bytes."""
        host = [np.ascontiguousarray(to_numpy(p)) for p in parts]
        row_shape, dtype = host[0].shape[1:], host[0].dtype
        row_bytes = int(np.prod(row_shape, dtype=np.int64)) * dtype.itemsize
        send_rows = np.array([p.shape[0] for p in host], dtype=np.int64)  # [size]
        recv_rows = np.empty_like(send_rows)
        self._wait(self.comm.Ialltoall(send_rows, recv_rows), "all_to_all")
        send = np.concatenate([p.reshape(-1).view(np.uint8) for p in host])  # every part's bytes, in rank order
        received = np.empty(int(recv_rows.sum()) * row_bytes, dtype=np.uint8)
        send_counts, recv_counts = send_rows * row_bytes, recv_rows * row_bytes
        request = self.comm.Ialltoallv([send, (send_counts, _offsets(send_counts)), MPI.BYTE],
                                       [received, (recv_counts, _offsets(recv_counts)), MPI.BYTE])
        self._wait(request, "all_to_all")
        pieces = np.split(received, _offsets(recv_counts)[1:])
        return [_like(piece.view(dtype).reshape(-1, *row_shape), parts[0]) for piece in pieces]


def _offsets(counts: np.ndarray) -> np.ndarray:
    """Where each of consecutive blocks of `counts` starts.  [n] -> [n]"""
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


def _like(host: np.ndarray, x):
    """`host` on the array module of x (back to the GPU when x was a CuPy array)."""
    return host if isinstance(x, np.ndarray) else xp_of(x).asarray(host)

