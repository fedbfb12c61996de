"""The engine loop of the server: one thread owns the LLM; the asyncio side hands it work and gets outputs back.

The LLM (tinyinfer/engine/llm.py) is not thread-safe, and it does not need to be: exactly one thread, the
engine thread, ever touches it. The HTTP side (tinyinfer/engine/server.py, on an asyncio event loop) builds a
`Submission` per request and calls `submit`; that only puts a function in a thread-safe queue, the inbox.
The engine thread loops:

    wait on the inbox while there is no work (no busy loop)  ->  run what arrived (add_request, abort)
    ->  one step() for every running request  ->  hand each RequestOutput to its submission

Handing back crosses threads the asyncio way: `loop.call_soon_threadsafe(queue.put_nowait, event)` puts the
event on the submission's asyncio.Queue from inside the event loop, which then wakes the request's coroutine.
Requests that arrive while others run join them at the next step: continuous batching (chapter 10).

**Back-pressure.** `Engine.admit` counts the sequences in flight (waiting or running) and refuses a submission
that would take them past `max_in_flight`: the server answers 503 at once instead of queueing without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
import traceback
from dataclasses import dataclass, field

from tinyinfer.errors import TinyInferError
from tinyinfer.sampling import SamplingParams

ACCEPTED = "accepted"  # the engine queued every request of a submission
GONE = "gone"  # the client closed its connection (put by the HTTP side)
STOP = None  # tells the engine thread to end


class ClientGone(Exception):
    """The client closed its connection while its request was running."""


class Overloaded(TinyInferError):
    """More sequences in flight than the server queues: answered 503, to be retried later."""

    status = 503


@dataclass
class Submission:
    """One HTTP request's work for the engine: a (request id, prompt ids, params, constraint maker) per prompt,
    the LoRA adapter and cache salt they run with, when it arrived (time.perf_counter), and the asyncio queue
    on which the engine answers: first ACCEPTED or an exception, then RequestOutputs."""

    requests: list[tuple[str, list[int], SamplingParams, object]]
    lora: str | None = None
    cache_salt: str | None = None
    arrival: float = field(default_factory=time.perf_counter)
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    loop: asyncio.AbstractEventLoop | None = None

    def keys(self) -> list[tuple[str, int]]:
        """(request id, sample index) of every choice, in the order of the response's `choices`."""
        return [(rid, i) for rid, _, params, _ in self.requests for i in range(params.n)]

    def put(self, event) -> None:
        """From any thread: queue an event for the request's coroutine (dropped if the loop has closed)."""
        with contextlib.suppress(RuntimeError):  # the server is shutting down: nobody is waiting any more
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)

    async def outputs(self):
        """The RequestOutputs until every choice has finished; raises the engine's error, or ClientGone."""
        unfinished = set(self.keys())
        while unfinished:
            event = await self.events.get()
            if event is GONE:
                raise ClientGone
            if isinstance(event, Exception):
                raise event
            if event.finished:
                unfinished.discard((event.request_id, event.index))
            yield event

    async def accepted(self) -> None:
        """Wait for the engine to queue the submission; raises its refusal (a bad request, or ClientGone)."""
        event = await self.events.get()
        if event is GONE:
            raise ClientGone
        if isinstance(event, Exception):
            raise event


class Engine:
    """The one thread that owns the LLM. Other threads only `submit`, `done` and `run`: their calls travel
    through the inbox as functions the engine thread runs between two steps. `on_step(llm, outputs)` runs
    on the engine thread after each step (the server's metrics)."""

    def __init__(self, llm, max_in_flight: int = 1 << 30, on_step=None):
        self.llm = llm
        self.max_in_flight = max_in_flight
        self.in_flight = 0  # sequences submitted and not yet finished or aborted (counted on the event loop)
        self.on_step = on_step
        self.inbox: queue.Queue = queue.Queue()
        self.routes: dict[str, Submission] = {}  # running request id -> the submission waiting for it
        self.thread = threading.Thread(target=self._loop, name="tinyinfer-engine", daemon=True)
        self.thread.start()

    def submit(self, submission: Submission) -> None:
        """Queue a submission (on the event loop thread), or raise Overloaded when the queue is full."""
        wanted = len(submission.keys())
        if self.in_flight + wanted > self.max_in_flight:
            raise Overloaded(f"the server is busy: {self.in_flight} sequences in flight, the most it queues is "
                             f"{self.max_in_flight}: retry later (or serve with a larger --max-queued-requests)")
        self.in_flight += wanted
        submission.loop = asyncio.get_running_loop()
        self.inbox.put(lambda: self._admit(submission))

    def done(self, submission: Submission) -> None:
        """The HTTP side is done with a submission (answered, failed or gone): stop what is left of it, so its
        blocks go back to the pool before the next step, and count it out of the queue."""
        self.in_flight -= len(submission.keys())
        self.inbox.put(lambda: self._abort(submission))

    async def run(self, function):
        """`function(llm)` run on the engine thread between two steps (on the event loop): its result, or its
        exception raised here."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def call():
            try:
                result, error = function(self.llm), None
            except Exception as e:  # noqa: BLE001 - raised again on the event loop, for the caller
                result, error = None, e
            loop.call_soon_threadsafe(future.set_exception if error else future.set_result, error or result)

        self.inbox.put(call)
        return await future

    def stop(self) -> None:
        self.inbox.put(STOP)
        self.thread.join()

    def _loop(self) -> None:
        while True:
            calls = [] if self.llm.has_unfinished() else [self.inbox.get()]  # idle: sleep until work comes
            while not self.inbox.empty():
                calls.append(self.inbox.get())
            for call in calls:
                if call is STOP:
                    return
                self._guarded(call)
            if self.llm.has_unfinished():
                self._guarded(self._step)
            elif self.on_step is not None:  # an abort may have freed blocks: the gauges must say so
                self._guarded(lambda: self.on_step(self.llm, []))

    def _guarded(self, call) -> None:
        """Run one call of the loop; a bug in it fails the requests in flight, and the thread keeps serving."""
        try:
            call()
        except Exception as e:  # noqa: BLE001 - a bug: the engine thread must outlive it, or every request hangs
            traceback.print_exc()  # the server's log: the client only gets a 500 with the message
            routes, self.routes = self.routes, {}
            for submission in routes.values():
                submission.put(e)  # first unblock every request waiting on one in flight
            for rid in routes:
                with contextlib.suppress(Exception):  # best effort: the engine's state may be what failed
                    self.llm.abort(rid)

    def _admit(self, submission: Submission) -> None:
        added = []
        try:
            for rid, prompt_ids, params, make_constraint in submission.requests:
                added.append(self.llm.add_request(prompt_ids, params, request_id=rid, lora=submission.lora,
                                                   constraint=make_constraint, cache_salt=submission.cache_salt,
                                                   arrival=submission.arrival))
        except Exception as e:  # noqa: BLE001 - bad input (a 400), or a bug (a 500): the HTTP side answers it
            for rid in added:
                self.llm.abort(rid)
            submission.put(e)
            return
        self.routes.update((rid, submission) for rid in added)
        submission.put(ACCEPTED)

    def _abort(self, submission: Submission) -> None:
        for rid, *_ in submission.requests:
            self.llm.abort(rid)  # ids that already finished are ignored
            self.routes.pop(rid, None)

    def _step(self) -> None:
        outputs = self.llm.step()
        if self.on_step is not None:  # first: a client that has seen an output finds it in the metrics
            self.on_step(self.llm, outputs)
        for out in outputs:
            self.routes[out.request_id].put(out)
        for out in outputs:  # a second pass: two samples of one request may finish in the same step
            if out.request_id not in self.llm.requests:  # all its samples finished
                self.routes.pop(out.request_id, None)
