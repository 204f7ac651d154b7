"""Password logins (the admin's form). With GORGE_PHORGE_OAUTH_ONLY on, only the break-glass accounts may
use one: active superusers whose user name is listed in GORGE_BREAK_GLASS_USERS. Anyone else is refused as
a wrong password would be (django-axes counts it the same way)."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth.backends import ModelBackend
from django.http import HttpRequest

from . import events
from .phorge import config

logger = logging.getLogger("webhook_delivery.phorge_auth")


def may_use_password(user: Any) -> bool:
    conf = config()
    if not conf.only:
        return True
    return bool(user.is_active and user.is_superuser and user.get_username() in conf.break_glass_users)


class LocalPasswordBackend(ModelBackend):
    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> Any:
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            return None
        if not may_use_password(user):
            logger.warning(
                "password login refused: only Phorge sign-in is allowed",
                extra=events.about(
                    events.LOCAL_LOGIN_REFUSED, user.get_username(), None, reason="not a break-glass account"
                ),
            )
            return None
        return user
