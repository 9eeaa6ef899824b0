"""A reader waiting on replay.json is answered as soon as the outcome is ready; the run is
stored after the answer has gone, by the request that answered (request_finished), and by
the pool's thread when nobody waits."""

from __future__ import annotations

import threading
import time
from typing import Any
from unittest import mock

import pytest
from django.conf import settings
from django.test import Client, TransactionTestCase

from kernels import finishing, replay
from kernels.engine.pool import Pool
from kernels.models import Run
from pages import replay_views
from tests.base import add_kernel, make_session

pytestmark = [
    pytest.mark.usefixtures("fresh_replay_backend"),
    pytest.mark.skipif(settings.REPLAY_BACKEND != "local", reason="the in-process pool's"),
]

PATH = "/s/demo/turns/2/replay.json"


def stored_run(timeout: float = 60) -> Run:
    """The one run, once the database has it done."""
    give_up = time.monotonic() + timeout
    while (run := Run.objects.get()).state != Run.State.DONE:
        assert time.monotonic() < give_up, "the run was never stored"
        time.sleep(0.05)
    return run


class AnswerFirstTests(TransactionTestCase):
    def setUp(self) -> None:
        add_kernel(make_session("demo", turns=3), turn=2)
        self.events: list[tuple[str, str]] = []
        real_json, real_store = replay_views._run_json, finishing.store

        def answer(shown: Any, extra: Any) -> str:
            state = Run.objects.values_list("state", flat=True).get()
            self.events.append(("answer while " + state, threading.current_thread().name))
            return real_json(shown, extra)

        def store(run_id: int, done: finishing.Finished) -> dict[str, Any] | None:
            self.events.append(("store", threading.current_thread().name))
            return real_store(run_id, done)

        # Each job ends after its run's INSERT, as it does but for the tiniest jobs on a
        # busy machine (one that ends first is stored before the answer, from the request
        # that made it: test_replay_queries.py).
        inserted = threading.Event()
        real_new_run, real_resolve = replay._new_run, Pool._resolve

        def new_run(*args: Any, **kwargs: Any) -> Any:
            try:
                return real_new_run(*args, **kwargs)
            finally:
                inserted.set()

        def resolve(pool: Pool, *args: Any, **kwargs: Any) -> None:
            inserted.wait(30)
            real_resolve(pool, *args, **kwargs)

        for patcher in (
            mock.patch.object(replay_views, "_run_json", side_effect=answer),
            mock.patch.object(finishing, "store", side_effect=store),
            mock.patch.object(replay, "_new_run", new_run),
            mock.patch.object(Pool, "_resolve", resolve),
        ):
            patcher.start()
            self.addCleanup(patcher.stop)

    def test_the_reader_is_answered_before_the_run_is_stored(self) -> None:
        r = self.client.get(PATH, {"wait": 30})
        self.assertEqual(r.status_code, 200, r.content)
        here = threading.current_thread().name
        # The answer went out while the run was unstored; the request stored it after.
        self.assertEqual(self.events, [("answer while running", here), ("store", here)])
        run = Run.objects.get()
        self.assertEqual(run.state, Run.State.DONE)
        self.assertEqual(r.json()["run"]["id"], run.pk)
        self.assertEqual(r.json()["outcome"], run.outcome)
        self.assertEqual(run.outcome["status"], "passed")
        # Asked again, it is the stored run that answers.
        self.assertEqual(self.client.get(PATH).json()["outcome"], run.outcome)

    def test_with_nobody_waiting_the_pool_stores_it(self) -> None:
        r = self.client.get(PATH)
        self.assertEqual(r.status_code, 202)
        self.assertEqual(stored_run().outcome["status"], "passed")
        [thread] = [thread for what, thread in self.events if what == "store"]
        self.assertTrue(thread.startswith("replay-slot"), thread)

    def test_a_reader_who_gave_up_leaves_the_store_to_the_pool(self) -> None:
        release = threading.Event()
        real = finishing.finished

        def held_back(outcome: Any) -> finishing.Finished:
            release.wait(30)
            return real(outcome)

        with mock.patch.object(finishing, "finished", side_effect=held_back):
            r = self.client.get(PATH, {"wait": "0.2"})
            self.assertEqual(r.status_code, 202)
            release.set()
            run = stored_run()
        self.assertEqual(run.outcome["status"], "passed")
        [thread] = [thread for what, thread in self.events if what == "store"]
        self.assertTrue(thread.startswith("replay-slot"), thread)

    def test_a_second_reader_meanwhile_gets_the_same_outcome_unstored(self) -> None:
        stored = threading.Event()
        real_store = finishing.store

        def slow_store(run_id: int, done: finishing.Finished) -> dict[str, Any] | None:
            stored.wait(30)
            return real_store(run_id, done)

        answers: list[Any] = []
        with mock.patch.object(finishing, "store", side_effect=slow_store):
            first = threading.Thread(
                target=lambda: answers.append(Client().get(PATH, {"wait": 30})), name="first"
            )
            first.start()
            give_up = time.monotonic() + 60
            while not self.events:
                self.assertLess(time.monotonic(), give_up)
                time.sleep(0.01)
            second = self.client.get(PATH, {"wait": 30})
            self.assertEqual(Run.objects.get().state, Run.State.RUNNING)
            stored.set()
            first.join(60)
        self.assertEqual(second.status_code, 200)
        self.assertEqual(second.json()["outcome"], answers[0].json()["outcome"])
        self.assertEqual(stored_run().outcome, second.json()["outcome"])
        # Stored once, by the reader answered first.
        self.assertEqual([thread for what, thread in self.events if what == "store"], ["first"])
