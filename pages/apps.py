from django.apps import AppConfig


class PagesConfig(AppConfig):
    """The views, URLs, forms and template tags of the archive and its replays, and the
    context they build; no models."""

    name = "pages"
    verbose_name = "Pages"
