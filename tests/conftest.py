import pytest

from kernels import replay


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def fresh_replay_backend():
    """A replay backend (and local pool) built from this test's settings, closed after it."""
    replay._backend = None
    yield
    if getattr(replay._backend, "_pool", None) is not None:
        replay._backend._pool.close()
    replay._backend = None
