from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from config import accounts, views

urlpatterns = [
    path("", include("pages.urls")),
    path("accounts/signup/", accounts.signup, name="signup"),
    path("accounts/login/", accounts.signin, name="login"),
    # Not django.contrib.auth.urls: without mail and e-mail addresses, password reset
    # could only be abused, never used.
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(
        "accounts/password_change/",
        auth_views.PasswordChangeView.as_view(),
        name="password_change",
    ),
    path(
        "accounts/password_change/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    path("tutor/", include("tutor.urls")),
    path("admin/", admin.site.urls),
    path("healthz", views.healthz, name="healthz"),
]

handler400 = "config.views.bad_request"
handler404 = "config.views.not_found"
handler500 = "config.views.server_error"
