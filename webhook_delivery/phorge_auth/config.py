"""The parsed Sign in with Phorge settings (read from the environment in gorge_site/settings.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PhorgeOAuthConfig:
    client_id: str = ""
    client_secret: str = ""  # a secret: never logged, never shown
    url: str = ""  # Phorge's address; empty: Phorge's phabricator.base-uri, when known
    site_url: str = ""  # this dashboard's public address; empty: from the request
    recheck_sec: int = 300
    only: bool = False  # no password logins, except break_glass_users
    break_glass_users: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.client_id and self.client_secret)

    def __repr__(self) -> str:  # keeps the secret out of tracebacks and debug pages
        return f"PhorgeOAuthConfig(client_id={self.client_id!r}, url={self.url!r}, enabled={self.enabled})"
