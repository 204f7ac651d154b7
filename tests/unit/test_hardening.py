"""Findings of the security review, each proven fixed with the real parts: the `mariadb` client fed the
output of print_grants, a real Worker and receiver, a real MariaDB database for Django's own tables.

Here: what needs no database and no server process; the rest is in tests/db/test_hardening.py,
tests/process/test_hardening.py."""

from __future__ import annotations

import pytest


def test_grants_sql_refuses_control_characters_and_impossible_names() -> None:
    from webhook_delivery.grants import AccountError, grants_sql

    for user in ["a\nb", "a\tb", "a\x1bb", "a\x00b", "a\u200bb", "", "u" * 129]:
        with pytest.raises(AccountError):
            grants_sql("phorge", user)
    for host in ["a\nb", "a b", "a'b", "", "h" * 256]:
        with pytest.raises(AccountError):
            grants_sql("phorge", "gorge", host)
    assert "'u" + "u" * 127 + "'@" in grants_sql("phorge", "u" * 128)


def test_transaction_ids_of_any_length_are_ordered_without_int() -> None:
    from webhook_delivery.phorge.payload import transactions_newest_first

    long_id = "9" * 5000  # beyond int()'s 4300 digits
    stored = {"2": "PHID-b", long_id: "PHID-long", "010": "PHID-ten", "1": "PHID-a"}
    assert transactions_newest_first(stored) == ["PHID-long", "PHID-ten", "PHID-b", "PHID-a"]
    with pytest.raises(ValueError, match="not a transaction ID"):
        transactions_newest_first({"\u00b2": "PHID-x"})


def test_printable_escapes_controls_and_keeps_other_text() -> None:
    from webhook_delivery.terminal import printable

    assert printable("Ünïcode ✓ name") == "Ünïcode ✓ name"
    assert printable("a\x1b[31mb\x07\x00\x7f\x9b\r\n\t\u2028\u202e\ud800") == (
        "a\\x1b[31mb\\x07\\x00\\x7f\\x9b\\r\\n\\t\\u2028\\u202e\\ud800"
    )
    assert printable("line one\nline\x1b two", keep_newlines=True) == "line one\nline\\x1b two"


def test_delivery_id_hooks_are_parsed_strictly() -> None:
    from webhook_delivery.phorge.delivery_id import DeliveryIdHooks, parse_delivery_id_hooks

    a, b = "PHID-HWBH-aaaaaaaaaaaaaaaaaaaa", "PHID-HWBH-bbbbbbbbbbbbbbbbbbbb"
    assert parse_delivery_id_hooks("").off and parse_delivery_id_hooks("  ").off
    assert parse_delivery_id_hooks(" * ").applies_to(a)
    listed = parse_delivery_id_hooks(f"{a}, {b}")
    assert listed == DeliveryIdHooks(hooks=frozenset({a, b}))
    assert listed.applies_to(b) and not listed.applies_to("PHID-HWBH-cccccccccccccccccccc")
    for bad in [f"{a},", "PHID-HWBR-aaaaaaaaaaaaaaaaaaaa", f"*,{a}", "yes", f"{a} {b}", "PHID-HWBH-a\nb"]:
        with pytest.raises(ValueError):
            parse_delivery_id_hooks(bad)


def test_a_bad_delivery_id_setting_is_one_config_error_naming_the_variable() -> None:
    from webhook_delivery.config import load_config

    base = {"GORGE_WEBHOOK_DATABASE_URL": "mysql://u@127.0.0.1/phorge_herald"}
    assert load_config(base).delivery.delivery_id_hooks.off
    assert load_config({**base, "GORGE_WEBHOOK_DELIVERY_ID_HOOKS": "*"}).delivery.delivery_id_hooks.all_hooks
    loaded = load_config({**base, "GORGE_WEBHOOK_DELIVERY_ID_HOOKS": "PHID-HWBH-ok,nope"})
    assert [str(error) for error in loaded.errors] == [
        "GORGE_WEBHOOK_DELIVERY_ID_HOOKS: expected * (every hook) or a comma-separated list of hook PHIDs "
        "(PHID-HWBH-...), got 'nope'"
    ]
    assert loaded.delivery.delivery_id_hooks.off


def test_the_config_entry_grant_says_what_is_lost_without_it() -> None:
    """Issue 39, finding 7: the comment said three settings were not seen without this grant, while Phorge keeps
    them in local.json, which the service reads without any grant."""
    from webhook_delivery.grants import grants_sql

    lines = grants_sql("phabricator", "gorge").splitlines()
    [index] = [i for i, line in enumerate(lines) if line.startswith("GRANT") and "`config_entry`" in line]
    assert lines[index - 1] == (
        "-- Optional: without it, values an older install left in Phorge's config database are not seen. "
        "phabricator.silent, security.outbound-blacklist, phabricator.base-uri and phd.garbage-collection come "
        "from conf/local/local.json, where bin/config set writes them, read without any grant "
        "(GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG)."
    )
