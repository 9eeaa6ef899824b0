"""Rate limits and token budgets: clear refusals, nothing half-done."""

from __future__ import annotations

from datetime import timedelta

from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from sessions.models import Turn
from tests.tutor.helpers import (
    FAKE_KEY,
    FakeAPI,
    TutorRunTestCase,
    TutorTestCase,
    names,
    read_events,
    text_reply,
    tool_reply,
    vector_kernel,
)
from tutor.models import ApiCall, GuidedSession


def spend(guided: GuidedSession, tokens: int, hours_ago: float = 0) -> None:
    call = ApiCall.objects.create(
        guided=guided, user=guided.learner, model="m", input_tokens=tokens
    )
    if hours_ago:
        ApiCall.objects.filter(pk=call.pk).update(
            created=timezone.now() - timedelta(hours=hours_ago)
        )


class RateLimitTestCase(TutorTestCase):
    @override_settings(TUTOR_MESSAGES_PER_MINUTE=2)
    def test_it_limits_messages_per_learner(self) -> None:
        guided = self.start()
        for text in ("one", "two"):
            self.assertEqual(names(read_events(self.say(guided, text)))[-1], "done")

        response = self.say(guided, "three")
        self.assertEqual(response.status_code, 429)
        self.assertTrue(response["Retry-After"])
        self.assertIn("Too many messages: at most 2 a minute", response.json()["error"])
        self.assertFalse(guided.session.turns.filter(content="three").exists())

        # Another learner has their own allowance.
        other = self.start(user=self.bob)
        self.assertEqual(names(read_events(self.say(other, "hello")))[-1], "done")

    @override_settings(TUTOR_MESSAGES_PER_MINUTE=1)
    def test_it_says_so_without_javascript(self) -> None:
        guided = self.start()
        self.client.post(self.url(guided, "say"), {"text": "one"})
        response = self.client.post(self.url(guided, "say"), {"text": "two"}, follow=True)
        self.assertContains(response, "Too many messages")

    @override_settings(TUTOR_SUBMISSIONS_PER_MINUTE=0)
    def test_it_limits_submissions(self) -> None:
        guided = self.start()
        response = self.submit(guided, vector_kernel())
        self.assertEqual(response.status_code, 429)
        self.assertIn("Too many submissions", response.json()["error"])
        self.assertFalse(guided.kernel.versions.exists())

    @override_settings(TUTOR_STARTS_PER_HOUR=1)
    def test_it_limits_new_sessions(self) -> None:
        self.start()
        response = self.client.post(reverse("tutor:start"), {"lesson": "free"}, follow=True)
        self.assertContains(response, "You have started many sessions")
        self.assertEqual(GuidedSession.objects.count(), 1)

    def test_it_refuses_empty_and_oversized_input(self) -> None:
        guided = self.start()
        self.assertEqual(self.say(guided, "   ").status_code, 400)
        with override_settings(TUTOR_MESSAGE_MAX_CHARS=10):
            response = self.say(guided, "x" * 11)
        self.assertEqual(response.status_code, 400)
        self.assertIn("too long", response.json()["error"])
        self.assertEqual(self.submit(guided, "  \n").status_code, 400)
        self.assertFalse(guided.session.turns.filter(role=Turn.Role.LEARNER).exists())


@override_settings(ANTHROPIC_API_KEY=FAKE_KEY, TUTOR_SESSION_TOKEN_BUDGET=10_000)
class BudgetTestCase(TutorTestCase):
    def test_it_stops_at_the_session_budget(self) -> None:
        guided = self.start()
        spend(guided, 10_000)
        response = self.say(guided, "Are you there?")
        self.assertEqual(response.status_code, 429)
        message = response.json()["error"]
        self.assertIn("This session has used its token budget (10,000 of 10,000 tokens)", message)
        self.assertIn("You can still submit kernels", message)
        self.assertFalse(guided.session.turns.filter(content="Are you there?").exists())
        # The refusal says so; the page shows a learner no token counts.
        page = self.client.get(self.url(guided, "session"))
        self.assertNotContains(page, "tokens this session")

    @override_settings(TUTOR_USER_DAILY_TOKEN_BUDGET=5_000)
    def test_it_stops_at_the_daily_budget_across_sessions(self) -> None:
        earlier = self.start()
        spend(earlier, 5_000)
        guided = self.start()
        response = self.say(guided, "Hello")
        self.assertEqual(response.status_code, 429)
        self.assertIn("daily token budget (5,000 of 5,000", response.json()["error"])

        # Tokens spent more than a day ago no longer count.
        ApiCall.objects.update(created=timezone.now() - timedelta(hours=25))
        with FakeAPI(text_reply("Welcome back.")).patch():
            self.assertEqual(names(read_events(self.say(guided, "Hello")))[-1], "done")

    def test_it_stops_when_a_reply_crosses_the_budget(self) -> None:
        guided = self.start()
        spend(guided, 9_000)
        # The first round's tokens (2,462) cross the budget: no second round is asked for.
        api = FakeAPI(tool_reply("toolu_budget", {}))
        with api.patch():
            events = read_events(self.say(guided, "Check it please"))
        self.assertEqual(len(api.requests), 1)
        self.assertEqual(names(events)[-1], "error")
        self.assertEqual(events[-1][1]["kind"], "budget")
        self.assertFalse(events[-1][1]["retry"])


@override_settings(ANTHROPIC_API_KEY=FAKE_KEY, TUTOR_SESSION_TOKEN_BUDGET=10_000)
class BudgetSubmissionTestCase(TutorRunTestCase):
    def test_it_reviews_submissions_offline_when_the_budget_is_spent(self) -> None:
        guided = self.start()
        spend(guided, 10_000)
        api = FakeAPI()  # no call may reach the API
        with api.patch():
            events = read_events(self.submit(guided, vector_kernel(32)))
        self.assertEqual(api.requests, [])
        self.assertEqual(names(events)[-1], "done")
        review = guided.session.turns.order_by("number").last()
        self.assertTrue(review.meta["automatic"])
        self.assertIn("used its token budget", review.content)
        self.assertIn("never written", review.content)
