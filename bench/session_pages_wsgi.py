"""The app as gunicorn serves it, plus a static folder: bench/session_pages.py's baseline."""

import os

from whitenoise import WhiteNoise

from config.wsgi import application as django_application

application = WhiteNoise(
    django_application, root=os.environ["BENCH_STATIC_DIR"], prefix="bench-static/"
)
