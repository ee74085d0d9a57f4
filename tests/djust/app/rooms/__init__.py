# tests/djust/app/rooms: the djust test project (settings, ASGI app, RoomView, lobby store).
