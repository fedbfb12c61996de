"""Benchmarks: one module per `tinyinfer bench NAME`."""
