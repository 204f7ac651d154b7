"""grants.py: the grants print_grants prints refuse what no MariaDB account name can hold, and say what is
lost without each optional one (the rest, piped into a real mariadb client: tests/process/test_print_grants.py)."""

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


def test_the_config_entry_grant_says_what_is_lost_without_it() -> None:
    """Issue 39, finding 7: the comment said three settings were not seen without this grant, while Phorge keeps
    them in local.json, which the service reads without any grant."""
    from webhook_delivery.grants import grants_sql

    lines = grants_sql("phabricator", "gorge").splitlines()
    [index] = [i for i, line in enumerate(lines) if line.startswith("GRANT") and "`config_entry`" in line]
    assert lines[index - 1] == (
        "-- Optional: without it, values an older install left in Phorge's config database are not seen. "
        "phabricator.silent, security.outbound-blacklist, phabricator.base-uri, phd.garbage-collection and "
        "gorge.webhook.uri come from conf/local/local.json, where bin/config set writes them, read without any "
        "grant (GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG)."
    )


def test_the_web_process_grants_are_select_only_and_the_workers_keep_their_update() -> None:
    from webhook_delivery.grants import grants_sql

    web = [line for line in grants_sql("phabricator", "gorge_web", web=True).splitlines() if line.startswith("GRANT")]
    worker = [line for line in grants_sql("phabricator", "gorge").splitlines() if line.startswith("GRANT")]
    assert all(line.startswith("GRANT SELECT ON ") for line in web), "no UPDATE, no other privilege"
    assert web[:2] == [
        "GRANT SELECT ON `phabricator_herald`.`herald_webhook` TO 'gorge_web'@'%';",
        "GRANT SELECT ON `phabricator_herald`.`herald_webhookrequest` TO 'gorge_web'@'%';",
    ]
    assert worker[1] == "GRANT SELECT, UPDATE ON `phabricator_herald`.`herald_webhookrequest` TO 'gorge'@'%';"
    assert [line.split(" TO ")[0] for line in web[2:]] == [line.split(" TO ")[0] for line in worker[2:]], (
        "the same optional reads: the pages show what the workers see"
    )
