import importlib
import os
import subprocess
import sys
from unittest import mock, skipUnless

from django.conf import settings
from django.contrib.auth.models import User
from django.test import SimpleTestCase, TestCase, override_settings

from kernels.backends import LocalBackend
from kernels.replay import backend

NO_CACHE = "max-age=0, no-cache, no-store, must-revalidate, private"


class HealthzTestCase(TestCase):
    def test_it_tells_anyone_the_status_and_nothing_else(self) -> None:
        r = self.client.get("/healthz")
        self.assertEqual(r.status_code, 200)
        self.assertEqual(r.json(), {"status": "ok"})
        self.assertEqual(r["Cache-Control"], NO_CACHE)

    def test_it_answers_head(self) -> None:
        r = self.client.head("/healthz")
        self.assertEqual(r.status_code, 200)

    def test_it_refuses_post(self) -> None:
        self.assertEqual(self.client.post("/healthz").status_code, 405)

    def test_it_shows_staff_the_database_and_the_replay_backend(self) -> None:
        staff = User.objects.create_user("operator", password="pw-kernelbin-1", is_staff=True)
        self.client.force_login(staff)
        body = self.client.get("/healthz").json()
        self.assertEqual(body["status"], "ok")
        self.assertTrue(body["database"]["ok"])
        self.assertIn("backend", body["replay"])
        # How to turn Claude on is for staff: learner pages never say it.
        self.assertEqual(body["tutor"]["tutor"], "automatic reviewer")
        self.assertIn("ANTHROPIC_API_KEY", body["tutor"]["claude"])

    def test_it_hides_details_from_learners(self) -> None:
        learner = User.objects.create_user("learner", password="pw-kernelbin-1")
        self.client.force_login(learner)
        self.assertEqual(set(self.client.get("/healthz").json()), {"status"})

    @override_settings(HEALTHZ_TOKEN="monitor-token-1234")
    def test_a_monitor_with_the_token_sees_details(self) -> None:
        body = self.client.get(
            "/healthz", headers={"Authorization": "Bearer monitor-token-1234"}
        ).json()
        self.assertIn("replay", body)
        wrong = self.client.get("/healthz", headers={"Authorization": "Bearer guess"}).json()
        self.assertEqual(set(wrong), {"status"})

    @override_settings(HEALTHZ_TOKEN="")
    def test_an_empty_token_opens_nothing(self) -> None:
        body = self.client.get("/healthz", headers={"Authorization": "Bearer "}).json()
        self.assertEqual(set(body), {"status"})

    def test_it_says_busy_while_the_replay_queue_is_full(self) -> None:
        live = backend()
        original = live.health

        def full() -> dict:
            return {**original(), "ok": True, "full": True}

        with mock.patch.object(live, "health", full):
            self.assertEqual(self.client.get("/healthz").json(), {"status": "busy"})


class BadHostTestCase(TestCase):
    def test_a_bad_host_gets_the_400_page_without_operator_advice(self) -> None:
        r = self.client.get("/", HTTP_HOST="evil.example")
        self.assertEqual(r.status_code, 400)
        self.assertContains(r, "does not answer to that host name", status_code=400)
        self.assertNotContains(r, "ALLOWED_HOSTS", status_code=400)


@skipUnless(settings.REPLAY_BACKEND == "local", "Celery's workers start with Celery, not the app")
class ServerStartTestCase(SimpleTestCase):
    def test_the_server_starts_its_replay_workers_in_the_background_when_it_loads(self) -> None:
        from kernels import replay

        started = replay._backend
        replay._backend = None
        sys.modules.pop("config.wsgi", None)
        try:
            importlib.import_module("config.wsgi")
            local = replay.backend()
            assert isinstance(local, LocalBackend)
            pool = local.pool()
            # Loading returned at once: no worker has opened its device yet.
            self.assertIsNone(pool.status()["environment"])
            # Each opens its device and runs its warm-up jobs before it says hello.
            pool.environment(timeout=120)
            self.assertEqual(pool.status()["warm_up"], ["passed", "passed"])
        finally:
            if replay._backend is not None:
                replay._backend.pool().close()
            replay._backend = started


def test_a_fresh_web_process_loads_its_pages_without_the_claude_sdk() -> None:
    # The SDK's import took 1.7 s of a web process's first page on a quiet machine; it is
    # imported when a reply is asked for (tutor/llm.py), not with the URLconf.
    probe = (
        "import sys, django; django.setup(); import config.urls, config.wsgi;"
        "print('anthropic' in sys.modules)"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "REPLAY_BACKEND": "celery",
            "CELERY_BROKER_URL": "memory://",
        },
        timeout=120,
    )
    assert found.stdout.strip().splitlines()[-1] == "False", found.stdout + found.stderr
