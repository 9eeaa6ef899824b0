from django.contrib import admin
from django.urls import include, path

from config import views
from tutor import views as tutor_views

urlpatterns = [
    path("", include("sessions.urls")),
    path("", include("kernels.urls")),
    path("accounts/signup/", tutor_views.signup, name="signup"),
    path("accounts/login/", tutor_views.signin, name="login"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("tutor/", include("tutor.urls")),
    path("admin/", admin.site.urls),
    path("healthz", views.healthz, name="healthz"),
]

handler400 = "config.views.bad_request"
handler404 = "config.views.not_found"
