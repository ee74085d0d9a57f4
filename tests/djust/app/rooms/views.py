# tests/djust/app/rooms/views.py: the RoomView LiveView plus the plain lobby/whoami views.
import uuid

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.urls import Resolver404, resolve
from django.utils.html import format_html, format_html_join
from djust import LiveView
from djust.decorators import event_handler
from djust.push import push_to_view

from rooms import registry

VIEW_PATH = "rooms.views.RoomView"  # what the page's dj-view says and the client mounts


class RoomView(LiveView):
    template_name = "rooms/room.html"
    login_required = False

    def mount(self, request, **kwargs):
        # The room comes from the page's URL only, never from the mount's client-supplied
        # `params` (djust passes both as kwargs): roomgate routes the socket by the URL, so a room
        # named in params could be mounted on a backend that does not own it.
        try:
            match = request.resolver_match or resolve(request.path_info)
            room = match.kwargs.get("room", "")
        except Resolver404:
            room = ""
        self.room = room
        self.backend_id = settings.BACKEND_ID
        # #nav goes to ?next=<room> (default "<room>-next"), #nav-auto to ?next2= ("<room>-next2").
        self.next_room = request.GET.get("next") or f"{room}-next"
        self.next_room2 = request.GET.get("next2") or f"{room}-next2"
        self.member_id = None
        # mount() also runs for the HTTP prerender; only the WebSocket mount joins the room.
        # (A mount frame whose url does not resolve still mounts, with room "": it joins nothing.)
        if room and getattr(self, "_websocket_session_id", None):
            self.member_id = uuid.uuid4().hex
            registry.join(room, self.member_id)
            registry.lobby_join(room)
        self.refresh()

    def refresh(self):
        self.count, self.members = registry.read(self.room)

    def leave(self):
        if self.member_id:
            registry.leave(self.room, self.member_id)
            registry.lobby_leave(self.room)
            self.member_id = None

    async def aleave(self):  # called by RoomConsumer on disconnect, live_redirect_mount, a second mount
        await sync_to_async(self.leave)()

    @event_handler()
    def increment(self, **kwargs):
        # Sync on purpose: djust's HTTP fallback (POST + X-Djust-Event) calls handlers without
        # awaiting them. Over the WebSocket djust runs it in a worker thread, where the sync
        # push_to_view is the right call. The broadcast reaches every RoomView in this process
        # except the sender; handle_room_update filters by room.
        registry.bump(self.room)
        self.refresh()
        push_to_view(VIEW_PATH, handler="handle_room_update", payload={"room": self.room})

    def handle_room_update(self, room):
        if room != self.room:
            self._skip_render = True  # djust answers with a bare noop frame instead of a patch
            return
        self.refresh()

    def get_context_data(self, **kwargs):
        return {
            "backend_id": self.backend_id,
            "room": self.room,
            "count": self.count,
            "members": self.members,
            "next_room": self.next_room,
            "next_room2": self.next_room2,
        }


def _snapshot_or_503():
    try:
        return registry.lobby_snapshot(), None
    except registry.redis.RedisError as e:
        return None, JsonResponse({"error": f"lobby store unavailable: {e}"}, status=503)


def lobby_json(request):
    rooms, error = _snapshot_or_503()
    return error or JsonResponse({"rooms": rooms, "backend": settings.BACKEND_ID})


def lobby_log_json(request):
    """The WebSocket joins and leaves of ?room=, across every backend (registry.lobby_log)."""
    room = request.GET.get("room", "")
    try:
        events = registry.lobby_log(room)
    except registry.redis.RedisError as e:
        return JsonResponse({"error": f"lobby store unavailable: {e}"}, status=503)
    return JsonResponse({"room": room, "events": events})


def lobby_html(request):
    rooms, error = _snapshot_or_503()
    if error:
        return error
    rows = format_html_join(
        "\n",
        '<tr><td class="room">{}</td><td class="backend">{}</td><td class="members">{}</td></tr>',
        ((room, r["backend"], r["members"]) for room, r in rooms.items()),
    )
    return HttpResponse(
        format_html(
            "<!DOCTYPE html><html><head><title>lobby</title></head><body>"
            '<p>served by <span id="backend">{}</span></p>'
            '<table id="rooms"><tr><th>room</th><th>backend</th><th>members</th></tr>\n{}\n</table>'
            "</body></html>",
            settings.BACKEND_ID,
            rows,
        )
    )


def whoami(request):
    return JsonResponse(
        {
            "backend": settings.BACKEND_ID,
            "xff": request.META.get("HTTP_X_FORWARDED_FOR"),
            "remote": request.META.get("REMOTE_ADDR"),
        }
    )
