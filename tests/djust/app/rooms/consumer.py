# tests/djust/app/rooms/consumer.py: stock LiveViewConsumer plus a leave hook (djust 1.2.6 has no LiveView unmount callback).
from djust.websocket import LiveViewConsumer


class RoomConsumer(LiveViewConsumer):
    """Same wire protocol as LiveViewConsumer; only tells the current view when it is replaced or torn down."""

    async def _leave(self):
        view = getattr(self, "view_instance", None)
        if view is not None and hasattr(view, "aleave"):
            await view.aleave()

    async def disconnect(self, close_code):
        await self._leave()
        await super().disconnect(close_code)

    async def handle_live_redirect_mount(self, data):
        await self._leave()  # the old view is replaced on the same socket
        await super().handle_live_redirect_mount(data)

    async def _dispatch_runtime_owned(self, data):
        if data.get("type") == "mount":
            await self._leave()  # a second "mount" on one socket also replaces the view
        await super()._dispatch_runtime_owned(data)
