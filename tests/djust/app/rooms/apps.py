# tests/djust/app/rooms/apps.py: the rooms app config; registers the room hand-off hooks with roomgate_handoff.
from django.apps import AppConfig


class RoomsConfig(AppConfig):
    name = "rooms"

    def ready(self):
        import roomgate_handoff

        from rooms import registry

        roomgate_handoff.register(export_room=registry.export_room, import_room=registry.import_room)
