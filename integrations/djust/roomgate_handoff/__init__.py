# roomgate_handoff/__init__.py: the public API, register(), and the hooks it holds for the views.
"""Serve roomgate's room hand-off endpoints from a Django or djust app.

Add ``"roomgate_handoff"`` to ``INSTALLED_APPS``, include ``roomgate_handoff.urls`` at the site
root, and register the two hooks once, e.g. in your ``AppConfig.ready()``::

    import roomgate_handoff

    roomgate_handoff.register(export_room=export_room, import_room=import_room)

``export_room(key)`` returns the room's state as ``bytes`` (sent as
``application/octet-stream``), a ``(bytes, content_type)`` pair, or ``None`` when there is nothing
to hand over. ``import_room(key, data, content_type)`` replaces whatever this process holds for
the room with ``data``. Either hook may be a coroutine function. See README.md and docs/handoff.md.
"""

__all__ = ["register", "registered"]
__version__ = "0.1.0"

_hooks = {"export": None, "import": None}


def register(*, export_room=None, import_room=None):
    """Set both hooks (each call replaces both; a hook left out is not served: 501).

    export_room(key: str) -> bytes | (bytes, str) | None
    import_room(key: str, data: bytes, content_type: str) -> None
    """
    for name, fn in (("export_room", export_room), ("import_room", import_room)):
        if fn is not None and not callable(fn):
            raise TypeError(f"roomgate_handoff.register: {name} must be callable, got {fn!r}")
    _hooks["export"] = export_room
    _hooks["import"] = import_room


def registered():
    """The hooks in force: (export_room, import_room), None for a hook not registered."""
    return _hooks["export"], _hooks["import"]
