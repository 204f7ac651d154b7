"""Thin views: the staff dashboard, the probes and the web metrics. Every read is in selectors.py."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from . import selectors
from .web_metrics import REGISTRY

logger = logging.getLogger(__name__)
REFRESH_SEC = 30


@staff_member_required
@never_cache
def dashboard(request: HttpRequest) -> HttpResponse:
    context = {**admin.site.each_context(request), "is_nav_sidebar_enabled": False}
    try:
        board = selectors.dashboard(settings.GORGE_WEBHOOK)
    except DatabaseError as exc:
        logger.warning("dashboard: Phorge's herald database unavailable", extra={"error": type(exc).__name__})
        return render(request, "webhook_delivery/unavailable.html", context, status=503)
    context.update(board=board, health=board.health, refresh_sec=REFRESH_SEC)
    return render(request, "webhook_delivery/dashboard.html", context)


@require_safe
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_safe
@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    try:
        selectors.phorge_database_answers()
    except DatabaseError as exc:
        logger.warning("readiness: Phorge's herald database unavailable", extra={"error": type(exc).__name__})
        return JsonResponse({"status": "unavailable", "reason": "phorge database unreachable"}, status=503)
    body = {"status": "ok"}
    if selectors.php_delivery_state()["state"] == "active":
        body["warning"] = "phorge's php webhook worker is also delivering"
    return JsonResponse(body)


@require_safe
@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
