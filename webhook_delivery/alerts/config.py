"""GORGE_ALERT_* and EMAIL_URL, parsed from the environment by gorge_site/settings.py (no Django)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import environ as django_environ

from ..config import ConfigError, parse_bool

DEFAULT_FROM = "gorge-webhook@localhost"


@dataclass(frozen=True)
class AlertConfig:
    email_to: tuple[str, ...] = ()
    email_from: str = DEFAULT_FROM
    chat_url: str = field(default="", repr=False)  # a secret: never logged, never in an error
    site_url: str = ""  # our dashboard's public address, for links to /hooks/<phid>/
    failing_sec: float = 15 * 60.0  # GORGE_ALERT_FAILING_MINUTES
    gc_warning_sec: float = 24 * 3600.0  # GORGE_ALERT_GC_HOURS
    worker_dead_sec: float = 30.0
    interval_sec: float = 30.0
    channel_timeout_sec: float = 10.0
    php_hold_sec: float = 60.0  # Phorge's PHP worker seen delivering this long before it is told (and clear as long)
    in_worker: bool = False
    loss_margin_sec: int = 3600  # queued requests this close to collection are remembered, to notice their loss
    # Django's EMAIL_* settings from EMAIL_URL (django-environ's email_url); empty: Django's defaults.
    email_settings: tuple[tuple[str, Any], ...] = field(default=(), repr=False)

    @property
    def channels(self) -> tuple[str, ...]:
        configured = []
        if self.email_to:
            configured.append("email")
        if self.chat_url:
            configured.append("chat")
        return tuple(configured)


def _number(
    environ: Mapping[str, str], name: str, default: float, scale: float, errors: list[ConfigError], *, maximum: float
) -> float:
    """A positive number of the variable's unit, at most `maximum` of them (beyond, a timer or a date
    overflows later): the value times `scale`, in seconds."""
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= maximum:  # NaN and infinity fail too
        errors.append(ConfigError(name, f"expected a number above 0 and at most {maximum:g}, got {raw!r}"))
        return default
    return value * scale


def load_alert_config(environ: Mapping[str, str]) -> tuple[AlertConfig, list[ConfigError]]:
    errors: list[ConfigError] = []
    recipients = tuple(part.strip() for part in environ.get("GORGE_ALERT_EMAIL_TO", "").split(",") if part.strip())
    for address in recipients:
        if "@" not in address or any(c.isspace() for c in address):
            errors.append(ConfigError("GORGE_ALERT_EMAIL_TO", f"not an e-mail address: {address!r}"))
    chat = environ.get("GORGE_ALERT_WEBHOOK_URL", "").strip()
    if chat and not chat.lower().startswith(("http://", "https://")):
        # The URL is a secret: the error never repeats it.
        errors.append(ConfigError("GORGE_ALERT_WEBHOOK_URL", "expected an http:// or https:// URL"))
        chat = ""
    site = environ.get("GORGE_ALERT_SITE_URL", "").strip().rstrip("/")
    if site and not site.lower().startswith(("http://", "https://")):
        errors.append(ConfigError("GORGE_ALERT_SITE_URL", f"expected an http(s) URL, got {site!r}"))
        site = ""
    in_worker = False
    raw_flag = environ.get("GORGE_ALERT_IN_WORKER", "").strip()
    if raw_flag:
        try:
            in_worker = parse_bool(raw_flag)
        except ValueError:
            errors.append(ConfigError("GORGE_ALERT_IN_WORKER", f"expected true or false, got {raw_flag!r}"))
    email_settings: tuple[tuple[str, Any], ...] = ()
    email_url = environ.get("EMAIL_URL", "").strip()
    if email_url:
        try:
            email_settings = tuple(_email_url_config(email_url).items())
        except Exception:  # noqa: BLE001 - any parse failure is a configuration error, reported by name
            errors.append(ConfigError("EMAIL_URL", "expected an e-mail URL such as smtp://user:pass@host:587"))
    config = AlertConfig(
        email_to=recipients,
        email_from=environ.get("GORGE_ALERT_EMAIL_FROM", "").strip() or DEFAULT_FROM,
        chat_url=chat,
        site_url=site,
        failing_sec=_number(environ, "GORGE_ALERT_FAILING_MINUTES", 15 * 60.0, 60.0, errors, maximum=7 * 24 * 60),
        gc_warning_sec=_number(environ, "GORGE_ALERT_GC_HOURS", 24 * 3600.0, 3600.0, errors, maximum=365 * 24),
        worker_dead_sec=_number(environ, "GORGE_ALERT_WORKER_DEAD_SEC", 30.0, 1.0, errors, maximum=86400),
        interval_sec=_number(environ, "GORGE_ALERT_INTERVAL_SEC", 30.0, 1.0, errors, maximum=3600),
        channel_timeout_sec=_number(environ, "GORGE_ALERT_CHANNEL_TIMEOUT_SEC", 10.0, 1.0, errors, maximum=300),
        php_hold_sec=_number(environ, "GORGE_ALERT_PHP_HOLD_SEC", 60.0, 1.0, errors, maximum=86400),
        in_worker=in_worker,
        email_settings=email_settings,
    )
    return config, errors


def _email_url_config(url: str) -> Mapping[str, Any]:
    parsed: Mapping[str, Any] = django_environ.Env.email_url_config(url)
    return parsed
