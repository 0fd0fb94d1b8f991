"""Benchmarks of hermes-transport against plain httpx and a model of the seed design.

Not part of the test suite: run them with ``python3 benchmarks/run.py`` (see README.md).
"""
