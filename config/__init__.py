# Load the Celery app with Django, so @shared_task binds to it (REPLAY_BACKEND=celery).
from config.celery import app as celery_app

__all__ = ("celery_app",)
