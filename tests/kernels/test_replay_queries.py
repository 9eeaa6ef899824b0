"""What a fresh replay costs the database: the queries from a request to its stored outcome.

Counted on the caller's connection; the outcome is stored by a pool thread, on its own
connection (or by the caller, when the job ended before the run's INSERT did), and counted
apart (finish).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any
from unittest import mock

import pytest
from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.test import TransactionTestCase, override_settings
from django.test.utils import CaptureQueriesContext

from kernels import finishing, jobs, replay
from kernels.models import Run
from sessions.programs import KernelVersion
from tests.base import add_kernel, make_session
from tests.kernels.test_replay_views import finished

pytestmark = [
    pytest.mark.usefixtures("fresh_replay_backend"),
    pytest.mark.skipif(settings.REPLAY_BACKEND != "local", reason="counts the local pool's work"),
]

STORED = ("state", "status", "cacheable", "outcome", "detail", "adapter", "finished")
TAKEN = ("environment_id", "started", "worker", "attempts")


def asked(queries: CaptureQueriesContext) -> list[str]:
    """The statements' verbs, but for a store's UPDATE."""
    sqls = [
        q["sql"] for q in queries if not q["sql"].startswith('UPDATE "kernels_run" SET "state"')
    ]
    return [sql.split()[0] for sql in sqls]


class FreshReplayQueriesTestCase(TransactionTestCase):
    def setUp(self) -> None:
        add_kernel(make_session("queries", turns=1))
        # As a page holds it: the version with its kernel.
        self.version = KernelVersion.objects.select_related("kernel").get()
        self.environment_id = replay.backend().environment_id(wait=True)

    def test_a_fresh_replay_is_one_lookup_and_one_insert_and_is_not_read_back(self) -> None:
        with CaptureQueriesContext(connection) as queries:
            shown = replay.run_now(self.version)
        # The store's UPDATE is on this connection when the job ended before its INSERT
        # did, else on the pool thread's; either way it is counted apart (below).
        self.assertEqual(asked(queries), ["SELECT", "INSERT"])

        self.assertEqual(shown.outcome["status"], "passed")
        # What the caller holds is what was stored, though nothing was read back.
        stored = Run.objects.get()
        self.assertEqual(shown.run.pk, stored.pk)
        for name in STORED + TAKEN:
            self.assertEqual(getattr(shown.run, name), getattr(stored, name), name)
        self.assertEqual((stored.attempts, stored.worker), (1, replay.worker_name()))

    def inserted_after_the_job_ends(self) -> Any:
        """A patch under which each job ends before its run's INSERT is made."""
        pool = replay.backend().pool()  # type: ignore[attr-defined]
        real_submit, real_new_run = pool.submit, replay._new_run
        futures: list[Future[Any]] = []

        def submit(*args: Any, **kwargs: Any) -> Future[Any]:
            futures.append(real_submit(*args, **kwargs))
            return futures[-1]

        def late(*args: Any, **kwargs: Any) -> Run | None:
            futures[-1].result(30)  # the job has ended
            return real_new_run(*args, **kwargs)

        pool.submit = submit
        self.addCleanup(delattr, pool, "submit")
        return mock.patch.object(replay, "_new_run", side_effect=late)

    def test_a_job_that_ends_before_its_insert_is_stored_and_not_read_back(self) -> None:
        with self.inserted_after_the_job_ends(), CaptureQueriesContext(connection) as queries:
            shown = replay.run_now(self.version)

        self.assertEqual(shown.outcome["status"], "passed")
        stored = Run.objects.get()
        self.assertEqual(shown.run.pk, stored.pk)
        for name in STORED:
            self.assertEqual(getattr(shown.run, name), getattr(stored, name), name)
        verbs = [q["sql"].split()[0] for q in queries]
        self.assertEqual(verbs, ["SELECT", "INSERT", "UPDATE"])

    def test_a_job_that_ends_before_its_insert_leaves_the_callers_transaction_open(self) -> None:
        # The store is then the caller's, on its connection: one in a transaction (a
        # request under ATOMIC_REQUESTS, a test) must still be usable after it.
        with self.inserted_after_the_job_ends(), transaction.atomic():
            shown = replay.run_now(self.version)
            self.assertEqual(shown.outcome["status"], "passed")
            self.assertEqual(Run.objects.get().state, Run.State.DONE)

        self.assertEqual(Run.objects.get().status, "passed")

    def test_a_fresh_run_is_one_insert(self) -> None:
        replay.run_now(self.version)
        job = jobs.job_for(self.version)

        with CaptureQueriesContext(connection) as queries:
            run = replay.start_run(job, fresh=True)

        # Besides the store's UPDATE, made here when the job ended first (counted apart).
        self.assertEqual(asked(queries), ["INSERT"])
        self.assertEqual(replay.wait(run, 10).status, "passed")
        self.assertEqual(Run.objects.count(), 2)

    def test_the_outcome_is_stored_in_one_update(self) -> None:
        job = jobs.job_for(self.version)
        run = replay._new_run(job, self.environment_id)
        outcome = finishing.failed_outcome("The worker running it stopped.")

        with self.assertNumQueries(1):
            stored = finishing.finish(run.pk, outcome)

        self.assertEqual(stored["status"], "crashed")
        with self.assertNumQueries(1):
            self.assertIsNone(finishing.finish(run.pk, outcome))  # finished already

    def test_a_cached_outcome_takes_one_query(self) -> None:
        first = replay.run_now(self.version).run

        with self.assertNumQueries(1):
            again = replay.run_now(self.version)

        self.assertEqual(again.run.pk, first.pk)
        self.assertEqual(Run.objects.count(), 1)

    def test_a_page_that_starts_a_run_looks_twice_and_inserts_once(self) -> None:
        # What the reader sees now (for_reader), then the run started (start_run).
        with CaptureQueriesContext(connection) as queries:
            shown = replay.for_reader(self.version, start=True)

        self.assertEqual(asked(queries), ["SELECT", "SELECT", "INSERT"])

        self.assertEqual(replay.wait(shown.run, 10).status, "passed")

    def test_a_run_in_flight_is_joined_without_an_insert(self) -> None:
        job = jobs.job_for(self.version)
        in_flight = replay._new_run(job, self.environment_id)

        with self.assertNumQueries(1):
            joined = replay.start_run(job)
        # A fresh request tries its insert first (the usual case: nothing in flight).
        with self.assertNumQueries(2):
            joined_fresh = replay.start_run(job, fresh=True)

        self.assertEqual((joined.pk, joined_fresh.pk), (in_flight.pk, in_flight.pk))
        self.assertEqual(Run.objects.count(), 1)

    def test_a_clash_on_the_insert_is_shared_and_spoils_no_transaction(self) -> None:
        job = jobs.job_for(self.version)
        first = replay._new_run(job, self.environment_id)

        self.assertIsNone(replay._new_run(job, self.environment_id))
        with transaction.atomic():
            self.assertIsNone(replay._new_run(job, self.environment_id))
            # The caller's transaction goes on.
            self.assertEqual(Run.objects.get().pk, first.pk)

    def test_concurrent_requests_for_one_job_share_one_run(self) -> None:
        job = jobs.job_for(self.version)
        together = threading.Barrier(2)
        runs: list[Run] = []

        def request() -> None:
            together.wait()
            runs.append(replay.start_run(job))
            connection.close()

        threads = [threading.Thread(target=request) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)

        self.assertEqual(len({run.pk for run in runs}), 1)
        self.assertEqual(replay.wait(runs[0], 10).status, "passed")
        self.assertEqual(Run.objects.count(), 1)


@pytest.mark.skipif(connection.vendor != "sqlite", reason="reads SQLite's query plans")
class RunsFoundByIndexTestCase(TransactionTestCase):
    def test_no_query_of_a_replay_reads_the_whole_table_of_runs(self) -> None:
        add_kernel(make_session("indexed", turns=1))
        self.addCleanup(cache.clear)  # the "Run again" rate limit counts in the cache
        statements: list[tuple[str, tuple]] = []

        def record(execute, sql, params, many, context):
            statements.append((sql, params))
            return execute(sql, params, many, context)

        with connection.execute_wrapper(record):
            finished(self.client, "/s/indexed/turns/1/replay.json")  # started, waited for
            self.client.get("/s/indexed/turns/1/replay.json")  # the stored answer
            self.client.post("/s/indexed/turns/1/replay/")  # "Run again"
            replay.run_now(KernelVersion.objects.get(), fresh=True)

        reads = [(sql, params) for sql, params in statements if "kernels_run" in sql]
        self.assertGreaterEqual(len(reads), 6)
        with connection.cursor() as cursor:
            for sql, params in reads:
                cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
                steps = [row[-1] for row in cursor.fetchall()]
                self.assertEqual([step for step in steps if step.startswith("SCAN")], [], sql)


@override_settings(REPLAY_BACKEND="celery")
class QueuedForCeleryTestCase(TransactionTestCase):
    def test_a_run_for_the_queue_is_created_untaken_for_a_worker_to_claim(self) -> None:
        job = jobs.job_for(add_kernel(make_session("queued", turns=1)))

        run = replay._new_run(job, "")

        self.assertEqual(
            (run.state, run.attempts, run.worker, run.started), ("queued", 0, "", None)
        )
        self.assertTrue(finishing.claim(run.pk, "host:1:2"))
        run.refresh_from_db()
        self.assertEqual((run.state, run.attempts, run.worker), ("running", 1, "host:1:2"))
