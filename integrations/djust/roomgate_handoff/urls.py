# roomgate_handoff/urls.py: the URL pattern of the hand-off endpoints; include it at the site root.
import re

from django.urls import re_path

from roomgate_handoff import conf, views


def build(prefix):
    """URL patterns serving `{prefix}/{key}/export` and `{prefix}/{key}` (prefix like "/.roomgate/rooms")."""
    # [\s\S]: a decoded key may hold any character, "/" and newlines included.
    pattern = rf"^{re.escape(prefix.strip('/'))}/(?P<rest>[\s\S]+)\Z"
    return [re_path(pattern, views.handoff, name="roomgate-handoff")]


urlpatterns = build(conf.path())
