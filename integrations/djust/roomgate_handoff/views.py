# roomgate_handoff/views.py: the hand-off endpoint: token check, export (POST {path}/{key}/export), import (PUT {path}/{key}).
import hmac
import inspect
import logging

from asgiref.sync import async_to_sync
from django.http import HttpResponse
from django.views.decorators.csrf import csrf_exempt

from roomgate_handoff import conf, registered

log = logging.getLogger("roomgate_handoff")

EXPORT_SUFFIX = "/export"
DEFAULT_CONTENT_TYPE = "application/octet-stream"
_warned_open = []  # non-empty once the "no token configured" warning was logged in this process


def _text(status, message, **headers):
    response = HttpResponse(message + "\n", status=status, content_type="text/plain; charset=utf-8")
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


def _authorized(request):
    """True when the call carries the configured token, or when no token is configured."""
    expected = conf.token()
    if expected is None:
        if not _warned_open:
            _warned_open.append(True)
            log.warning(
                "no ROOMGATE_HANDOFF_TOKEN configured: hand-off calls are accepted without a token"
            )
        return True
    scheme, _, credentials = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(credentials.strip().encode("utf-8"), expected.encode("utf-8"))


def _call(fn, *args):
    """Calls a hook, sync or async (a sync view runs in a worker thread, where async_to_sync works)."""
    if inspect.iscoroutinefunction(fn):
        return async_to_sync(fn)(*args)
    return fn(*args)


def _move(request, key):
    """The call's Roomgate-* headers, for the log."""
    meta = request.META
    return (
        f"room={key!r} move={meta.get('HTTP_ROOMGATE_MOVE', '-')} "
        f"from={meta.get('HTTP_ROOMGATE_FROM', '-')} to={meta.get('HTTP_ROOMGATE_TO', '-')}"
    )


@csrf_exempt
def handoff(request, rest):
    """`rest` is the path after the prefix, already percent-decoded once by the server."""
    try:
        authorized = _authorized(request)
    except OSError as e:
        log.error("cannot read the hand-off token: %s", e)
        return _text(500, "hand-off token unavailable")
    if not authorized:
        return _text(401, "missing or wrong bearer token", WWW_Authenticate='Bearer realm="roomgate-handoff"')
    is_export_path = rest.endswith(EXPORT_SUFFIX)
    if request.method == "POST" and is_export_path:
        return _export(request, rest[: -len(EXPORT_SUFFIX)])
    if request.method == "PUT":
        return _import(request, rest)
    allow = "POST, PUT" if is_export_path else "PUT"
    return _text(405, f"method {request.method} not allowed here", Allow=allow)


def _export(request, key):
    export_room, _ = registered()
    if not key:
        return _text(400, "empty room key")
    if export_room is None:
        return _text(501, "no export_room hook registered")
    try:
        state = _call(export_room, key)
        body, content_type = _export_body(state)
    except Exception:
        log.exception("export failed: %s", _move(request, key))
        return _text(500, "export failed")
    if body is None:
        log.info("export: nothing to hand over: %s", _move(request, key))
        return HttpResponse(status=204)
    log.info("export: %d bytes: %s", len(body), _move(request, key))
    return HttpResponse(body, status=200, content_type=content_type)


def _export_body(state):
    """(bytes or None, content type) from what export_room returned."""
    if state is None:
        return None, None
    content_type = DEFAULT_CONTENT_TYPE
    if isinstance(state, tuple) and len(state) == 2:
        state, content_type = state
        if not isinstance(content_type, str) or not content_type:
            raise TypeError(f"export_room returned a content type that is not a string: {content_type!r}")
    if not isinstance(state, (bytes, bytearray, memoryview)):
        raise TypeError(f"export_room must return bytes, (bytes, content_type) or None, got {type(state)}")
    return bytes(state), content_type


def _read_body(request, limit):
    """The request body, or None when it is larger than `limit` bytes.

    Reads the stream directly, so DATA_UPLOAD_MAX_MEMORY_SIZE (meant for forms, 2.5 MB by
    default) does not apply; ROOMGATE_HANDOFF_MAX_BYTES does.
    """
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        return None
    body = request.read(limit + 1)
    return None if len(body) > limit else body


def _import(request, key):
    _, import_room = registered()
    if not key:
        return _text(400, "empty room key")
    if import_room is None:
        return _text(501, "no import_room hook registered")
    limit = conf.max_bytes()
    data = _read_body(request, limit)
    if data is None:
        log.warning("import refused: body over %d bytes: %s", limit, _move(request, key))
        return _text(413, f"state larger than ROOMGATE_HANDOFF_MAX_BYTES ({limit})")
    content_type = request.META.get("CONTENT_TYPE", "")
    try:
        _call(import_room, key, data, content_type)
    except Exception:
        log.exception("import failed: %s", _move(request, key))
        return _text(500, "import failed")
    log.info("import: %d bytes: %s", len(data), _move(request, key))
    return HttpResponse(status=204)
