"""Signing in and signing up: the site's accounts, whatever part of it asked for one."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth.forms import AuthenticationForm, UserCreationForm
from django.contrib.auth.models import User
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods

from config.ratelimit import client_key, hit, signin_failed, signin_wait


class SignedInRequest(HttpRequest):
    """The request a view under login_required is given: its user has signed in."""

    user: User


@require_http_methods(["GET", "POST"])
def signin(request: HttpRequest) -> HttpResponseBase:
    """Django's sign-in, with failed attempts counted before any password is checked.

    Failures count per account from one address and per address (config/ratelimit.py),
    so a guesser elsewhere never locks the account's owner out.
    """
    username = request.POST.get("username", "")[:150]
    if request.method == "POST":
        wait = signin_wait(request, username)
        if wait:
            context = {"form": AuthenticationForm(request), "throttled": wait // 60 + 1}
            return render(request, "registration/login.html", context, status=429)
    response = LoginView.as_view()(request)
    if request.method == "POST" and response.status_code == 200:  # the form came back
        signin_failed(request, username)
    return response


def signup(request: HttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        return redirect("tutor:index")
    next_url = request.POST.get("next") or request.GET.get("next") or ""
    if not url_has_allowed_host_and_scheme(
        next_url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        next_url = ""
    form: UserCreationForm[User] = UserCreationForm(request.POST or None)
    if request.method == "POST":
        # Counted per client IP, failed attempts included: sign-ups are cheap to script.
        wait = hit("signup", client_key(request), settings.TUTOR_SIGNUPS_PER_HOUR, 3600)
        if wait:
            form.add_error(
                None, f"Too many sign-ups from your network. Try again in {wait // 60 + 1} min."
            )
            return render(
                request, "registration/signup.html", {"form": form, "next": next_url}, status=429
            )
        if form.is_valid():
            user = form.save()
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            return redirect(next_url or "tutor:index")
    return render(request, "registration/signup.html", {"form": form, "next": next_url})
