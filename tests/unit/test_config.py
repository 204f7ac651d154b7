"""config.py: the GORGE_WEBHOOK_* settings, their defaults, forms and ranges, each bad value one error naming
its variable (what `check` and the worker then do with them: tests/process/test_checks.py)."""

from __future__ import annotations

import pytest

from webhook_delivery.config import default_blacklist, parse_blacklist
from webhook_delivery.phorge.formats import load_config


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


NUMBERS = {  # every numeric GORGE_WEBHOOK_* setting: its range as the refusal names it
    "GORGE_WEBHOOK_MYSQL_PORT": "a whole number from 1 to 65535",
    "GORGE_WEBHOOK_POLL_INTERVAL_MS": "a whole number from 10 to 3600000",
    "GORGE_WEBHOOK_MAX_CONCURRENT": "a whole number from 1 to 1024",
    "GORGE_WEBHOOK_DB_POOL_SIZE": "a whole number from 1 to 64",
    "GORGE_WEBHOOK_DELIVERY_TIMEOUT": "a number of seconds from 1 to 3600",
    "GORGE_WEBHOOK_CLAIM_LEASE_SEC": "a whole number from 1 to 86400",
    "GORGE_WEBHOOK_RETRY_BACKOFF_SEC": "a whole number from 1 to 2592000",
    "GORGE_WEBHOOK_ERROR_BACKOFF_SEC": "a whole number from 1 to 2592000",
    "GORGE_WEBHOOK_ERROR_THRESHOLD": "a whole number from 1 to 1000000",
    "GORGE_WEBHOOK_ATTEMPT_LOG_DAYS": "a whole number from 1 to 366",
    "GORGE_WEBHOOK_ATTEMPT_LOG_PER_HOOK": "a whole number from 10 to 10000000",
    "GORGE_WEBHOOK_ATTEMPT_LOG_BODY_BYTES": "a whole number from 0 to 65536",
    "GORGE_WEBHOOK_REPLICA_MAX_LAG_SEC": "a whole number from 0 to 86400",
}


@pytest.mark.parametrize("name", sorted(NUMBERS))
@pytest.mark.parametrize(
    "value", ["1e-300", "-1", "1e300", "nan", "inf", "\u0661\u0665", "\uff11\uff15", "1_0", "0x10", "99999999999"]
)
def test_numbers_are_ascii_and_in_a_range_that_the_refusal_names(name: str, value: str) -> None:
    loaded = load_config({name: value})
    assert [str(error) for error in loaded.errors] == [f"{name}: expected {NUMBERS[name]}, got {value!r}"]
    assert loaded.delivery == load_config({}).delivery


def test_numbers_in_range_are_taken_as_written() -> None:
    loaded = load_config({"GORGE_WEBHOOK_DELIVERY_TIMEOUT": "2.5", "GORGE_WEBHOOK_POLL_INTERVAL_MS": "+10"})
    assert not loaded.errors
    assert (loaded.delivery.delivery_timeout, loaded.delivery.poll_interval_ms) == (2.5, 10)


def test_a_bad_delivery_id_setting_is_one_config_error_naming_the_variable() -> None:
    from webhook_delivery.phorge.formats import load_config

    base = {"GORGE_WEBHOOK_DATABASE_URL": "mysql://u@127.0.0.1/phorge_herald"}
    assert load_config(base).delivery.delivery_id_hooks.off
    assert load_config({**base, "GORGE_WEBHOOK_DELIVERY_ID_HOOKS": "*"}).delivery.delivery_id_hooks.all_hooks
    loaded = load_config({**base, "GORGE_WEBHOOK_DELIVERY_ID_HOOKS": "PHID-HWBH-ok,nope"})
    assert [str(error) for error in loaded.errors] == [
        "GORGE_WEBHOOK_DELIVERY_ID_HOOKS: expected * (every hook) or a comma-separated list of hook PHIDs "
        "(PHID-HWBH-...), got 'nope'"
    ]
    assert loaded.delivery.delivery_id_hooks.off


def test_honoring_retry_after_is_off_unless_asked_and_a_bad_word_is_refused_by_name() -> None:
    assert load_config({}).delivery.honor_retry_after is False
    assert load_config({"GORGE_WEBHOOK_HONOR_RETRY_AFTER": "true"}).delivery.honor_retry_after is True
    loaded = load_config({"GORGE_WEBHOOK_HONOR_RETRY_AFTER": "sometimes"})
    assert [str(error).split(":")[0] for error in loaded.errors] == ["GORGE_WEBHOOK_HONOR_RETRY_AFTER"]
    assert loaded.delivery.honor_retry_after is False
