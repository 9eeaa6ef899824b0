from django.apps import AppConfig


class SessionsConfig(AppConfig):
    name = "sessions"
    # django.contrib.sessions owns the label "sessions".
    label = "tutoring_sessions"
    verbose_name = "Tutoring sessions"
