"""The Django-free replay engine: what the worker processes import.

Nothing in this package imports Django or the project's apps (tests/kernels/
test_engine_boundary.py checks it), so a worker starts without settings and the web
process only ever needs the pool.
"""
