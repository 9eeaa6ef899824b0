from django.contrib import admin
from django.urls import include, path

from config import accounts, views

urlpatterns = [
    path("", include("sessions.urls")),
    path("", include("kernels.urls")),
    path("accounts/signup/", accounts.signup, name="signup"),
    path("accounts/login/", accounts.signin, name="login"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("tutor/", include("tutor.urls")),
    path("admin/", admin.site.urls),
    path("healthz", views.healthz, name="healthz"),
]

handler400 = "config.views.bad_request"
handler404 = "config.views.not_found"
