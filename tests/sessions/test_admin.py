from sessions.models import Session
from sessions.programs import Kernel
from tests.base import ADD_HARNESS, BaseTestCase, add_kernel, make_session


class AdminTestCase(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.charlie.is_superuser = True
        self.charlie.save()
        self.client.login(username="charlie", password="password")
        self.session = make_session("draft", turns=2, visibility="private")

    def test_curators_can_list_and_open_sessions(self) -> None:
        self.assertContains(self.client.get("/admin/tutoring_sessions/session/"), "Session draft")
        r = self.client.get(f"/admin/tutoring_sessions/session/{self.session.pk}/change/")
        self.assertContains(r, "Turn 1 text")

    def test_publish_and_unpublish(self) -> None:
        url = "/admin/tutoring_sessions/session/"
        self.client.post(url, {"action": "publish_public", "_selected_action": [self.session.pk]})
        self.session.refresh_from_db()
        self.assertEqual(self.session.visibility, "public")
        self.assertIsNotNone(self.session.published_at)
        self.client.post(url, {"action": "unpublish", "_selected_action": [self.session.pk]})
        self.session.refresh_from_db()
        self.assertEqual(self.session.visibility, "private")
        self.assertIsNotNone(self.session.published_at, "numbers stay frozen after unpublishing")

    def test_published_turn_numbers_are_frozen(self) -> None:
        self.session.publish()
        turn = self.session.turns.get(number=1)
        turn.number = 5
        with self.assertRaisesMessage(Exception, "frozen"):
            turn.save()
        r = self.client.get(f"/admin/tutoring_sessions/session/{self.session.pk}/change/")
        self.assertNotContains(r, 'name="turns-0-number"')

    def test_an_invalid_harness_is_refused_with_the_field_named(self) -> None:
        kernel = add_kernel(self.session).kernel
        bad = dict(
            ADD_HARNESS,
            buffers={
                **ADD_HARNESS["buffers"],
                "a": {**ADD_HARNESS["buffers"]["a"], "dtype": "f64"},
            },
        )
        import json

        r = self.client.post(
            f"/admin/tutoring_sessions/kernel/{kernel.pk}/change/",
            {
                "session": self.session.pk,
                "name": "add",
                "title": "",
                "harness": json.dumps(bad),
                "versions-TOTAL_FORMS": 0,
                "versions-INITIAL_FORMS": 0,
            },
        )
        self.assertContains(r, "buffers.a.dtype")
        self.assertEqual(Kernel.objects.get().harness, ADD_HARNESS)

    def test_non_staff_are_sent_to_login(self) -> None:
        self.client.login(username="bob", password="password")
        r = self.client.get("/admin/tutoring_sessions/session/")
        self.assertEqual(r.status_code, 302)
        self.assertEqual(Session.objects.count(), 1)
