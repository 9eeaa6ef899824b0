"""The replay jobs as Celery tasks (REPLAY_BACKEND=celery): WebGPU replays on the "replay"
queue, Triton and CUDA programs on the queue of their kind (kernels.jobs.GPU_KINDS), and
each worker's announcement of what it offers (kernels/workers.py).

The tasks belong to the project's app (config/celery.py) by name, not through
shared_task: a web process loads Celery only once it sends one, not as Django starts
(0.2 s of a web process's start on the H100's host, before its replay workers could
start with the local backend)."""

from __future__ import annotations

import threading
from typing import Any

from celery.signals import worker_ready, worker_shutdown
from django.db import close_old_connections

from config.celery import app
from kernels import finishing, local_pool, replay, workers
from kernels.engine.gpu_run import run_program
from kernels.engine.pool import Pool

_pool: Pool | None = None
_stop = threading.Event()
ANNOUNCE_EVERY = 60.0


def worker_pool() -> Pool:
    """One warm replay process per Celery worker child, created after the fork."""
    global _pool
    if _pool is None:
        _pool = local_pool.new_pool(size=1, max_queue=1)
    return _pool


@app.task(name="kernels.replay", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_replay(run_id: int, key: str, payload: dict[str, Any]) -> None:
    # acks_late + reject_on_worker_lost: if this process is killed mid-job the broker
    # hands the job to another worker, and claim() counts the attempt.
    worker = replay.worker_name()
    if not finishing.claim(run_id, worker):
        return
    finishing.finish(run_id, worker_pool().run(key, payload))


@app.task(name="kernels.gpu_replay", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_gpu_replay(run_id: int, key: str, payload: dict[str, Any]) -> None:
    """A Triton or CUDA program, in the sandbox, on this worker's GPU. The sandbox is the
    process boundary: a program that hangs or crashes its GPU context is killed with
    everything it started, and the worker goes on."""
    worker = replay.worker_name()
    if not finishing.claim(run_id, worker):
        return
    finishing.finish(run_id, run_program({**payload, "gpu": workers.gpu_index()}))


def _queues(sender: Any) -> list[str]:
    try:
        return list(sender.app.amqp.queues.consume_from)
    except AttributeError:
        return []


@worker_ready.connect
def announce_worker(sender: Any = None, **_: Any) -> None:
    """Say what this worker offers, and keep saying it while it runs."""
    name, queues, gpu = str(sender.hostname), _queues(sender), workers.gpu_name()
    workers.announce(name, queues, gpu)

    def renew() -> None:
        while not _stop.wait(ANNOUNCE_EVERY):
            close_old_connections()
            workers.announce(name, queues, gpu)

    threading.Thread(target=renew, name="kernelbin-announce", daemon=True).start()


@worker_shutdown.connect
def withdraw_worker(sender: Any = None, **_: Any) -> None:
    _stop.set()
    workers.withdraw(str(sender.hostname))
