import pytest

from kernels import replay


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _uploads_in_the_request(settings, tmp_path):
    """Staff uploads imported before their page answers, so that a test that follows
    the redirect reads the outcome (tests/sessions/test_uploads.py runs them in the
    background, as a server does)."""
    settings.UPLOADS_IN_BACKGROUND = False
    settings.UPLOAD_SPOOL_DIR = tmp_path / "uploads"


@pytest.fixture
def fresh_replay_backend():
    """A replay backend (and local pool) built from this test's settings, closed after it."""
    replay._backend = None
    yield
    pool = getattr(replay._backend, "_pool", None)  # a LocalBackend's, once started
    if pool is not None:
        pool.close()
    replay._backend = None
