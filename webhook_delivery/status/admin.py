"""Worker heartbeats, read-only: the worker writes them and removes its own row on a clean exit."""

from __future__ import annotations

import json

from django.contrib import admin
from django.utils.html import format_html

from ..admin import ReadOnlyAdmin
from .models import WorkerHeartbeat


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(ReadOnlyAdmin):
    list_display = ["worker_id", "hostname", "pid", "started_at", "last_seen"]
    search_fields = ["hostname", "worker_id"]
    fields = readonly_fields = ("worker_id", "hostname", "pid", "started_at", "last_seen", "pretty_state")

    @admin.display(description="state")
    def pretty_state(self, obj: WorkerHeartbeat) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.state, indent=2, sort_keys=True))
