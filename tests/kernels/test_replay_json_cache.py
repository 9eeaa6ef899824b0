"""A finished run's replay.json is kept and served with one query, for as long as it is
still the answer: the session unchanged and visible to the reader, no newer run."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from kernels import finishing, replay
from kernels.engine.outcome import WarningCode
from kernels.engine.run_warnings import coded
from kernels.models import Run
from tests.base import BaseTestCase, add_kernel, make_session, store_run, stored_outcome

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


LOOP_CAP = coded(
    WarningCode.LOOP_CAP,
    {"kernel": "self", "entry_point": "main", "line": 4, "condition": "i < dims.k"},
)
OLD_SENTENCE = (
    "llvmpipe stops any loop after 65,535 iterations per invocation, so a mismatch in a "
    "long loop may not happen on a real GPU."
)


class WarningsShapeTestCase(BaseTestCase):
    """replay.json's warnings stay the sentences clients have always read; the coded
    items come under warning_items, whenever and however the run was stored."""

    def setUp(self) -> None:
        super().setUp()
        self.session = make_session("demo", turns=3)
        self.version = add_kernel(self.session, turn=2)

    def assert_shape(self, expected_code: str) -> None:
        for query in ({}, {"wait": "0"}):  # the cached answer, and one made afresh
            outcome = self.client.get(URL, query).json()["outcome"]
            self.assertEqual(len(outcome["warnings"]), 1)
            self.assertIsInstance(outcome["warnings"][0], str)
            [item] = outcome["warning_items"]
            self.assertEqual(item["code"], expected_code)
            self.assertEqual(item["text"], outcome["warnings"][0])

    def test_a_run_finished_now_serves_sentences_and_coded_items(self) -> None:
        run = store_run(self.version, "passed")
        Run.objects.filter(pk=run.pk).update(state=Run.State.RUNNING)
        outcome = {**run.outcome, "warnings": [LOOP_CAP]}
        self.assertIsNotNone(finishing.finish(run.pk, stored_outcome(outcome)))
        stored = Run.objects.get(pk=run.pk).outcome
        self.assertEqual(stored["warnings"], [LOOP_CAP["text"]])
        self.assertEqual(stored["warning_items"], [LOOP_CAP])
        self.assert_shape("llvmpipe_loop_cap")
        self.assertIn("line 4", self.client.get(URL).json()["outcome"]["warnings"][0])

    def test_a_run_stored_with_coded_warnings_serves_them_as_sentences(self) -> None:
        store_run(self.version, "mismatch", warnings=[LOOP_CAP])
        self.assert_shape("llvmpipe_loop_cap")

    def test_a_run_stored_before_codes_keeps_its_sentence_and_gains_its_code(self) -> None:
        store_run(self.version, "mismatch", warnings=[OLD_SENTENCE])
        self.assert_shape("llvmpipe_loop_cap")
        self.assertEqual(self.client.get(URL).json()["outcome"]["warnings"], [OLD_SENTENCE])
