# integrations/djust/tests/test_handoff.py: the hand-off endpoints through Django's test client (settings configured here).
# Run: <python with Django> -m unittest discover integrations/djust
import asyncio
import logging
import os
import tempfile
import types
import unittest
from unittest import mock

import django
from django.conf import settings

if not settings.configured:
    settings.configure(
        DEBUG=False,
        SECRET_KEY="roomgate-handoff-tests",
        ALLOWED_HOSTS=["testserver"],
        ROOT_URLCONF=__name__,
        INSTALLED_APPS=["roomgate_handoff"],
        MIDDLEWARE=[
            "django.middleware.common.CommonMiddleware",
            "django.middleware.csrf.CsrfViewMiddleware",
        ],
        DATABASES={},
        USE_TZ=True,
        LOGGING_CONFIG=None,
    )
    django.setup()

from django.core import checks  # noqa: E402
from django.test import Client, SimpleTestCase, override_settings  # noqa: E402
from django.urls import include, path  # noqa: E402

import roomgate_handoff  # noqa: E402
from roomgate_handoff import urls as handoff_urls  # noqa: E402

logging.getLogger("django.request").setLevel(logging.CRITICAL)  # 4xx/5xx are what these tests expect

urlpatterns = [path("", include("roomgate_handoff.urls"))]

BASE = "/.roomgate/rooms"
MOVE = {
    "HTTP_ROOMGATE_ROOM": "42",
    "HTTP_ROOMGATE_FROM": "game-0",
    "HTTP_ROOMGATE_TO": "game-1",
    "HTTP_ROOMGATE_MOVE": "m-1",
}
NO_TOKEN_ENV = {"ROOMGATE_HANDOFF_TOKEN": "", "ROOMGATE_HANDOFF_TOKEN_FILE": ""}


class Rooms:
    """A module-level-dict style store, with a record of the hook calls."""

    def __init__(self):
        self.state = {}
        self.calls = []

    def export_room(self, key):
        self.calls.append(("export", key))
        return self.state.get(key)

    def import_room(self, key, data, content_type):
        self.calls.append(("import", key, data, content_type))
        self.state[key] = data


class HandoffTestCase(SimpleTestCase):
    def setUp(self):
        self.rooms = Rooms()
        roomgate_handoff.register(export_room=self.rooms.export_room, import_room=self.rooms.import_room)
        self.client = Client(enforce_csrf_checks=True)  # the views must be CSRF-exempt
        env = mock.patch.dict(os.environ, NO_TOKEN_ENV)
        env.start()
        self.addCleanup(env.stop)
        self.addCleanup(roomgate_handoff.register)

    def export(self, quoted_key, **headers):
        return self.client.post(f"{BASE}/{quoted_key}/export", **{**MOVE, **headers})

    def put(self, quoted_key, data=b"state", content_type="application/octet-stream", **headers):
        return self.client.put(f"{BASE}/{quoted_key}", data=data, content_type=content_type, **{**MOVE, **headers})


class ExportTests(HandoffTestCase):
    def test_state_is_returned_as_octet_stream(self):
        self.rooms.state["42"] = b"\x00\x01count=7"
        r = self.export("42")
        self.assertEqual(r.status_code, 200)
        self.assertEqual(r.content, b"\x00\x01count=7")
        self.assertEqual(r["Content-Type"], "application/octet-stream")
        self.assertEqual(self.rooms.calls, [("export", "42")])

    def test_a_pair_sets_the_content_type(self):
        roomgate_handoff.register(export_room=lambda key: (b'{"count": 7}', "application/json"))
        r = self.export("42")
        self.assertEqual((r.status_code, r.content, r["Content-Type"]), (200, b'{"count": 7}', "application/json"))

    def test_empty_bytes_are_a_state(self):
        self.rooms.state["42"] = b""
        r = self.export("42")
        self.assertEqual((r.status_code, r.content), (200, b""))

    def test_none_is_204(self):
        r = self.export("unknown")
        self.assertEqual((r.status_code, r.content), (204, b""))

    def test_unregistered_hook_is_501(self):
        roomgate_handoff.register(import_room=self.rooms.import_room)
        self.assertEqual(self.export("42").status_code, 501)

    def test_a_failing_hook_is_500(self):
        def boom(key):
            raise RuntimeError("store down")

        roomgate_handoff.register(export_room=boom)
        with self.assertLogs("roomgate_handoff", "ERROR") as logs:
            self.assertEqual(self.export("42").status_code, 500)
        self.assertIn("move=m-1", logs.output[0])

    def test_a_str_is_refused_with_500(self):
        roomgate_handoff.register(export_room=lambda key: "not bytes")
        with self.assertLogs("roomgate_handoff", "ERROR"):
            self.assertEqual(self.export("42").status_code, 500)

    def test_async_hook(self):
        async def export_room(key):
            await asyncio.sleep(0)
            return key.encode()

        roomgate_handoff.register(export_room=export_room)
        r = self.export("42")
        self.assertEqual((r.status_code, r.content), (200, b"42"))


class ImportTests(HandoffTestCase):
    def test_body_and_full_content_type_reach_the_hook(self):
        r = self.put("42", data=b'{"count": 7}', content_type="application/json; charset=utf-8")
        self.assertEqual(r.status_code, 204)
        self.assertEqual(self.rooms.calls, [("import", "42", b'{"count": 7}', "application/json; charset=utf-8")])

    def test_unregistered_hook_is_501(self):
        roomgate_handoff.register(export_room=self.rooms.export_room)
        self.assertEqual(self.put("42").status_code, 501)

    def test_a_failing_hook_is_500(self):
        def refuse(key, data, content_type):
            raise ValueError("bad state")

        roomgate_handoff.register(import_room=refuse)
        with self.assertLogs("roomgate_handoff", "ERROR"):
            self.assertEqual(self.put("42").status_code, 500)

    @override_settings(ROOMGATE_HANDOFF_MAX_BYTES=10)
    def test_a_body_over_the_limit_is_413_and_not_imported(self):
        self.assertEqual(self.put("42", data=b"x" * 10).status_code, 204)
        with self.assertLogs("roomgate_handoff", "WARNING"):
            self.assertEqual(self.put("43", data=b"x" * 11).status_code, 413)
        self.assertEqual(list(self.rooms.state), ["42"])

    @override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=10)
    def test_data_upload_max_memory_size_does_not_apply(self):
        self.assertEqual(self.put("42", data=b"x" * 1000).status_code, 204)
        self.assertEqual(len(self.rooms.state["42"]), 1000)

    def test_async_hook(self):
        seen = []

        async def import_room(key, data, content_type):
            await asyncio.sleep(0)
            seen.append((key, data))

        roomgate_handoff.register(import_room=import_room)
        self.assertEqual(self.put("42", data=b"s").status_code, 204)
        self.assertEqual(seen, [("42", b"s")])

    def test_export_then_import_carries_the_state(self):
        self.rooms.state["42"] = b"count=7"
        exported = self.export("42")
        self.rooms.state.clear()  # as if the import went to another process
        r = self.put("42", data=exported.content, content_type=exported["Content-Type"])
        self.assertEqual(r.status_code, 204)
        self.assertEqual(self.rooms.state, {"42": b"count=7"})


class KeyTests(HandoffTestCase):
    def test_the_key_is_decoded_exactly_once(self):
        self.put("a%2Fb%20%C3%BC%2541")
        self.export("a%2Fb%20%C3%BC%2541")
        self.assertEqual([c[:2] for c in self.rooms.calls], [("import", "a/b ü%41"), ("export", "a/b ü%41")])

    def test_unreserved_characters_and_newlines(self):
        self.put("A-z_0.9~")
        self.put("line%0Abreak")
        self.assertEqual([c[1] for c in self.rooms.calls], ["A-z_0.9~", "line\nbreak"])

    def test_a_key_ending_in_export_is_told_apart_by_method(self):
        self.put("a%2Fexport")  # PUT {path}/{"a/export"}
        self.export("a%2Fexport")  # POST {path}/{"a/export"}/export
        self.export("a")
        self.assertEqual([c[:2] for c in self.rooms.calls], [("import", "a/export"), ("export", "a/export"), ("export", "a")])

    def test_empty_key_is_400(self):
        self.assertEqual(self.client.post(f"{BASE}//export").status_code, 400)
        self.assertEqual(self.client.put(f"{BASE}/").status_code, 404)
        self.assertEqual(self.rooms.calls, [])

    def test_outside_the_prefix_is_404(self):
        self.assertEqual(self.client.post("/.roomgate/roomsx/42/export").status_code, 404)
        self.assertEqual(self.client.put("/.roomgate/42").status_code, 404)


class MethodTests(HandoffTestCase):
    def test_wrong_methods_are_405_with_allow(self):
        for method, url, allow in [
            ("GET", f"{BASE}/42/export", "POST, PUT"),
            ("DELETE", f"{BASE}/42/export", "POST, PUT"),
            ("GET", f"{BASE}/42", "PUT"),
            ("POST", f"{BASE}/42", "PUT"),
            ("HEAD", f"{BASE}/42", "PUT"),
        ]:
            r = self.client.generic(method, url)
            self.assertEqual((r.status_code, r["Allow"]), (405, allow), f"{method} {url}")
        self.assertEqual(self.rooms.calls, [])


class TokenTests(HandoffTestCase):
    def assert_refused(self, **headers):
        r = self.export("42", **headers)
        self.assertEqual(r.status_code, 401, headers)
        self.assertTrue(r["WWW-Authenticate"].startswith("Bearer"))

    def test_no_token_configured_accepts_and_warns_once(self):
        from roomgate_handoff import views

        views._warned_open.clear()
        with self.assertLogs("roomgate_handoff", "WARNING") as logs:
            self.assertEqual(self.export("42").status_code, 204)
            self.assertEqual(self.export("42").status_code, 204)
        self.assertEqual(sum("no ROOMGATE_HANDOFF_TOKEN" in line for line in logs.output), 1)
        self.assertEqual(checks.run_checks(tags=[checks.Tags.security])[0].id, "roomgate_handoff.W001")

    @override_settings(ROOMGATE_HANDOFF_TOKEN="s3cret")
    def test_setting_token(self):
        self.assert_refused()
        self.assert_refused(HTTP_AUTHORIZATION="Bearer wrong")
        self.assert_refused(HTTP_AUTHORIZATION="Bearer s3cret-and-more")
        self.assert_refused(HTTP_AUTHORIZATION="Basic s3cret")
        self.assert_refused(HTTP_AUTHORIZATION="s3cret")
        self.assert_refused(HTTP_AUTHORIZATION="Bearer ünï")
        self.assertEqual(self.export("42", HTTP_AUTHORIZATION="Bearer s3cret").status_code, 204)
        self.assertEqual(self.export("42", HTTP_AUTHORIZATION="bearer s3cret").status_code, 204)
        self.assertEqual(checks.run_checks(tags=[checks.Tags.security]), [])

    @override_settings(ROOMGATE_HANDOFF_TOKEN="s3cret")
    def test_refused_before_anything_else(self):
        self.assertEqual(self.client.get(f"{BASE}/42").status_code, 401)
        self.assertEqual(self.put("42").status_code, 401)
        roomgate_handoff.register()
        self.assertEqual(self.export("42").status_code, 401)
        self.assertEqual(self.rooms.calls, [])

    def test_environment_token(self):
        with mock.patch.dict(os.environ, {"ROOMGATE_HANDOFF_TOKEN": "from-env"}):
            self.assert_refused(HTTP_AUTHORIZATION="Bearer wrong")
            self.assertEqual(self.put("42", HTTP_AUTHORIZATION="Bearer from-env").status_code, 204)

    @override_settings(ROOMGATE_HANDOFF_TOKEN="from-setting")
    def test_setting_wins_over_environment(self):
        with mock.patch.dict(os.environ, {"ROOMGATE_HANDOFF_TOKEN": "from-env"}):
            self.assert_refused(HTTP_AUTHORIZATION="Bearer from-env")
            self.assertEqual(self.export("42", HTTP_AUTHORIZATION="Bearer from-setting").status_code, 204)

    def test_token_file_is_read_on_each_call(self):
        with tempfile.NamedTemporaryFile("w", suffix=".token", delete=False) as f:
            f.write("from-file\n")
        self.addCleanup(os.unlink, f.name)
        with mock.patch.dict(os.environ, {"ROOMGATE_HANDOFF_TOKEN_FILE": f.name}):
            self.assertEqual(self.export("42", HTTP_AUTHORIZATION="Bearer from-file").status_code, 204)
            with open(f.name, "w") as g:
                g.write("rotated")
            self.assert_refused(HTTP_AUTHORIZATION="Bearer from-file")
            self.assertEqual(self.export("42", HTTP_AUTHORIZATION="Bearer rotated").status_code, 204)

    def test_unreadable_or_empty_token_file_refuses(self):
        with tempfile.TemporaryDirectory() as tmp:
            empty = os.path.join(tmp, "empty")
            open(empty, "w").close()
            for name in (os.path.join(tmp, "missing"), empty):
                with mock.patch.dict(os.environ, {"ROOMGATE_HANDOFF_TOKEN_FILE": name}):
                    with self.assertLogs("roomgate_handoff", "ERROR"):
                        self.assertEqual(self.export("42").status_code, 500)
                    self.assertEqual(checks.run_checks(tags=[checks.Tags.security])[0].id, "roomgate_handoff.E001")
        self.assertEqual(self.rooms.calls, [])


custom_urls = types.ModuleType("custom_urls")
custom_urls.urlpatterns = handoff_urls.build("/internal/handoff/")


@override_settings(ROOT_URLCONF=custom_urls)
class CustomPathTests(HandoffTestCase):
    def test_another_prefix(self):
        self.assertEqual(self.client.put("/internal/handoff/7", data=b"s", content_type="x/y").status_code, 204)
        self.assertEqual(self.client.post(f"{BASE}/7/export").status_code, 404)
        self.assertEqual(self.rooms.calls, [("import", "7", b"s", "x/y")])


class RegisterTests(unittest.TestCase):
    def tearDown(self):
        roomgate_handoff.register()

    def test_register_replaces_both_hooks(self):
        roomgate_handoff.register(export_room=len, import_room=print)
        self.assertEqual(roomgate_handoff.registered(), (len, print))
        roomgate_handoff.register(export_room=len)
        self.assertEqual(roomgate_handoff.registered(), (len, None))

    def test_a_hook_must_be_callable(self):
        with self.assertRaises(TypeError):
            roomgate_handoff.register(export_room="not callable")


class ConfTests(unittest.TestCase):
    def test_path_setting_is_validated(self):
        from django.core.exceptions import ImproperlyConfigured

        from roomgate_handoff import conf

        self.assertEqual(conf.path(), "/.roomgate/rooms")
        for bad in ("/", "relative", 5):
            with override_settings(ROOMGATE_HANDOFF_PATH=bad), self.assertRaises(ImproperlyConfigured):
                conf.path()
        with override_settings(ROOMGATE_HANDOFF_PATH="/x/y/"):
            self.assertEqual(conf.path(), "/x/y")


if __name__ == "__main__":
    unittest.main()
