"""Django settings: the one place the environment is read.

Delivery settings are parsed by webhook_delivery.config; every invalid value is collected in
GORGE_CONFIG_ERRORS and reported by the system check (manage.py check, deliver_webhooks, wsgi start-up).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import environ

from webhook_delivery.alerts.config import load_alert_config
from webhook_delivery.config import (
    PHORGE_ALIAS,
    REPLICA_ALIAS,
    ConfigError,
    master_alias,
    parse_bool,
)
from webhook_delivery.phorge.formats import load_config
from webhook_delivery.phorge_auth.config import PhorgeOAuthConfig, address_problem

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
_dotenv = Path(os.environ.get("GORGE_ENV_FILE", BASE_DIR / ".env"))
if _dotenv.is_file():
    env.read_env(str(_dotenv), overwrite=False)

_errors: list[ConfigError] = []


def _flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return parse_bool(raw)
    except ValueError:
        _errors.append(ConfigError(name, f"expected true or false, got {raw!r}"))
        return default


DEBUG = _flag("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if DEBUG:
        SECRET_KEY = "insecure-debug-only-key"  # noqa: S105 - DEBUG only
    else:
        _errors.append(ConfigError("SECRET_KEY", "must be set to a long random string (DEBUG is off)"))
        SECRET_KEY = "unset-secret-key-startup-will-refuse"  # noqa: S105 - the check refuses to start
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

_loaded = load_config(os.environ)
_errors.extend(_loaded.errors)
GORGE_WEBHOOK = _loaded.delivery

INSTALLED_APPS = [
    "django.contrib.admin.apps.SimpleAdminConfig",  # admin.autodiscover() in urls.py: workers load no admin
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "webhook_delivery",
    "webhook_delivery.records",
    "webhook_delivery.alerts",
    "webhook_delivery.phorge_auth",
    "axes",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "gorge_site.security_headers.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "webhook_delivery.phorge_auth.middleware.PhorgeRecheckMiddleware",  # re-asks Phorge: tokens never expire
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "gorge_site.urls"
WSGI_APPLICATION = "gorge_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "gorge_site" / "templates"],  # admin/base_site.html: the icon on every page
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "webhook_delivery.phorge_auth.context.login_options",
            ],
        },
    },
]

FORMAT_MODULE_PATH = ["gorge_site.formats"]  # times with seconds and zone in the admin too

SQLITE_INIT = "PRAGMA journal_mode=WAL"  # Django's own tables on SQLite (a URL's ?init_command= replaces it)


def _database(url: str, variable: str) -> dict[str, object]:
    try:
        config: dict[str, object] = env.db_url_config(url)
    except Exception:  # noqa: BLE001 - any parse failure is a configuration error, reported by name
        _errors.append(ConfigError(variable, "expected a database URL such as mysql://user:pass@host:3306/name"))
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
    if config.get("ENGINE") == "django.db.backends.mysql":
        options = dict(config.get("OPTIONS") or {})  # type: ignore[call-overload]
        options.setdefault("charset", "utf8mb4")
        options.setdefault("connect_timeout", 5)
        options.setdefault("read_timeout", 60)
        options.setdefault("write_timeout", 60)
        options.setdefault("isolation_level", "read committed")
        # mysqlclient lets every connection run several statements sent as one unless told not to: no
        # connection of Django's needs that, so none takes a second statement after a `;`. Only the
        # worker's session pool turns it on, on the connections it keeps for itself (worker/sessions.py).
        options["multi_statements"] = False
        config["OPTIONS"] = options
    elif config.get("ENGINE") == "django.db.backends.sqlite3":
        options = dict(config.get("OPTIONS") or {})  # type: ignore[call-overload]
        # Write-ahead log: a commit is one synced append instead of a rollback journal written, synced and
        # deleted (the attempt log's writer took half the CPU, the deliveries a tenth more), and the pages'
        # reads no longer hold its writes back. Durability is as before (synchronous stays FULL).
        options.setdefault("init_command", SQLITE_INIT)
        config["OPTIONS"] = options
    return config


# The embedded SQLite default: under systemd's StateDirectory= when a unit gives one (the code's own directory
# is read-only there, ProtectSystem=strict), else under the project's var/ (the demo, the image's volume).
_state_directory = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
_default_site = Path(_state_directory) if _state_directory else BASE_DIR / "var"
DATABASES = {
    "default": _database(
        os.environ.get("DATABASE_URL", "") or f"sqlite:///{_default_site / 'gorge_site.sqlite3'}",
        "DATABASE_URL",
    ),
    PHORGE_ALIAS: _database(_loaded.phorge_database_url, "GORGE_WEBHOOK_DATABASE_URL"),
}
DATABASES[PHORGE_ALIAS]["TEST"] = {"NAME": DATABASES[PHORGE_ALIAS].get("NAME")}
# Reuse connections (per thread in the worker), but recycle them every minute so none goes stale.
DATABASES[PHORGE_ALIAS]["CONN_MAX_AGE"] = 60
# The other masters of a partitioned Phorge (GORGE_WEBHOOK_CLUSTER_DATABASES, else cluster.databases in the
# local file, read here once: a changed map takes effect at restart): read-only lookups and locks.
for _ref_key, _url in _loaded.master_urls.items():
    DATABASES[master_alias(_ref_key)] = _database(_url, _loaded.master_variable) | {"CONN_MAX_AGE": 60}
if _loaded.replica_url:  # a replica of herald's master: reads of the pages, admin, API and web metrics
    DATABASES[REPLICA_ALIAS] = _database(_loaded.replica_url, "GORGE_WEBHOOK_REPLICA_DATABASE_URL") | {
        "CONN_MAX_AGE": 60
    }
    # Short bounds: a replica that accepts and never answers must cost a page little (web/replica.py then
    # reads the master for a while), and the pages' reads are light.
    _replica_options = dict(DATABASES[REPLICA_ALIAS].get("OPTIONS") or {})  # type: ignore[call-overload]
    if DATABASES[REPLICA_ALIAS].get("ENGINE") == "django.db.backends.mysql":
        _replica_options.update(connect_timeout=2, read_timeout=10, write_timeout=10)
        DATABASES[REPLICA_ALIAS]["OPTIONS"] = _replica_options
DATABASE_ROUTERS = ["gorge_site.routers.PhorgeRouter"]
MIGRATION_MODULES = {"webhook_delivery": None}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}
WHITENOISE_USE_FINDERS = DEBUG
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "admin:login"
LOGIN_REDIRECT_URL = "webhook_delivery:dashboard"  # where a login lands when its next= is refused

# Behind a TLS-terminating proxy (the documented deployment), these make check --deploy pass.
_behind_tls = _flag("GORGE_BEHIND_TLS_PROXY", not DEBUG)
SESSION_COOKIE_SECURE = _behind_tls
CSRF_COOKIE_SECURE = _behind_tls
SECURE_SSL_REDIRECT = _behind_tls and _flag("GORGE_SSL_REDIRECT", True)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if _behind_tls else None
SECURE_HSTS_SECONDS = 31_536_000 if _behind_tls else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = _behind_tls
SECURE_HSTS_PRELOAD = False
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

# Login throttling (django-axes): a username tried from one client address is locked for 15 minutes after
# 5 wrong passwords. Behind proxies, the client is the address the nearest GORGE_TRUSTED_PROXIES proxies
# saw (X-Forwarded-For from the right); without proxies, the socket's peer.
# LocalPasswordBackend is Django's ModelBackend that, with GORGE_PHORGE_OAUTH_ONLY on, refuses passwords
# except for the break-glass superusers (webhook_delivery/phorge_auth/backends.py).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "webhook_delivery.phorge_auth.backends.LocalPasswordBackend",
]
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_HTTP_RESPONSE_CODE = 429
AXES_CLIENT_IP_CALLABLE = "gorge_site.client_ip.client_ip"
_proxies_raw = os.environ.get("GORGE_TRUSTED_PROXIES", "").strip()
GORGE_TRUSTED_PROXIES = 1 if _behind_tls else 0
if _proxies_raw:
    if _proxies_raw.isascii() and _proxies_raw.isdigit() and int(_proxies_raw) <= 10:
        GORGE_TRUSTED_PROXIES = int(_proxies_raw)
    else:
        _errors.append(
            ConfigError("GORGE_TRUSTED_PROXIES", f"expected a whole number from 0 to 10, got {_proxies_raw!r}")
        )

# HSTS preload would commit the whole domain to browsers' preload lists: the site owner's call, not ours.
SILENCED_SYSTEM_CHECKS = ["security.W021"]
if _behind_tls and not SECURE_SSL_REDIRECT:  # GORGE_SSL_REDIRECT=false: declared, the proxy redirects (handover.md)
    SILENCED_SYSTEM_CHECKS.append("security.W008")

LOG_LEVEL = (os.environ.get("LOG_LEVEL", "") or "INFO").strip().upper()
if LOG_LEVEL not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
    _errors.append(ConfigError("LOG_LEVEL", f"expected DEBUG, INFO, WARNING, ERROR or CRITICAL, got {LOG_LEVEL!r}"))
    LOG_LEVEL = "INFO"
LOG_FORMAT = (os.environ.get("LOG_FORMAT", "") or "text").strip().lower()
if LOG_FORMAT not in {"text", "json"}:
    _errors.append(ConfigError("LOG_FORMAT", f"expected text or json, got {LOG_FORMAT!r}"))
    LOG_FORMAT = "text"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {"()": "webhook_delivery.logformat.TextFormatter"},
        "json": {"()": "webhook_delivery.logformat.JsonFormatter"},
    },
    "filters": {"no_403_traceback": {"()": "webhook_delivery.logformat.RefusalsWithoutTraceback"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["no_403_traceback"]},
        "null": {"class": "logging.NullHandler"},
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Apprise's own lines can hold a URL with its token (its DEBUG lines name every URL it posts to):
        # never shown; the watcher says what failed, by channel and kind (alerts/apprise_channels.py).
        "apprise": {"handlers": ["null"], "level": "CRITICAL", "propagate": False},
        "django.db.backends": {"level": "INFO"},
        # At DEBUG, Django's template engine logs whole contexts, the request's query string included (the
        # OAuth callback's code): never below INFO.
        "django.template": {"level": "INFO"},
        "urllib3": {"level": "WARNING"},
    },
}

# Alerts (webhook_delivery.alerts: manage.py watch_webhooks, or inside deliver_webhooks). E-mail goes
# through Django's e-mail backend, configured by EMAIL_URL (smtp://user:pass@host:25, smtp+tls://...).
GORGE_ALERT, _alert_errors = load_alert_config(os.environ)
_errors.extend(_alert_errors)
globals().update(dict(GORGE_ALERT.email_settings))  # EMAIL_BACKEND, EMAIL_HOST, ... parsed from EMAIL_URL
EMAIL_TIMEOUT = GORGE_ALERT.channel_timeout_sec
DEFAULT_FROM_EMAIL = GORGE_ALERT.email_from
SERVER_EMAIL = GORGE_ALERT.email_from


def _http_url(name: str, raw: str) -> str:
    raw = raw.strip().rstrip("/")
    if raw and not (raw.startswith(("http://", "https://")) and "?" not in raw and "#" not in raw):
        _errors.append(ConfigError(name, f"expected an http(s) address with no query or fragment, got {raw!r}"))
        return ""
    return raw


# Sign in with Phorge (webhook_delivery.phorge_auth): Phorge's OAuth server signs in Phorge's administrators.
_oauth_client_id = os.environ.get("GORGE_PHORGE_OAUTH_CLIENT_ID", "").strip()
_oauth_client_secret = os.environ.get("GORGE_PHORGE_OAUTH_CLIENT_SECRET", "").strip()
if bool(_oauth_client_id) != bool(_oauth_client_secret):
    _errors.append(
        ConfigError(
            "GORGE_PHORGE_OAUTH_CLIENT_SECRET" if _oauth_client_id else "GORGE_PHORGE_OAUTH_CLIENT_ID",
            "Sign in with Phorge needs both GORGE_PHORGE_OAUTH_CLIENT_ID and GORGE_PHORGE_OAUTH_CLIENT_SECRET",
        )
    )
if _oauth_client_id and not _oauth_client_id.startswith("PHID-OASC-"):
    _errors.append(
        ConfigError("GORGE_PHORGE_OAUTH_CLIENT_ID", "expected the OAuth client's PHID (PHID-OASC-...) from Phorge")
    )


def _seconds(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if raw.isascii() and raw.isdigit() and 1 <= int(raw) <= 86400:
        return int(raw)
    _errors.append(ConfigError(name, f"expected whole seconds from 1 to 86400, got {raw!r}"))
    return default


_oauth_recheck = _seconds("GORGE_PHORGE_OAUTH_RECHECK_SEC", 300)
_oauth_action_recheck = _seconds("GORGE_PHORGE_OAUTH_ACTION_RECHECK_SEC", 30)
_oauth_only = _flag("GORGE_PHORGE_OAUTH_ONLY", False)
if _oauth_only and not (_oauth_client_id and _oauth_client_secret):
    _errors.append(
        ConfigError("GORGE_PHORGE_OAUTH_ONLY", "needs Sign in with Phorge configured (client id and secret)")
    )
_oauth_allow_http = _flag("GORGE_PHORGE_ALLOW_HTTP", False)
_oauth_url = _http_url("GORGE_PHORGE_OAUTH_URL", os.environ.get("GORGE_PHORGE_OAUTH_URL", ""))
if _oauth_url and (_oauth_url_problem := address_problem(_oauth_url, allow_http=_oauth_allow_http)) is not None:
    _errors.append(ConfigError("GORGE_PHORGE_OAUTH_URL", f"refused: {_oauth_url_problem}"))
    _oauth_url = ""
GORGE_PHORGE_OAUTH = PhorgeOAuthConfig(
    client_id=_oauth_client_id,
    client_secret=_oauth_client_secret,
    url=_oauth_url,
    allow_http=_oauth_allow_http,
    site_url=_http_url(
        "GORGE_PHORGE_OAUTH_SITE_URL",
        os.environ.get("GORGE_PHORGE_OAUTH_SITE_URL", "") or os.environ.get("GORGE_ALERT_SITE_URL", ""),
    ),
    recheck_sec=_oauth_recheck,
    action_recheck_sec=_oauth_action_recheck,
    only=_oauth_only and bool(_oauth_client_id and _oauth_client_secret),
    break_glass_users=tuple(
        name.strip() for name in os.environ.get("GORGE_BREAK_GLASS_USERS", "").split(",") if name.strip()
    ),
)

GORGE_CONFIG_ERRORS: tuple[ConfigError, ...] = tuple(_errors)
