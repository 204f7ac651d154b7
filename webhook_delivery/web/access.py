"""Who may see the delivery pages and the session-authenticated JSON: a staff account that holds the view
permission on Phorge's webhook requests (superusers hold every permission). Being staff alone is not
enough: a staff account made for another purpose sees nothing here. Who may act from them (hold, release,
requeue, retry now): such an account that also holds `operate webhooks`; without it the pages show no
button, and say why.

A refusal is a worded page (403) and one log line with its event key, never a traceback: the page says who
is signed in and which permission is missing."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from gorge_site.client_ip import client_ip

logger = logging.getLogger(__name__)

VIEW_PERMISSION = "webhook_delivery.view_heraldwebhookrequest"
OPERATE_PERMISSION = "delivery_status.operate_webhooks"
VIEW_WORDS = "view heraldwebhookrequest"  # the permission as the admin's user page lists it
OPERATE_WORDS = "operate webhooks"


def may_view(user: Any) -> bool:
    return bool(user.is_authenticated and user.is_active and user.is_staff and user.has_perm(VIEW_PERMISSION))


def may_operate(user: Any) -> bool:
    return may_view(user) and bool(user.has_perm(OPERATE_PERMISSION))


def forbidden(
    request: HttpRequest, *, missing: str, doing: str, nothing_done: bool = False, event: str = "access.forbidden"
) -> HttpResponse:
    """The 403 page: who is signed in, the permission they lack, what they tried; logged once, no traceback."""
    user = request.user.get_username()
    logger.warning(
        f"refused: the user lacks the permission {missing!r}",
        extra={
            "event": event,
            "user": user,
            "permission": missing,
            "path": request.path,
            "client": client_ip(request),
        },
    )
    context = {
        **admin.site.each_context(request),
        "is_nav_sidebar_enabled": False,
        "user_name": user,
        "missing": missing,
        "doing": doing,
        "nothing_done": nothing_done,
    }
    return render(request, "webhook_delivery/forbidden.html", context, status=403)


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django's 403 handler (the admin's refusals): the same worded page."""
    return forbidden(request, missing="", doing="see or do this")


def view_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Anonymous: to the login page, as the admin does; logged in without the permission: the 403 page."""

    @functools.wraps(view)
    def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not may_view(request.user):
            return forbidden(request, missing=VIEW_WORDS, doing="see the webhook delivery pages")
        return view(request, *args, **kwargs)

    return staff_member_required(checked)
