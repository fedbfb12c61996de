"""The communicator between GPUs, on NCCL through CuPy (`cupy.cuda.nccl`), imported only when chosen.

NCCL moves device memory directly between GPUs (NVLink inside a machine, InfiniBand between machines), on a
CUDA stream like any kernel. Its ranks find each other through a unique id made by rank 0 and handed to the
others by some other channel: here the MPI job that started them (`bootstrap`, an MPICommunicator), which
also sets each rank's GPU (rank i uses GPU i mod the GPUs it sees, so two ranks may share one GPU).

NCCL's calls only queue work. Each operation here records a CUDA event after it and polls the event until
`timeout_s`; when it never completes (a rank died or waits on something else), the communicator is aborted
and a CommunicationError raised on every rank that waits, as with MPI.

Arrays are CuPy arrays; the dtypes are those of `DTYPES`. send/recv and all-to-all are grouped point-to-point
calls (`groupStart` ... `groupEnd`), NCCL's own way to post several transfers at once.
"""

from __future__ import annotations

import numpy as np

from tinyinfer.distributed.communicator import DEFAULT_TIMEOUT_S, CommunicationError, Communicator, wait_until


class NCCLCommunicator(Communicator):
    """One GPU per rank (or ranks sharing a GPU), the ranks of `bootstrap`'s MPI job."""

    name = "NCCL"

    def __init__(self, bootstrap: Communicator, timeout_s: float = DEFAULT_TIMEOUT_S):
        super().__init__()
        import cupy  # noqa: PLC0415 - only when this communicator is chosen
        from cupy.cuda import nccl  # noqa: PLC0415

        self.cp, self.nccl = cupy, nccl
        self.rank, self.size, self.timeout_s = bootstrap.rank, bootstrap.size, timeout_s
        cupy.cuda.Device(self.rank % cupy.cuda.runtime.getDeviceCount()).use()
        unique_id = bootstrap.broadcast_object(nccl.get_unique_id() if self.rank == 0 else None)
        self.comm = nccl.NcclCommunicator(self.size, unique_id, self.rank)
        self.stream = cupy.cuda.get_current_stream()
        self.dtypes = {np.dtype(name): getattr(nccl, code) for name, code in DTYPES.items()}

    def _wait(self, op: str) -> None:
        event = self.cp.cuda.Event(disable_timing=True)
        event.record(self.stream)
        wait_until(lambda: event.done, self.timeout_s, f"rank {self.rank} of {self.size}: NCCL {op}", self.comm.abort)

    def _type(self, x) -> int:
        if x.dtype not in self.dtypes:
            raise CommunicationError(f"NCCL cannot move {x.dtype} arrays here: use one of {', '.join(DTYPES)}")
        return self.dtypes[x.dtype]

    def _all_reduce(self, x):
        x = self.cp.ascontiguousarray(x)
        total = self.cp.empty_like(x)
        self.comm.allReduce(x.data.ptr, total.data.ptr, x.size, self._type(x), self.nccl.NCCL_SUM, self.stream.ptr)
        self._wait("all_reduce")
        return total

    def _all_gather(self, x, axis):
        x = self.cp.ascontiguousarray(x)
        parts = self.cp.empty((self.size, *x.shape), dtype=x.dtype)  # [size, *x.shape]
        self.comm.allGather(x.data.ptr, parts.data.ptr, x.size, self._type(x), self.stream.ptr)
        self._wait("all_gather")
        return self.cp.concatenate(list(parts), axis=axis)

    def _broadcast(self, x, root):
        buffer = self.cp.array(x)  # a copy, on the device (broadcast_object hands NumPy arrays)
        self.comm.bcast(buffer.data.ptr, buffer.size, self._type(buffer), root, self.stream.ptr)
        self._wait("broadcast")
        return buffer if not isinstance(x, np.ndarray) else self.cp.asnumpy(buffer)

    def _send(self, x, dest):
        x = self.cp.ascontiguousarray(x)
        self.comm.send(x.data.ptr, x.size, self._type(x), dest, self.stream.ptr)
        self._wait(f"send to rank {dest}")

    def _recv(self, shape, dtype, source):
        buffer = self.cp.empty(shape, dtype=dtype)
        self.comm.recv(buffer.data.ptr, buffer.size, self._type(buffer), source, self.stream.ptr)
        self._wait(f"recv from rank {source}")
        return buffer

    def _exchange(self, sends: list, receives: list, op: str) -> None:
        """Post sends[j] to rank j and receives[j] from rank j at once (one NCCL group), then wait."""
        self.nccl.groupStart()
        for peer, (out, into) in enumerate(zip(sends, receives)):
            self.comm.send(out.data.ptr, out.size, self._type(out), peer, self.stream.ptr)
            self.comm.recv(into.data.ptr, into.size, self._type(into), peer, self.stream.ptr)
        self.nccl.groupEnd()
        self._wait(op)

    def _all_to_all(self, parts):
        """The row counts first (so each rank can size what it receives), then the rows."""
        parts = [self.cp.ascontiguousarray(p) for p in parts]
        counts = [self.cp.array([p.shape[0]], dtype=np.int64) for p in parts]  # size x [1]
        received_counts = [self.cp.empty(1, dtype=np.int64) for _ in parts]
        self._exchange(counts, received_counts, "all_to_all")
        row_shape, dtype = parts[0].shape[1:], parts[0].dtype
        received = [self.cp.empty((int(n[0]), *row_shape), dtype=dtype) for n in received_counts]
        self._exchange(parts, received, "all_to_all")
        return received


# NumPy dtype -> the name of NCCL's constant for it
DTYPES = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64", "int32": "NCCL_INT32",
          "int64": "NCCL_INT64", "uint8": "NCCL_UINT8"}
