"""n ranks as n threads of one process: the communicator's test double, and the course's way to run a split
without MPI. Each rank runs the same function with its own communicator; the collectives meet at a barrier
and read each other's arrays from shared slots (summed in rank order, so every rank gets the same bits).

    >>> import numpy as np
    >>> run_ranks(2, lambda comm: comm.all_reduce(np.array([comm.rank + 1.0])).tolist())
    [[3.0], [3.0]]

A rank that never arrives breaks the barrier after `timeout_s`: a CommunicationError on the ranks that wait,
as with MPI.
"""

from __future__ import annotations

import queue
import threading

from tinyinfer.backend import xp_of
from tinyinfer.distributed.communicator import DEFAULT_TIMEOUT_S, CommunicationError, Communicator


class ThreadGroup:
    """What the n threads share: a barrier, one slot per rank, and a queue per (sender, receiver) pair."""

    def __init__(self, n: int, timeout_s: float):
        self.size, self.timeout_s = n, timeout_s  # each rank's communicator starts with this timeout
        self.barrier = threading.Barrier(n)
        self.slots: list = [None] * n
        self.queues = {(i, j): queue.Queue() for i in range(n) for j in range(n)}


class ThreadCommunicator(Communicator):
    """Rank `rank` of a ThreadGroup."""

    name = "threads"

    def __init__(self, group: ThreadGroup, rank: int):
        super().__init__()
        self.group, self.rank, self.size, self.timeout_s = group, rank, group.size, group.timeout_s

    @property
    def _wait_s(self) -> float | None:
        return None if self.timeout_s == float("inf") else self.timeout_s

    def _meet(self, value, op: str) -> list:
        """Every rank's `value`, in rank order, once all have arrived."""
        group = self.group
        group.slots[self.rank] = value
        self._wait_for_all(op)
        values = list(group.slots)
        self._wait_for_all(op)  # nobody overwrites a slot before every rank has read it
        return values

    def _wait_for_all(self, op: str) -> None:
        try:
            self.group.barrier.wait(self._wait_s)
        except threading.BrokenBarrierError:
            raise CommunicationError(f"rank {self.rank} of {self.size}: {op} did not complete within "
                                     f"{self.timeout_s:g} s: another rank has died or is stuck") from None

    def _all_reduce(self, x):
        values = self._meet(x, "all_reduce")
        total = values[0]
        for value in values[1:]:
            total = total + value
        return total

    def _all_gather(self, x, axis):
        return xp_of(x).concatenate(self._meet(x, "all_gather"), axis=axis)

    def _broadcast(self, x, root):
        return self._meet(x, "broadcast")[root].copy()

    def _all_to_all(self, parts):
        return [sent[self.rank] for sent in self._meet(list(parts), "all_to_all")]

    def _split(self, color, key):
        """Every rank's (color, key) meet; the first rank of each color makes the group its members share."""
        wanted = self._meet((color, key, self.rank), "split")
        members = sorted((k, r) for c, k, r in wanted if c == color)  # [(key, rank)] of this color, in key order
        group = ThreadGroup(len(members), self.timeout_s) if members[0][1] == self.rank else None
        groups = self._meet(group, "split")
        return ThreadCommunicator(groups[members[0][1]], [r for _, r in members].index(self.rank))

    def _send(self, x, dest):
        self.group.queues[self.rank, dest].put(x.copy())

    def _recv(self, shape, dtype, source):
        try:
            x = self.group.queues[source, self.rank].get(timeout=self._wait_s)
        except queue.Empty:
            raise CommunicationError(f"rank {self.rank}: nothing came from rank {source} within "
                                     f"{self.timeout_s:g} s") from None
        if x.shape != shape or x.dtype != dtype:
            raise CommunicationError(f"rank {self.rank} expected {dtype}{list(shape)} from rank {source}, got "
                                     f"{x.dtype}{list(x.shape)}")
        return x


def run_ranks(n: int, fn, timeout_s: float = DEFAULT_TIMEOUT_S) -> list:
    """fn(comm) on n threads, one ThreadCommunicator each; their results in rank order. The first error of any
    rank is raised (after the others have stopped: the failed rank breaks the barrier they wait at)."""
    group = ThreadGroup(n, timeout_s)
    results, errors = [None] * n, [None] * n

    def rank_main(rank: int) -> None:
        try:
            results[rank] = fn(ThreadCommunicator(group, rank))
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            errors[rank] = e
            group.barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(rank,), daemon=True) for rank in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    first = next((e for e in errors if e is not None and not isinstance(e, CommunicationError)), None)
    first = first or next((e for e in errors if e is not None), None)
    if first is not None:
        raise first
    return results
