"""Phorge's own switches, read where Phorge keeps them: `phabricator.silent`, `security.outbound-blacklist`,
`phabricator.base-uri`, `phd.garbage-collection` and the handover's `gorge.webhook.uri` (delegation.py).

All are locked options in Phorge (the last as contrib/phorge declares it): `bin/config set` writes them to
`conf/local/local.json` (GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG names that file here) and refuses to put them in
the database, though Phorge still honours values an older install left in `<ns>_config.config_entry`. Each
is resolved in one order: the service's own variable, the local file, the database, Phorge's default.
Silent mode is the one that must never be guessed: when neither a variable, nor the file, nor a value in
the database says, it is unknown, and the worker delivers nothing until someone declares it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from .. import jsonread
from ..config import (
    CLUSTER_KEY,
    FROM_CLUSTER_VARIABLE,
    DeliveryConfig,
    IPNetwork,
    parse_blacklist,
)
from ..egress import PROXY_VARIABLE, Proxy
from .cabundle import CaBundle, CaBundleFile
from .cluster import ClusterError, parse_cluster_databases
from .columns import in_filter
from .databases import (
    CACHE_SEC,
    ConnectionSource,
    Masters,
    MasterUnavailable,
    NoAccessError,
    herald_connection,
    qualified,
    select,
)
from .delegation import DELEGATION_KEYS, SERVICE_URI, Delegation, decide, first_switch
from .formats import configured_map, local_cluster_value
from .herald import text
from .netguard import local_gaps
from .watched import LocalConfigFile, LocalRead

logger = logging.getLogger(__name__)

SILENT = "phabricator.silent"
BLACKLIST = "security.outbound-blacklist"
BASE_URI = "phabricator.base-uri"
COLLECTION = "phd.garbage-collection"
SETTING_KEYS = (SILENT, BLACKLIST, BASE_URI, COLLECTION, *DELEGATION_KEYS)
REQUEST_RETENTION_SEC = 7 * 86400  # Phorge's default for herald.webhooks in phd.garbage-collection

Source = Literal["variable", "local file", "database", "Phorge's default", "arcanist", "unknown"]
CA_BUNDLE = "CA bundle"  # the summary's rows of how deliveries leave this host
PROXY = "outbound proxy"
T = TypeVar("T")


def php_truthy(value: Any) -> bool:
    """PHP's truthiness of a json_decode()d value ("0", "", 0, [], {} and null are false)."""
    if isinstance(value, str):
        return value not in ("", "0")
    return bool(value)


def request_retention(values: dict[str, Any] | None) -> int | None:
    """Seconds Phorge keeps webhook requests (from dateCreated) given a `phd.garbage-collection` holder;
    None: forever (a null retention). As Phorge's collector: a missing entry is the 7-day default."""
    collection = (values or {}).get(COLLECTION)
    if not isinstance(collection, dict) or "herald.webhooks" not in collection:
        return REQUEST_RETENTION_SEC
    retention = collection["herald.webhooks"]
    if retention is None:
        return None
    return int(retention) if isinstance(retention, int) and retention > 0 else REQUEST_RETENTION_SEC


def base_uri_value(value: Any) -> str | None:
    """A usable `phabricator.base-uri` (http or https), without its trailing slash."""
    if not isinstance(value, str) or not value.startswith(("https://", "http://")):
        return None
    return value.rstrip("/")


@dataclass(frozen=True)
class Resolved(Generic[T]):
    """One setting in force and where it came from; `where` names the variable, file or table."""

    value: T
    source: Source
    where: str

    @property
    def origin(self) -> str:
        """In a phrase: `local file /path`, `Phorge's default`; for an unknown value, why."""
        if self.source in ("unknown", "Phorge's default") or not self.where:
            return self.where if self.source == "unknown" else self.source
        return f"{self.source} {self.where}"

    def describe(self) -> str:
        """Where it came from; for a default, only that (PhorgeConfig.looked says once where it was looked for)."""
        if self.source == "Phorge's default" or not self.where:
            return self.source
        return f"{self.source} ({self.where})"


@dataclass(frozen=True)
class PhorgeConfig:
    silent: Resolved[bool | None]
    blacklist: Resolved[tuple[IPNetwork, ...]]
    base_uri: Resolved[str | None]
    retention: Resolved[int | None]
    looked: str = ""  # where a setting left at Phorge's default was looked for, and why not found
    switch: Resolved[bool | None] = Resolved(None, "unknown", "")  # the handover's switch: on = delegated
    switch_option: str = SERVICE_URI  # or the soulteary/phorge fork's gorge.webhook.owner, where it is set
    switch_text: str = "unknown"  # its value for people: set, not set, unknown (never the URI itself)
    ca_bundle: Resolved[CaBundle | None] = Resolved(None, "unknown", "not looked for")  # the CA bundle PHP uses
    proxy: Resolved[Proxy | None] = Resolved(None, "variable", f"{PROXY_VARIABLE} is not set")

    @property
    def defaults_looked(self) -> str:
        """Where the settings left at Phorge's default were looked for; empty when none is."""
        at_default = any(
            where.source == "Phorge's default"
            for where in (self.silent, self.blacklist, self.base_uri, self.retention, self.switch)
        )
        return self.looked if at_default else ""

    @property
    def delegation(self) -> Delegation:
        """Whether Phorge's PHP hands each new request to this service (contrib/phorge's predicate)."""
        switch, silent = self.switch, self.silent
        return decide(self.switch_option, switch.value, switch.origin, silent.value, silent.origin, self.switch_text)

    @property
    def silent_unknown(self) -> bool:
        return self.silent.value is None

    def paused_reason(self) -> str | None:
        """Why nothing may be delivered now, with what to set; None when delivery may go on."""
        if not self.silent_unknown:
            return None
        return (
            f"phabricator.silent is unknown ({self.silent.where}): nothing is delivered until it is declared; "
            "set GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG to Phorge's conf/local/local.json, or GORGE_WEBHOOK_SILENT "
            "to true or false"
        )

    def summary(self) -> list[tuple[str, str, Resolved[Any]]]:
        """(option, value as text, resolution) for each setting: the start-up lines and the pages."""
        silent = "unknown" if self.silent.value is None else "on" if self.silent.value else "off"
        ranges = len(self.blacklist.value)
        blacklist = f"{ranges} range{'s' if ranges != 1 else ''}" if ranges else "empty (every address allowed)"
        if gaps := local_gaps(self.blacklist.value):
            blacklist += f", leaving open {', '.join(gaps)}"
        retention = self.retention.value
        kept = (
            "forever"
            if retention is None
            else f"{retention // 86400} days"
            if retention % 86400 == 0
            else f"{retention} s"
        )
        return [
            (SILENT, silent, self.silent),
            (BLACKLIST, blacklist, self.blacklist),
            (BASE_URI, self.base_uri.value or "not set", self.base_uri),
            (f"{COLLECTION} herald.webhooks", kept, self.retention),
            (CA_BUNDLE, self.ca_bundle.value.shown if self.ca_bundle.value else "unknown", self.ca_bundle),
            (PROXY, self.proxy.value.shown if self.proxy.value else "none", self.proxy),
            (self.switch_option, self.switch_text, self.switch),
        ]


def resolve(
    config: DeliveryConfig,
    local: LocalRead | None,
    database: dict[str, Any] | None,
    table: str,
    ca_bundle: CaBundle | None = None,
) -> PhorgeConfig:
    """Pure: each setting from the variable, then the local file, then the database, then Phorge's default.

    `local` is None when no file is configured; `database` None when the table cannot be read; `ca_bundle`
    is the bundle in force (cabundle.py; None: not looked for).
    """
    layers: list[tuple[Source, str, dict[str, Any]]] = []
    if local is not None and local.values is not None:
        layers.append(("local file", local.path, local.values))
    if database is not None:
        layers.append(("database", table, database))
    looked = [f"not set in {where}" for _source, where, _values in layers]
    if local is None:
        looked.append("no local file given (GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG), so bin/config set values are not seen")
    elif local.values is None:
        looked.append(f"cannot read {local.path}: {local.problem}")
    if database is None:
        looked.append(f"cannot read {table}")
    nowhere = "; ".join(looked)

    def stored(key: str) -> tuple[Source, str, Any] | None:
        for source, where, values in layers:
            if key in values:
                return source, where, values[key]
        return None

    silent: Resolved[bool | None]
    if config.silent is not None:
        silent = Resolved(config.silent, "variable", "GORGE_WEBHOOK_SILENT")
    elif local is not None and local.values is None:
        silent = Resolved(None, "unknown", f"cannot read {local.path}: {local.problem}")
    elif (found := stored(SILENT)) is not None:
        silent = Resolved(php_truthy(found[2]), found[0], found[1])
    elif local is not None:
        silent = Resolved(False, "Phorge's default", nowhere)
    else:
        silent = Resolved(None, "unknown", nowhere)

    blacklist: Resolved[tuple[IPNetwork, ...]]
    if config.outbound_blacklist_from_env:
        blacklist = Resolved(config.outbound_blacklist, "variable", "GORGE_WEBHOOK_OUTBOUND_BLACKLIST")
    elif (found := stored(BLACKLIST)) is not None and (networks := _networks(found[2])) is not None:
        blacklist = Resolved(networks, found[0], found[1])
    elif found is not None:
        blacklist = Resolved(
            config.outbound_blacklist, "Phorge's default", f"{BLACKLIST} in {found[1]} is not a list of CIDR blocks"
        )
    else:
        blacklist = Resolved(config.outbound_blacklist, "Phorge's default", nowhere)

    base_uri: Resolved[str | None]
    if config.phorge_base_uri:
        base_uri = Resolved(config.phorge_base_uri, "variable", "GORGE_WEBHOOK_PHORGE_BASE_URI")
    elif (found := stored(BASE_URI)) is not None and base_uri_value(found[2]) is not None:
        base_uri = Resolved(base_uri_value(found[2]), found[0], found[1])
    else:
        base_uri = Resolved(None, "Phorge's default", nowhere)

    retention: Resolved[int | None]
    if (found := stored(COLLECTION)) is not None:
        retention = Resolved(request_retention({COLLECTION: found[2]}), found[0], found[1])
    else:
        retention = Resolved(REQUEST_RETENTION_SEC, "Phorge's default", nowhere)
    option, switch, shown = _switch(local, stored, nowhere)
    return PhorgeConfig(
        silent=silent,
        blacklist=blacklist,
        base_uri=base_uri,
        retention=retention,
        looked=nowhere,
        switch=switch,
        switch_option=option,
        switch_text=shown,
        ca_bundle=Resolved(None, "unknown", "not looked for")
        if ca_bundle is None
        else Resolved(ca_bundle, ca_bundle.origin, ca_bundle.where),
        proxy=Resolved(config.proxy, "variable", PROXY_VARIABLE)
        if config.proxy is not None
        else Resolved(None, "variable", f"{PROXY_VARIABLE} is not set"),
    )


def _switch(
    local: LocalRead | None, stored: Callable[[str], tuple[Source, str, Any] | None], nowhere: str
) -> tuple[str, Resolved[bool | None], str]:
    """The handover's switch, found as silent mode is (a locked option): the option that decides, on or off,
    and its value as text."""
    if local is not None and local.values is None:
        return SERVICE_URI, Resolved(None, "unknown", f"cannot read {local.path}: {local.problem}"), "unknown"
    if (found := first_switch(stored)) is not None:
        return found[0], Resolved(found[1], found[2], found[3]), found[4]
    if local is not None:
        return SERVICE_URI, Resolved(False, "Phorge's default", nowhere), "not set"
    return SERVICE_URI, Resolved(None, "unknown", nowhere), "unknown"


def _networks(value: Any) -> tuple[IPNetwork, ...] | None:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        return None
    try:
        return parse_blacklist(json.dumps(value)) if value else ()
    except ValueError:
        return None


class ConfigDatabase:
    """The same settings in Phorge's config database (`<ns>_config.config_entry`, an optional grant), in one
    query, cached a few seconds.

    `values()` is None when the table cannot be read, or when the config application is on another master
    of a partitioned Phorge (the table here is an empty copy); otherwise the keys stored there, decoded. One thread
    refreshes the cache at a time; the others keep the last values rather than queue behind a slow read
    (only the very first read is waited for). An outage raises django.db.DatabaseError.
    """

    def __init__(
        self,
        namespace: str,
        *,
        connection: ConnectionSource | None = None,
        ttl: float = CACHE_SEC,
        clock: Callable[[], float] = time.monotonic,
        masters: Masters | None = None,
    ) -> None:
        self.table = qualified(namespace, "config", "config_entry")
        self.masters = masters or Masters.single(namespace, connection or herald_connection)
        self.partitions = self.masters.partitions
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: tuple[float, dict[str, Any] | None] | None = None
        self._unreadable = False
        self._elsewhere: str | None = None

    def values(self) -> dict[str, Any] | None:
        cached = self._cached
        if cached is not None and self._clock() - cached[0] < self._ttl:
            return cached[1]
        if not self._lock.acquire(blocking=cached is None):
            return cached[1] if cached is not None else None
        try:
            cached = self._cached
            if cached is not None and self._clock() - cached[0] < self._ttl:
                return cached[1]
            values = self._query()
            self._cached = (self._clock(), values)
            return values
        finally:
            self._lock.release()

    def _query(self) -> dict[str, Any] | None:
        route = self.masters.route("config")
        unreached = None if route.source is not None else route.master
        if unreached != self._elsewhere:
            self._elsewhere = unreached
            if unreached is not None:
                logger.warning(
                    f"Phorge's config application is on another master ({unreached}) than herald's, which this "
                    f"service cannot reach: {self.table} is not read, and values stored there are not seen",
                    extra={"event": "settings.config_elsewhere", "application": "config", "master": unreached},
                )
        if route.source is None:
            return None
        keys, params = in_filter("configKey", SETTING_KEYS, "key")
        sql = f"SELECT configKey, value FROM {self.table} WHERE namespace = 'default' AND {keys} AND isDeleted = 0"
        try:
            rows = select(route.source, sql, params)
        except MasterUnavailable:
            # Logged by Masters; the values last read stay in force (none read yet: as without the grant).
            cached = self._cached
            return None if cached is None else cached[1]
        except NoAccessError as exc:
            if not self._unreadable:
                self._unreadable = True
                logger.info(
                    f"cannot read {self.table} (no SELECT grant, or not Phorge's database): values stored there "
                    "are not seen",
                    extra={"event": "settings.table_unreadable", "mysql_error": exc.code},
                )
            return None
        if self._unreadable:
            self._unreadable = False
            logger.info(f"reading Phorge's settings from {self.table} again", extra={"event": "settings.table_back"})
        values: dict[str, Any] = {}
        for row in rows:
            values[text(row["configKey"])] = jsonread.decode(text(row["value"]))  # json_decode's null
        return values


class PhorgeSettings:
    """The settings in force, from every source, resolved afresh whenever a source changed (the file is
    checked at most once a second, the database every few seconds). Logs each setting's value and source, and the
    partition map in force with its origin, the first time and whenever either changes. `current()` raises
    django.db.DatabaseError in an outage.
    """

    def __init__(
        self,
        config: DeliveryConfig,
        *,
        connection: ConnectionSource | None = None,
        ttl: float = CACHE_SEC,
        clock: Callable[[], float] = time.monotonic,
        masters: Masters | None = None,
    ) -> None:
        self.config = config
        self.database = ConfigDatabase(config.namespace, connection=connection, ttl=ttl, clock=clock, masters=masters)
        self.local = LocalConfigFile(config.phorge_local_config, clock=clock) if config.phorge_local_config else None
        self.trust = CaBundleFile(config.trust, clock=clock)
        self._lock = threading.Lock()
        self._cached: tuple[tuple[LocalRead | None, dict[str, Any] | None, CaBundle], PhorgeConfig] | None = None
        self._reported: dict[str, tuple[str, str]] = {}
        self._map_checked: LocalRead | None = None
        self._map_change_said = False

    def current(self) -> PhorgeConfig:
        local = None if self.local is None else self.local.read()
        database = self.database.values()
        bundle = self.trust.current()
        cached = self._cached
        if cached is not None and all(a is b for a, b in zip(cached[0], (local, database, bundle), strict=True)):
            return cached[1]  # the sources hand back the same objects until they change
        resolved = resolve(self.config, local, database, self.database.table, bundle)
        self._report(resolved)
        self._report_map(local)  # before caching: after an outage here the next call says it again
        self._cached = ((local, database, bundle), resolved)
        return resolved

    def ca_bundle(self) -> CaBundle:
        """For Dispatcher(ca_bundle=...): the CA bundle in force, as the files are now (no database read)."""
        return self.trust.current()

    def silent(self) -> bool | None:
        """For Dispatcher(silent=...): True, False, or None when unknown."""
        return self.current().silent.value

    def blacklist(self) -> tuple[IPNetwork, ...]:
        """For Dispatcher(blacklist=...)."""
        return self.current().blacklist.value

    def _report(self, resolved: PhorgeConfig) -> None:
        with self._lock:
            looked = resolved.defaults_looked
            if looked and self._reported.get("looked") != (looked, ""):
                self._reported["looked"] = (looked, "")
                logger.info(f"Phorge settings at Phorge's default: {looked}", extra={"event": "settings.looked"})
            for option, shown, where in resolved.summary():
                line = (shown, where.describe())
                if self._reported.get(option) != line:
                    self._reported[option] = line
                    logger.info(
                        f"Phorge setting in force: {option} = {shown}, from {where.describe()}",
                        extra={"event": "settings.in_force", "option": option, "source": where.source},
                    )

    def _report_map(self, local: LocalRead | None) -> None:
        """The partition map in force and where it came from, like the settings; and once, that the local
        file's cluster.databases no longer is the map read at start, which the masters' connections were made
        from: it takes effect at restart."""
        in_force = self.database.partitions.current().in_force()
        changed = False
        if local is not self._map_checked and not self._map_change_said:
            self._map_checked = local
            changed = local is not None and local.values is not None and self._file_map_changed(local.values)
        with self._lock:
            if in_force is not None and self._reported.get(CLUSTER_KEY) != in_force:
                self._reported[CLUSTER_KEY] = in_force
                logger.info(
                    f"Phorge setting in force: {CLUSTER_KEY} = {in_force[0]}, from {in_force[1]}",
                    extra={"event": "settings.in_force", "option": CLUSTER_KEY},
                )
            if changed and not self._map_change_said:
                self._map_change_said = True
                cluster = self.config.cluster
                logger.warning(
                    f"{CLUSTER_KEY} in {self.config.phorge_local_config} changed since start-up: the map read "
                    f"then ({'none' if cluster is None else cluster.origin}) stays in force until the service "
                    "restarts",
                    extra={"event": "settings.map_changed", "option": CLUSTER_KEY},
                )

    def _file_map_changed(self, values: dict[str, Any]) -> bool:
        cluster = configured_map(self.config.cluster)
        if cluster is not None and cluster.origin == FROM_CLUSTER_VARIABLE:
            return False  # the variable wins over the file, now as at start
        value = local_cluster_value(values)
        if value is None or cluster is None:
            return (value is None) != (cluster is None)
        try:
            return not parse_cluster_databases(value).same_entries(cluster)
        except ClusterError:
            return True
