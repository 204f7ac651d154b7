"""Worker heartbeats and the attempt log, read-only: the worker writes both (and removes its own heartbeat
on a clean exit, and prunes the log)."""

from __future__ import annotations

import json

from django.contrib import admin
from django.utils.html import format_html

from ..admin import ReadOnlyAdmin, error_text
from ..web.links import page_link
from .models import DeliveryAttempt, WorkerHeartbeat


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(ReadOnlyAdmin):
    list_display = ["worker_id", "hostname", "pid", "started_at", "last_seen"]
    search_fields = ["hostname", "worker_id"]
    fields = readonly_fields = ("worker_id", "hostname", "pid", "started_at", "last_seen", "pretty_state")

    @admin.display(description="state")
    def pretty_state(self, obj: WorkerHeartbeat) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.state, indent=2, sort_keys=True))


@admin.register(DeliveryAttempt)
class DeliveryAttemptAdmin(ReadOnlyAdmin):
    list_display = ["started_at", "request", "hook_phid", "result", "error", "duration", "http_status", "worker_id"]
    list_filter = ["result", "error_type"]
    search_fields = ["request_phid__exact", "hook_phid__exact", "object_phid__exact"]
    search_help_text = "a request, hook or object PHID"
    sortable_by = ["started_at"]
    fields = readonly_fields = (
        "request",
        "hook_phid",
        "object_phid",
        "started_at",
        "duration",
        "status",
        "result",
        "error",
        "http_status",
        "response_bytes",
        "redirects",
        "worker_id",
        "response_prefix",
    )

    @admin.display(description="request", ordering="started_at")
    def request(self, obj: DeliveryAttempt) -> str:
        return page_link("request", obj.request_phid, obj.request_phid, code=True)

    @admin.display(description="outcome")
    def error(self, obj: DeliveryAttempt) -> str:
        return error_text(obj.error_type, obj.error_code) if obj.error_type else "-"

    @admin.display(description="duration")
    def duration(self, obj: DeliveryAttempt) -> str:
        return f"{round(obj.duration_ms)} ms"
