"""phorge/cluster.py: Phorge's `cluster.databases` parsed as Phorge parses it, for a partitioned Phorge (issue
22); the database tests: tests/db/test_cluster.py, and on two real servers tests/process/test_cluster.py."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager as contextmanager_source
from typing import Any

import pytest

from tests.support.clock import FixedClock
from tests.support.cluster import CLUSTER, HERALD_MASTER, HERALD_URL, OTHER_MASTER, SINGLE, config_from, local_file
from tests.support.helpers import with_event
from tests.support.phorge_app_db import php_json_encode
from webhook_delivery.phorge.cluster import ClusterError, loads_cluster_databases, parse_cluster_databases
from webhook_delivery.phorge.databases import Placement

DOCS_EXAMPLE = [  # cluster_partitioning.diviner
    {"host": "db001.corporation.com", "role": "master", "user": "phorge", "port": 3306, "partition": ["default"]},
    {"host": "db002.corporation.com", "role": "replica", "port": 3306, "master": "db001.corporation.com:3306"},
    {"host": "db003.corporation.com", "role": "master", "port": 3306, "partition": ["file", "passphrase", "slowvote"]},
    {"host": "db004.corporation.com", "role": "replica", "port": 3306, "master": "db003.corporation.com:3306"},
]


def test_applications_resolve_to_their_partition_else_the_default_master() -> None:
    cluster = parse_cluster_databases(DOCS_EXAMPLE)
    assert cluster.partitioned
    assert [ref.ref_key for ref in cluster.enabled_masters()] == [
        "db001.corporation.com:3306",
        "db003.corporation.com:3306",
    ]
    master = cluster.master_for
    assert [master(app).ref_key for app in ("file", "slowvote", "herald", "maniphest")] == [  # type: ignore[union-attr]
        "db003.corporation.com:3306",
        "db003.corporation.com:3306",
        "db001.corporation.com:3306",
        "db001.corporation.com:3306",
    ]
    assert cluster.elsewhere("file") == "db003.corporation.com:3306"
    assert cluster.elsewhere("maniphest") is None  # the default partition, like herald
    assert [ref.master for ref in cluster.refs if not ref.is_master] == [
        "db001.corporation.com:3306",
        "db003.corporation.com:3306",
    ]


def test_a_disabled_master_sends_its_applications_to_the_default_one() -> None:
    entries = [dict(entry) for entry in DOCS_EXAMPLE]
    entries[2]["disabled"] = True
    cluster = parse_cluster_databases(entries)
    assert cluster.master_for("file").ref_key == "db001.corporation.com:3306"  # type: ignore[union-attr]
    assert not cluster.partitioned and cluster.elsewhere("file") is None  # one enabled master left


def test_a_single_master_is_the_default_and_not_partitioned() -> None:
    cluster = parse_cluster_databases([{"host": "db", "role": "master", "partition": ["maniphest"]}])
    assert not cluster.partitioned
    assert cluster.master_for("herald") == cluster.master_for("maniphest")
    assert cluster.master_for("herald").ref_key == "db:3306"  # type: ignore[union-attr]
    assert cluster.elsewhere("maniphest") is None
    assert not parse_cluster_databases([]).partitioned
    replica = parse_cluster_databases([*SINGLE, {"host": "r", "role": "replica"}]).refs[1]
    assert replica.master == "db-a.example.org:3306"  # unpartitioned: the first master


def test_without_a_default_an_unlisted_application_has_no_master() -> None:
    cluster = parse_cluster_databases(
        [{"host": "a", "role": "master", "partition": ["herald"]}, {"host": "b", "role": "master", "partition": []}]
    )
    assert cluster.master_for("maniphest") is None
    assert cluster.elsewhere("maniphest") == "no master"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("db001", "not a list"),
        ({"0": "a"}, "entry 0 is not a dictionary"),
        (["a"], "entry 0 is not a dictionary"),
        ([{"host": "a", "role": "master", "weight": 1}], "unknown key 'weight'"),
        ([{"role": "master"}], "missing the required key 'host'"),
        ([{"host": "a", "role": "primary"}], "neither 'master' nor 'replica'"),
        ([{"host": "a", "role": "master", "port": "3306"}], "'port' must be int"),
        ([{"host": "a", "role": "master", "port": True}], "'port' must be int"),
        ([{"host": "a", "role": "master", "disabled": 0}], "'disabled' must be bool"),
        ([{"host": "a", "role": "master", "partition": ["x", 1]}], "'partition' must be list<string>"),
        ([{"host": "a", "role": "master"}, {"host": "a", "role": "replica"}], "the host a: more than once"),
        ([{"host": "a", "role": "master"}, {"host": "a", "role": "replica", "port": 3306}], "a:3306 more than once"),
        (
            [{"host": "a", "role": "master", "partition": ["default"]}, {"host": "b", "role": "master"}],
            "b:3306 is missing",
        ),
        (
            [
                {"host": "a", "role": "master", "partition": ["default"]},
                {"host": "b", "role": "master", "partition": ["default"]},
            ],
            "more than one master is the default",
        ),
        (
            [
                {"host": "a", "role": "master", "partition": ["default", "file"]},
                {"host": "b", "role": "master", "partition": ["file"]},
            ],
            "'file' is in the partitions of a:3306 and b:3306",
        ),
        ([*SINGLE, {"host": "r", "role": "replica", "partition": []}], 'has a "partition" key'),
        ([*SINGLE, {"host": "r", "role": "replica", "master": "db-a.example.org"}], "not a configured master"),
        ([{"host": "r", "role": "replica"}], "lists no master"),
        (
            [
                {"host": "a", "role": "master", "partition": ["default"]},
                {"host": "b", "role": "master", "partition": []},
                {"host": "r", "role": "replica"},
            ],
            'replica r:3306 has no "master"',
        ),
    ],
)
def test_phorge_refuses_what_the_parser_refuses(value: Any, message: str) -> None:
    with pytest.raises(ClusterError) as caught:
        parse_cluster_databases(value)
    assert message in str(caught.value)


def test_the_hoststate_text_is_read_as_php_wrote_it() -> None:
    text = php_json_encode([{k: v for k, v in e.items() if k != "pass"} for e in CLUSTER])
    assert "svc\\/phorge" in text and "secret" not in text and ", " not in text
    cluster = loads_cluster_databases(text)
    assert cluster.elsewhere("worker") == OTHER_MASTER and cluster.elsewhere("herald") is None
    with pytest.raises(ClusterError, match="not valid JSON"):
        loads_cluster_databases("[{")


def test_the_warning_names_each_consequence() -> None:
    assert Placement().warning() is None and not Placement().partitioned
    assert Placement(parse_cluster_databases(SINGLE)).warning() is None
    warning = Placement(parse_cluster_databases(CLUSTER)).warning()
    assert warning is not None
    assert f"herald on {HERALD_MASTER}" in warning and OTHER_MASTER in warning
    assert "config, maniphest, repository, user, worker" in warning
    assert f"Phorge takes its hook locks on the repository application's master {OTHER_MASTER}" in warning
    unreadable = Placement(problem="cluster.databases is not a list of database hosts")
    assert unreadable.partitioned and unreadable.elsewhere("herald") is None
    assert unreadable.elsewhere("maniphest") is not None and "cannot be used" in (unreadable.warning() or "")


def _loaded(value: Any, url: str = "mysql://svc:herald%2Fpw@db-a.example.org:3306/phabricator_herald") -> Any:
    from webhook_delivery.phorge.formats import load_config

    text = value if isinstance(value, str) else json.dumps(value)
    return load_config({"GORGE_WEBHOOK_DATABASE_URL": url, "GORGE_WEBHOOK_CLUSTER_DATABASES": text})


def test_the_variable_names_each_other_master_with_the_services_own_login_unless_the_entry_says() -> None:
    loaded = _loaded(CLUSTER)
    assert not loaded.errors
    assert loaded.delivery.cluster.elsewhere("maniphest") == OTHER_MASTER
    # Herald's master is the herald connection itself; B gets that connection's user and password.
    assert loaded.master_urls == {OTHER_MASTER: "mysql://svc:herald%2Fpw@db-b.example.org:3306/"}
    own = [dict(CLUSTER[0]), {**CLUSTER[1], "user": "lookups", "pass": "b-secret"}, CLUSTER[2]]
    assert _loaded(own).master_urls == {OTHER_MASTER: "mysql://lookups:b-secret@db-b.example.org:3306/"}
    for shown in (repr(_loaded(own)), repr(_loaded(own).delivery)):
        assert "b-secret" not in shown and "herald%2Fpw" not in shown and "secret-a" not in shown


@pytest.mark.parametrize(
    ("value", "url", "message"),
    [
        ("{not json", None, "not valid JSON"),
        ([{"host": "db-a", "role": "master", "pass": 7}], None, "'pass' must be string"),
        ([{**CLUSTER[1], "pass": "leaky-secret"}, {**CLUSTER[0], "partition": ["maniphest"]}], None, "maniphest"),
        (
            [
                {"host": "a", "role": "master", "partition": ["maniphest"]},
                {"host": "b", "role": "master", "partition": ["user"]},
            ],
            None,
            "no master serves herald",
        ),
        (CLUSTER, "sqlite:///demo.sqlite3", "needs a MySQL/MariaDB herald database"),
    ],
)
def test_a_bad_variable_is_a_configuration_error_that_shows_no_password(
    value: Any, url: str | None, message: str
) -> None:
    loaded = _loaded(value) if url is None else _loaded(value, url)
    (error,) = loaded.errors
    assert error.variable == "GORGE_WEBHOOK_CLUSTER_DATABASES" and message in error.message
    assert "secret" not in error.message and loaded.master_urls == {}


def test_a_master_that_does_not_answer_is_waited_for_then_tried_again(caplog: pytest.LogCaptureFixture) -> None:
    from django.db import OperationalError

    from webhook_delivery.phorge.databases import MASTER_DOWN_SEC, Masters, MasterUnavailable

    class Fixed:
        def __init__(self, placement: Placement) -> None:
            self.placement = placement

        def current(self) -> Placement:
            return self.placement

    clock = FixedClock(1000.0)
    tries: list[str] = []

    @contextmanager_source
    def b_source() -> Iterator[Any]:
        tries.append("b")
        if down[0]:
            raise OperationalError(2003, "Can't connect")
        yield "connection to B"

    down = [True]
    placement = Placement(parse_cluster_databases(CLUSTER), reachable=frozenset({OTHER_MASTER}))
    herald = object()
    masters = Masters(
        Fixed(placement),
        lambda: herald,
        others=lambda ref: b_source if ref == OTHER_MASTER else None,
        clock=clock,
    )  # type: ignore[arg-type, return-value]
    assert masters.route("herald").source is not None and masters.route("herald").master is None
    route = masters.route("maniphest")
    assert route.master == OTHER_MASTER and route.source is not None
    caplog.set_level(logging.INFO)
    for _ in range(3):
        with pytest.raises(MasterUnavailable), route.source():
            pass
    assert tries == ["b"]  # tried once, then waited for
    clock.advance(MASTER_DOWN_SEC + 1)
    down[0] = False
    with route.source() as connection:
        assert connection == "connection to B"
    assert len(with_event(caplog.records, "master.down")) == 1 and with_event(caplog.records, "master.back")


def test_the_local_files_map_is_used_as_the_variable_would_be(tmp_path: Any) -> None:
    path = local_file(tmp_path, {"cluster.databases": CLUSTER, "phabricator.silent": False})
    loaded = config_from(path)
    assert not loaded.errors
    cluster = loaded.delivery.cluster
    assert cluster.origin == f"the local file {path}" and loaded.master_variable == "GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG"
    assert cluster.same_entries(_loaded(CLUSTER).delivery.cluster)
    assert (
        loaded.master_urls == _loaded(CLUSTER).master_urls == {OTHER_MASTER: f"mysql://svc:herald%2Fpw@{OTHER_MASTER}/"}
    )
    unset: list[dict[str, Any]] = [{}, {"cluster.databases": []}, {"phabricator.silent": True}]  # []: Phorge's default
    for values in unset:
        nothing = config_from(local_file(tmp_path, values))
        assert not nothing.errors and nothing.delivery.cluster is None and nothing.master_urls == {}
    missing = config_from(str(tmp_path / "absent.json"))  # gorge.E002's to refuse, not load_config's
    assert not missing.errors and missing.delivery.cluster is None


def test_the_variable_wins_over_the_local_file(tmp_path: Any) -> None:
    moved = [dict(CLUSTER[0]), {**CLUSTER[1], "partition": ["maniphest"]}, CLUSTER[2]]
    bad = [{"host": "db-a", "role": "primary", "pass": "file-secret"}]
    for in_file in (CLUSTER, bad):
        loaded = config_from(
            local_file(tmp_path, {"cluster.databases": in_file}), GORGE_WEBHOOK_CLUSTER_DATABASES=json.dumps(moved)
        )
        assert not loaded.errors and loaded.master_variable == "GORGE_WEBHOOK_CLUSTER_DATABASES"
        assert loaded.delivery.cluster.origin == "the variable GORGE_WEBHOOK_CLUSTER_DATABASES"
        assert loaded.delivery.cluster.elsewhere("user") is None  # the variable's map, not the file's


@pytest.mark.parametrize(
    ("value", "url", "message"),
    [
        ({"0": {"host": "db-a", "role": "master", "pass": 7}}, None, "'pass' must be string"),
        ([{**CLUSTER[1], "pass": "leaky-secret"}, {**CLUSTER[0], "partition": ["maniphest"]}], None, "maniphest"),
        ([{**CLUSTER[0], "pass": "leaky-secret", "partition": ["file"]}, CLUSTER[1]], None, "no master serves herald"),
        ("db-a.example.org", None, "not a list of database hosts"),
        (CLUSTER, "sqlite:///demo.sqlite3", "needs a MySQL/MariaDB herald database"),
    ],
)
def test_a_bad_map_in_the_local_file_stops_start_up_naming_the_file_and_key_not_the_password(
    tmp_path: Any, value: Any, url: str | None, message: str
) -> None:
    from webhook_delivery.phorge.formats import load_config

    path = local_file(tmp_path, {"cluster.databases": value})
    env = {"GORGE_WEBHOOK_DATABASE_URL": url or HERALD_URL, "GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG": path}
    loaded = load_config(env)
    (error,) = loaded.errors
    assert error.variable == "GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG"
    assert str(error).startswith(f"GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG: cluster.databases in {path} is refused: ")
    assert message in error.message and "secret" not in str(error) and loaded.master_urls == {}
    assert loaded.delivery.cluster is None


def test_the_warning_and_the_start_up_line_say_where_the_map_came_from() -> None:
    hoststate = Placement(parse_cluster_databases(CLUSTER), origin="`ns_meta_data`.`hoststate`")
    warning = hoststate.warning() or ""
    assert "(map from `ns_meta_data`.`hoststate`; herald on" in warning
    assert "GORGE_WEBHOOK_CLUSTER_DATABASES or in cluster.databases of the local file" in warning
    assert hoststate.in_force() == (
        f"herald on {HERALD_MASTER}; {OTHER_MASTER} (config, maniphest, repository, user, worker)",
        "`ns_meta_data`.`hoststate`",
    )
    assert Placement(parse_cluster_databases(SINGLE), origin="x").in_force() == (
        f"herald on {HERALD_MASTER} (not partitioned)",
        "x",
    )
    assert Placement().in_force() is None and Placement(problem="unreadable").in_force() is None
