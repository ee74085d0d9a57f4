# roomgate_handoff/apps.py: the Django app config; registers a system check that warns when no token is set.
from django.apps import AppConfig
from django.core import checks


class RoomgateHandoffConfig(AppConfig):
    name = "roomgate_handoff"
    verbose_name = "roomgate room hand-off"

    def ready(self):
        checks.register(check_token, checks.Tags.security)


def check_token(app_configs=None, **kwargs):
    from roomgate_handoff import conf

    try:
        configured = conf.token() is not None
    except OSError as e:
        return [checks.Error(f"cannot read ROOMGATE_HANDOFF_TOKEN_FILE: {e}", id="roomgate_handoff.E001")]
    if configured:
        return []
    return [
        checks.Warning(
            "No ROOMGATE_HANDOFF_TOKEN is configured: anyone who can reach this process directly "
            "can export and overwrite room state.",
            hint="Set ROOMGATE_HANDOFF_TOKEN (setting or environment) to roomgate's [handoff] token.",
            id="roomgate_handoff.W001",
        )
    ]
