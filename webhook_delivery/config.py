"""Parse and validate the GORGE_WEBHOOK_* environment. Pure: no Django import.

Every problem becomes one ConfigError naming the variable and the value expected; settings.py collects
them and the system check in checks.py reports them, so a bad value stops startup instead of falling back.
A value in one of Phorge's own formats (the partition map, in GORGE_WEBHOOK_CLUSTER_DATABASES or in Phorge's
local file; the delivery-id list) is read on Phorge's side (phorge/formats.py, `PhorgeFormats`) and handed
back here already read: this module imports nothing of phorge/.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from . import jsonread
from .egress import Proxy, load_proxy

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_BLACKLIST_FILE = Path(__file__).with_name("outbound-blacklist-default.json")
LEASE_MARGIN_SEC = 5
NAMESPACE_RE = re.compile(r"^[A-Za-z0-9_]{1,32}$")  # Phorge's storage.default-namespace, safe in SQL names
PHORGE_ALIAS = "phorge"  # Django's database alias of Phorge's herald database
CLUSTER_VARIABLE = "GORGE_WEBHOOK_CLUSTER_DATABASES"
CLUSTER_KEY = "cluster.databases"
FROM_CLUSTER_VARIABLE = f"the variable {CLUSTER_VARIABLE}"  # ClusterDatabases.origin of the variable's map
LOCAL_CONFIG_VARIABLE = "GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG"
LOCAL_FILE_MAX_BYTES = 4 * 1024 * 1024  # far above any real local.json; a bigger file is not Phorge's
REPLICA_ALIAS = f"{PHORGE_ALIAS}@replica"  # a replica of herald's master, for the web side's reads
# Minimums that keep a value meaningful: a poll faster than 10 ms only loads the database.
POLL_INTERVAL_MS_RANGE = (10, 3_600_000)
MAX_CONCURRENT_RANGE = (1, 1024)


def master_alias(ref_key: str) -> str:
    """Django's database alias of another master of a partitioned Phorge (`phorge@host:port`)."""
    return f"{PHORGE_ALIAS}@{ref_key}"


def is_phorge_alias(alias: str) -> bool:
    """Herald's alias, another master's, or the replica's: Phorge's databases, never migrated."""
    return alias == PHORGE_ALIAS or alias.startswith(f"{PHORGE_ALIAS}@")


@dataclass(frozen=True)
class ConfigError:
    variable: str
    message: str

    def __str__(self) -> str:
        return f"{self.variable}: {self.message}"


class DeliveryIds(Protocol):
    """Which hooks' requests carry the delivery id (phorge/delivery_id.py: DeliveryIdHooks)."""

    def applies_to(self, hook_phid: str) -> bool: ...


class ClusterMap(Protocol):
    """Phorge's `cluster.databases` as Phorge's side read it (phorge/cluster.py: ClusterDatabases): where it
    was read, and the master (by its key) of an application that is not on herald's."""

    @property
    def origin(self) -> str: ...

    def elsewhere(self, application: str) -> str | None: ...


@dataclass(frozen=True)
class Trust:
    """Where the CA bundle PHP uses is looked for (phorge/cabundle.py finds it): the override, arcanist's
    directory (and which variable gave it), PHP's curl.cainfo."""

    override: str = ""  # GORGE_WEBHOOK_CA_BUNDLE: a path, `system`, or empty to follow PHP
    arcanist: str = ""  # arcanist's directory; empty: not known
    arcanist_from: str = ""  # the variable it came from, or why it is not known
    php_cainfo: str = ""  # GORGE_WEBHOOK_PHP_CURL_CAINFO


class PhorgeFormats(Protocol):
    """Reads the values written in Phorge's formats for load_config (phorge/formats.py: PHORGE_FORMATS)."""

    def trust(self, raw: Callable[[str], str], local_config: str) -> tuple[Trust, list[ConfigError]]:
        """Where the CA bundle is looked for (arcanist as Phorge's install lays it out), from the variables
        `raw` reads, and the problems (the bundle in force must be a file libcurl can verify against)."""
        ...

    def delivery_id_hooks(self, raw: str) -> DeliveryIds:
        """GORGE_WEBHOOK_DELIVERY_ID_HOOKS; raises ValueError saying what is wrong (not naming the variable)."""
        ...

    def cluster(
        self, raw: str, local_config: str, herald_url: str
    ) -> tuple[ClusterMap | None, dict[str, str], list[ConfigError]]:
        """The partition map at start (`raw`: GORGE_WEBHOOK_CLUSTER_DATABASES, else the local file's), the
        database URL of each master other than herald's by its key, and the problems."""
        ...


@dataclass(frozen=True)
class DeliveryConfig:
    namespace: str = "phabricator"
    poll_interval_ms: int = 250
    max_concurrent: int = 128
    db_pool_size: int = 4
    delivery_timeout: float = 15.0
    claim_lease_sec: int = 60
    requested_lease_sec: int = 60
    retry_backoff_sec: int = 300
    error_backoff_sec: int = 300
    error_threshold: int = 10
    outbound_blacklist: tuple[IPNetwork, ...] = ()  # GORGE_WEBHOOK_OUTBOUND_BLACKLIST, or Phorge's default
    outbound_blacklist_from_env: bool = False
    silent: bool | None = None
    phorge_local_config: str = ""  # Phorge's conf/local/local.json: its locked options, and cluster.databases
    phorge_base_uri: str | None = None
    service_token: str = field(default="", repr=False)
    attempt_log: bool = True
    # GORGE_WEBHOOK_HONOR_RETRY_AFTER: a 429 or 503 answer's Retry-After holds the hook's next call back (never
    # sooner than Phorge's own backoff), in this worker's memory only. Phorge has no such rule: off by default.
    honor_retry_after: bool = False
    attempt_log_days: int = 7
    attempt_log_per_hook: int = 10_000
    attempt_log_body_bytes: int = 0
    delivery_id_hooks: DeliveryIds | None = None  # GORGE_WEBHOOK_DELIVERY_ID_HOOKS; None: off (the default)
    # How to reach every master: GORGE_WEBHOOK_CLUSTER_DATABASES, else cluster.databases in the local file.
    cluster: ClusterMap | None = None
    replica_max_lag_sec: int = 30  # GORGE_WEBHOOK_REPLICA_MAX_LAG_SEC: beyond it, pages read the master
    trust: Trust = field(default_factory=Trust)  # where the CA bundle PHP uses is looked for
    proxy: Proxy | None = None  # GORGE_WEBHOOK_PROXY and GORGE_WEBHOOK_NO_PROXY
    counts_refresh_sec: int = 5  # GORGE_WEBHOOK_COUNTS_REFRESH_SEC: the tally's refreshes at most this often

    @property
    def lease_was_clamped(self) -> bool:
        return self.claim_lease_sec != self.requested_lease_sec


@dataclass(frozen=True)
class LoadedConfig:
    delivery: DeliveryConfig
    phorge_database_url: str = field(repr=False)
    errors: tuple[ConfigError, ...]
    # Database URLs of the masters other than herald's, by ref key ("host:port"): Django aliases master_alias().
    master_urls: dict[str, str] = field(default_factory=dict, repr=False)
    master_variable: str = CLUSTER_VARIABLE  # the variable that gave the map, for errors in those URLs
    replica_url: str = field(default="", repr=False)  # GORGE_WEBHOOK_REPLICA_DATABASE_URL


def read_local_file(path: str) -> tuple[dict[str, Any] | None, str]:
    """Phorge's `conf/local/local.json`: a JSON object of option to value as `bin/config set` writes it
    (`[]` once every key was deleted); else None and why it cannot be used."""
    try:
        # Non-blocking: a FIFO (or a device) put at the path must not hang start-up, check or a worker.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(descriptor, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None, "not a regular file"
            data = handle.read(LOCAL_FILE_MAX_BYTES + 1)
    except OSError as exc:
        return None, exc.strerror or type(exc).__name__
    if len(data) > LOCAL_FILE_MAX_BYTES:
        return None, f"larger than {LOCAL_FILE_MAX_BYTES} bytes"
    values = jsonread.decode(data, max_bytes=LOCAL_FILE_MAX_BYTES)
    if values is None:
        return None, "not valid JSON (or nested deeper than PHP reads)"
    if values == []:
        values = {}
    if not isinstance(values, dict):
        return None, "not a JSON object of option to value"
    return values, ""


def default_blacklist() -> tuple[IPNetwork, ...]:
    entries = json.loads(DEFAULT_BLACKLIST_FILE.read_text())
    return tuple(ipaddress.ip_network(entry) for entry in entries)


def parse_blacklist(raw: str) -> tuple[IPNetwork, ...]:
    """A JSON list or a comma-separated list of CIDRs; an empty value means "block nothing"."""
    text = raw.strip()
    if not text:
        return ()
    if text.startswith("["):
        items = jsonread.decode(text)
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ValueError("expected a JSON list of CIDR strings")
    else:
        items = [part for part in (p.strip() for p in text.split(",")) if part]
    networks = []
    for item in items:
        try:
            networks.append(ipaddress.ip_network(item.strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"{item.strip()!r} is not a CIDR block such as 10.0.0.0/8") from exc
    return tuple(networks)


_WHOLE = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")


def parse_whole(raw: str) -> int | None:
    """A whole number written in ASCII digits (Python's int() also reads `1_0` and other scripts' digits,
    which nobody means in a setting); None when it is not one."""
    text = raw.strip()
    return int(text, 10) if _WHOLE.fullmatch(text) else None


def parse_decimal(raw: str) -> float | None:
    """A decimal number in ASCII digits, such as 15 or 2.5 (no exponent, no inf or nan); None otherwise."""
    text = raw.strip()
    return float(text) if _DECIMAL.fullmatch(text) else None


def range_text(minimum: float, maximum: float) -> str:
    def shown(number: float) -> str:
        return str(int(number)) if float(number).is_integer() else str(number)

    return f"from {shown(minimum)} to {shown(maximum)}"


def parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ValueError("expected true or false")


class _Reader:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.errors: list[ConfigError] = []

    def raw(self, name: str) -> str | None:
        value = self.env.get(name)
        return None if value is None else value.strip()

    def boolean(self, name: str, default: bool | None) -> bool | None:
        raw = self.raw(name)
        if not raw:
            return default
        try:
            return parse_bool(raw)
        except ValueError as exc:
            self.errors.append(ConfigError(name, f"{exc}, got {raw!r}"))
            return default

    def integer(self, name: str, default: int, *, minimum: int, maximum: int) -> int:
        raw = self.raw(name)
        if raw is None or raw == "":
            return default
        value = parse_whole(raw)
        if value is None or not minimum <= value <= maximum:
            self.errors.append(
                ConfigError(name, f"expected a whole number {range_text(minimum, maximum)}, got {raw!r}")
            )
            return default
        return value

    def seconds(self, name: str, default: float, *, minimum: float, maximum: float) -> float:
        raw = self.raw(name)
        if raw is None or raw == "":
            return default
        value = parse_decimal(raw)
        if value is None or not minimum <= value <= maximum:
            self.errors.append(
                ConfigError(name, f"expected a number of seconds {range_text(minimum, maximum)}, got {raw!r}")
            )
            return default
        return value


def load_config(env: Mapping[str, str], phorge: PhorgeFormats) -> LoadedConfig:
    """The settings of `env`, the values in Phorge's formats read by `phorge` (phorge/formats.py)."""
    r = _Reader(env)

    namespace = r.raw("GORGE_WEBHOOK_NAMESPACE") or ""
    url = r.raw("GORGE_WEBHOOK_DATABASE_URL") or ""
    if url:
        database_name = url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        if not namespace:
            if database_name.endswith("_herald") and len(database_name) > len("_herald"):
                namespace = database_name[: -len("_herald")]
            elif url.startswith("sqlite"):
                namespace = "phabricator"
            else:
                r.errors.append(
                    ConfigError(
                        "GORGE_WEBHOOK_DATABASE_URL",
                        "the database name must be <namespace>_herald (or set GORGE_WEBHOOK_NAMESPACE)",
                    )
                )
                namespace = "phabricator"
    else:
        namespace = namespace or "phabricator"
    if not NAMESPACE_RE.match(namespace):
        r.errors.append(ConfigError("GORGE_WEBHOOK_NAMESPACE", "expected letters, digits and underscores (at most 32)"))
        namespace = "phabricator"
    if not url:
        host = r.raw("GORGE_WEBHOOK_MYSQL_HOST") or "127.0.0.1"
        port = r.integer("GORGE_WEBHOOK_MYSQL_PORT", 3306, minimum=1, maximum=65535)
        user = r.raw("GORGE_WEBHOOK_MYSQL_USER") or "phorge"
        password = r.env.get("GORGE_WEBHOOK_MYSQL_PASS", "")
        url = f"mysql://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}/{namespace}_herald"

    poll = r.integer(
        "GORGE_WEBHOOK_POLL_INTERVAL_MS", 250, minimum=POLL_INTERVAL_MS_RANGE[0], maximum=POLL_INTERVAL_MS_RANGE[1]
    )
    concurrent = r.integer(
        "GORGE_WEBHOOK_MAX_CONCURRENT", 128, minimum=MAX_CONCURRENT_RANGE[0], maximum=MAX_CONCURRENT_RANGE[1]
    )
    # A call needs a second at least (1e-300 s fails every request for good, with no call made), and an
    # immediate retry would call a failing receiver in a loop.
    db_pool = r.integer("GORGE_WEBHOOK_DB_POOL_SIZE", 4, minimum=1, maximum=64)
    timeout = r.seconds("GORGE_WEBHOOK_DELIVERY_TIMEOUT", 15.0, minimum=1, maximum=3600)
    lease = r.integer("GORGE_WEBHOOK_CLAIM_LEASE_SEC", 60, minimum=1, maximum=86_400)
    retry = r.integer("GORGE_WEBHOOK_RETRY_BACKOFF_SEC", 300, minimum=1, maximum=30 * 86_400)
    error_backoff = r.integer("GORGE_WEBHOOK_ERROR_BACKOFF_SEC", 300, minimum=1, maximum=30 * 86_400)
    threshold = r.integer("GORGE_WEBHOOK_ERROR_THRESHOLD", 10, minimum=1, maximum=1_000_000)

    raw_blacklist = r.env.get("GORGE_WEBHOOK_OUTBOUND_BLACKLIST")
    blacklist = default_blacklist()
    if raw_blacklist is not None and raw_blacklist and not raw_blacklist.strip():
        r.errors.append(
            ConfigError(
                "GORGE_WEBHOOK_OUTBOUND_BLACKLIST",
                "only blanks: give CIDR blocks, or an empty value to allow every address",
            )
        )
    elif raw_blacklist is not None:
        try:
            blacklist = parse_blacklist(raw_blacklist)
        except ValueError as exc:
            r.errors.append(ConfigError("GORGE_WEBHOOK_OUTBOUND_BLACKLIST", str(exc)))

    silent = r.boolean("GORGE_WEBHOOK_SILENT", None)
    local_config = r.raw(LOCAL_CONFIG_VARIABLE) or ""
    base_uri = r.raw("GORGE_WEBHOOK_PHORGE_BASE_URI") or None
    if base_uri is not None and not re.match(r"^https?://[^\s/?#]+", base_uri):
        r.errors.append(
            ConfigError(
                "GORGE_WEBHOOK_PHORGE_BASE_URI", "expected Phorge's address, such as https://phorge.example.com/"
            )
        )
        base_uri = None
    attempt_log = bool(r.boolean("GORGE_WEBHOOK_ATTEMPT_LOG", True))
    honor_retry_after = bool(r.boolean("GORGE_WEBHOOK_HONOR_RETRY_AFTER", False))
    log_days = r.integer("GORGE_WEBHOOK_ATTEMPT_LOG_DAYS", 7, minimum=1, maximum=366)
    log_per_hook = r.integer("GORGE_WEBHOOK_ATTEMPT_LOG_PER_HOOK", 10_000, minimum=10, maximum=10_000_000)
    log_body = r.integer("GORGE_WEBHOOK_ATTEMPT_LOG_BODY_BYTES", 0, minimum=0, maximum=65_536)

    try:
        delivery_id_hooks = phorge.delivery_id_hooks(r.raw("GORGE_WEBHOOK_DELIVERY_ID_HOOKS") or "")
    except ValueError as exc:
        r.errors.append(ConfigError("GORGE_WEBHOOK_DELIVERY_ID_HOOKS", str(exc)))
        delivery_id_hooks = phorge.delivery_id_hooks("")  # off

    raw_cluster = r.raw(CLUSTER_VARIABLE) or ""
    cluster, master_urls, cluster_errors = phorge.cluster(raw_cluster, local_config, url)
    r.errors.extend(cluster_errors)

    replica_url = r.raw("GORGE_WEBHOOK_REPLICA_DATABASE_URL") or ""
    if replica_url and not (replica_url.startswith("mysql") and url.startswith("mysql")):
        r.errors.append(
            ConfigError("GORGE_WEBHOOK_REPLICA_DATABASE_URL", "expected a mysql:// URL of a replica of herald's master")
        )
        replica_url = ""
    replica_lag = r.integer("GORGE_WEBHOOK_REPLICA_MAX_LAG_SEC", 30, minimum=0, maximum=86_400)
    counts_refresh = r.integer("GORGE_WEBHOOK_COUNTS_REFRESH_SEC", 5, minimum=0, maximum=3600)

    trust, trust_errors = phorge.trust(lambda name: r.raw(name) or "", local_config)
    proxy, proxy_problems = load_proxy(lambda name: r.raw(name) or "")
    r.errors.extend([*trust_errors, *(ConfigError(variable, message) for variable, message in proxy_problems)])

    minimum_lease = math.ceil(timeout) + LEASE_MARGIN_SEC
    delivery = DeliveryConfig(
        namespace=namespace,
        poll_interval_ms=poll,
        max_concurrent=concurrent,
        db_pool_size=db_pool,
        delivery_timeout=timeout,
        claim_lease_sec=max(lease, minimum_lease),
        requested_lease_sec=lease,
        retry_backoff_sec=retry,
        error_backoff_sec=error_backoff,
        error_threshold=threshold,
        outbound_blacklist=blacklist,
        outbound_blacklist_from_env=raw_blacklist is not None,
        silent=silent,
        phorge_local_config=local_config,
        phorge_base_uri=None if base_uri is None else base_uri.rstrip("/"),
        service_token=r.env.get("GORGE_SERVICE_TOKEN", "").strip(),
        attempt_log=attempt_log,
        honor_retry_after=honor_retry_after,
        attempt_log_days=log_days,
        attempt_log_per_hook=log_per_hook,
        attempt_log_body_bytes=log_body,
        delivery_id_hooks=delivery_id_hooks,
        cluster=cluster,
        replica_max_lag_sec=replica_lag,
        trust=trust,
        proxy=proxy,
        counts_refresh_sec=counts_refresh,
    )
    return LoadedConfig(
        delivery=delivery,
        phorge_database_url=url,
        errors=tuple(r.errors),
        master_urls=master_urls,
        master_variable=CLUSTER_VARIABLE if raw_cluster else LOCAL_CONFIG_VARIABLE,
        replica_url=replica_url,
    )
