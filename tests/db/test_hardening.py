"""Findings of the security review, each proven fixed with the real parts: the `mariadb` client fed the
output of print_grants, a real Worker and receiver, a real MariaDB database for Django's own tables."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.conf import settings

from tests.helpers import PHORGE_DB, mysql_admin, worker_env

ROOT = Path(__file__).resolve().parent.parent
PID = os.getpid()


def _mariadb_args(*extra: str) -> list[str]:
    db = settings.DATABASES["phorge"]
    args = ["mariadb", "-h", str(db["HOST"] or "127.0.0.1"), "-P", str(db["PORT"] or 3306), "-u", str(db["USER"])]
    if db["PASSWORD"]:
        args.append(f"-p{db['PASSWORD']}")
    return [*args, *extra]


def _print_grants_into_mariadb(*args: str, env: dict[str, str] | None = None, client: tuple[str, ...] = ()) -> Any:
    """`manage.py print_grants ARGS | mariadb -u root`, as the README tells administrators to run it."""
    grants = subprocess.Popen(
        [sys.executable, "manage.py", "print_grants", *args],
        cwd=ROOT,
        env=env or worker_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert grants.stdout is not None
    sql = subprocess.run(_mariadb_args(*client), stdin=grants.stdout, capture_output=True, text=True, timeout=60)
    grants.stdout.close()
    stderr = grants.stderr.read().decode() if grants.stderr else ""
    grants.wait(60)
    return grants.returncode, stderr, sql


def _databases(admin: Any) -> set[str]:
    with admin.cursor() as cursor:
        cursor.execute("SHOW DATABASES")
        return {name for (name,) in cursor.fetchall()}


@pytest.fixture
def scratch() -> Iterator[tuple[Any, str]]:
    """A database the hostile input tries to drop: gwtest<pid>_scratch, made and dropped here."""
    name = f"gwtest{PID}_scratch"
    admin = mysql_admin()
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")
    yield admin, name
    with admin.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    admin.close()


# -- 1. print_grants piped into `mariadb -u root` runs nothing but GRANTs ----------------------------------


@pytest.mark.database_server
@pytest.mark.parametrize(
    "user",
    [
        "gorge\nDROP DATABASE {scratch};\n-- ",
        "gorge\rDROP DATABASE {scratch};\r-- ",
        "gorge\u2028DROP DATABASE {scratch};",
    ],
)
def test_print_grants_refuses_a_hostile_user_argument(scratch: tuple[Any, str], user: str) -> None:
    admin, name = scratch
    status, stderr, sql = _print_grants_into_mariadb("--user", user.format(scratch=name), "--required-only")
    assert status == 1
    assert "refusing --user: the user name contains the control character" in stderr
    assert "Traceback" not in stderr
    assert sql.returncode == 0, sql.stderr  # nothing reached the client: nothing ran
    assert name in _databases(admin)


@pytest.mark.database_server
def test_print_grants_refuses_a_hostile_user_in_the_database_url(scratch: tuple[Any, str]) -> None:
    admin, name = scratch
    db = settings.DATABASES["phorge"]
    hostile = quote(f"gorge\nDROP DATABASE {name};\n-- ", safe="")
    env = worker_env(GORGE_WEBHOOK_DATABASE_URL=f"mysql://{hostile}@{db['HOST']}:{db['PORT']}/{db['NAME']}")
    status, stderr, sql = _print_grants_into_mariadb("--required-only", env=env)
    assert status == 1
    assert "refusing the user of GORGE_WEBHOOK_DATABASE_URL" in stderr
    assert "control character '\\n'" in stderr
    assert "Traceback" not in stderr
    assert sql.returncode == 0, sql.stderr
    assert name in _databases(admin)


@pytest.mark.database_server
@pytest.mark.parametrize("host", ["%\nDROP DATABASE {scratch};\n-- ", "%' ; DROP DATABASE {scratch}; -- ", ""])
def test_print_grants_refuses_a_hostile_host(scratch: tuple[Any, str], host: str) -> None:
    admin, name = scratch
    status, stderr, _sql = _print_grants_into_mariadb("--user", "gorge", "--host", host.format(scratch=name))
    assert status == 1
    assert "refusing --host: the host" in stderr
    assert "Traceback" not in stderr
    assert name in _databases(admin)


def test_grants_sql_refuses_control_characters_and_impossible_names() -> None:
    from webhook_delivery.grants import AccountError, grants_sql

    for user in ["a\nb", "a\tb", "a\x1bb", "a\x00b", "a\u200bb", "", "u" * 129]:
        with pytest.raises(AccountError):
            grants_sql("phorge", user)
    for host in ["a\nb", "a b", "a'b", "", "h" * 256]:
        with pytest.raises(AccountError):
            grants_sql("phorge", "gorge", host)
    assert "'u" + "u" * 127 + "'@" in grants_sql("phorge", "u" * 128)


@PHORGE_DB
@pytest.mark.parametrize("suffix", ["_grantee", "_o'b\\x ; DROP DATABASE {scratch}; -- "])
@pytest.mark.parametrize("sql_mode", ["", "NO_BACKSLASH_ESCAPES"])
@pytest.mark.slow
def test_print_grants_piped_into_mariadb_applies_the_grants(
    scratch: tuple[Any, str], suffix: str, sql_mode: str
) -> None:
    admin, name = scratch
    user = f"gwtest{PID}" + suffix.format(scratch=name)
    account = "'" + user.replace("\\", "\\\\").replace("'", "\\'") + "'@'%'"
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE USER {account} IDENTIFIED BY 'not-used-1234'")
    try:
        client = (f"--init-command=SET SESSION sql_mode='{sql_mode}'",) if sql_mode else ()
        status, stderr, sql = _print_grants_into_mariadb("--user", user, "--required-only", client=client)
        assert status == 0, stderr
        assert sql.returncode == 0, sql.stderr
        with admin.cursor() as cursor:
            cursor.execute(f"SHOW GRANTS FOR {account}")
            grants = [row[0] for row in cursor.fetchall()]
        herald = settings.DATABASES["phorge"]["NAME"]
        assert any(f"GRANT SELECT ON `{herald}`.`herald_webhook` TO" in grant for grant in grants), grants
        assert any(f"GRANT SELECT, UPDATE ON `{herald}`.`herald_webhookrequest` TO" in grant for grant in grants)
        assert len(grants) == 3  # USAGE plus the two required grants, nothing else
        assert name in _databases(admin)
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP USER IF EXISTS {account}")


# -- 3. transactionPHIDs keys that are digits only for Unicode: unsendable, no traceback -------------------

UNICODE_DIGIT_KEYS = {
    "superscript two": '{"retry":"forever","transactionPHIDs":{"\\u00b2":"PHID-XACT-TASK-aaaaaaaaaaaaaaa"}}',
    "arabic-indic three": '{"retry":"never","transactionPHIDs":{"1":"PHID-XACT-TASK-a","\\u0663":"PHID-XACT-TASK-b"}}',
}


@PHORGE_DB
@pytest.mark.parametrize("name", sorted(UNICODE_DIGIT_KEYS))
def test_a_unicode_digit_transaction_key_is_unsendable_without_a_traceback(
    phorge: Any, receiver: Any, delivery_config: Any, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    import dataclasses
    import logging

    from webhook_delivery.worker.loop import build_worker

    caplog.set_level(logging.DEBUG)
    properties = UNICODE_DIGIT_KEYS[name]
    hook = phorge.hook(receiver.url("/unicode-keys/ok"))
    phid = phorge.request(hook, properties=properties)
    build_worker(dataclasses.replace(delivery_config, retry_backoff_sec=0), once=True).run()
    row = phorge.row(phid)
    assert (row["status"], row["lastRequestResult"], row["lastRequestEpoch"]) == ("failed", "none", 0)
    assert row["properties"] == properties  # byte for byte as stored
    assert receiver.requests == []  # settled before any call
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    assert not any("unexpected error" in r.getMessage() for r in caplog.records)
    reasons = [str(r.__dict__.get("reason", "")) + r.getMessage() for r in caplog.records]
    assert any("not a transaction ID" in reason for reason in reasons), reasons


def test_transaction_ids_of_any_length_are_ordered_without_int() -> None:
    from webhook_delivery.phorge.payload import transactions_newest_first

    long_id = "9" * 5000  # beyond int()'s 4300 digits
    stored = {"2": "PHID-b", long_id: "PHID-long", "010": "PHID-ten", "1": "PHID-a"}
    assert transactions_newest_first(stored) == ["PHID-long", "PHID-ten", "PHID-b", "PHID-a"]
    with pytest.raises(ValueError, match="not a transaction ID"):
        transactions_newest_first({"\u00b2": "PHID-x"})


# -- 2. requeue_webhooks: times range-checked, Phorge's text escaped on the terminal, text logs escaped -----

HUGE_TIMES = [
    ("--since", "99999999999999999999d", "is out of range"),
    ("--until", "9999-12-31T23:59:59-23:59", "is out of range"),
    ("--since", "9" * 5000, "is not a time"),
    ("--since", "9" * 5000 + "d", "is out of range"),
    ("--until", "1969-12-31T23:59:59", "is out of range"),
]


@PHORGE_DB
@pytest.mark.parametrize(("option", "value", "says"), HUGE_TIMES, ids=[t[1][:30] for t in HUGE_TIMES])
def test_requeue_refuses_times_out_of_range_with_a_clear_error(phorge: Any, option: str, value: str, says: str) -> None:
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError) as caught:
        call_command("requeue_webhooks", option, value, "--dry-run")
    message = str(caught.value)
    assert message.startswith(f"{option} ") and says in message
    assert len(message) < 300  # the value is shortened, not repeated 5,000 digits long


@PHORGE_DB
def test_requeue_exits_with_an_error_and_no_traceback_for_a_huge_age(phorge: Any) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "requeue_webhooks", "--since", "99999999999999999999d", "--dry-run"],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "--since '99999999999999999999d' is out of range" in done.stderr


def _unsafe(text: str, ours: str = "\n") -> list[str]:
    """The control characters in `text` but those the output itself uses (`ours`)."""
    return [c for c in text if (ord(c) < 0x20 and c not in ours) or 0x7F <= ord(c) <= 0x9F or c == "\u202e"]


@PHORGE_DB
def test_requeue_escapes_hook_names_and_phorge_text_on_the_terminal(phorge: Any) -> None:
    import io

    from django.core.management import CommandError, call_command

    forged = "x\x1b[2K\rRequeued 999 requests.\u202e\x07"
    hook = phorge.hook("http://127.0.0.1:9/", name=forged)
    at = phorge.now() - 60
    phorge.request(
        hook,
        status="failed",
        properties='{"retry":"never","transactionPHIDs":[],"triggerPHIDs":[],"errorType":"http","errorCode":503}',
        lastRequestResult="fail",
        lastRequestEpoch=at,
        dateModified=at,
    )
    out = io.StringIO()
    call_command("requeue_webhooks", "--dry-run", stdout=out)
    text = out.getvalue()
    assert _unsafe(text, ours="\n\t") == []  # tabs separate the columns
    assert "x\\x1b[2K\\rRequeued 999 requests.\\u202e\\x07" in text
    assert not any(line.startswith("Requeued") for line in text.splitlines())
    phorge.execute("UPDATE herald_webhook SET status = 'disabled' WHERE phid = %s", [hook])
    with pytest.raises(CommandError) as caught:  # errors that name a hook escape its name too
        call_command("requeue_webhooks", "--hook", hook, "--dry-run", stdout=io.StringIO())
    assert _unsafe(str(caught.value)) == [] and "\\x1b[2K" in str(caught.value)


def test_printable_escapes_controls_and_keeps_other_text() -> None:
    from webhook_delivery.terminal import printable

    assert printable("Ünïcode ✓ name") == "Ünïcode ✓ name"
    assert printable("a\x1b[31mb\x07\x00\x7f\x9b\r\n\t\u2028\u202e\ud800") == (
        "a\\x1b[31mb\\x07\\x00\\x7f\\x9b\\r\\n\\t\\u2028\\u202e\\ud800"
    )
    assert printable("line one\nline\x1b two", keep_newlines=True) == "line one\nline\\x1b two"


@PHORGE_DB
def test_text_log_lines_escape_control_characters_from_phorge_rows(phorge: Any, delivery_config: Any) -> None:
    import dataclasses
    import json
    import logging

    from tests.receiver import Receiver
    from webhook_delivery.logformat import JsonFormatter, TextFormatter
    from webhook_delivery.worker.loop import build_worker

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    evil = "PHID-HWBR-\x1b]0;owned\x07\x1b[2K\rforged\x7f\x85"
    handler = Keep()
    logging.getLogger("webhook_delivery").addHandler(handler)
    try:
        with Receiver() as receiver:
            hook = phorge.hook(receiver.url("/ctl/s503"))
            phorge.request(hook, phid=evil)
            build_worker(dataclasses.replace(delivery_config, retry_backoff_sec=0), once=True).run()
    finally:
        logging.getLogger("webhook_delivery").removeHandler(handler)
    failed = [r for r in records if r.__dict__.get("request") == evil]
    assert failed, [r.getMessage() for r in records]
    for record in failed:
        line = TextFormatter().format(record)
        assert _unsafe(line) == [] and "\n" not in line, repr(line)
        assert 'request="PHID-HWBR-\\u001b]0;owned\\u0007\\u001b[2K\\rforged\\u007f\\u0085"' in line
        entry = JsonFormatter().format(record)
        assert json.loads(entry)["request"] == evil  # JSON already escapes: still the same value
    record = logging.LogRecord("webhook_delivery", logging.ERROR, "", 0, "bad \x1b[2K name", None, None)
    assert TextFormatter().format(record).endswith("bad \\x1b[2K name")


# -- 5. the opt-in delivery id: webhook-id, the request's PHID, on configured hooks only -------------------

PHORGE_HEADERS = ["Host", "User-Agent", "Accept", "Content-Type", "X-Phabricator-Webhook-Signature"]


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


@PHORGE_DB
def test_the_delivery_id_is_sent_only_for_configured_hooks_and_is_the_same_on_every_retry(
    phorge: Any, receiver: Any, delivery_config: Any
) -> None:
    import dataclasses

    from webhook_delivery.phorge.delivery_id import parse_delivery_id_hooks
    from webhook_delivery.worker.loop import build_worker

    chosen = phorge.hook(receiver.url("/dedup/s503"))
    other = phorge.hook(receiver.url("/plain/ok"))
    redirected = phorge.hook(receiver.url("/dedup-moved/r307"))
    retried = phorge.request(chosen, retry="forever")
    plain = phorge.request(other)
    moved = phorge.request(redirected)
    config = dataclasses.replace(
        delivery_config, retry_backoff_sec=0, delivery_id_hooks=parse_delivery_id_hooks(f"{chosen},{redirected}")
    )
    build_worker(config, once=True).run()  # the first attempt fails (503): the row stays queued, to be retried
    assert phorge.row(retried)["status"] == "queued"
    phorge.execute("UPDATE herald_webhook SET webhookURI = %s WHERE phid = %s", [receiver.url("/dedup/ok"), chosen])
    build_worker(config, once=True).run()
    assert phorge.row(retried)["status"] == "sent"

    to_chosen = [r for r in receiver.requests if r.path.startswith("/dedup/")]
    paths = [r.path for r in to_chosen]
    assert paths[-1] == "/dedup/ok" and len(paths) >= 2 and set(paths[:-1]) == {"/dedup/s503"}
    assert [r.header("webhook-id") for r in to_chosen] == [retried] * len(to_chosen)
    assert len({r.body for r in to_chosen}) == 1
    names = [name for name, _ in to_chosen[0].headers]
    assert names == [*PHORGE_HEADERS, "webhook-id", "Accept-Encoding", "Content-Length"]  # libcurl's order

    hops = [r for r in receiver.requests if r.path.startswith("/dedup-moved/")]
    assert [r.path for r in hops] == ["/dedup-moved/r307", "/dedup-moved/redirected"]
    assert [r.header("webhook-id") for r in hops] == [moved, moved]  # every hop

    unlisted = [r for r in receiver.requests if r.path.startswith("/plain/")]
    assert len(unlisted) == 1 and unlisted[0].header("webhook-id") is None
    assert [name for name, _ in unlisted[0].headers] == [*PHORGE_HEADERS, "Accept-Encoding", "Content-Length"]
    assert phorge.row(plain)["status"] == "sent"


@PHORGE_DB
def test_no_delivery_id_by_default_and_for_every_hook_with_a_star(
    phorge: Any, receiver: Any, delivery_config: Any
) -> None:
    import dataclasses

    from webhook_delivery.phorge.delivery_id import ALL
    from webhook_delivery.worker.loop import build_worker

    assert settings.GORGE_WEBHOOK.delivery_id_hooks.off  # unset: off
    hook = phorge.hook(receiver.url("/default/ok"))
    first = phorge.request(hook)
    build_worker(delivery_config, once=True).run()
    second = phorge.request(hook)
    build_worker(dataclasses.replace(delivery_config, delivery_id_hooks=ALL), once=True).run()
    assert [r.header("webhook-id") for r in receiver.requests] == [None, second]
    assert phorge.row(first)["status"] == phorge.row(second)["status"] == "sent"


@PHORGE_DB
def test_the_delivery_id_is_the_same_when_a_failed_request_is_requeued(
    phorge: Any, receiver: Any, delivery_config: Any
) -> None:
    import dataclasses
    import io

    from django.core.management import call_command

    from webhook_delivery.phorge.delivery_id import ALL
    from webhook_delivery.worker.loop import build_worker

    hook = phorge.hook(receiver.url("/again/s500"))
    phid = phorge.request(hook, retry="never")
    config = dataclasses.replace(delivery_config, delivery_id_hooks=ALL)
    build_worker(config, once=True).run()
    assert phorge.row(phid)["status"] == "failed"
    phorge.execute("UPDATE herald_webhook SET webhookURI = %s WHERE phid = %s", [receiver.url("/again/ok"), hook])
    call_command("requeue_webhooks", "--hook", hook, stdout=io.StringIO())
    build_worker(config, once=True).run()
    assert phorge.row(phid)["status"] == "sent"
    assert [(r.path, r.header("webhook-id")) for r in receiver.requests] == [("/again/s500", phid), ("/again/ok", phid)]


# -- 4. the attempt log stores what Django's database can hold, and one bad record costs only itself --------

GOOD = [f"good{i}" for i in range(6)] + [f"later{i}" for i in range(3)]


def _drive_attempt_log(database_url: str, prefix: str) -> dict[str, Any]:
    import json

    env = worker_env(DATABASE_URL=database_url, GORGE_WEBHOOK_ATTEMPT_LOG_BODY_BYTES="64", LOG_FORMAT="text")
    migrated = subprocess.run(
        [sys.executable, "manage.py", "migrate", "delivery_status", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    done = subprocess.run(
        [sys.executable, "-m", "tests.attempt_log_driver", prefix],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["stderr"] = done.stderr
    return result


def _check_stored(rows: dict[str, tuple[str, str, str]], result: dict[str, Any], prefix: str) -> None:
    """rows: request_phid -> (object_phid, hook_phid, response_prefix), as the database holds them."""
    assert result["alive_after_first_batch"] is True
    for name in GOOD:
        assert f"PHID-HWBR-{prefix}{name}" in rows, name  # no bad record cost a good one
    assert rows[f"PHID-HWBR-{prefix}nul"] == ("PHID-TASK-\\x00x", "PHID-HWBH-driver", "a\\x00b")
    assert f"PHID-HWBR-{prefix}toobig" not in rows  # counted lost, costing nobody else
    assert result["lost"] == 1.0
    assert len(rows) == len(GOOD) + 4
    said = [line for line in result["stderr"].splitlines() if "attempt log:" in line]
    assert len(said) == 1 and "a record cannot be stored" in said[0], result["stderr"][-3000:]


@pytest.mark.database_server
@pytest.mark.slow
def test_attempt_log_on_a_latin1_mariadb_database_stores_every_good_record() -> None:
    db = settings.DATABASES["phorge"]
    name = f"gwtest{PID}_site"
    admin = mysql_admin()
    with admin.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET latin1 COLLATE latin1_swedish_ci")
    try:
        auth = str(db["USER"]) + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
        result = _drive_attempt_log(f"mysql://{auth}@{db['HOST']}:{db['PORT']}/{name}", "my")
        with admin.cursor() as cursor:
            cursor.execute(
                "SELECT CHARACTER_SET_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                "AND TABLE_NAME = 'delivery_status_deliveryattempt' AND COLUMN_NAME = 'response_prefix'",
                [name],
            )
            assert cursor.fetchone() == ("latin1",)  # the case under test: not utf8mb4
            cursor.execute(
                f"SELECT request_phid, object_phid, hook_phid, response_prefix "
                f"FROM `{name}`.delivery_status_deliveryattempt"
            )
            rows = {phid: (obj, hook, body) for phid, obj, hook, body in cursor.fetchall()}
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin.close()
    _check_stored(rows, result, "my")
    assert rows["PHID-HWBR-myemoji"] == ("PHID-TASK-driver", "PHID-HWBH-?", "ok ? done")  # latin1 has no emoji
    assert rows["PHID-HWBR-myaccents"][2] == "café ñ"  # what latin1 holds is kept
    assert rows["PHID-HWBR-mysurrogate"][2] == "half ? pair"


@pytest.mark.database_server
@pytest.mark.slow
def test_attempt_log_on_postgresql_stores_nul_escaped_and_every_good_record() -> None:
    psycopg = pytest.importorskip("psycopg")
    server = "postgresql://postgres@127.0.0.1:5432"
    try:
        admin = psycopg.connect(f"{server}/postgres", autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL at 127.0.0.1:5432: {exc}")
    name = f"gwtest{PID}_site"
    admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
    admin.execute(f"CREATE DATABASE \"{name}\" ENCODING 'UTF8' TEMPLATE template0")
    try:
        result = _drive_attempt_log(f"{server}/{name}", "pg")
        with psycopg.connect(f"{server}/{name}") as site:
            found = site.execute(
                "SELECT request_phid, object_phid, hook_phid, response_prefix FROM delivery_status_deliveryattempt"
            ).fetchall()
        rows = {phid: (obj, hook, body) for phid, obj, hook, body in found}
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
    _check_stored(rows, result, "pg")
    assert rows["PHID-HWBR-pgemoji"] == ("PHID-TASK-driver", "PHID-HWBH-\U0001f600", "ok \U0001f600 done")
    assert rows["PHID-HWBR-pgsurrogate"][2] == "half \ufffd pair"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_record_that_fails_with_a_non_database_error_costs_only_itself_and_the_writer_lives_on(
    delivery_config: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import logging
    import time

    from webhook_delivery.records.models import DeliveryAttempt
    from webhook_delivery.worker.attempts import FLUSH_SEC, AttemptLog, AttemptRecord

    def record(phid: str, started_at: float) -> AttemptRecord:
        return AttemptRecord(phid, "PHID-HWBH-x", "PHID-TASK-x", started_at, 1.0, "sent", "okay", "http", "200", 200)

    caplog.set_level(logging.INFO, logger="webhook_delivery")
    log = AttemptLog(delivery_config, "w")
    now = time.time()
    for item in [record("PHID-HWBR-a", now), record("PHID-HWBR-nan", float("nan")), record("PHID-HWBR-b", now)]:
        log.record(item)  # the NaN time raises ValueError (not a DatabaseError) while the batch is built
    time.sleep(FLUSH_SEC * 2.5)
    assert log._thread.is_alive()
    log.record(record("PHID-HWBR-later", time.time()))
    log.close()
    stored = set(DeliveryAttempt.objects.values_list("request_phid", flat=True))
    assert stored == {"PHID-HWBR-a", "PHID-HWBR-b", "PHID-HWBR-later"}
    said = [r for r in caplog.records if r.getMessage().startswith("attempt log:")]
    assert len(said) == 1 and "a record cannot be stored" in said[0].getMessage()
