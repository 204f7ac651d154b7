"""The staff dashboard's content: every read it needs, composed once, and which hooks it shows first."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import DeliveryConfig
from ..phorge.config import PhorgeConfig
from ..phorge.delegation import Delegation
from ..phorge.php_guard import RECENT_ARCHIVE_SEC
from ..reads import herald as selectors
from ..reads import phorge_status, queue, replica
from ..reads.attempt_digest import DeliverySeries, series_of
from ..reads.health import HookHealth, QueueHealth
from ..reads.herald import RecentFailure
from ..reads.replica import NO_REPLICA, ReplicaState
from ..records import heartbeat
from ..records.heartbeat import WorkerStatus
from ..state import PhpDelivery, TaskWhileDelegated

HOOKS_SHOWN = 200
_ATTENTION = {"backoff": 0, "failing": 1, "misconfigured": 2, "ok": 3, "disabled": 4}


@dataclass(frozen=True)
class Dashboard:
    health: QueueHealth
    series: DeliverySeries
    failures: list[RecentFailure]
    workers: list[WorkerStatus]
    php: PhpDelivery
    due_left_to_php: int | None = None  # read only while Phorge's PHP worker is active
    attempt_log: bool = True  # the chart draws this service's attempts: none are kept when the log is off
    phorge_uri: str | None = None  # phabricator.base-uri, for links into Phorge's pages
    settings: PhorgeConfig | None = None  # Phorge's own switches in force; None: its database is unreachable
    replica: ReplicaState = NO_REPLICA  # where these reads came from

    @property
    def alive_workers(self) -> int:
        return sum(1 for worker in self.workers if worker.alive)

    @property
    def versions_running(self) -> dict[str, int]:
        """The alive workers by version; two or more keys: workers of two versions run at once."""
        return heartbeat.versions_running(self.workers)

    @property
    def last_worker(self) -> WorkerStatus | None:
        """The worker heard from last, alive or not (the table lists the last day's)."""
        return max(self.workers, key=lambda worker: worker.last_seen, default=None)

    @property
    def paused(self) -> str | None:
        """Why nothing is delivered, as the running workers read Phorge's settings (their heartbeat says): they
        are what delivers, and may be given Phorge's local file when this process is not. This process's own
        reading only while no worker runs."""
        alive = [worker for worker in self.workers if worker.alive]
        if not alive:
            return None if self.settings is None else self.settings.paused_reason()
        paused = [worker for worker in alive if worker.beat.delivery_paused]
        if not paused:
            return None
        said = f"{paused[0].beat.delivery_paused} (the worker {paused[0].worker_id} says so)"
        return said if len(paused) == len(alive) else f"{len(paused)} of {len(alive)} workers deliver nothing: {said}"

    @property
    def paused_here_only(self) -> str | None:
        """This process's own reading says nothing is delivered while the running workers deliver: why it
        cannot tell (the workers' reading is the truth)."""
        mine = None if self.settings is None else self.settings.paused_reason()
        return mine if mine and self.alive_workers and self.paused is None else None

    @property
    def delegation(self) -> Delegation | None:
        """Whether Phorge hands delivery to this service; None: its settings cannot be read now."""
        return None if self.settings is None else self.settings.delegation

    @property
    def task_while_delegated(self) -> TaskWhileDelegated | None:
        """The newest request a worker saw get a PHP task although delivery is delegated, in the last 15
        minutes and while Phorge's settings still say so: Phorge's side of the handover is not in force."""
        if self.delegation is None or self.delegation.state != "delegated":
            return None
        seen = (worker.beat.php_task_while_delegated for worker in self.workers)
        latest = max((one for one in seen if one is not None), key=lambda one: one.seen, default=None)
        return latest if latest is not None and latest.seen >= self.health.now - RECENT_ARCHIVE_SEC else None

    @property
    def hooks_shown(self) -> list[HookHealth]:
        """Hooks needing attention first, then the busiest; at most HOOKS_SHOWN rows on the page."""
        ranked = sorted(
            self.health.hooks, key=lambda hook: (_ATTENTION[hook.state], -hook.due, -hook.queued, hook.name)
        )
        return ranked[:HOOKS_SHOWN]

    @property
    def hooks_hidden(self) -> int:
        return max(0, len(self.health.hooks) - HOOKS_SHOWN)


@selectors.uncommitted_reads
def dashboard(config: DeliveryConfig) -> Dashboard:
    """Everything the dashboard shows, Phorge's reads in one READ UNCOMMITTED transaction."""
    health = queue.queue_health(config)
    resolved = phorge_status.phorge_settings()
    php = phorge_status.php_delivery_state()
    return Dashboard(
        health=health,
        series=health.attempts.series if health.attempts is not None else series_of({}, health.now),
        failures=selectors.recent_failures(health),
        workers=heartbeat.workers(),
        php=php,
        due_left_to_php=selectors.due_left_to_php(health, config) if php.state == "active" else None,
        attempt_log=config.attempt_log,
        phorge_uri=None if resolved is None else resolved.base_uri.value,
        settings=resolved,
        replica=replica.state(),
    )
