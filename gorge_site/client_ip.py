"""The client address that login throttling counts failures by."""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str:
    """The address the nearest GORGE_TRUSTED_PROXIES proxies saw: each appends its peer to
    X-Forwarded-For, so only entries from the right are theirs; the left ones are the client's to forge."""
    remote = str(request.META.get("REMOTE_ADDR", ""))
    proxies: int = settings.GORGE_TRUSTED_PROXIES
    if not proxies:
        return remote
    hops = [hop.strip() for hop in str(request.META.get("HTTP_X_FORWARDED_FOR", "")).split(",") if hop.strip()]
    if len(hops) < proxies:
        return remote
    try:
        return str(ipaddress.ip_address(hops[-proxies]))
    except ValueError:
        return remote
