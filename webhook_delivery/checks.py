"""System checks: configuration problems are reported by manage.py check and stop every command."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.checks import CheckMessage, Error, register
from django.core.exceptions import ImproperlyConfigured


@register()
def configuration(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = [Error(str(error), id="gorge.E001") for error in settings.GORGE_CONFIG_ERRORS]
    config = settings.GORGE_WEBHOOK
    if config.lease_was_clamped:
        messages.append(
            checks.Warning(
                f"GORGE_WEBHOOK_CLAIM_LEASE_SEC: {config.requested_lease_sec} s is shorter than the delivery "
                f"timeout plus a margin; using {config.claim_lease_sec} s",
                id="gorge.W001",
            )
        )
    return messages


def raise_for_config_errors() -> None:
    if settings.GORGE_CONFIG_ERRORS:
        lines = "\n".join(f"  {error}" for error in settings.GORGE_CONFIG_ERRORS)
        raise ImproperlyConfigured(f"invalid configuration:\n{lines}")
