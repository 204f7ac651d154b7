"""Worker heartbeats, the attempt log and the operators' actions, read-only: the worker writes the first two
(and removes its own heartbeat on a clean exit, and prunes the log); the pages and the commands ask for
actions, the worker records what came of them."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from ..admin import BoundedChangeList, BoundedPaginator, KnownValuesFilter, ReadOnlyAdmin, error_text
from ..reads.request_lists import COUNT_BOUND
from ..web.access import may_view
from ..web.links import page_link
from .models import DeliveryAttempt, OperatorAction, WorkerHeartbeat


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(ReadOnlyAdmin):
    list_display = ["worker_id", "version", "hostname", "pid", "started_at", "last_seen"]
    list_filter = ["version"]
    search_fields = ["hostname", "worker_id"]
    fields = readonly_fields = ("worker_id", "version", "hostname", "pid", "started_at", "last_seen", "pretty_state")

    @admin.display(description="state")
    def pretty_state(self, obj: WorkerHeartbeat) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.state, indent=2, sort_keys=True))


SCANNED = 100_000  # filters and object searches look at the newest attempts only


@admin.register(DeliveryAttempt)
class DeliveryAttemptAdmin(ReadOnlyAdmin):
    """Newest first through the (started_at, id) index, a page at a time; a request or hook PHID through its
    own index; filters and object PHIDs among the newest SCANNED attempts only (there is no index for them)."""

    list_display = ["started_at", "request", "hook_phid", "result", "error", "duration", "http_status", "worker_id"]
    list_filter = [
        ("result", KnownValuesFilter.of("okay", "fail", "none")),
        ("error_type", KnownValuesFilter.of("http", "timeout", "hook")),
    ]
    search_fields = ["request_phid__exact"]  # what the box finds is get_search_results'
    search_help_text = (
        f"a request or hook PHID; an object PHID, and the filters, among the newest {SCANNED:,} attempts only"
    )
    sortable_by = ()
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

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[DeliveryAttempt], search_term: str
    ) -> tuple[QuerySet[DeliveryAttempt], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        kind = term[5:9] if term.startswith("PHID-") else ""
        if kind == "HWBR":
            return queryset.filter(request_phid=term), False
        if kind == "HWBH":
            return queryset.filter(hook_phid=term), False
        return queryset.filter(object_phid=term), False

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return BoundedChangeList

    def get_paginator(self, request: HttpRequest, queryset: Any, per_page: int, *args: Any, **kwargs: Any) -> Any:
        term = request.GET.get("q", "").strip()
        indexed = term.startswith(("PHID-HWBR-", "PHID-HWBH-"))
        if (term and not indexed) or any(request.GET.get(name) for name in ("result__exact", "error_type__exact")):
            newest = DeliveryAttempt.objects.order_by("-started_at", "-id").values_list("started_at", flat=True)
            floor = next(iter(newest[SCANNED - 1 : SCANNED]), None)
            if floor is not None:
                queryset = queryset.filter(started_at__gte=floor)
        return BoundedPaginator(
            queryset,
            per_page,
            counter=lambda: queryset[: COUNT_BOUND + 1].count(),
            rows=lambda offset, limit: queryset[offset : offset + limit],
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


@admin.register(OperatorAction)
class OperatorActionAdmin(ReadOnlyAdmin):
    """Everyone who may see the dashboard sees its "Operator actions" here too."""

    list_display = ["requested_at", "requested_by", "requested_from", "kind", "hook", "what", "state", "outcome"]
    list_filter = ["kind", "state"]
    search_fields = ["hook_phid__exact", "request_phid__exact", "requested_by__exact"]
    search_help_text = "a hook or request PHID, or who asked"
    sortable_by = ["requested_at"]
    fields = readonly_fields = (
        "kind",
        "hook",
        "request",
        "what",
        "reason",
        "requested_by",
        "requested_from",
        "requested_at",
        "state",
        "taken_by",
        "taken_at",
        "done_at",
        "requeued",
        "outcome",
    )

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return may_view(request.user)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return may_view(request.user)

    @admin.display(description="hook", ordering="hook_phid")
    def hook(self, obj: OperatorAction) -> str:
        return page_link("hook", obj.hook_phid, obj.hook_phid, code=True) if obj.hook_phid else "every hook"

    @admin.display(description="request")
    def request(self, obj: OperatorAction) -> str:
        return page_link("request", obj.request_phid, obj.request_phid, code=True) if obj.request_phid else "-"

    @admin.display(description="what")
    def what(self, obj: OperatorAction) -> str:
        return obj.what
