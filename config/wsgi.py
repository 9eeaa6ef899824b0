import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

application = get_wsgi_application()

# The replay workers start with the server, in the background, so that a reader's first
# replay does not wait for a device to open and warm up. Imported after the application,
# which sets Django up; in each process that serves (gunicorn without --preload: a pool's
# threads and pipes do not survive a fork).
from kernels import replay  # noqa: E402

replay.backend().start_workers()
