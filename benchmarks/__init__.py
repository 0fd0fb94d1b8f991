"""Benchmarks of hermes-transport against plain httpx (or httpx2) and a model of the seed design.

Not part of the test suite: run them with ``python3 benchmarks/run.py`` (see README.md).
"""
