"""The replay job as a Celery task (REPLAY_BACKEND=celery)."""

from __future__ import annotations

import atexit

from celery import shared_task
from django.conf import settings

from kernels import replay
from kernels.engine.pool import Pool

_pool: Pool | None = None


def worker_pool() -> Pool:
    """One warm replay process per Celery worker child, created after the fork."""
    global _pool
    if _pool is None:
        _pool = Pool(
            size=1,
            deadline=settings.REPLAY_DEADLINE,
            max_queue=1,
            backend=settings.REPLAY_WGPU_BACKEND,
            cwd=str(settings.BASE_DIR),
        )
        atexit.register(_pool.close)
    return _pool


@shared_task(name="kernels.replay", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_replay(run_id: int, key: str, payload: dict) -> None:
    # acks_late + reject_on_worker_lost: if this process is killed mid-job the broker
    # hands the job to another worker, and claim() counts the attempt.
    worker = replay.worker_name()
    if not replay.claim(run_id, worker):
        return
    replay.finish(run_id, worker_pool().run(key, payload))
