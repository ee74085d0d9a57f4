# tests/djust/app/rooms/urls.py: URL map (room LiveView, lobby and its join log, whoami, roomgate's hand-off endpoints).
from django.urls import include, path

from rooms import views

urlpatterns = [
    path("room/<str:room>/", views.RoomView.as_view(), name="room"),
    path("lobby/", views.lobby_html, name="lobby"),
    path("lobby.json", views.lobby_json, name="lobby-json"),
    path("lobby/log.json", views.lobby_log_json, name="lobby-log-json"),
    path("whoami", views.whoami, name="whoami"),
    path("", include("roomgate_handoff.urls")),  # POST /.roomgate/rooms/<room>/export, PUT /.roomgate/rooms/<room>
]
