import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

# The replay workers start first, from the settings alone (kernels/local_pool.py): they open
# their devices and warm up in the background while Django loads the site, so that a
# reader's first replay does not wait for both one after the other. In each process that
# serves (gunicorn without --preload: a pool's threads and pipes do not survive a fork).
from kernels import local_pool

local_pool.start_early()

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()

from kernels import replay  # noqa: E402

# The backend takes the pool started above (or, for Celery, starts nothing).
replay.backend().start_workers()
