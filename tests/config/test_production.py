"""Production settings: safe with the documented environment, refused without it.

Settings are read once per process, so each case runs manage.py in a fresh one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

PRODUCTION = {
    "KERNELBIN_PRODUCTION": "True",
    "SECRET_KEY": "k3rnelbin-t3st-s3cr3t-" + "x7Qp" * 12,
    "ALLOWED_HOSTS": "kernelbin.example.org",
    "SITE_URL": "https://kernelbin.example.org",
    "TRUSTED_PROXY_HOPS": "1",
}


# Whatever the test run itself is configured with (CI's second pass sets some) must not
# leak into the settings under test.
SETTINGS_VARIABLES = {
    *PRODUCTION,
    "DJANGO_DEBUG",
    "REDIS_URL",
    "CELERY_BROKER_URL",
    "REPLAY_BACKEND",
    "DJANGO_ALLOW_ASYNC_UNSAFE",
}


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in SETTINGS_VARIABLES}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=Path(settings.BASE_DIR),
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_documented_production_environment_passes_the_deploy_check() -> None:
    result = manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_development_defaults_do_not() -> None:
    result = manage("check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode != 0
    assert "security.W" in result.stderr + result.stdout


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"SECRET_KEY": ""}, "Set SECRET_KEY"),
        ({"SECRET_KEY": "short"}, "Set SECRET_KEY"),
        ({"ALLOWED_HOSTS": ""}, "Set ALLOWED_HOSTS"),
        ({"ALLOWED_HOSTS": "*"}, "Set ALLOWED_HOSTS"),
        ({"SITE_URL": "http://kernelbin.example.org"}, "https://"),
        ({"DJANGO_DEBUG": "True"}, "DJANGO_DEBUG=True is not allowed"),
        ({"REPLAY_BACKEND": "celery"}, "needs CELERY_BROKER_URL or REDIS_URL"),
        ({"REPLAY_BACKEND": "gpu-farm"}, "REPLAY_BACKEND must be"),
        ({"REPLAY_DEADLINE": "soon"}, "REPLAY_DEADLINE must be a number"),
        # Behind the TLS proxy every client would share the proxy's address.
        ({"TRUSTED_PROXY_HOPS": "0"}, "Set TRUSTED_PROXY_HOPS"),
    ],
)
def test_unsafe_or_broken_settings_refuse_to_start_and_say_why(change: dict, message: str) -> None:
    env = {**PRODUCTION, **change}
    if not env["SECRET_KEY"]:
        del env["SECRET_KEY"]
    result = manage("check", **env)
    assert result.returncode != 0
    assert message in result.stderr
