"""The models match Phorge's real tables; migrations never touch Phorge; bad configuration stops start-up.

Here: what needs no database and no server process; the rest is in tests/db/test_schema_config.py,
tests/process/test_schema_config.py."""

from __future__ import annotations

from webhook_delivery.config import default_blacklist, load_config, parse_blacklist


def test_defaults_follow_phorge_and_the_spec() -> None:
    config = load_config({}).delivery
    assert config.namespace == "phabricator"
    assert (config.poll_interval_ms, config.max_concurrent, config.delivery_timeout) == (250, 128, 15.0)
    assert config.db_pool_size == 4
    assert (config.claim_lease_sec, config.retry_backoff_sec) == (60, 300)
    assert (config.error_backoff_sec, config.error_threshold) == (300, 10)
    assert config.outbound_blacklist == default_blacklist()
    assert config.silent is None


def test_database_url_and_namespace() -> None:
    loaded = load_config({"GORGE_WEBHOOK_DATABASE_URL": "mysql://u:p@db:3306/acme_herald"})
    assert loaded.delivery.namespace == "acme"
    parts = load_config({"GORGE_WEBHOOK_MYSQL_USER": "we b", "GORGE_WEBHOOK_MYSQL_PASS": "p@ss:/"})
    assert parts.phorge_database_url == "mysql://we%20b:p%40ss%3A%2F@127.0.0.1:3306/phabricator_herald"
    bad = load_config({"GORGE_WEBHOOK_DATABASE_URL": "mysql://u:p@db:3306/herald"})
    assert [e.variable for e in bad.errors] == ["GORGE_WEBHOOK_DATABASE_URL"]


def test_blacklist_forms() -> None:
    assert parse_blacklist("") == ()
    assert [str(n) for n in parse_blacklist('["10.0.0.0/8", "fc00::/7"]')] == ["10.0.0.0/8", "fc00::/7"]
    assert [str(n) for n in parse_blacklist("10.0.0.0/8, 192.168.0.0/16")] == ["10.0.0.0/8", "192.168.0.0/16"]
    assert load_config({"GORGE_WEBHOOK_OUTBOUND_BLACKLIST": ""}).delivery.outbound_blacklist == ()
