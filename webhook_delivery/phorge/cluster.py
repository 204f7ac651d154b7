"""Phorge's `cluster.databases` (PhabricatorDatabaseRefParser, PhabricatorDatabaseRef): its validation, and
which master serves an application, as Phorge resolves it. Pure: the value comes from `hoststate`
(databases.py) as `bin/storage partition` wrote it, passwords left out, or from
GORGE_WEBHOOK_CLUSTER_DATABASES or Phorge's local file (config.py), which may name a user and password per host.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import jsonread

HERALD = "herald"
DEFAULT_PARTITION = "default"
DEFAULT_PORT = 3306  # nonempty(mysql.port, 3306): the service does not know Phorge's mysql.port

# PhabricatorClusterDatabasesConfigType: key -> (type name in Phorge's errors, Python type, required).
_SPEC: dict[str, tuple[str, type, bool]] = {
    "host": ("string", str, True),
    "role": ("string", str, True),
    "port": ("int", int, False),
    "user": ("string", str, False),
    "pass": ("string", str, False),
    "disabled": ("bool", bool, False),
    "master": ("string", str, False),
    "partition": ("list<string>", list, False),
    "persistent": ("bool", bool, False),
}
_ROLES = ("master", "replica")


class ClusterError(ValueError):
    """A `cluster.databases` value Phorge itself would refuse, with the reason."""


@dataclass(frozen=True)
class DatabaseRef:
    """One entry of `cluster.databases`, with Phorge's defaults filled in."""

    host: str
    port: int
    is_master: bool
    disabled: bool = False
    applications: frozenset[str] = frozenset()  # the partition list, without "default"
    is_default: bool = False
    master: str | None = None  # a replica's master, by ref key
    user: str | None = field(default=None, compare=False)
    password: str | None = field(default=None, compare=False, repr=False)

    @property
    def ref_key(self) -> str:
        """PhabricatorDatabaseRef::getRefKey: "host:port"."""
        return f"{self.host}:{self.port}" if self.port else self.host


@dataclass(frozen=True)
class ClusterDatabases:
    """A parsed `cluster.databases`: the refs in their configured order."""

    refs: tuple[DatabaseRef, ...]
    origin: str = field(default="", compare=False)  # where it was read, for the log and the warnings

    def same_entries(self, other: ClusterDatabases) -> bool:
        """The same hosts, roles and partitions, and the same logins: nothing to reconnect."""
        return [(ref, ref.user, ref.password) for ref in self.refs] == [
            (ref, ref.user, ref.password) for ref in other.refs
        ]

    def enabled_masters(self) -> list[DatabaseRef]:
        return [ref for ref in self.refs if ref.is_master and not ref.disabled]

    @property
    def partitioned(self) -> bool:
        """More than one enabled master: applications may live on different hosts."""
        return len(self.enabled_masters()) > 1

    def master_for(self, application: str) -> DatabaseRef | None:
        """getMasterDatabaseRefForApplication: the enabled master listing the application, else the default
        one (a disabled master's applications fall to the default too); None when neither exists."""
        default = None
        for master in self.enabled_masters():
            if application in master.applications:
                return master
            if master.is_default and default is None:
                default = master
        return default

    def elsewhere(self, application: str) -> str | None:
        """The master ref of an application that is not on herald's master ("no master" when Phorge finds
        none); None when it shares herald's master or the install is not partitioned."""
        if not self.partitioned:
            return None
        master = self.master_for(application)
        if master == self.master_for(HERALD):
            return None
        return "no master" if master is None else master.ref_key

    def reachable(self) -> list[str]:
        """The enabled masters other than herald's: those the service connects to beside herald's."""
        home = self.master_for(HERALD)
        return [ref.ref_key for ref in self.enabled_masters() if ref != home]

    def layout(self) -> tuple[tuple[str, tuple[str, ...], bool], ...]:
        """Which enabled master serves what: two maps place every application alike when these are equal."""
        return tuple(
            sorted((ref.ref_key, tuple(sorted(ref.applications)), ref.is_default) for ref in self.enabled_masters())
        )

    def others(self, *, skip: frozenset[str] = frozenset()) -> list[str]:
        """Each enabled master that is not herald's (nor in `skip`, by ref key), with what lives there: for
        the warnings."""
        home = self.master_for(HERALD)
        lines = []
        for master in self.enabled_masters():
            if master == home or master.ref_key in skip:
                continue
            apps = sorted(master.applications)
            if master.is_default:
                apps.append("every application no partition lists")
            lines.append(f"{master.ref_key} ({', '.join(apps) or 'no application'})")
        return lines


def _checked(index: int, spec: Any) -> dict[str, Any]:
    where = f"cluster.databases entry {index}"
    if not isinstance(spec, dict):
        raise ClusterError(f"{where} is not a dictionary")
    for key, value in spec.items():
        if key not in _SPEC:
            raise ClusterError(f"{where} has the unknown key {key!r}")
        name, kind, _required = _SPEC[key]
        wrong = not isinstance(value, kind) or (kind is int and isinstance(value, bool))
        if key == "partition" and not wrong:
            wrong = not all(isinstance(item, str) for item in value)
        if wrong:
            raise ClusterError(f"{where}: {key!r} must be {name}")
    for key, (_name, _kind, required) in _SPEC.items():
        if required and key not in spec:
            raise ClusterError(f"{where} is missing the required key {key!r}")
    if spec["role"] not in _ROLES:
        raise ClusterError(f"{where}: role {spec['role']!r} is neither 'master' nor 'replica'")
    return spec


def parse_cluster_databases(value: Any, *, default_port: int = DEFAULT_PORT) -> ClusterDatabases:
    """Validate and parse `cluster.databases` as Phorge does; ClusterError says why a value is refused."""
    if isinstance(value, Mapping):
        value = list(value.values())  # a PHP array with non-sequential keys is encoded as an object
    if not isinstance(value, list):
        raise ClusterError("cluster.databases is not a list of database hosts")
    specs = [_checked(index, spec) for index, spec in enumerate(value)]
    raw_keys: set[str] = set()
    for spec in specs:
        # The config type's duplicate check uses the raw port, so an omitted one reads "host:".
        raw = f"{spec['host']}:{'' if spec.get('port') is None else spec['port']}"
        if raw in raw_keys:
            raise ClusterError(f"cluster.databases lists the host {raw} more than once")
        raw_keys.add(raw)

    masters = [spec for spec in specs if spec["role"] == "master"]
    partitioned = len(masters) > 1
    refs: dict[str, DatabaseRef] = {}
    default_seen = False
    claimed: dict[str, str] = {}
    master_keys: list[str] = []
    for spec in specs:
        port = spec.get("port") or default_port
        key = DatabaseRef(spec["host"], port, True).ref_key
        if key in refs:
            raise ClusterError(f"cluster.databases lists the host {key} more than once")
        is_master = spec["role"] == "master"
        applications: set[str] = set()
        is_default = False
        master: str | None = None
        if is_master:
            master_keys.append(key)
            if not partitioned:
                is_default = True
            elif "partition" not in spec:
                raise ClusterError(f'master {key} is missing a "partition" configuration key')
            else:
                for application in spec["partition"]:
                    if application == DEFAULT_PARTITION:
                        if default_seen:
                            raise ClusterError(f"more than one master is the default partition (again: {key})")
                        default_seen = is_default = True
                    elif application in claimed:
                        raise ClusterError(
                            f"the application {application!r} is in the partitions of {claimed[application]} and {key}"
                        )
                    else:
                        claimed[application] = key
                        applications.add(application)
        elif "partition" in spec:
            raise ClusterError(f'replica {key} has a "partition" key: only masters are partitioned')
        else:
            master = spec.get("master")
        refs[key] = DatabaseRef(
            spec["host"],
            port,
            is_master,
            disabled=bool(spec.get("disabled", False)),
            applications=frozenset(applications),
            is_default=is_default,
            master=master,
            user=spec.get("user"),
            password=spec.get("pass"),
        )
    for key, ref in refs.items():
        if ref.is_master:
            continue
        if ref.master is None:
            if partitioned:
                raise ClusterError(f'replica {key} has no "master": a partitioned cluster must name it')
            if not master_keys:
                raise ClusterError(f"replica {key} has no master: cluster.databases lists no master")
            refs[key] = dataclasses.replace(ref, master=master_keys[0])
        elif ref.master not in master_keys:
            raise ClusterError(f"replica {key} names the master {ref.master!r}, which is not a configured master")
    return ClusterDatabases(tuple(refs.values()))


def loads_cluster_databases(text: str, *, default_port: int = DEFAULT_PORT) -> ClusterDatabases:
    """`parse_cluster_databases` of the JSON text that `bin/storage partition` stores in hoststate."""
    value = jsonread.decode(text)
    if value is None:
        raise ClusterError("cluster.databases is not valid JSON (or nested deeper than PHP reads)")
    return parse_cluster_databases(value, default_port=default_port)
