"""A rolling upgrade from the previous release to this tree, and back, as docs/operate/upgrade.md says to do it.

The previous release's tree comes from git (the CHANGELOG's newest release other than this tree's version,
then the commit that set that version in pyproject.toml: tests/support/releases.py) and runs in this
virtualenv, its worker and its web process (gunicorn) on MariaDB with Phorge's DDL, Django's tables in a
database of their own. Requests arrive the whole time, to a real receiver that records each. This tree's
`migrate` runs under the old processes; this tree's worker runs beside the old one; the old worker stops;
every request is delivered once and the old pages still answer. Then the rollback: the old worker again,
Django's database migrated back to the release's migrations, and more requests, each delivered once.
Along the way, the two workers' versions on the dashboard, in the health JSON and in build_info.

No git history (a shallow clone, a tarball) fails the test with what to do: it is never skipped."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from django.apps import apps
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from tests.support import ROOT
from tests.support.helpers import PHORGE_DB, Phorge, mysql_admin
from tests.support.processes import SiteDatabase, WorkerProcess, count_status
from tests.support.receiver import Receiver
from tests.support.releases import (
    NoRelease,
    Release,
    git,
    previous_release,
    pyproject_version,
    release_commit,
    unpack,
)
from tests.support.waiting import wait_for
from tests.support.web_process import free_port, logged_in, select_only_user, staff_account, web_process
from webhook_delivery.phorge import seeding
from webhook_delivery.version import VERSION

pytestmark = [PHORGE_DB, pytest.mark.slow]
TOKEN = "upgrade-t0ken"
STAFF = ("upgrader", "pw-upgrader-1")
PROJECT_APPS = ("delivery_status", "delivery_alerts", "phorge_auth")
WORKER_ARGS = ("--poll-interval-ms", "50", "--max-concurrent", "8", "--metrics-addr", "127.0.0.1")


@dataclass(frozen=True)
class OldTree:
    release: Release
    commit: str
    path: Path

    def migrations(self) -> set[tuple[str, str]]:
        """The project's migrations in the release's tree, from its files."""
        found = set()
        for label in PROJECT_APPS:
            folder = self.path / Path(apps.get_app_config(label).path).relative_to(ROOT) / "migrations"
            found |= {(label, path.stem) for path in folder.glob("[0-9][0-9][0-9][0-9]_*.py")}
        return found


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory: pytest.TempPathFactory) -> OldTree:
    try:
        release = previous_release(VERSION)
        commit = release_commit(release.version)
    except NoRelease as exc:
        pytest.fail(f"the previous release's tree is needed for the upgrade test: {exc}")
    return OldTree(release, commit, unpack(commit, tmp_path_factory.mktemp("release") / release.version))


@pytest.fixture
def upgrade_site() -> Iterator[SiteDatabase]:
    """Django's own tables in a throwaway database of this test only: it migrates them forward and back."""
    from tests.support.settings import TEST_DATABASE, TEST_SERVER

    name = TEST_DATABASE.replace("_herald", "_upgrade")
    admin = mysql_admin()
    cursor = admin.cursor()
    cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    yield SiteDatabase(f"{TEST_SERVER}/{name}")
    cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    admin.close()


class Feeder:
    """Queues requests for the hooks round-robin, as Phorge does, `per_second` while it runs (its own
    connection), and remembers each request's object PHID."""

    def __init__(self, hooks: list[str], per_second: int) -> None:
        self.hooks, self.per_second = hooks, per_second
        self.database = str(settings.DATABASES["phorge"]["NAME"])
        self.objects: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feeder")

    def add(self, cursor: Any, count: int) -> None:
        cursor.execute("SELECT UNIX_TIMESTAMP()")
        now = int(cursor.fetchone()[0])
        rows = []
        for _ in range(count):
            hook = self.hooks[len(self.objects) % len(self.hooks)]
            rows.append(seeding.request_row(hook, seeding.properties(triggers=[hook], flags=False), now=now))
            self.objects.append(str(rows[-1]["objectPHID"]))
        seeding.insert(cursor, seeding.REQUEST_TABLE, rows)

    def _run(self) -> None:
        connection = mysql_admin(self.database)
        try:
            while not self._stop.wait(0.2):
                self.add(connection.cursor(), max(1, self.per_second // 5))
        finally:
            connection.close()

    def start(self) -> Feeder:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert not self._thread.is_alive()


def applied(site: SiteDatabase) -> set[tuple[str, str]]:
    listed = ", ".join(f"'{label}'" for label in PROJECT_APPS)
    return {(app, name) for app, name in site.sql(f"SELECT app, name FROM django_migrations WHERE app IN ({listed})")}


def health(base: str) -> dict[str, Any]:
    answer = requests.get(f"{base}/api/webhook/health", headers={"X-Service-Token": TOKEN}, timeout=20)
    assert answer.status_code == 200, answer.text[:500]
    return dict(answer.json()["data"])


def samples(url: str, name: str) -> list[tuple[dict[str, str], float]]:
    text = requests.get(url, timeout=10).text
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


def build_info(url: str) -> set[str]:
    return {labels["version"] for labels, value in samples(url, "gorge_webhook_build_info") if value == 1}


def claims_won(port: int) -> float:
    metrics = f"http://127.0.0.1:{port}/metrics"
    return sum(value for labels, value in samples(metrics, "gorge_webhook_claims_total") if labels["result"] == "won")


def alive_versions(base: str) -> list[str]:
    """The version of each worker alive, as the health JSON of the web process at `base` gives them."""
    return sorted(str(worker["version"]) for worker in health(base)["workers"] if worker["alive"])


def beats(base: str) -> dict[str, str]:
    return {worker["worker_id"]: worker["last_seen"] for worker in health(base)["workers"]}


def pages_answer(base: str, staff: requests.Session) -> str:
    """The dashboard, the health JSON, the metrics and the probes of the web process at `base` answer; the
    dashboard's text."""
    for path in ("/healthz", "/readyz", "/metrics"):
        assert requests.get(f"{base}{path}", timeout=20).status_code == 200, path
    health(base)
    dashboard = staff.get(f"{base}/", timeout=20)
    assert dashboard.status_code == 200 and 'id="workers"' in dashboard.text, dashboard.text[:500]
    return dashboard.text


def stop(worker: WorkerProcess) -> None:
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0, worker.log.read_text()[-3000:]


# What a worker logs when Django's database refuses what it writes: the schema took away something it uses.
UNWRITABLE = {"worker.heartbeat_unwritable", "attempts.unwritable", "attempts.queue_full"}


def wrote_everything(worker: WorkerProcess) -> None:
    lines = worker.lines()
    refused = [line for line in lines if line.get("event") in UNWRITABLE or line.get("level") in ("ERROR", "CRITICAL")]
    assert lines and not refused, refused[:3]


def delivered_once(receiver: Receiver, objects: list[str]) -> None:
    counts = Counter(request.object_phid for request in receiver.requests)
    assert counts == Counter(objects), {phid: n for phid, n in counts.items() if n != 1}


def test_a_rolling_upgrade_from_the_previous_release_and_back(
    old_tree: OldTree,
    upgrade_site: SiteDatabase,
    phorge: Phorge,
    workers: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    release, old = old_tree.release, old_tree.path
    assert release.version != VERSION
    assert old_tree.migrations() >= set(release.migrations.items()), "the CHANGELOG names migrations the tree lacks"
    site = upgrade_site
    site.command("migrate", "--noinput", "-v", "0", cwd=old)
    assert applied(site) == old_tree.migrations()
    staff_account(site, *STAFF, "view_heraldwebhookrequest", cwd=old)

    with Receiver() as receiver, select_only_user() as reader:
        hooks = [phorge.hook(receiver.url(f"/hook{i}/ok"), name=f"hook {i}") for i in range(6)]
        ports = {"old": free_port(), "new": free_port()}
        web_env = {"GORGE_SERVICE_TOKEN": TOKEN}
        for web in ("old-web", "new-web"):
            (tmp_path / web).mkdir()
        feed = Feeder(hooks, 25)
        old_worker = workers("old-worker", *WORKER_ARGS, "--metrics-port", str(ports["old"]), cwd=old, **site.env)
        with web_process(site, tmp_path / "old-web", reader, cwd=old, **web_env) as old_base:
            old_staff = logged_in(old_base, *STAFF)
            old_worker.start()
            feed.start()
            try:
                wait_for(lambda: count_status(phorge, "sent") >= 50, 90, "the old worker delivering")
                assert release.version in pages_answer(old_base, old_staff)
                assert build_info(f"http://127.0.0.1:{ports['old']}/metrics") == {release.version}

                # 1. This tree's migrate under the running release: the old worker delivers and beats on, the
                # old pages answer.
                site.command("migrate", "--noinput", "-v", "0")
                assert applied(site) >= old_tree.migrations()
                after_migrate = beats(old_base)
                sent = count_status(phorge, "sent")
                wait_for(lambda: count_status(phorge, "sent") >= sent + 50, 90, "the old worker after the migrate")
                wait_for(lambda: beats(old_base) != after_migrate, 30, "the old worker's heartbeat after the migrate")
                pages_answer(old_base, old_staff)

                # 2. This tree's worker beside the old one (and its web process beside the old one).
                new_worker = workers("new-worker", *WORKER_ARGS, "--metrics-port", str(ports["new"]), **site.env)
                new_worker.start()
                with web_process(site, tmp_path / "new-web", reader, **web_env) as new_base:
                    new_staff = logged_in(new_base, *STAFF)
                    two = sorted([release.version, VERSION])
                    wait_for(lambda: alive_versions(new_base) == two, 60, "both workers alive, each with its version")
                    versions = health(new_base)["versions"]
                    assert versions == {"web": VERSION, "workers_alive": dict.fromkeys(two, 1), "mixed": True}
                    dashboard = pages_answer(new_base, new_staff)
                    assert 'id="mixed-versions" data-versions="2"' in dashboard
                    assert f'<td class="gw-version">{release.version}</td>' in dashboard
                    assert f'<td class="gw-version">{VERSION}</td>' in dashboard
                    assert build_info(f"http://127.0.0.1:{ports['new']}/metrics") == {VERSION}
                    assert build_info(f"{new_base}/metrics") == {VERSION}
                    assert build_info(f"{old_base}/metrics") == {release.version}
                    assert alive_versions(old_base) == two  # the old pages see both too
                    won = {name: claims_won(port) for name, port in ports.items()}
                    sent = count_status(phorge, "sent")
                    wait_for(lambda: count_status(phorge, "sent") >= sent + 150, 90, "both workers delivering")
                    assert all(claims_won(port) > won[name] for name, port in ports.items()), "each delivered"

                    # 3. The old worker stops; requests keep arriving, for the new one alone.
                    stop(old_worker)
                    wait_for(lambda: alive_versions(new_base) == [VERSION], 30, "one version running")
                    assert health(new_base)["versions"]["mixed"] is False
                    assert 'id="mixed-versions"' not in pages_answer(new_base, new_staff)
                    sent = count_status(phorge, "sent")
                    wait_for(lambda: count_status(phorge, "sent") >= sent + 50, 90, "the new worker alone")
            finally:
                feed.stop()
            wait_for(lambda: count_status(phorge, "sent") == len(feed.objects), 120, "every request delivered")
            delivered_once(receiver, feed.objects)
            pages_answer(old_base, old_staff)  # the old pages, after the new migrate, to the end
        started = [line for line in old_worker.lines() if line.get("event") == "worker.started"]
        assert [line["version"] for line in started] == [release.version]
        wrote_everything(old_worker)

        # 4. The rollback: the old worker again, the new one stopped, Django's database back to the release.
        again = workers("old-worker-again", *WORKER_ARGS, cwd=old, **site.env).start()
        stop(new_worker)
        for app, name in sorted(release.migrations.items()):
            site.command("migrate", app, name, "--noinput", "-v", "0")
        assert applied(site) == old_tree.migrations()
        with web_process(site, tmp_path / "old-web", reader, cwd=old, **web_env) as old_base:
            before = len(feed.objects)
            connection = mysql_admin(feed.database)
            try:
                feed.add(connection.cursor(), 100)
            finally:
                connection.close()
            wait_for(lambda: count_status(phorge, "sent") == before + 100, 90, "the old worker after the rollback")
            delivered_once(receiver, feed.objects)
            assert release.version in pages_answer(old_base, logged_in(old_base, *STAFF))
        stop(again)
        wrote_everything(again)
        wrote_everything(new_worker)


def test_the_previous_release_is_the_commit_that_set_its_version(old_tree: OldTree) -> None:
    version = old_tree.release.version
    assert pyproject_version(old_tree.commit) == version
    assert pyproject_version(f"{old_tree.commit}^") != version
    assert (old_tree.path / "pyproject.toml").read_text() == git("show", f"{old_tree.commit}:pyproject.toml")


def test_without_the_history_the_release_is_not_found_and_the_reason_is_said(tmp_path: Path) -> None:
    """A shallow clone, as CI systems make by default, and a tree with no git at all: a clear failure."""
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{ROOT}", str(shallow)], check=True, timeout=120)
    version = previous_release(VERSION).version
    with pytest.raises(NoRelease, match=r"this clone is shallow.*git fetch --unshallow"):
        release_commit(version, root=shallow)
    plain = unpack("HEAD", tmp_path / "plain")
    with pytest.raises(NoRelease, match="is not a git checkout"):
        release_commit(version, root=plain)
