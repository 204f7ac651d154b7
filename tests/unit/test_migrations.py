"""Migrations the previous release survives (docs/develop.md): every migration of the project's apps after the
last release's (the CHANGELOG's "Django's database at X") only adds, or relaxes, or is the contract step of
a change the last release already no longer uses; and each can be undone, for a rollback. The released
migrations stay in the tree under their names. Real processes of two releases: tests/process/test_upgrade.py."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from django.apps import apps
from django.db import migrations, models
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.state import ProjectState

from tests.support.releases import Release, previous_release, releases
from webhook_delivery.version import VERSION

# Operations that leave everything the previous release reads and writes as it was.
ADDITIVE = (
    migrations.CreateModel,
    migrations.AddIndex,
    migrations.RemoveIndex,
    migrations.RenameIndex,
    migrations.RemoveConstraint,
    migrations.AlterModelOptions,
    migrations.AlterModelManagers,
    migrations.AlterModelTableComment,
)
# What an AlterField may change and still be survived: only Django's side, or a relaxation.
PYTHON_ONLY = {"default", "db_index", "db_comment"}


def project_apps() -> list[str]:
    return sorted(
        config.label
        for config in apps.get_app_configs()
        if config.name.startswith("webhook_delivery") and MigrationLoader.migrations_module(config.label)[0]
    )


@pytest.fixture(scope="module")
def loader() -> MigrationLoader:
    return MigrationLoader(None, ignore_no_migrations=True)


def _kwargs(field: models.Field[Any, Any]) -> tuple[str, dict[str, Any]]:
    _name, path, _args, kwargs = field.deconstruct()
    for attr in field.non_db_attrs:
        kwargs.pop(attr, None)
    return path, kwargs


def altered(old: models.Field[Any, Any], new: models.Field[Any, Any]) -> list[str]:
    """What an AlterField changes that the previous release may not survive."""
    old_path, before = _kwargs(old)
    new_path, after = _kwargs(new)
    if old_path != new_path:
        return [f"its type ({old_path.rsplit('.', 1)[1]} to {new_path.rsplit('.', 1)[1]})"]
    found = []
    for key in sorted(set(before) | set(after)):
        was, now = before.get(key), after.get(key)
        if was == now or key in PYTHON_ONLY:
            continue
        if key == "null" and now:
            continue  # NOT NULL relaxed
        if key == "max_length" and was is not None and now is not None and now > was:
            continue  # widened
        if key == "db_default" and was is None:
            continue  # a database default added: rows the previous release inserts get it
        found.append(f"{key} ({was!r} to {now!r})")
    return found


def refusals(
    migration: migrations.Migration, state: ProjectState, released: Iterable[Release] | None = None
) -> list[str]:
    """Why the previous release would not survive this migration, or could not be rolled back to: [] if fine.
    `state` is the project's state just before it (MigrationLoader.project_state(..., at_end=False))."""
    where = f"{migration.app_label} {migration.name}"
    found = [f"{where}: {type(op).__name__} cannot be undone" for op in migration.operations if not op.reversible]
    contract_of = getattr(migration, "contract_of", None)
    if contract_of is not None:
        versions = {release.version for release in (releases() if released is None else released)}
        if contract_of not in versions:
            found.append(
                f"{where}: contract_of = {contract_of!r} names no release in the CHANGELOG: the contract step "
                "comes in the release after the one that stopped using what it drops"
            )
        return found
    if getattr(migration, "previous_release_survives", None):
        return found  # reviewed by hand, the reason written in the migration
    for op in migration.operations:
        if isinstance(op, (*ADDITIVE, migrations.RunPython)):  # data moved: fine if it can be undone (above)
            continue
        if isinstance(op, migrations.AddField):
            field = op.field
            if field.many_to_many or field.null or field.has_db_default():
                continue
            found.append(
                f"{where}: AddField {op.model_name}.{op.name} is NOT NULL without a database default "
                "(db_default): the previous release inserts rows without it (a Python default is dropped from "
                "the column once the existing rows are filled)"
            )
        elif isinstance(op, migrations.AlterField):
            old = state.models[migration.app_label, op.model_name_lower].fields[op.name]
            if changes := altered(old, op.field):
                found.append(f"{where}: AlterField {op.model_name}.{op.name} changes {', '.join(changes)}")
        else:
            found.append(
                f"{where}: {type(op).__name__} may take away what the previous release uses: expand in one "
                "release, contract in the next (contract_of), or say why it survives (previous_release_survives)"
            )
    return found


def after_release(loader: MigrationLoader, release: Release) -> list[tuple[str, str]]:
    """The project's migrations that are not part of `release`, in the order migrate applies them."""
    released = {node for app, name in release.migrations.items() for node in loader.graph.forwards_plan((app, name))}
    leaves = [node for node in loader.graph.leaf_nodes() if node[0] in project_apps()]
    plan = [node for leaf in leaves for node in loader.graph.forwards_plan(leaf)]
    return [node for node in dict.fromkeys(plan) if node[0] in project_apps() and node not in released]


def test_the_last_release_names_its_migrations_and_this_tree_keeps_them(loader: MigrationLoader) -> None:
    release = previous_release(VERSION)
    assert sorted(release.migrations) == project_apps(), f"{release.version}'s Upgrading note lists every app"
    missing = [f"{app} {name}" for app, name in release.migrations.items() if (app, name) not in loader.graph.nodes]
    assert not missing, f"released migrations renamed or removed (never do that: a database is at them): {missing}"
    newest = releases()[0]
    if newest.version == VERSION:  # a release commit: the note says where this very tree leaves the database
        leaves = {app: name for app, name in loader.graph.leaf_nodes() if app in project_apps()}
        assert newest.migrations == leaves


def test_every_migration_since_the_last_release_keeps_it_working_and_can_be_undone(loader: MigrationLoader) -> None:
    release = previous_release(VERSION)
    found = []
    for app, name in after_release(loader, release):
        found += refusals(loader.get_migration(app, name), loader.project_state((app, name), at_end=False))
    assert found == []


def synthetic(loader: MigrationLoader, *operations: Any, **marks: str) -> tuple[migrations.Migration, ProjectState]:
    """A migration of delivery_status after its last one, with these operations and class attributes."""
    leaf = next(node for node in loader.graph.leaf_nodes() if node[0] == "delivery_status")
    migration = type("Migration", (migrations.Migration,), {"operations": list(operations), **marks})(
        "9999_probe", "delivery_status"
    )
    return migration, loader.project_state(leaf)


def char(**kwargs: Any) -> models.CharField[Any, Any]:
    return models.CharField(max_length=kwargs.pop("max_length", 64), **kwargs)


SURVIVED = {
    "a new table": migrations.CreateModel("Probe", [("id", models.BigAutoField(primary_key=True))]),
    "a nullable column": migrations.AddField("workerheartbeat", "note", models.TextField(null=True)),
    "a column with a database default": migrations.AddField("workerheartbeat", "zone", char(db_default="")),
    "an index": migrations.AddIndex("workerheartbeat", models.Index(fields=["hostname"], name="probe_idx")),
    "a label": migrations.AlterField(
        "workerheartbeat", "hostname", models.CharField(max_length=255, verbose_name="host")
    ),
    "a wider column": migrations.AlterField("workerheartbeat", "hostname", models.CharField(max_length=300)),
    "NOT NULL relaxed": migrations.AlterField("workerheartbeat", "pid", models.PositiveIntegerField(null=True)),
    "data moved, both ways": migrations.RunPython(migrations.RunPython.noop, migrations.RunPython.noop),
}
REFUSED = {
    "a column dropped": (migrations.RemoveField("workerheartbeat", "state"), "RemoveField may take away"),
    "a table dropped": (migrations.DeleteModel("requeuenotice"), "DeleteModel may take away"),
    "a column renamed": (migrations.RenameField("workerheartbeat", "pid", "process"), "RenameField may take"),
    "a table renamed": (migrations.RenameModel("RequeueNotice", "Notice"), "RenameModel may take away"),
    "NOT NULL, a Python default only": (
        migrations.AddField("workerheartbeat", "zone", char(default="")),
        "AddField workerheartbeat.zone is NOT NULL without a database default",
    ),
    "made NOT NULL": (
        migrations.AlterField("operatoraction", "taken_at", models.DateTimeField()),
        "AlterField operatoraction.taken_at changes null (True to None)",
    ),
    "narrowed": (
        migrations.AlterField("workerheartbeat", "hostname", models.CharField(max_length=100)),
        "changes max_length (255 to 100)",
    ),
    "another type": (
        migrations.AlterField("workerheartbeat", "pid", models.CharField(max_length=10)),
        "changes its type (PositiveIntegerField to CharField)",
    ),
    "a constraint": (
        migrations.AddConstraint(
            "workerheartbeat", models.CheckConstraint(condition=models.Q(pid__gt=1), name="probe_pid")
        ),
        "AddConstraint may take away",
    ),
    "SQL": (migrations.RunSQL("SELECT 1", migrations.RunSQL.noop), "RunSQL may take away"),
    "data moved one way": (migrations.RunPython(migrations.RunPython.noop), "RunPython cannot be undone"),
}


@pytest.mark.parametrize("what", SURVIVED)
def test_the_rule_lets_through_what_the_previous_release_survives(loader: MigrationLoader, what: str) -> None:
    assert refusals(*synthetic(loader, SURVIVED[what])) == []


@pytest.mark.parametrize("what", REFUSED)
def test_the_rule_refuses_what_the_previous_release_would_not_survive(loader: MigrationLoader, what: str) -> None:
    operation, says = REFUSED[what]
    (refusal,) = refusals(*synthetic(loader, operation))
    assert refusal.startswith("delivery_status 9999_probe: ") and says in refusal


def test_a_contract_step_names_a_release_that_already_stopped_using_what_it_drops(loader: MigrationLoader) -> None:
    drop = migrations.RemoveField("workerheartbeat", "state")
    released = [Release("0.3.0", "2027-01-01", {}), Release("0.2.0", "2026-12-04", {})]
    assert refusals(*synthetic(loader, drop, contract_of="0.3.0"), released) == []
    (refusal,) = refusals(*synthetic(loader, drop, contract_of="0.4.0"), released)
    assert "contract_of = '0.4.0' names no release in the CHANGELOG" in refusal
    assert refusals(*synthetic(loader, drop, previous_release_survives="nothing reads it since 0.2.0")) == []
    one_way = migrations.RunPython(migrations.RunPython.noop)
    (refusal,) = refusals(*synthetic(loader, one_way, contract_of="0.3.0"), released)
    assert "cannot be undone" in refusal  # a contract step must still roll back


def test_the_rule_would_have_caught_what_the_history_did_before_it(loader: MigrationLoader) -> None:
    """Before the rule: NOT NULL columns without a database default (an older watcher's inserts fail on them
    under MariaDB's strict mode), and a column's type widened, which needs a reviewer's word."""
    found = [
        refusal
        for app in project_apps()
        for (label, name) in loader.graph.forwards_plan(next(n for n in loader.graph.leaf_nodes() if n[0] == app))
        if label == app
        for refusal in refusals(loader.get_migration(label, name), loader.project_state((label, name), at_end=False))
    ]
    assert [refusal.split(": ", 1)[0] for refusal in found] == [
        "delivery_alerts 0002_hold_and_subject",  # alertnotification.subject
        "delivery_alerts 0003_channel_backoff",  # alertchannel.failures
        "delivery_alerts 0003_channel_backoff",  # alertchannel.refusals
        "delivery_alerts 0003_channel_backoff",  # alertnotification.given_up
        "delivery_alerts 0005_task_id_fits_phorge",  # alerttask.task_id to a bigint
    ]


def test_the_changelogs_releases_are_read_as_written() -> None:
    text = (
        "## Unreleased\n\n## 0.3.0 (2027-01-05)\n\n* Django's database at 0.3.0: `delivery_status 0008_x`,\n"
        "  `delivery_alerts 0005_y`, `phorge_auth 0001_initial`.\n\n## 0.2.0 (2026-12-04)\n\nnothing\n"
    )
    assert releases(text) == [
        Release(
            "0.3.0",
            "2027-01-05",
            {"delivery_status": "0008_x", "delivery_alerts": "0005_y", "phorge_auth": "0001_initial"},
        ),
        Release("0.2.0", "2026-12-04", {}),
    ]
    assert (
        previous_release("0.3.0", text).version == "0.2.0" and previous_release("0.4.0.dev0", text).version == "0.3.0"
    )
