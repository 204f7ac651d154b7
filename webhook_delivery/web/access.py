"""Who may see the delivery pages and the session-authenticated JSON: a staff account that holds the view
permission on Phorge's webhook requests (superusers hold every permission). Being staff alone is not
enough: a staff account made for another purpose sees nothing here. Who may act from them (hold, release,
requeue): such an account that also holds `operate webhooks`; without it the pages show no button."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

VIEW_PERMISSION = "webhook_delivery.view_heraldwebhookrequest"
OPERATE_PERMISSION = "delivery_status.operate_webhooks"


def may_view(user: Any) -> bool:
    return bool(user.is_authenticated and user.is_active and user.is_staff and user.has_perm(VIEW_PERMISSION))


def may_operate(user: Any) -> bool:
    return may_view(user) and bool(user.has_perm(OPERATE_PERMISSION))


def view_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Anonymous: to the login page, as the admin does; logged in without the permission: 403."""

    @functools.wraps(view)
    def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not may_view(request.user):
            raise PermissionDenied
        return view(request, *args, **kwargs)

    return staff_member_required(checked)
