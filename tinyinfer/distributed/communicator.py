"""What every communicator offers, the volume it counts, and the one-process communicator (the identity).

A communicator joins `size` processes (ranks 0..size-1) that run the same program on different parts of the
work. Five operations carry all of tinyinfer's parallelism:

    all_reduce(x)        every rank gives x [*], every rank gets the sum over ranks [*]     tensor parallelism
    all_gather(x, axis)  every rank gives x, every rank gets them all, joined along axis    the LM head's vocab
    broadcast(x, root)   root's x, to every rank                                            a step's batch
    send(x, to) / recv   one rank's x to another                                            pipeline stages
    all_to_all(parts)    rank i gives parts[j] to rank j, gets part i of every rank         expert parallelism

An implementation provides the five (`_all_reduce`, ...); this class counts each call and the bytes of the
array it was given (`stats`), which is what the chapter's formulas are written in: tensor parallelism sends
two [T, d_model] activations per layer through all_reduce. What a rank puts on the wire depends on the
algorithm the library picks (a ring all-reduce sends 2 (n - 1) / n of the array, see `ring_all_reduce_bytes`).

    >>> comm = SingleProcess()
    >>> comm.all_reduce(np.ones(3, dtype=np.float32)).tolist(), comm.stats.bytes["all_reduce"]
    ([1.0, 1.0, 1.0], 12)
"""

from __future__ import annotations

import contextlib
import pickle
import time
from collections import Counter

import numpy as np

from tinyinfer.errors import TinyInferError

DEFAULT_TIMEOUT_S = 600.0  # a collective that has not completed by then means a rank is dead or elsewhere
SPIN_S = 2e-3  # a pending operation is polled without pause this long (most complete within it), then with pauses
MAX_PAUSE_S = 1e-3  # the longest sleep between two polls of a pending operation


class CommunicationError(TinyInferError):
    """A collective that did not complete: a rank died, is stuck, or runs a different program (world size)."""


def wait_until(done, timeout_s: float, what: str, on_timeout=None) -> None:
    """Poll `done()` until it is true, or raise a CommunicationError naming `what` after timeout_s. For SPIN_S
    without pause (a sleep costs far more than a collective of small arrays, whose partner is usually there
    already), then with pauses growing up to MAX_PAUSE_S, so that a rank waiting long leaves the cores to the
    ranks still computing."""
    start = time.monotonic()
    deadline, pause = start + timeout_s, 0.0
    while not done():
        now = time.monotonic()
        if now < start + SPIN_S:
            continue
        if now > deadline:
            if on_timeout is not None:
                on_timeout()
            raise CommunicationError(f"{what} did not complete within {timeout_s:g} s: another rank has died, is "
                                     f"stuck, or runs with other sizes; check the other ranks' errors")
        time.sleep(pause)
        pause = min(2 * pause + 1e-5, MAX_PAUSE_S)


class CommStats:
    """Calls and bytes per operation, as handed to the communicator by this rank."""

    def __init__(self):
        self.calls: Counter = Counter()
        self.bytes: Counter = Counter()

    def add(self, op: str, nbytes: int) -> None:
        self.calls[op] += 1
        self.bytes[op] += int(nbytes)

    def reset(self) -> None:
        self.calls.clear()
        self.bytes.clear()

    def table(self) -> str:
        """One line per operation: calls and bytes."""
        return "\n".join(f"{op:>12}: {self.calls[op]:6d} calls {self.bytes[op]:12,d} bytes" for op in sorted(self.calls))


class Communicator:
    """The interface (see the module docstring). Arrays in, arrays out, on the caller's array module."""

    rank: int = 0
    size: int = 1
    name = "communicator"
    timeout_s: float = DEFAULT_TIMEOUT_S  # how long an operation may wait for the other ranks

    @contextlib.contextmanager
    def patience(self, timeout_s: float):
        """Inside: operations wait up to timeout_s (float("inf"): for ever, as an idle worker waits for work)."""
        before, self.timeout_s = self.timeout_s, timeout_s
        try:
            yield
        finally:
            self.timeout_s = before

    def __init__(self):
        self.stats = CommStats()

    def all_reduce(self, x):
        """The elementwise sum of every rank's x.  [*] -> [*]"""
        self.stats.add("all_reduce", x.nbytes)
        return self._all_reduce(x)

    def all_gather(self, x, axis: int = 0):
        """Every rank's x (all of one shape), joined along `axis` in rank order.  [.., n, ..] -> [.., size n, ..]"""
        self.stats.add("all_gather", x.nbytes)
        return self._all_gather(x, axis)

    def broadcast(self, x, root: int = 0):
        """Root's array x on every rank; the others pass an array of the same shape and dtype (overwritten)."""
        self.stats.add("broadcast", x.nbytes)
        return self._broadcast(x, root)

    def broadcast_object(self, obj=None, root: int = 0):
        """Root's picklable Python object on every rank (a step's batch: sequence ids, positions, tokens)."""
        data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8) if self.rank == root else None
        n = self._broadcast(np.array([0 if data is None else data.size], dtype=np.int64), root)  # [1]
        data = self._broadcast(data if data is not None else np.empty(int(n[0]), dtype=np.uint8), root)
        self.stats.add("broadcast", data.nbytes)
        return pickle.loads(data.tobytes())

    def send(self, x, dest: int) -> None:
        """Send x to rank `dest` (which calls recv with x's shape and dtype)."""
        self.stats.add("send", x.nbytes)
        self._send(x, dest)

    def recv(self, shape, dtype, source: int):
        """The array rank `source` sends; the receiver knows its shape and dtype (SPMD: it runs the same step)."""
        return self._recv(tuple(shape), np.dtype(dtype), source)

    def send_object(self, obj, dest: int) -> None:
        """Send a picklable Python object to rank `dest` (its size first, then its bytes)."""
        data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
        self.send(np.array([data.size], dtype=np.int64), dest)
        self.send(data, dest)

    def recv_object(self, source: int):
        """The Python object rank `source` sends with send_object."""
        n = int(self.recv((1,), np.int64, source)[0])
        return pickle.loads(np.asarray(self.recv((n,), np.uint8, source)).tobytes())

    def all_to_all(self, parts: list):
        """parts[j] (any number of rows, the same trailing shape and dtype on every rank) goes to rank j;
        returns the `size` arrays the ranks sent to this one, in rank order."""
        if len(parts) != self.size:
            raise ValueError(f"all_to_all needs one part per rank ({self.size}), got {len(parts)}")
        self.stats.add("all_to_all", sum(p.nbytes for j, p in enumerate(parts) if j != self.rank))
        return self._all_to_all(parts)

    def split(self, color: int, key: int) -> Communicator:
        """The ranks that give the same `color`, numbered in the order of their `key`s: a communicator of their
        own (a pipeline stage's tensor-parallel group, say). Every rank must call it. It counts into the same
        `stats` as this one."""
        group = self._split(color, key)
        group.stats, group.timeout_s = self.stats, self.timeout_s
        return group

    def barrier(self) -> None:
        self._all_reduce(np.zeros(1, dtype=np.int64))

    def check_size(self, wanted: int, what: str) -> None:
        """A clear error on every rank when the job was started with the wrong number of processes."""
        if self.size != wanted:
            hint = (f"start it with `mpirun -n {wanted} python -m tinyinfer ...`" if wanted > 1
                    else "start it without mpirun, or give the parallel sizes that multiply to the number of processes")
            raise TinyInferError(f"{what} needs {wanted} process{'es' if wanted > 1 else ''}, but this job has "
                                 f"{self.size} (rank {self.rank}): {hint}")

    # the five operations, per implementation
    def _all_reduce(self, x):
        raise NotImplementedError

    def _all_gather(self, x, axis):
        raise NotImplementedError

    def _broadcast(self, x, root):
        raise NotImplementedError

    def _send(self, x, dest):
        raise NotImplementedError

    def _recv(self, shape, dtype, source):
        raise NotImplementedError

    def _all_to_all(self, parts):
        raise NotImplementedError

    def _split(self, color, key):
        raise TinyInferError(f"the {self.name} communicator cannot be split into groups: use MPI")


class SingleProcess(Communicator):
    """One rank: every collective is the identity, and there is nobody to send to."""

    name = "single process"

    def _all_reduce(self, x):
        return x

    def _all_gather(self, x, axis):
        return x

    def _broadcast(self, x, root):
        return x

    def _all_to_all(self, parts):
        return list(parts)

    def _split(self, color, key):
        return SingleProcess()

    def _send(self, *args):
        raise TinyInferError("a single process has no other rank to send to or receive from")

    _recv = _send


def ring_all_reduce_bytes(nbytes: int, n: int) -> float:
    """Bytes each rank sends to sum an array of `nbytes` over n ranks with a ring all-reduce: the array travels
    in n pieces, n - 1 steps to add them up (reduce-scatter) and n - 1 to hand the sums round.

    >>> ring_all_reduce_bytes(1000, 4)  # 2 * 3/4 of the array
    1500.0
    """
    return 2 * (n - 1) / n * nbytes
