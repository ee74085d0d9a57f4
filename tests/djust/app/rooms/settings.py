# tests/djust/app/rooms/settings.py: Django settings for the roomgate djust test backend (no DB, env-configured).
import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent

BACKEND_ID = os.environ.get("BACKEND_ID", "game-0")
REDIS_SOCKET = os.environ.get("REDIS_SOCKET", "")  # empty: lobby store disabled
LOBBY_PREFIX = os.environ.get("LOBBY_PREFIX", "roomgate:")

# Shared by every backend so each accepts the others' session/CSRF cookies.
SECRET_KEY = "roomgate-djust-e2e-not-secret-3c4f0a2b9d1e8f7a6b5c4d3e2f1a0b9c"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "rooms.test"] + [
    h for h in os.environ.get("EXTRA_ALLOWED_HOSTS", "").split(",") if h
]
DJUST_TRUSTED_PROXY_COUNT = int(os.environ.get("DJUST_TRUSTED_PROXY_COUNT", "0"))

INSTALLED_APPS = [
    "channels",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.staticfiles",
    "djust",
    "roomgate_handoff",  # integrations/djust: roomgate's hand-off endpoints (token: env ROOMGATE_HANDOFF_TOKEN)
    "rooms",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "rooms.urls"
ASGI_APPLICATION = "rooms.asgi.application"
TEMPLATES = [
    {
        "BACKEND": "djust.template_backend.DjustTemplateBackend",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]

DATABASES = {}  # no database: signed-cookie sessions, anonymous users only
SESSION_ENGINE = "django.contrib.sessions.backends.signed_cookies"
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
LIVEVIEW_ALLOWED_MODULES = ["rooms.views"]

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "/static/"  # served by ASGIStaticFilesHandler from djust's package (see asgi.py)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["stderr"], "level": os.environ.get("DJANGO_LOG_LEVEL", "WARNING")},
    # djust.utils warns once per process about the in-memory state backend and about
    # signed-cookie sessions on live_redirect: both are expected here.
    "loggers": {"djust.utils": {"level": "ERROR"}},
}
