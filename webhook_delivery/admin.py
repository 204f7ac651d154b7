"""Read-only admin over Phorge's herald tables: nobody adds, changes or deletes, superusers included.

The URI and HMAC key columns are in no list, form, search or filter, no query-string lookup reaches them
(nor any other field the list does not offer as a filter), and the default manager defers them so they
are never even loaded; "no key" is the boolean `hmacKey = ''` computed in SQL.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import InvalidPage, Paginator
from django.db import DatabaseError
from django.db.models import BooleanField, ExpressionWrapper, OuterRef, Q, QuerySet, Subquery
from django.db.models.expressions import RawSQL
from django.db.models.functions import Lower
from django.http import HttpRequest
from django.utils.functional import cached_property
from django.utils.html import format_html

from .config import PHORGE_ALIAS
from .models import HeraldWebhook, HeraldWebhookRequest
from .phorge.herald import RequestResult, RequestStatus, text, utc
from .phorge.outcomes import error_label, is_success
from .phorge.payload import phid_get_type
from .phorge.phpjson import UndecodableProperties, decode_properties
from .reads import herald as selectors
from .reads import object_names, phorge_status, request_lists
from .reads.request_lists import COUNT_BOUND
from .records import tally
from .web import links

admin.site.site_header = "gorge-webhook"
admin.site.site_title = "gorge-webhook"
admin.site.index_title = "Phorge webhook delivery"
admin.site.enable_nav_sidebar = False  # three lists: the width is the request list's

PHID_STYLE = "font-size:11px;white-space:nowrap"


class BoundedPaginator(Paginator):  # type: ignore[type-arg]
    """Counts at most COUNT_BOUND + 1 matches (the pages say "more than COUNT_BOUND"), and reads each page as
    `rows(offset, limit)` gives it: no list counts or reads its whole table."""

    bound = COUNT_BOUND

    def __init__(
        self, object_list: Any, per_page: int, *, counter: Callable[[], int], rows: Callable[[int, int], Any]
    ) -> None:
        super().__init__(object_list, per_page)
        self._counter = counter
        self._rows = rows

    @cached_property
    def count(self) -> int:
        return min(self._counter(), COUNT_BOUND + 1)

    @property
    def capped(self) -> bool:
        return self.count > COUNT_BOUND

    def page(self, number: Any) -> Any:
        number = self.validate_number(number)
        return self._get_page(self._rows((number - 1) * self.per_page, self.per_page), number, self)  # type: ignore[attr-defined]


class BoundedChangeList(ChangeList):
    """A list page read only through its paginator: never the whole query unsliced, never a full count."""

    def get_results(self, request: HttpRequest) -> None:
        paginator = self.model_admin.get_paginator(request, self.queryset, self.list_per_page)
        self.result_count = paginator.count
        self.show_full_result_count = False
        self.show_admin_actions = False
        self.full_result_count = None
        try:
            self.result_list = paginator.page(self.page_num).object_list
        except InvalidPage as exc:
            raise IncorrectLookupParameters from exc
        self.can_show_all = False
        self.multi_page = self.result_count > self.list_per_page
        self.paginator = paginator


def _when(epoch: int) -> str:
    return utc(epoch) or "-"


def error_text(error_type: str, error_code: object) -> str:
    """A stored errorType/errorCode as the pages word it (outcomes.error_label), with the pair as stored
    beside it (what `requeue_webhooks --error` takes); a 2xx answer reads as the success it is."""
    code = str(error_code)
    if is_success(error_type, code):
        return error_label(error_type, code)
    return f"{error_label(error_type, code)} ({error_type}/{code[:40]})"


class KnownValuesFilter(admin.AllValuesFieldListFilter):
    """A column's filter offering the values this service writes, not a DISTINCT over the whole table."""

    known: tuple[str, ...] = ()

    def __init__(
        self, field: Any, request: HttpRequest, params: Any, model: Any, model_admin: Any, field_path: str
    ) -> None:
        path = field_path
        self.lookup_kwarg = path
        self.lookup_kwarg_isnull = f"{path}__isnull"
        self.lookup_val = params.get(self.lookup_kwarg)
        self.lookup_val_isnull = None
        self.empty_value_display = model_admin.get_empty_value_display()
        self.lookup_choices = list(self.known)  # type: ignore[assignment]
        admin.FieldListFilter.__init__(self, field, request, params, model, model_admin, path)

    @classmethod
    def of(cls, *values: str) -> type[KnownValuesFilter]:
        return type("KnownValues", (cls,), {"known": values})


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    actions = None
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # a facet is a count over the whole table
    list_per_page = 50

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="created", ordering="date_created")
    def created(self, obj: Any) -> str:
        return _when(obj.date_created)

    @admin.display(description="modified", ordering="date_modified")
    def modified(self, obj: Any) -> str:
        return _when(obj.date_modified)

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        """Only the list's own filters. Django would otherwise filter on any local field given in the
        query string (`?hmac_key__startswith=ab`): an oracle for keys and URIs, one character at a time."""
        names = [item[0] if isinstance(item, tuple) else item for item in self.list_filter]
        return lookup in {f"{name}__{test}" for name in names for test in ("exact", "isnull")}


@admin.register(HeraldWebhook)
class HeraldWebhookAdmin(ReadOnlyAdmin):
    list_display = ["name", "phid", "status", "signing_key", "created", "modified"]
    list_filter = ["status"]
    search_fields = ["phid__exact", "name"]
    fields = readonly_fields = (
        "phid",
        "name",
        "status",
        "signing_key",
        "history",
        "view_policy",
        "edit_policy",
        "created",
        "modified",
    )
    exclude = ["webhook_uri", "hmac_key"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[HeraldWebhook]:
        missing = ExpressionWrapper(Q(hmac_key=""), output_field=BooleanField())
        queryset: QuerySet[HeraldWebhook] = super().get_queryset(request)
        return queryset.annotate(key_missing=missing)

    @admin.display(description="attempts")
    def history(self, obj: Any) -> str:
        return links.page_link("hook", obj.phid, "recent attempts and latency")

    @admin.display(description="HMAC key")
    def signing_key(self, obj: Any) -> str:
        return "missing: requests stay queued" if obj.key_missing else "set"


PHID_RE = re.compile(r"PHID-([A-Z0-9]{4})-[A-Za-z0-9-]{1,60}")


@dataclass(frozen=True)
class _Search:
    """What the request list's search box names: a request, hooks, or objects."""

    searched: bool = False
    request_phid: str | None = None
    hooks: tuple[str, ...] = ()
    objects: tuple[str, ...] = ()

    @classmethod
    def of(cls, term: str) -> _Search:
        term = term.strip()
        if not term:
            return cls()
        if PHID_RE.fullmatch(term):
            kind = term[5:9]
            if kind == "HWBR":
                return cls(True, request_phid=term)
            return cls(True, hooks=(term,)) if kind == "HWBH" else cls(True, objects=(term,))
        # Phorge's columns have a binary collation: compare lowercased to ignore case.
        named = HeraldWebhook.objects.annotate(lowered=Lower("name")).filter(lowered__contains=term.lower())
        return cls(
            True,
            hooks=tuple(named.values_list("phid", flat=True)[:100]),
            objects=tuple(object_names.object_phids(term)),
        )


def _key_status() -> bool:
    """Whether Phorge's table has key_status, as the counts' last refresh found (no query of Phorge's)."""
    try:
        snapshot = tally.read(tally.source_of(PHORGE_ALIAS))
    except DatabaseError:
        return False
    return bool(snapshot is not None and snapshot.key_status)


def _phorge_link(base: str | None, path: str, text: str) -> str:
    if base is None:
        return format_html('<code style="{}">{}</code>', PHID_STYLE, text)
    return format_html('<a href="{}{}" rel="noreferrer"><code style="{}">{}</code></a>', base, path, PHID_STYLE, text)


@admin.register(HeraldWebhookRequest)
class HeraldWebhookRequestAdmin(ReadOnlyAdmin):
    """Answers "what happened to the webhooks of this object / this hook?": search by request, object or
    hook PHID, by an object's monogram (T123, rXYZabc12, ...), or by hook name; objects are shown by Phorge's
    names, and linked into Phorge's own pages when its base URI can be read."""

    sortable_by = ()  # newest first, always: the one order every index serves
    list_display = ["request", "hook", "object", "outcome", "last_attempt"]
    list_display_links = ["request"]
    list_filter = ["status", "last_request_result"]
    search_fields = ["phid__exact"]  # the search box; what it finds is get_search_results' (request_lists.py)
    search_help_text = (
        "a request or hook PHID, part of a hook's name, or an object's PHID or monogram (T123, D45, rXYZabc12): "
        f"objects only among the requests of the last {request_lists.SEARCH_DAYS} day"
        f"{'' if request_lists.SEARCH_DAYS == 1 else 's'}, at most the newest {request_lists.SEARCH_ROWS:,}"
    )
    fields = readonly_fields = (
        "id",
        "phid",
        "history",
        "in_phorge",
        "hook",
        "object",
        "status",
        "last_request_result",
        "last_attempt",
        "created",
        "modified",
        "decoded_properties",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[HeraldWebhookRequest]:
        hook = HeraldWebhook.objects.filter(phid=OuterRef("webhook_phid"))
        queryset: QuerySet[HeraldWebhookRequest] = super().get_queryset(request)
        # The list shows each row's error, never its properties: the database reads the two keys out, so a
        # page of multi-megabyte rows costs what it shows (the form loads the one row it displays).
        errors = {
            f"stored_{key}": RawSQL(selectors.stored_error_sql(key), ())  # noqa: S611 - constant SQL, no input
            for key in ("errorType", "errorCode")
        }
        return (
            queryset.defer("properties")
            .annotate(hook_name=Subquery(hook.values("name")[:1]), hook_id=Subquery(hook.values("id")[:1]))
            .annotate(**errors)
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[HeraldWebhookRequest], search_term: str
    ) -> tuple[QuerySet[HeraldWebhookRequest], bool]:
        found = _Search.of(search_term)
        if not found.searched:
            return queryset, False
        if found.request_phid is not None:
            return queryset.filter(phid=found.request_phid), False
        match = Q(webhook_phid__in=found.hooks) if found.hooks else Q(pk__in=[])
        if found.objects:
            match |= Q(object_phid__in=found.objects)
        return queryset.filter(match), False

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return BoundedChangeList

    def get_paginator(self, request: HttpRequest, queryset: Any, per_page: int, *args: Any, **kwargs: Any) -> Any:
        found = _Search.of(request.GET.get("q", ""))
        choices = {"status__exact": RequestStatus.values, "last_request_result__exact": RequestResult.values}
        wanted = {
            name: value if value in choices[name] else "-" for name in choices if (value := request.GET.get(name))
        }
        plan = request_lists.plan(
            request_phid=found.request_phid,
            hooks=found.hooks,
            objects=found.objects,
            searched=found.searched,
            status=wanted.get("status__exact"),
            result=wanted.get("last_request_result__exact"),
            key_status=_key_status(),
        )
        request.search_plan = plan  # type: ignore[attr-defined]

        def rows(offset: int, limit: int) -> Any:
            return queryset.filter(id__in=plan.page(offset, limit))

        return BoundedPaginator(queryset, per_page, counter=plan.count, rows=rows)

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        plan = getattr(request, "search_plan", None)
        changelist.search_bound = (  # type: ignore[attr-defined]
            (
                f"objects searched among the requests of the last {request_lists.SEARCH_DAYS * 24} hours only, "
                f"at most the newest {request_lists.SEARCH_ROWS:,} (from request {plan.searched_from} on)"
            )
            if plan is not None and plan.bounded
            else ""
        )
        # The page's rows, read once here (the template iterates the same evaluated queryset), named in one
        # batch: each row carries its name, since this admin instance is shared by every request.
        rows = list(changelist.result_list)
        named = object_names.object_names(row.object_phid for row in rows)
        for row in rows:
            row.object_name = named.get(row.object_phid)
        return changelist

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        self._base = phorge_status.phorge_base_uri()
        return super().changelist_view(request, extra_context)

    def change_view(self, request: HttpRequest, object_id: str, *args: Any, **kwargs: Any) -> Any:
        self._base = phorge_status.phorge_base_uri()
        return super().change_view(request, object_id, *args, **kwargs)

    _base: str | None = None

    @admin.display(description="request", ordering="id")
    def request(self, obj: Any) -> str:
        return format_html('{}<br><code style="{}">{}</code>', obj.id, PHID_STYLE, obj.phid)

    @admin.display(description="attempts")
    def history(self, obj: Any) -> str:
        return links.page_link("request", obj.phid, "every attempt on record")

    @admin.display(description="in Phorge")
    def in_phorge(self, obj: Any) -> str:
        if self._base is None or obj.hook_id is None:
            return "-"
        path = f"/herald/webhook/view/{obj.hook_id}/request/{obj.id}/"
        return format_html('<a href="{}{}" rel="noreferrer">{}{}</a>', self._base, path, self._base, path)

    @admin.display(description="hook")
    def hook(self, obj: Any) -> str:
        name = obj.hook_name if obj.hook_name is not None else "(hook gone)"
        path = "" if obj.hook_id is None else f"/herald/webhook/view/{obj.hook_id}/"
        return format_html("{}<br>{}", name, _phorge_link(self._base if path else None, path, obj.webhook_phid))

    @admin.display(description="object")
    def object(self, obj: Any) -> str:
        if not hasattr(obj, "object_name"):  # the form of one request: not named with a page
            obj.object_name = object_names.object_names([obj.object_phid]).get(obj.object_phid)
        name = obj.object_name
        shown = phid_get_type(obj.object_phid) if name is None else links.object_link(name, self._base)
        return format_html('{}<br><code style="{}">{}</code>', shown, PHID_STYLE, obj.object_phid)

    @admin.display(description="outcome")
    def outcome(self, obj: HeraldWebhookRequest) -> str:
        return format_html("{} / {}<br>{}", obj.status, obj.last_request_result, self.error(obj))

    @staticmethod
    def _properties(obj: HeraldWebhookRequest) -> dict[str, Any] | None:
        try:
            return decode_properties(obj.properties)
        except UndecodableProperties:
            return None

    @admin.display(description="error")
    def error(self, obj: Any) -> str:
        error_type = obj.stored_errorType
        if error_type is None:
            return "-"
        return error_text(text(error_type), text(obj.stored_errorCode))

    @admin.display(description="properties")
    def decoded_properties(self, obj: HeraldWebhookRequest) -> str:
        if len(obj.properties) > selectors.SHOWN_PROPERTIES:
            return format_html(
                "<p>{} characters, too large to decode here; the first 4,000:</p><pre>{}</pre>",
                len(obj.properties),
                obj.properties[:4000],
            )
        properties = self._properties(obj)
        if properties is None:
            return format_html("<p>Not valid JSON; stored text:</p><pre>{}</pre>", obj.properties[:4000])
        return format_html("<pre>{}</pre>", json.dumps(properties, indent=2, ensure_ascii=False)[:20000])

    @admin.display(description="last try, UTC", ordering="last_request_epoch")
    def last_attempt(self, obj: HeraldWebhookRequest) -> str:
        when = _when(obj.last_request_epoch)
        return format_html("{}<br>{}", when[:10], when[11:16]) if obj.last_request_epoch else when
