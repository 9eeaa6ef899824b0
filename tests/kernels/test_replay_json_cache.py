"""A finished run's replay.json is kept and served with one query, for as long as it is
still the answer: the session unchanged and visible to the reader, no newer run."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from kernels import replay
from kernels.models import Run
from tests.base import BaseTestCase, add_kernel, make_session, store_run

URL = "/s/demo/turns/2/replay.json"


class StoredAnswerTestCase(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.session = make_session("demo", turns=3)
        self.version = add_kernel(self.session, turn=2)
        store_run(self.version, "passed", "All 6 cells match the reference.")

    def test_a_finished_answer_is_served_again_with_one_query(self) -> None:
        first = self.client.get(URL)
        self.assertEqual(first.status_code, 200)
        # Beyond what the backend takes to name the environment it runs on (nothing for
        # the local pool; the fleet's, from the runs table, under Celery).
        with CaptureQueriesContext(connection) as naming:
            replay.backend().environment_id(wait=False)
        with self.assertNumQueries(1 + len(naming)):
            again = self.client.get(URL)
        self.assertEqual(again.status_code, 200)
        self.assertEqual(again.content, first.content)
        self.assertEqual(again.json()["outcome"]["message"], "All 6 cells match the reference.")

    def test_a_newer_run_of_the_kernel_is_answered_at_once(self) -> None:
        self.client.get(URL)
        newer = store_run(self.version, "mismatch", "1 of 6 cells wrong.")
        answer = self.client.get(URL).json()
        self.assertEqual(answer["run"]["id"], newer.pk)
        self.assertEqual(answer["outcome"]["message"], "1 of 6 cells wrong.")

    def test_a_session_made_private_is_404_for_others_at_once(self) -> None:
        self.client.get(URL)
        self.session.visibility = "private"
        self.session.owner = self.alice
        self.session.save()
        self.assertEqual(self.client.get(URL).status_code, 404)
        self.client.login(username="alice", password="password")
        self.assertEqual(self.client.get(URL).status_code, 200)

    def test_a_change_to_the_session_is_answered_afresh(self) -> None:
        self.assertIsNone(self.client.get(URL).json()["matches_expected"])
        self.version.expected_status = "mismatch"
        self.version.save()
        self.assertIs(self.client.get(URL).json()["matches_expected"], False)

    def test_an_unfinished_run_is_not_kept(self) -> None:
        Run.objects.all().delete()
        stored = store_run(self.version, "passed")
        Run.objects.filter(pk=stored.pk).update(state=Run.State.RUNNING, worker="elsewhere:1")
        self.assertEqual(self.client.get(URL).status_code, 202)
        Run.objects.filter(pk=stored.pk).update(state=Run.State.DONE)
        self.assertEqual(self.client.get(URL).status_code, 200)
