"""Kernelbin settings: one file, configured from the environment.

Defaults are for a developer's machine (SQLite, a local replay pool, DEBUG off).
Production is switched on with KERNELBIN_PRODUCTION=True; it then refuses to start
on an unsafe configuration and says which variable to fix.
"""

from __future__ import annotations

import os
from pathlib import Path

from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def envbool(name: str, default: str) -> bool:
    value = os.getenv(name, default)
    if value not in ("True", "False"):
        raise ImproperlyConfigured(f"Unexpected value {name}={value!r}, use 'True' or 'False'")
    return value == "True"


def envint(name: str, default: int) -> int:
    value = os.getenv(name, str(default))
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None


def envfloat(name: str, default: float) -> float:
    value = os.getenv(name, str(default))
    try:
        return float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {value!r}") from None


def envlist(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.getenv(name, default).split(",") if item.strip()]


PRODUCTION = envbool("KERNELBIN_PRODUCTION", "False")
DEBUG = envbool("DJANGO_DEBUG", "False")

DEV_SECRET_KEY = "kernelbin-dev-only-secret-key-never-use-in-production"  # noqa: S105
SECRET_KEY = os.getenv("SECRET_KEY", DEV_SECRET_KEY)
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1],testserver")
# The public origin (scheme://host[:port]) that embed and oEmbed URLs are built on.
# Unset, the origin of each request is used, which is right for one box without a proxy.
SITE_URL = os.getenv("SITE_URL", "").rstrip("/")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "csp",
    "sessions.apps.SessionsConfig",
    "kernels.apps.KernelsConfig",
    "tutor.apps.TutorConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "config.context_processors.site",
            ],
        },
    },
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.getenv("SQLITE_PATH", str(BASE_DIR / "db.sqlite3")),
        "OPTIONS": {
            # WAL lets readers keep reading while a replay result or a tutor turn is written.
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        },
        # A file, not memory: replay results are stored from pool threads, which need
        # their own connections to see what the test committed.
        "TEST": {"NAME": os.getenv("SQLITE_TEST_PATH", str(BASE_DIR / ".test-db.sqlite3"))},
        # Reuse connections across requests instead of opening one per request.
        "CONN_MAX_AGE": envint("CONN_MAX_AGE", 600),
        "CONN_HEALTH_CHECKS": True,
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "kernelbin",
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "sessions:index"
LOGOUT_REDIRECT_URL = "sessions:index"

LANGUAGE_CODE = "en"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
# collectstatic's target in production; elsewhere WhiteNoise serves static/ directly.
STATIC_ROOT = BASE_DIR / ".staticfiles" if PRODUCTION else None
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = not PRODUCTION
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if PRODUCTION
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}

# Every page: no inline code, never framed. Embeds allow their own inlined CSS and JS
# by hash and may be framed anywhere (sessions.views.EMBED_CSP).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

# Transcripts and exports are uploaded through the admin and the import form.
DATA_UPLOAD_MAX_MEMORY_SIZE = 2_621_440
FILE_UPLOAD_MAX_MEMORY_SIZE = 2_621_440

# How many proxies in front of us append to X-Forwarded-For (0: use REMOTE_ADDR).
TRUSTED_PROXY_HOPS = envint("TRUSTED_PROXY_HOPS", 0)

# Kernel replay (kernels/replay.py). The local backend runs a pool of worker
# processes inside each web process; every job runs under a wall-clock deadline.
REPLAY_BACKEND = os.getenv("REPLAY_BACKEND", "local")
REPLAY_WORKERS = envint("REPLAY_WORKERS", 2)
REPLAY_DEADLINE = envfloat("REPLAY_DEADLINE", 10.0)
REPLAY_QUEUE = envint("REPLAY_QUEUE", 16)
# "" prefers Vulkan and falls back to OpenGL; "vulkan" or "opengl" forces one.
REPLAY_WGPU_BACKEND = os.getenv("REPLAY_WGPU_BACKEND", "")
# Fresh ("run again") replays per client per minute.
REPLAY_FRESH_PER_MINUTE = envint("REPLAY_FRESH_PER_MINUTE", 6)
FIXTURES_DIR = BASE_DIR / "fixtures"

# Markdown longer than this is shown as escaped preformatted text: see sessions/markdown.py.
MARKDOWN_MAX_CHARS = envint("MARKDOWN_MAX_CHARS", 100_000)
# kernelbin/1 files larger than this are refused before parsing.
IMPORT_MAX_BYTES = envint("IMPORT_MAX_BYTES", 64 * 1024 * 1024)
# Turns per page of a session; permalinks to later turns land on their page.
TURNS_PER_PAGE = envint("TURNS_PER_PAGE", 100)
# Rendered session pages and embeds are cached until the session changes, or this long.
PAGE_CACHE_SECONDS = envint("PAGE_CACHE_SECONDS", 24 * 3600)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.getenv("LOG_LEVEL", "INFO")},
}

if PRODUCTION:
    if DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_DEBUG=True is not allowed with KERNELBIN_PRODUCTION=True"
        )
    if SECRET_KEY == DEV_SECRET_KEY or len(SECRET_KEY) < 50:
        raise ImproperlyConfigured(
            "Set SECRET_KEY to a random string of at least 50 characters in production"
        )
    if not os.getenv("ALLOWED_HOSTS"):
        raise ImproperlyConfigured("Set ALLOWED_HOSTS to the host names Kernelbin answers on")
    if not SITE_URL.startswith("https://"):
        raise ImproperlyConfigured("Set SITE_URL to the public https:// origin in production")
