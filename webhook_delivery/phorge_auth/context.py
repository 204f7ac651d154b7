from __future__ import annotations

from django.http import HttpRequest

from .phorge import config


def login_options(request: HttpRequest) -> dict[str, bool]:
    """For the admin login page: whether to offer Sign in with Phorge and to fold the password form away."""
    conf = config()
    return {"phorge_signin": conf.enabled, "phorge_only": conf.only}
