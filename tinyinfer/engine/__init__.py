"""The serving engine: a paged KV cache with prefix caching, and a continuous-batching scheduler.

Read in this order: block_manager.py (which blocks are free, shared, cached), paged_cache.py (where the
numbers live), sequence.py (one request's state), scheduler.py (who runs each step), llm.py (the API);
then, to serve it over HTTP, async_engine.py (the thread that owns the LLM), openai_api.py (the OpenAI API's
JSON), metrics.py (Prometheus) and server.py (the ASGI app on uvicorn).
"""

from tinyinfer.engine.llm import LLM, EngineStats, RequestOutput

__all__ = ["LLM", "EngineStats", "RequestOutput"]
