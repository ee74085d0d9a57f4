# roomgate_handoff/conf.py: the package's settings (path, token, body limit), read from Django settings or the environment.
import os

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

DEFAULT_PATH = "/.roomgate/rooms"
DEFAULT_MAX_BYTES = 16 * 1024 * 1024  # roomgate's own default for [handoff] max_bytes


def path():
    """ROOMGATE_HANDOFF_PATH: the endpoints' prefix, as in roomgate's `[handoff] path`."""
    value = getattr(settings, "ROOMGATE_HANDOFF_PATH", None) or DEFAULT_PATH
    if not isinstance(value, str) or not value.startswith("/") or not value.strip("/"):
        raise ImproperlyConfigured(
            f"ROOMGATE_HANDOFF_PATH must be an absolute path other than '/', got {value!r}"
        )
    return value.rstrip("/")


def max_bytes():
    """ROOMGATE_HANDOFF_MAX_BYTES: the largest import body accepted (default 16 MiB)."""
    value = getattr(settings, "ROOMGATE_HANDOFF_MAX_BYTES", None)
    if value is None:
        return DEFAULT_MAX_BYTES
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ImproperlyConfigured(f"ROOMGATE_HANDOFF_MAX_BYTES must be an int >= 0, got {value!r}")
    return value


def token():
    """The bearer token roomgate must send, or None when none is configured.

    First non-empty of: setting ROOMGATE_HANDOFF_TOKEN, env ROOMGATE_HANDOFF_TOKEN, the file named
    by setting ROOMGATE_HANDOFF_TOKEN_FILE, the file named by env ROOMGATE_HANDOFF_TOKEN_FILE
    (surrounding whitespace stripped). Read on every call, so a rotated file takes effect at once.
    A token file that cannot be read raises OSError: the caller refuses the request.
    """
    value = getattr(settings, "ROOMGATE_HANDOFF_TOKEN", None) or os.environ.get("ROOMGATE_HANDOFF_TOKEN")
    if value:
        return value
    name = getattr(settings, "ROOMGATE_HANDOFF_TOKEN_FILE", None) or os.environ.get(
        "ROOMGATE_HANDOFF_TOKEN_FILE"
    )
    if name:
        with open(name, encoding="utf-8") as f:
            value = f.read().strip()
        if not value:
            raise OSError(f"token file {name} is empty")
        return value
    return None
