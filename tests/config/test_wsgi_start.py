"""A web process starts its replay workers before it loads what it does not need to.

config/wsgi.py starts the local pool as soon as the settings are read, so that the
workers open their devices while the site loads. Whatever is imported before that point
delays a reader's first replay after a restart: the ORM (django-stubs' patch), Celery,
numpy and wgpu took 0.5 s of it on the H100's host.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("django.db.models", "celery", "numpy", "wgpu")


def test_the_replay_workers_start_before_the_orm_celery_numpy_or_wgpu_load() -> None:
    script = (
        "import json, sys\n"
        "from kernels import local_pool\n"
        "loaded = {}\n"
        "started = local_pool.start_early\n"
        "def start_early():\n"
        "    started()  # reads the settings, as it does to start the pool\n"
        f"    loaded.update({{name: name in sys.modules for name in {HEAVY!r}}})\n"
        "local_pool.start_early = start_early\n"
        "import config.wsgi\n"
        "print(json.dumps({'loaded': loaded, 'later': 'django.db.models' in sys.modules}))\n"
    )
    # The Celery backend starts no workers of its own: the check starts none either.
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "REPLAY_BACKEND": "celery"}
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen == {"loaded": dict.fromkeys(HEAVY, False), "later": True}
