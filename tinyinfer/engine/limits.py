"""The server's limits on what one client may ask of it, and where it reads its API key: plain settings, apart
from tinyinfer/engine/server.py so the command line can show their defaults without loading the HTTP stack."""

from __future__ import annotations

from dataclasses import dataclass

API_KEY_ENV = "TINYINFER_API_KEY"  # the API key, when --api-key is not given


@dataclass
class Limits:
    """What one client may ask of the server. Sizes in bytes, times in seconds."""

    max_body_bytes: int = 4 << 20  # a request body; a 512-token prompt as JSON is a few kB
    max_queued: int = 256  # sequences waiting beyond the running batch; more is a 503
    head_timeout_s: float = 10.0  # from connecting (or the last answer) to a whole request head
    body_timeout_s: float = 30.0  # from the head to the whole body
    keep_alive_s: float = 5.0  # an idle connection between requests (uvicorn's timeout_keep_alive)
    max_connections: int = 1024  # open connections and requests in progress (uvicorn's limit_concurrency)
    backlog: int = 2048  # connections the kernel queues before they are accepted
    probe_s: float = 0.25  # how often a half-closed connection is probed while its answer is computed
