"""The pool of replay workers a web process runs (LocalBackend's), made from the settings
alone: config/wsgi.py starts it before Django loads the site's apps, so that its workers
open their devices and warm up while the rest of the site loads, rather than after."""

from __future__ import annotations

import atexit

from django.conf import settings

from kernels.engine.pool import Pool

_early: Pool | None = None


def new_pool(size: int | None = None, max_queue: int | None = None) -> Pool:
    """A pool of this machine's replay workers, as the settings say (size and max_queue:
    other than REPLAY_WORKERS and REPLAY_QUEUE, as a Celery worker child's one process)."""
    pool = Pool(
        size=settings.REPLAY_WORKERS if size is None else size,
        deadline=settings.REPLAY_DEADLINE,
        max_queue=settings.REPLAY_QUEUE if max_queue is None else max_queue,
        backend=settings.REPLAY_WGPU_BACKEND,
        cwd=str(settings.BASE_DIR),
    )
    atexit.register(pool.close)
    return pool


def start_early() -> None:
    """Start this process's pool now, if it runs replays itself (the local backend)."""
    global _early
    if settings.REPLAY_BACKEND == "local" and _early is None:
        _early = new_pool()


def take_early() -> Pool | None:
    """The pool start_early() started, handed over once (None if there is none)."""
    global _early
    pool, _early = _early, None
    return pool
