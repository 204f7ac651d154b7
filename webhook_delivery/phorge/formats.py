"""The service's settings written in Phorge's own formats, read on Phorge's side and handed to
config.load_config already read (`PHORGE_FORMATS`; `load_config` here passes it): the partition map (Phorge's
`cluster.databases`, in GORGE_WEBHOOK_CLUSTER_DATABASES or in Phorge's local file) with the database URL of
every other master, the delivery-id list (GORGE_WEBHOOK_DELIVERY_ID_HOOKS), and where the CA bundle PHP uses
is looked for (arcanist as Phorge's install lays it out, cabundle.py). Pure: no Django import.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from .. import config
from ..config import (
    CLUSTER_KEY,
    CLUSTER_VARIABLE,
    FROM_CLUSTER_VARIABLE,
    LOCAL_CONFIG_VARIABLE,
    ClusterMap,
    ConfigError,
    LoadedConfig,
    Trust,
    read_local_file,
)
from .cabundle import ARCANIST_VARIABLE, CA_BUNDLE_VARIABLE, CAINFO_VARIABLE, choose, trust_from, unreadable
from .cluster import HERALD, ClusterDatabases, ClusterError, loads_cluster_databases, parse_cluster_databases
from .delivery_id import DeliveryIdHooks, parse_delivery_id_hooks


def local_cluster_value(values: Mapping[str, Any]) -> Any:
    """`cluster.databases` in the local file; None when it is not set there or is Phorge's default (empty),
    which Phorge reads as one server, mysql.host."""
    value = values.get(CLUSTER_KEY)
    return None if value in ([], {}) else value


def configured_map(cluster: ClusterMap | None) -> ClusterDatabases | None:
    """The map config.py holds (DeliveryConfig.cluster), as this side made it."""
    if cluster is not None and not isinstance(cluster, ClusterDatabases):
        raise TypeError("DeliveryConfig.cluster holds a map not read by phorge/formats.py")
    return cluster


def _cluster(
    parse: Callable[[], ClusterDatabases], herald_url: str, *, variable: str, origin: str, frame: tuple[str, str]
) -> tuple[ClusterDatabases | None, dict[str, str], list[ConfigError]]:
    """Phorge's `cluster.databases`, as `parse` reads it; each master other than herald's is reached with the
    entry's user and pass, else with the herald connection's. Errors never show a value; `frame` (before,
    after) says where the map was read."""
    try:
        cluster = dataclasses.replace(parse(), origin=origin)
    except ClusterError as exc:
        return None, {}, [ConfigError(variable, f"{frame[0]}{exc}{frame[1]}")]
    parts = urlsplit(herald_url)
    problem = ""
    if not parts.scheme.startswith("mysql"):
        problem = "needs a MySQL/MariaDB herald database"
    elif cluster.master_for(HERALD) is None:
        problem = "no master serves herald (no partition lists it, no default)"
    if problem:
        return None, {}, [ConfigError(variable, f"{frame[0]}{problem}{frame[1]}")]
    urls = {}
    masters = {ref.ref_key: ref for ref in cluster.enabled_masters()}
    for master in (masters[key] for key in cluster.reachable()):
        user = master.user if master.user is not None else unquote(parts.username or "")
        password = master.password if master.password is not None else unquote(parts.password or "")
        host = f"[{master.host}]" if ":" in master.host else master.host
        auth = quote(user, safe="") + (f":{quote(password, safe='')}" if password else "")
        urls[master.ref_key] = f"mysql://{auth}@{host}:{master.port}/"
    return cluster, urls, []


class PhorgeFormats:
    """config.PhorgeFormats, read as Phorge reads them."""

    def trust(self, raw: Callable[[str], str], local_config: str) -> tuple[Trust, list[ConfigError]]:
        errors = []
        arcanist = raw(ARCANIST_VARIABLE)
        if arcanist and not os.path.isdir(arcanist):
            errors.append(ConfigError(ARCANIST_VARIABLE, "expected arcanist's directory (it holds resources/ssl/)"))
            arcanist = ""
        trust = trust_from(raw(CA_BUNDLE_VARIABLE), arcanist, local_config, raw(CAINFO_VARIABLE))
        bundle = choose(trust)
        problem = "" if bundle.path is None else unreadable(bundle.path)
        if problem:
            errors.append(
                ConfigError(bundle.variable, f"the CA bundle {bundle.path} ({bundle.where}) cannot be used: {problem}")
            )
        return trust, errors

    def delivery_id_hooks(self, raw: str) -> DeliveryIdHooks:
        return parse_delivery_id_hooks(raw)

    def cluster(
        self, raw: str, local_config: str, herald_url: str
    ) -> tuple[ClusterDatabases | None, dict[str, str], list[ConfigError]]:
        """The map at start: GORGE_WEBHOOK_CLUSTER_DATABASES, else `cluster.databases` in the local file, read
        once since the masters' database aliases are made from it. A file that cannot be read gives no map
        here: gorge.E002 stops start-up."""
        if raw:
            return _cluster(
                lambda: loads_cluster_databases(raw),
                herald_url,
                variable=CLUSTER_VARIABLE,
                origin=FROM_CLUSTER_VARIABLE,
                frame=("", " (the JSON of Phorge's cluster.databases)"),
            )
        values = read_local_file(local_config)[0] if local_config else None
        value = None if values is None else local_cluster_value(values)
        if value is None:
            return None, {}, []
        return _cluster(
            lambda: parse_cluster_databases(value),
            herald_url,
            variable=LOCAL_CONFIG_VARIABLE,
            origin=f"the local file {local_config}",
            frame=(f"{CLUSTER_KEY} in {local_config} is refused: ", ""),
        )


PHORGE_FORMATS = PhorgeFormats()


def load_config(env: Mapping[str, str]) -> LoadedConfig:
    """config.load_config with Phorge's formats read here: what settings.py reads the environment with."""
    return config.load_config(env, PHORGE_FORMATS)
