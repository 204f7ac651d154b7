"""Every page of the site, found by walking the URLconf: a new route cannot escape the leak, permission and
index checks by being missing from a hand-kept list. A route whose arguments the walker cannot fill makes
`every_page` fail, naming it, until it is taught here."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from django.contrib import admin
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from webhook_delivery.models import HeraldWebhook, HeraldWebhookRequest

# Routes that are not pages to look at: each with the reason.
NOT_PAGES = {
    "admin:view_on_site": "a redirect to the object on another site",
    # The operators' actions: forms' POSTs, a GET answers 405 (tests/db/test_actions.py).
    "webhook_delivery:hook_hold": "an action, POST only",
    "webhook_delivery:hook_release": "an action, POST only",
    "webhook_delivery:request_requeue": "an action, POST only",
}
API_ROUTES = ["stats", "hooks", "health", "no-such-route"]
# Pages anyone may reach: the probes and metrics (keep them to the network that needs them), log in and out.
PUBLIC = {
    "webhook_delivery:healthz",
    "webhook_delivery:readyz",
    "webhook_delivery:metrics",
    "admin:login",
    "admin:logout",
    "phorge_auth:login",  # Sign in with Phorge: to Phorge's OAuth server (404 when not configured)
    "phorge_auth:callback",  # ... and back; refuses anything that is not the answer to its own request
    "phorge_auth:ended",  # where a session ended by a re-check lands: why, in words of our own
}


# Pages about one of Phorge's rows, named by its PHID: every row's page (up to ten), and one that is missing.
PHID_PAGES: dict[str, Any] = {
    "webhook_delivery:hook": HeraldWebhook,
    "webhook_delivery:request": HeraldWebhookRequest,
    "webhook_delivery:hook_requeue": HeraldWebhook,  # a GET is the requeue's dry run; its POST, the requeue
    "webhook_delivery:hook_retry": HeraldWebhook,  # a GET is Retry now's dry run; its POST, the retry
}
MISSING_PHID = "PHID-XXXX-missingmissingmissing"


def route_names(resolver: URLResolver | None = None, namespace: str = "") -> Iterator[tuple[str, list[str]]]:
    """(namespaced name, the names of its arguments) of every named route."""
    resolver = resolver or get_resolver()
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
            yield from route_names(entry, inner)
        elif isinstance(entry, URLPattern) and entry.name:
            pattern: Any = entry.pattern
            arguments = list(getattr(pattern, "converters", {})) or list(re.compile(str(pattern)).groupindex)
            yield f"{namespace}{entry.name}", arguments


def _model_admin(name: str) -> Any:
    for model, model_admin in admin.site._registry.items():
        prefix = f"admin:{model._meta.app_label}_{model._meta.model_name}_"
        if name.startswith(prefix):
            return model_admin
    return None


def every_page(*, refuse_unknown: bool = True) -> list[str]:
    """The path of every page: each route, with each object that exists for the admin's object pages."""
    pages: list[str] = []
    unknown = []
    for name, arguments in route_names():
        if name in NOT_PAGES:
            continue
        if not arguments:
            pages.append(reverse(name))
        elif arguments == ["rest"]:
            pages += [reverse(name, kwargs={"rest": rest}) for rest in API_ROUTES]
        elif arguments == ["app_label"]:
            labels = sorted({model._meta.app_label for model in admin.site._registry})
            pages += [reverse(name, kwargs={"app_label": label}) for label in labels]
        elif arguments == ["url"]:
            pages.append(reverse(name, kwargs={"url": "no-such-page/"}))
        elif arguments == ["phid"] and name in PHID_PAGES:
            model = PHID_PAGES[name]
            phids = [*model.objects.values_list("phid", flat=True)[:10], MISSING_PHID]
            pages += [reverse(name, kwargs={"phid": phid}) for phid in phids]
        elif arguments in (["object_id"], ["id"]) and _model_admin(name) is not None:
            model_admin = _model_admin(name)
            for pk in model_admin.model._default_manager.values_list("pk", flat=True)[:3]:
                pages.append(reverse(name, kwargs={arguments[0]: pk}))
        else:
            unknown.append(f"{name}({', '.join(arguments)})")
    if refuse_unknown:
        assert not unknown, f"routes the page walker cannot fill (teach tests/support/urlwalk.py): {unknown}"
    return pages


def is_public(path: str) -> bool:
    return any(path == reverse(name) for name in PUBLIC)


# A JSON text nested deeper than any parser's recursion: read where the site reads Phorge's rows, it must be
# a problem said, never a crash.
DEEP = "[" * 100_000 + "]" * 100_000


def assert_every_page_stands(client: Any) -> None:
    """No page of the site answers a server error (the readiness probe may say it is unavailable)."""
    broken = []
    for path in every_page():
        response = client.get(path, headers={"X-Service-Token": "t0ken"})
        if response.status_code >= 500 and not (path == "/readyz" and response.status_code == 503):
            broken.append((path, response.status_code))
    assert broken == []
    ready = client.get("/readyz")
    assert ready.status_code in (200, 503) and json.loads(ready.content)["status"] in ("ok", "unavailable")
