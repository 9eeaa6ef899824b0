"""Signing in: guessing is limited, and nobody can lock somebody else out."""

from __future__ import annotations

from django.core.cache import cache
from django.test import override_settings
from django.urls import reverse

from tests.base import BaseTestCase

HOME = "203.0.113.7"
ELSEWHERE = "198.51.100.9"


@override_settings(SIGNIN_FAILURES_PER_ACCOUNT=3, SIGNIN_FAILURES_PER_ADDRESS=5)
class SignInLimitTestCase(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        cache.clear()

    def sign_in(self, password: str, address: str = HOME, username: str = "alice"):
        return self.client.post(
            reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=address
        )

    def test_it_refuses_even_the_right_password_once_the_guesses_are_used_up(self) -> None:
        for _ in range(3):
            r = self.sign_in("guess", address=ELSEWHERE)
            self.assertContains(r, "enter a correct username and password")
        r = self.sign_in("password", address=ELSEWHERE)
        self.assertContains(r, "Too many sign-in attempts", status_code=429)
        self.assertNotIn("_auth_user_id", self.client.session)

    def test_guesses_from_elsewhere_do_not_lock_the_owner_out(self) -> None:
        for _ in range(10):
            self.sign_in("guess", address=ELSEWHERE)
        r = self.sign_in("password", address=HOME)
        self.assertEqual(r.status_code, 302)
        self.assertEqual(self.client.session["_auth_user_id"], str(self.alice.pk))

    def test_one_address_cannot_try_many_accounts(self) -> None:
        for name in ("a1", "a2", "a3", "a4", "a5"):
            self.assertEqual(self.sign_in("guess", username=name).status_code, 200)
        self.assertEqual(self.sign_in("guess", username="a6").status_code, 429)
        # Another address is not affected.
        self.assertEqual(self.sign_in("guess", username="a6", address=ELSEWHERE).status_code, 200)

    def test_successful_sign_ins_are_not_counted(self) -> None:
        for _ in range(6):
            self.assertEqual(self.sign_in("password").status_code, 302)
            self.client.logout()

    @override_settings(TRUSTED_PROXY_HOPS=1)
    def test_behind_a_proxy_each_client_is_counted_alone(self) -> None:
        proxy = "10.0.0.2"
        for _ in range(10):
            self.client.post(
                reverse("login"),
                {"username": "bob", "password": "guess"},
                REMOTE_ADDR=proxy,
                HTTP_X_FORWARDED_FOR=ELSEWHERE,
            )
        r = self.client.post(
            reverse("login"),
            {"username": "alice", "password": "password"},
            REMOTE_ADDR=proxy,
            HTTP_X_FORWARDED_FOR=HOME,
        )
        self.assertEqual(r.status_code, 302)


class PasswordResetTestCase(BaseTestCase):
    def test_there_is_no_password_reset_to_abuse(self) -> None:
        for url in ("/accounts/password_reset/", "/accounts/reset/MQ/set-password/"):
            with self.subTest(url=url):
                self.assertEqual(self.client.get(url).status_code, 404)
                self.assertEqual(self.client.post(url, {"email": "a@b.c"}).status_code, 404)

    def test_signed_in_learners_can_still_change_their_password_and_sign_out(self) -> None:
        self.client.force_login(self.alice)
        self.assertEqual(self.client.get(reverse("password_change")).status_code, 200)
        self.assertEqual(self.client.post(reverse("logout")).status_code, 302)
