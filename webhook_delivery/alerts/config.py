"""GORGE_ALERT_* and EMAIL_URL, parsed from the environment by gorge_site/settings.py (no Django)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import environ as django_environ

from ..config import ConfigError, parse_bool, parse_decimal, range_text
from ..phorge_auth.config import address_problem

DEFAULT_FROM = "gorge-webhook@localhost"
DEFAULT_PRIORITY = "high"
PHORGE_CHANNEL = "phorge"
# Apprise URLs are separated by blanks or commas; a comma inside one (a list of targets, a query) is not
# followed by a scheme, so it stays in its URL.
_URL_SEPARATOR = re.compile(r"[\s,]+(?=[A-Za-z][A-Za-z0-9+.-]*://)")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://\S")
# Phorge's Conduit tokens: a type and 28 random characters, 32 in all (PhabricatorConduitToken); cluster
# tokens (clr-) work only from inside a Phorge cluster.
_TOKEN = re.compile(r"^(api|cli)-[a-z0-9]{28}$")
# ManiphestTaskPriority::isValidPriorityKeyword
_PRIORITY = re.compile(r"^(?![0-9]*$)[a-zA-Z0-9]{1,64}$")
_TAG = re.compile(r"^(PHID-PROJ-[a-z0-9]+|[^\s,#]{1,128})$")


@dataclass(frozen=True)
class AlertConfig:
    email_to: tuple[str, ...] = ()
    email_from: str = DEFAULT_FROM
    chat_url: str = field(default="", repr=False)  # a secret: never logged, never in an error
    apprise_urls: tuple[str, ...] = field(default=(), repr=False)  # secrets too: named by scheme and host only
    phorge_token: str = field(default="", repr=False)  # GORGE_ALERT_PHORGE_TOKEN, a secret
    phorge_url: str = ""  # GORGE_ALERT_PHORGE_URL; empty: Phorge's address as sign-in finds it
    phorge_tags: tuple[str, ...] = ()
    phorge_priority: str = DEFAULT_PRIORITY
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


def _number(
    environ: Mapping[str, str],
    name: str,
    default: float,
    scale: float,
    errors: list[ConfigError],
    *,
    minimum: float,
    maximum: float,
) -> float:
    """A number of the variable's unit from `minimum` (below, the watcher spins or a send cannot even
    connect) to `maximum` (beyond, a timer or a date overflows later), in ASCII digits: the value times
    `scale`, in seconds."""
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    value = parse_decimal(raw)
    if value is None or not minimum <= value <= maximum:
        errors.append(ConfigError(name, f"expected a number {range_text(minimum, maximum)}, got {raw!r}"))
        return default
    return value * scale


def _chat_url_problem(url: str) -> str | None:
    if not url.lower().startswith(("http://", "https://")):
        return "expected an http:// or https:// URL"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - read for its ValueError
    except ValueError:
        return "not a URL that can be read (its host or port)"
    return None if parts.hostname else "no host in the URL"


def load_alert_config(environ: Mapping[str, str]) -> tuple[AlertConfig, list[ConfigError]]:
    errors: list[ConfigError] = []
    recipients = tuple(part.strip() for part in environ.get("GORGE_ALERT_EMAIL_TO", "").split(",") if part.strip())
    for address in recipients:
        if "@" not in address or any(c.isspace() for c in address):
            errors.append(ConfigError("GORGE_ALERT_EMAIL_TO", f"not an e-mail address: {address!r}"))
    chat = environ.get("GORGE_ALERT_WEBHOOK_URL", "").strip()
    if chat and (problem := _chat_url_problem(chat)) is not None:
        # The URL is a secret: the error never repeats it.
        errors.append(ConfigError("GORGE_ALERT_WEBHOOK_URL", problem))
        chat = ""
    apprise_urls = _apprise_urls(environ.get("GORGE_ALERT_URLS", ""), errors)
    phorge = _phorge(environ, errors)
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
        apprise_urls=apprise_urls,
        **phorge,
        site_url=site,
        failing_sec=_number(
            environ, "GORGE_ALERT_FAILING_MINUTES", 15 * 60.0, 60.0, errors, minimum=1, maximum=7 * 24 * 60
        ),
        gc_warning_sec=_number(
            environ, "GORGE_ALERT_GC_HOURS", 24 * 3600.0, 3600.0, errors, minimum=1, maximum=365 * 24
        ),
        worker_dead_sec=_number(environ, "GORGE_ALERT_WORKER_DEAD_SEC", 30.0, 1.0, errors, minimum=1, maximum=86400),
        interval_sec=_number(environ, "GORGE_ALERT_INTERVAL_SEC", 30.0, 1.0, errors, minimum=1, maximum=3600),
        channel_timeout_sec=_number(
            environ, "GORGE_ALERT_CHANNEL_TIMEOUT_SEC", 10.0, 1.0, errors, minimum=1, maximum=300
        ),
        php_hold_sec=_number(environ, "GORGE_ALERT_PHP_HOLD_SEC", 60.0, 1.0, errors, minimum=1, maximum=86400),
        in_worker=in_worker,
        email_settings=email_settings,
    )
    return config, errors


def split_urls(raw: str) -> list[str]:
    return [part.strip(" ,\t\r\n") for part in _URL_SEPARATOR.split(raw.strip()) if part.strip(" ,\t\r\n")]


def _apprise_urls(raw: str, errors: list[ConfigError]) -> tuple[str, ...]:
    urls = []
    for position, url in enumerate(split_urls(raw), 1):
        if not _SCHEME.match(url) or any(not c.isprintable() or c.isspace() for c in url):
            # The URL is a secret: the error says which entry, never what it holds.
            errors.append(ConfigError("GORGE_ALERT_URLS", f"entry {position} is not a URL (service://...)"))
            continue
        urls.append(url)
    return tuple(urls)


def _phorge(environ: Mapping[str, str], errors: list[ConfigError]) -> dict[str, Any]:
    """GORGE_ALERT_PHORGE_*: the incident task in Phorge, on with a token."""
    token = environ.get("GORGE_ALERT_PHORGE_TOKEN", "").strip()
    if token and not _TOKEN.match(token):
        errors.append(
            ConfigError(
                "GORGE_ALERT_PHORGE_TOKEN",
                "expected a Conduit API token of Phorge (api-... , 32 characters: a bot's Settings > Conduit API "
                "Tokens)",
            )
        )
        token = ""
    url = environ.get("GORGE_ALERT_PHORGE_URL", "").strip().rstrip("/")
    if url:
        try:
            allow_http = parse_bool(environ.get("GORGE_PHORGE_ALLOW_HTTP", "").strip() or "false")
        except ValueError:
            allow_http = False  # settings.py reports the flag itself
        problem = address_problem(url, allow_http=allow_http)
        if problem is None and ("?" in url or "#" in url):
            problem = "an address with no query or fragment"
        if problem is not None:
            errors.append(ConfigError("GORGE_ALERT_PHORGE_URL", f"refused: {problem}"))
            url = ""
    tags = []
    for tag in re.split(r"[\s,]+", environ.get("GORGE_ALERT_PHORGE_TAGS", "").strip()):
        tag = tag.removeprefix("#")
        if not tag:
            continue
        if not _TAG.match(tag):
            errors.append(ConfigError("GORGE_ALERT_PHORGE_TAGS", f"not a project's tag or PHID: {tag[:60]!r}"))
            continue
        tags.append(tag)
    priority = environ.get("GORGE_ALERT_PHORGE_PRIORITY", "").strip() or DEFAULT_PRIORITY
    if not _PRIORITY.match(priority):
        errors.append(
            ConfigError(
                "GORGE_ALERT_PHORGE_PRIORITY",
                f"expected a Maniphest priority keyword (unbreak, triage, high, normal, low, wish), got {priority!r}",
            )
        )
        priority = DEFAULT_PRIORITY
    return {"phorge_token": token, "phorge_url": url, "phorge_tags": tuple(tags), "phorge_priority": priority}


def _email_url_config(url: str) -> Mapping[str, Any]:
    parsed: Mapping[str, Any] = django_environ.Env.email_url_config(url)
    return parsed
