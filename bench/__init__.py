"""Benchmarks for aionative against the ways asyncio programs read files today.

Run ``python -m bench`` (see ``bench/__main__.py``). Every measurement runs in a fresh worker
subprocess (``bench/worker.py``) so that one system's threads, memory and CPU time never show
up in another's figures. Workloads are sibling modules (``bench/w1.py``, ...) that plug into the
same worker protocol, harness and report code.
"""
