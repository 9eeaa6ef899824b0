"""The Celery app for REPLAY_BACKEND=celery: replay jobs on worker machines.

    celery -A config worker -Q replay --concurrency 2

Each worker child keeps one warm replay subprocess (kernels/engine/pool.py), so a job runs in
its own killable process under the same deadline and limits as on one box.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("kernelbin")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
