"""The parsed Sign in with Phorge settings (read from the environment in gorge_site/settings.py)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class PhorgeOAuthConfig:
    client_id: str = ""
    client_secret: str = ""  # a secret: never logged, never shown
    url: str = ""  # Phorge's address; empty: Phorge's phabricator.base-uri, when known
    site_url: str = ""  # this dashboard's public address; empty: from the request
    recheck_sec: int = 300
    action_recheck_sec: int = 30  # before an action, Phorge is asked again when its last answer is older
    only: bool = False  # no password logins, except break_glass_users
    break_glass_users: tuple[str, ...] = ()
    allow_http: bool = False  # GORGE_PHORGE_ALLOW_HTTP: plain http to Phorge on another host

    @property
    def enabled(self) -> bool:
        return bool(self.client_id and self.client_secret)

    def __repr__(self) -> str:  # keeps the secret out of tracebacks and debug pages
        return f"PhorgeOAuthConfig(client_id={self.client_id!r}, url={self.url!r}, enabled={self.enabled})"


def address_problem(url: str, *, allow_http: bool) -> str | None:
    """Why `url` is no address to send a secret to (None: it is one): https, or plain http to a loopback
    address, or plain http anywhere when the operator allows it."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return None
    if parts.scheme != "http" or not parts.hostname:
        return "not an http(s) address"
    if allow_http or parts.hostname == "localhost":
        return None
    try:
        if ipaddress.ip_address(parts.hostname).is_loopback:
            return None
    except ValueError:
        pass
    return "plain http to another host (a secret would cross the network unencrypted; GORGE_PHORGE_ALLOW_HTTP)"
