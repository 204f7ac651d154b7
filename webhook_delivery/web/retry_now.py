"""Retry now, from a hook's page: after its receiver's outage, make the hook's queued requests that wait on their
retry backoff due at once. GET is the dry run (anyone who may see the pages): which requests wait, how many,
when the next is tried, and whether the breaker is open. POST (`operate webhooks`) asks a worker for it, as
the other actions do (actions.ask): the worker leaves an order every worker reads (records/retries.py), and
no row of Phorge's is written, by the web process or the worker.

What it does within Phorge's rules, as the page says: the requests stay `queued`; they go one at a time (the
hook's lock), oldest first; a request that fails again waits its backoff anew; and the breaker is left as it
is: while it is open (too many failed attempts in its window) nothing of the hook is called, these included,
until it closes by itself, as Phorge's does.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from ..reads import herald as selectors
from ..reads.retry_preview import RetryPreview, retry_preview
from ..records import actions
from .access import may_operate, view_required
from .actions import MOMENT_RE, STALE_FORM, Refused, ask, hook_row, operate_required, page_context


def hook_retry(request: HttpRequest, phid: str) -> HttpResponse:
    """GET: the dry run, for anyone who may see the pages; POST: the retry, for operators."""
    return retry(request, phid) if request.method == "POST" else retry_dry_run(request, phid)


@operate_required
def retry(request: HttpRequest, phid: str) -> HttpResponse:
    """The dry run's confirmation: failures up to the moment the dry run was read."""
    moment = request.POST.get("failed_up_to", "")
    if not MOMENT_RE.fullmatch(moment):
        raise Refused(STALE_FORM)
    hook = hook_row(phid)
    if hook.status == "disabled":
        raise Refused("This hook is disabled in Phorge: there is nothing to retry.", status=409)
    to = reverse("webhook_delivery:hook", args=[phid])
    return ask(request, actions.RETRY, phid, choices={"failed_up_to": int(moment)}, to=to)


@view_required
@never_cache
@require_safe
def retry_dry_run(request: HttpRequest, phid: str) -> HttpResponse:
    """What a Retry now of this hook would make due at once; changes nothing."""
    now, found = selectors.hooks(only=[phid])
    if not found:
        raise Http404("no such hook")
    preview = retry_preview(found[0], now, settings.GORGE_WEBHOOK)
    context = {
        **page_context(request),
        "phid": phid,
        "hook": found[0],
        "preview": preview,
        "form_key": actions.new_form_key(),
    }
    return render(request, "webhook_delivery/retry.html", context)


def hook_part(request: HttpRequest, phid: str) -> dict[str, Any]:
    """The hook page's part, for operators: what waits on its retry backoff. Left out when it cannot be read."""
    if not may_operate(request.user):
        return {}
    try:
        now, found = selectors.hooks(only=[phid])
        preview: RetryPreview | None = retry_preview(found[0], now, settings.GORGE_WEBHOOK) if found else None
    except DatabaseError:
        return {}
    return {"retry": preview}
