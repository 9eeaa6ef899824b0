"""Kernelbin settings: one file, configured from the environment.

Defaults are for a developer's machine (SQLite, a local replay pool, DEBUG off).
Production is switched on with KERNELBIN_PRODUCTION=True; it then refuses to start
on an unsafe configuration and says which variable to fix.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import dj_database_url
from csp.constants import NONCE, NONE, SELF
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
    "pages.apps.PagesConfig",
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

# SQLite by default; DATABASE_URL (e.g. postgres://user:pass@host/kernelbin) for more.
# SQLite has one write lock for the whole file: a request waits this many seconds for it
# (imports write in short batches, see sessions/importers/writer.py), then is answered
# 503 with Retry-After (config.views.server_error) instead of holding its thread longer.
SQLITE_BUSY_TIMEOUT = envfloat("SQLITE_BUSY_TIMEOUT", 5.0)
# What that 503 tells the client: seconds before trying again.
DATABASE_BUSY_RETRY_AFTER = envint("DATABASE_BUSY_RETRY_AFTER", 5)
if os.getenv("DATABASE_URL"):
    DATABASES = {"default": dj_database_url.parse(os.environ["DATABASE_URL"])}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.getenv("SQLITE_PATH", str(BASE_DIR / "db.sqlite3")),
            "OPTIONS": {
                # WAL lets readers read while a replay result or a tutor turn is written.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": SQLITE_BUSY_TIMEOUT,
            },
            # A file per test process, not memory: replay results are stored from pool
            # threads, whose own connections must see what a test committed.
            "TEST": {
                "NAME": os.getenv(
                    "SQLITE_TEST_PATH",
                    os.path.join(tempfile.gettempdir(), f"kernelbin-test-{os.getpid()}.sqlite3"),
                )
            },
        }
    }
# Reuse connections across requests instead of opening one per request.
DATABASES["default"]["CONN_MAX_AGE"] = envint("CONN_MAX_AGE", 600)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Page caches and rate-limit counters. With several web processes, point REDIS_URL at a
# Redis so they share one cache; alone, each process keeps its own in memory.
REDIS_URL = os.getenv("REDIS_URL", "")
CACHES = {
    "default": {
        "BACKEND": "config.cache.TolerantRedisCache",
        "LOCATION": REDIS_URL,
        "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
    }
    if REDIS_URL
    else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "kernelbin"}
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "tutor:index"
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
# by hash and may be framed anywhere (pages.embedding.EMBED_CSP). The code editor
# (static/src/editor.js) injects CodeMirror's stylesheet carrying the request's nonce,
# which a page names only when it loads the editor (templates/_editor_assets.html).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF, NONCE],
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

# /healthz shows its details (database, workers, queue) to staff and to a monitor that
# sends "Authorization: Bearer <HEALTHZ_TOKEN>"; everybody else sees the status only.
HEALTHZ_TOKEN = os.getenv("HEALTHZ_TOKEN", "")

# How many proxies in front of us append to X-Forwarded-For (0: use REMOTE_ADDR).
TRUSTED_PROXY_HOPS = envint("TRUSTED_PROXY_HOPS", 0)

# Kernel replay (kernels/replay.py). The local backend runs a pool of worker
# processes inside each web process; every job runs under a wall-clock deadline.
REPLAY_BACKEND = os.getenv("REPLAY_BACKEND", "local")
REPLAY_WORKERS = envint("REPLAY_WORKERS", 2)
REPLAY_DEADLINE = envfloat("REPLAY_DEADLINE", 10.0)
# A Triton or CUDA program's run on a GPU worker, compute-sanitizer's pass included.
GPU_REPLAY_DEADLINE = envfloat("GPU_REPLAY_DEADLINE", 120.0)
# How long a worker's announcement of what it offers holds without being renewed.
WORKER_SEEN_WITHIN = envint("WORKER_SEEN_WITHIN", 300)
REPLAY_QUEUE = envint("REPLAY_QUEUE", 16)
# A queued run older than this is given up as lost; so is one running past its deadline.
REPLAY_QUEUE_TIMEOUT = envint("REPLAY_QUEUE_TIMEOUT", 600)
# How often a run is taken up again after the worker running it died.
REPLAY_MAX_ATTEMPTS = envint("REPLAY_MAX_ATTEMPTS", 2)
# "" prefers Vulkan and falls back to OpenGL; "vulkan" or "opengl" forces one.
REPLAY_WGPU_BACKEND = os.getenv("REPLAY_WGPU_BACKEND", "")
# The local pool's workers read a program's files from here (kernels/jobs.py with_files),
# each written once by its sha256; a cache, safe to delete, kept under this many bytes.
REPLAY_FILES_DIR = Path(
    os.getenv("REPLAY_FILES_DIR", "") or Path(tempfile.gettempdir()) / "kernelbin-replay-files"
)
REPLAY_FILES_BYTES = envint("REPLAY_FILES_BYTES", 1024**3)
# A run that ended without a reusable result (a timeout) is shown this long before a
# visit runs the kernel again.
REPLAY_RETRY_AFTER = envint("REPLAY_RETRY_AFTER", 60)
# Fresh ("run again") replays per client per minute.
REPLAY_FRESH_PER_MINUTE = envint("REPLAY_FRESH_PER_MINUTE", 6)
# Runs a reader may start to keep a buffer whole (kernels/whole_buffers.py), an hour: each
# runs the version again. One already kept, or in flight, costs nothing.
WHOLE_BUFFERS_PER_HOUR = envint("WHOLE_BUFFERS_PER_HOUR", 30)
# Readers' forks (/s/<slug>/turns/<n>/fork/): runs per client per minute, and the longest
# kernel or host program a fork may hold.
FORK_RUNS_PER_MINUTE = envint("FORK_RUNS_PER_MINUTE", 6)
FORK_MAX_CHARS = envint("FORK_MAX_CHARS", 20_000)
# Runs of edited Triton and CUDA programs (forks of their versions) that a signed-in
# reader may start on the GPU workers in 24 hours; staff are not limited. Forks served
# from a stored run cost nothing; 0 leaves them to staff.
GPU_FORKS_PER_DAY = envint("GPU_FORKS_PER_DAY", 10)
FIXTURES_DIR = BASE_DIR / "fixtures"
# Files a session's host programs fetch() (weights, test data), uploaded in the admin,
# stored in the database and sent with every program job of the session.
SESSION_FILE_MAX_BYTES = envint("SESSION_FILE_MAX_BYTES", 8 * 1024 * 1024)
# A project's files brought with an import or added later, all together.
PROJECT_FILES_MAX_BYTES = envint("PROJECT_FILES_MAX_BYTES", 64 * 1024 * 1024)
PROJECT_FILES_MAX_COUNT = envint("PROJECT_FILES_MAX_COUNT", 500)
# The draw-a-digit page classifies with the latest version of this kernel of this session.
DIGITS_SESSION = os.getenv("DIGITS_SESSION", "gpu-inference-from-scratch")
DIGITS_KERNEL = os.getenv("DIGITS_KERNEL", "mnist")
DIGITS_MAX_BYTES = envint("DIGITS_MAX_BYTES", 2 * 1024 * 1024)
DIGITS_PER_MINUTE = envint("DIGITS_PER_MINUTE", 20)

# REPLAY_BACKEND=celery: replay jobs go to the "replay" queue, served by
# `celery -A config worker -Q replay` on the GPU machines (config/celery.py).
CELERY_BROKER_URL = os.getenv("CELERY_BROKER_URL", REDIS_URL or "redis://127.0.0.1:6379/0")
CELERY_TASK_ROUTES = {"kernels.replay": {"queue": "replay"}}
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_CONCURRENCY = envint("REPLAY_WORKERS", 2)
# A web request that cannot reach the broker gives up fast and says so.
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# An unacknowledged job (its worker died) goes back to the queue after this long.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": envint("REPLAY_REDELIVER_AFTER", 120)}

# Guided sessions (tutor/). The tutor is Claude through the anthropic SDK; without a key
# every submission is still run and explained by the offline reviewer.
# The key is read from the environment only; it never reaches a page, a log or an export.
ANTHROPIC_API_KEY = os.getenv("ANTHROPIC_API_KEY", "")
# Any Messages-API compatible endpoint. Empty: the SDK reads ANTHROPIC_BASE_URL, else
# https://api.anthropic.com.
TUTOR_BASE_URL = os.getenv("TUTOR_BASE_URL", "")
# The newest Sonnet the installed SDK knows (anthropic.types.Model); claude-sonnet-4-5 is
# in its DEPRECATED_MODELS and retires on 2026-11-30.
TUTOR_MODEL = os.getenv("TUTOR_MODEL", "claude-sonnet-5-5")
TUTOR_MAX_TOKENS = envint("TUTOR_MAX_TOKENS", 1500)
# A tutor reply's deadlines (tutor/llm.py), in seconds: the whole reply, and the longest
# wait between two events of its stream (an upstream that sends only pings is stalled).
# A request that writes a reply (its tool rounds included) holds its web thread for at
# most TUTOR_REQUEST_BUDGET (plus one stall at worst); at most TUTOR_CONCURRENT_REPLIES
# replies are written at once per web process, so tutoring never takes every thread.
TUTOR_REPLY_DEADLINE = envfloat("TUTOR_REPLY_DEADLINE", 90.0)
TUTOR_STALL_TIMEOUT = envfloat("TUTOR_STALL_TIMEOUT", 20.0)
TUTOR_REQUEST_BUDGET = envfloat("TUTOR_REQUEST_BUDGET", 150.0)
TUTOR_CONCURRENT_REPLIES = envint("TUTOR_CONCURRENT_REPLIES", 2)
# The SDK's own retries of 429/5xx/529 before the learner sees an error and a retry button,
# and the longest retry-after they may wait out on a web thread: a longer one is told to
# the learner ("Press Retry in N s").
TUTOR_MAX_RETRIES = envint("TUTOR_MAX_RETRIES", 1)
TUTOR_RETRY_WAIT = envfloat("TUTOR_RETRY_WAIT", 2.0)
# run_kernel calls the tutor may make before it must answer.
TUTOR_MAX_TOOL_ROUNDS = envint("TUTOR_MAX_TOOL_ROUNDS", 3)
# Token budgets count every token an API call processed: input, output, cache writes and
# cache reads. Per session, and per learner over the last 24 hours.
TUTOR_SESSION_TOKEN_BUDGET = envint("TUTOR_SESSION_TOKEN_BUDGET", 500_000)
TUTOR_USER_DAILY_TOKEN_BUDGET = envint("TUTOR_USER_DAILY_TOKEN_BUDGET", 2_000_000)
# Rate limits (config/ratelimit.py): messages and retries per learner per minute,
# kernel submissions per learner per minute, new sessions per learner per hour,
# sign-ups per client IP per hour.
TUTOR_MESSAGES_PER_MINUTE = envint("TUTOR_MESSAGES_PER_MINUTE", 6)
TUTOR_SUBMISSIONS_PER_MINUTE = envint("TUTOR_SUBMISSIONS_PER_MINUTE", 10)
TUTOR_STARTS_PER_HOUR = envint("TUTOR_STARTS_PER_HOUR", 20)
TUTOR_SIGNUPS_PER_HOUR = envint("TUTOR_SIGNUPS_PER_HOUR", 5)
# Failed sign-ins per hour (config/ratelimit.py): per account from one address, so that
# nobody can lock an account from elsewhere, and per address across all accounts.
SIGNIN_FAILURES_PER_ACCOUNT = envint("SIGNIN_FAILURES_PER_ACCOUNT", 10)
SIGNIN_FAILURES_PER_ADDRESS = envint("SIGNIN_FAILURES_PER_ADDRESS", 100)
TUTOR_MESSAGE_MAX_CHARS = envint("TUTOR_MESSAGE_MAX_CHARS", 4000)
TUTOR_KERNEL_MAX_CHARS = envint("TUTOR_KERNEL_MAX_CHARS", 20_000)
# Lesson plans, one JSON file each (fixtures/lessons/README.md).
TUTOR_LESSONS_DIR = Path(os.getenv("TUTOR_LESSONS_DIR", str(BASE_DIR / "fixtures" / "lessons")))

# Markdown longer than this is shown as escaped preformatted text (sessions/markdown.py).
# The slowest inputs known take about 12 µs per character to render; at this size that
# stays well under a second even on a busy machine.
MARKDOWN_MAX_CHARS = envint("MARKDOWN_MAX_CHARS", 32_000)
# A program's source on a page (replay, fork, tutor) shows its first whole lines within
# this many characters, highlighted once per text and kept in the cache.
SOURCE_PAGE_MAX_CHARS = envint("SOURCE_PAGE_MAX_CHARS", 100_000)
# kernelbin/1 files larger than this are refused before parsing.
IMPORT_MAX_BYTES = envint("IMPORT_MAX_BYTES", 64 * 1024 * 1024)
# Claude Code transcripts (JSON Lines) are streamed, never read whole; files larger than
# this are refused before reading, and single lines longer than the line cap are skipped
# (and reported) without being held in memory. See sessions/importers/claude_code/.
TRANSCRIPT_MAX_BYTES = envint("TRANSCRIPT_MAX_BYTES", 128 * 1024 * 1024)
TRANSCRIPT_MAX_LINE_BYTES = envint("TRANSCRIPT_MAX_LINE_BYTES", 16 * 1024 * 1024)
# Staff uploads (/import/, a session's files) are spooled here and imported by a thread
# of the web process, off the request (sessions/uploads.py); False imports them in the
# request, before answering with the upload's page (the tests do).
UPLOAD_SPOOL_DIR = Path(
    os.getenv("UPLOAD_SPOOL_DIR", str(Path(tempfile.gettempdir()) / "kernelbin-uploads"))
)
UPLOADS_IN_BACKGROUND = envbool("UPLOADS_IN_BACKGROUND", "True")
# Turns per page of a session; permalinks to later turns land on their page.
TURNS_PER_PAGE = envint("TURNS_PER_PAGE", 100)
# Rendered session pages and embeds are cached until the session changes, or this long.
PAGE_CACHE_SECONDS = envint("PAGE_CACHE_SECONDS", 24 * 3600)
# An embed showing a kernel that has no stored outcome yet is cached only this long, so
# the outcome appears soon after somebody replays it.
EMBED_PENDING_CACHE_SECONDS = envint("EMBED_PENDING_CACHE_SECONDS", 15)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.getenv("LOG_LEVEL", "INFO")},
}

if REPLAY_BACKEND not in ("local", "celery"):
    raise ImproperlyConfigured(
        f"REPLAY_BACKEND must be 'local' or 'celery', not {REPLAY_BACKEND!r}"
    )

if PRODUCTION:
    # Refuse to start rather than run unsafely; each message names the variable to fix.
    if DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_DEBUG=True is not allowed with KERNELBIN_PRODUCTION=True"
        )
    if SECRET_KEY == DEV_SECRET_KEY or len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5:
        raise ImproperlyConfigured(
            "Set SECRET_KEY to a random string of at least 50 characters in production"
        )
    if not os.getenv("ALLOWED_HOSTS") or "*" in ALLOWED_HOSTS:
        raise ImproperlyConfigured("Set ALLOWED_HOSTS to the host names Kernelbin answers on")
    if not SITE_URL.startswith("https://"):
        raise ImproperlyConfigured("Set SITE_URL to the public https:// origin in production")
    if REPLAY_BACKEND == "celery" and not (os.getenv("CELERY_BROKER_URL") or REDIS_URL):
        raise ImproperlyConfigured("REPLAY_BACKEND=celery needs CELERY_BROKER_URL or REDIS_URL")
    SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", "True")
    # Only behind a proxy that sets (and overwrites) X-Forwarded-Proto.
    if envbool("BEHIND_HTTPS_PROXY", "True"):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
        # Behind a proxy every request comes from the proxy's address: counted per address,
        # one client's failed sign-ins would lock everybody out.
        if TRUSTED_PROXY_HOPS < 1:
            raise ImproperlyConfigured(
                "Set TRUSTED_PROXY_HOPS to the number of proxies that append to "
                "X-Forwarded-For (1 behind one TLS proxy), or BEHIND_HTTPS_PROXY=False"
            )
    # Start modest: HSTS is sticky in browsers. Raise it once HTTPS is known to be good.
    SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", "True")
    SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", "False")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    CSRF_TRUSTED_ORIGINS = [SITE_URL]
    SILENCED_SYSTEM_CHECKS = [
        # Preloading HSTS is the operator's one-way decision (SECURE_HSTS_PRELOAD=True).
        "security.W021",
    ]
