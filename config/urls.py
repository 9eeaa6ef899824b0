from django.contrib import admin
from django.urls import include, path

from config import views

urlpatterns = [
    path("", include("sessions.urls")),
    path("", include("kernels.urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
    path("healthz", views.healthz, name="healthz"),
]

handler400 = "config.views.bad_request"
handler404 = "config.views.not_found"
