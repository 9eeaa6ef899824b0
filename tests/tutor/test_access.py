"""Who may read and post to a guided session, and CSRF on every POST."""

from __future__ import annotations

from django.urls import reverse

from sessions.models import Turn
from tests.tutor.helpers import TutorTestCase, read_events, vector_kernel

ACTIONS = {
    "say": {"text": "Hello from someone else"},
    "submit": {"source": "@compute @workgroup_size(1) fn main() {}"},
    "retry": {},
    "publish": {"visibility": "public"},
}


class AccessTestCase(TutorTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.guided = self.start()
        read_events(self.say(self.guided, "A private question"))
        self.client.logout()

    def test_it_hides_a_session_from_other_learners(self) -> None:
        self.client.force_login(self.bob)
        response = self.client.get(self.url(self.guided, "session"))
        self.assertEqual(response.status_code, 404)
        self.assertNotContains(response, "A private question", status_code=404)
        # The archive views of it are private too.
        self.assertEqual(self.client.get(self.guided.session.get_absolute_url()).status_code, 404)

    def test_it_refuses_posts_from_other_learners(self) -> None:
        self.client.force_login(self.bob)
        for name, data in ACTIONS.items():
            with self.subTest(name):
                response = self.client.post(self.url(self.guided, name), data)
                self.assertEqual(response.status_code, 404)
        self.assertEqual(self.guided.session.turns.count(), 3)
        self.guided.session.refresh_from_db()
        self.assertFalse(self.guided.session.is_published)

    def test_it_lets_staff_read_but_not_post(self) -> None:
        self.client.force_login(self.charlie)
        response = self.client.get(self.url(self.guided, "session"))
        self.assertContains(response, "A private question")
        self.assertContains(response, "You are reading alice's session.")
        self.assertNotContains(response, 'id="composer"')
        for name, data in ACTIONS.items():
            with self.subTest(name):
                self.assertEqual(
                    self.client.post(self.url(self.guided, name), data).status_code, 404
                )

    def test_anonymous_visitors_see_the_lessons_and_sign_in_to_start(self) -> None:
        lessons = self.client.get(reverse("tutor:index"))
        self.assertContains(lessons, "Your first compute shader: adding two vectors")
        self.assertContains(lessons, f'href="{reverse("login")}?next={reverse("tutor:index")}"')
        self.assertNotContains(lessons, 'action="/tutor/start/"')
        self.assertNotContains(lessons, "Your sessions")
        for url in (self.url(self.guided, "session"), self.url(self.guided, "publish")):
            with self.subTest(url):
                response = self.client.get(url)
                self.assertRedirects(response, f"{reverse('login')}?next={url}")
        response = self.client.post(reverse("tutor:start"), {"lesson": "vector-add"})
        self.assertEqual(response.status_code, 302)
        self.assertIn(reverse("login"), response["Location"])
        response = self.client.post(self.url(self.guided, "say"), ACTIONS["say"])
        self.assertEqual(response.status_code, 302)
        self.assertEqual(self.guided.session.turns.filter(role=Turn.Role.LEARNER).count(), 1)

    def test_it_enforces_csrf_on_every_post(self) -> None:
        self.csrf_client.force_login(self.alice)
        urls = {name: self.url(self.guided, name) for name in ACTIONS}
        urls["start"] = reverse("tutor:start")
        data = {**ACTIONS, "start": {"lesson": "free"}}
        for name, url in urls.items():
            with self.subTest(name):
                response = self.csrf_client.post(url, data[name], HTTP_ACCEPT="text/event-stream")
                self.assertEqual(response.status_code, 403)
        self.csrf_client.logout()
        response = self.csrf_client.post(
            reverse("signup"), {"username": "eve", "password1": "x", "password2": "x"}
        )
        self.assertEqual(response.status_code, 403)
        self.assertEqual(self.guided.session.turns.count(), 3)

    def test_it_accepts_posts_with_the_token(self) -> None:
        self.csrf_client.force_login(self.alice)
        page = self.csrf_client.get(self.url(self.guided, "session"))
        token = page.cookies["csrftoken"].value
        response = self.csrf_client.post(
            self.url(self.guided, "say"),
            {"text": "With a token"},
            HTTP_ACCEPT="text/event-stream",
            HTTP_X_CSRFTOKEN=token,
        )
        self.assertEqual(response.status_code, 200)
        read_events(response)
        self.assertTrue(self.guided.session.turns.filter(content="With a token").exists())

    def test_it_keeps_others_out_of_kernel_submissions(self) -> None:
        self.client.force_login(self.bob)
        response = self.client.post(
            self.url(self.guided, "submit"),
            {"source": vector_kernel()},
            HTTP_ACCEPT="text/event-stream",
        )
        self.assertEqual(response.status_code, 404)
        self.assertFalse(self.guided.kernel.versions.exists())
