"""What the queue window reads (its source's protocol: store.Store on Phorge's database, an in-memory one in the
tests) and what a job gives back to it (a Settlement)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..phorge.herald import RequestRow


class QueueSource(Protocol):
    """What the window reads (store.Store on Phorge's database; an in-memory one in the tests)."""

    def max_request_id(self) -> tuple[int, int]: ...

    def scan_after(self, after_id: int, limit: int) -> tuple[list[RequestRow], int | None]: ...

    def in_ranges(self, ranges: Sequence[tuple[int, int]], limit: int) -> tuple[list[RequestRow], int | None]: ...

    def untried(self, cursors: Sequence[tuple[str, int]], limit: int) -> tuple[list[RequestRow], int | None]: ...

    def retries(
        self, cursors: Sequence[tuple[str, int, int]], cutoff: int, limit: int
    ) -> tuple[list[RequestRow], int | None]: ...

    def next_failures(self, hooks: Sequence[str], after_epoch: int) -> dict[str, int]: ...

    def hook_phids(self) -> list[str]: ...

    def request_hooks_after(self, after: str, limit: int) -> list[str]: ...


@dataclass
class Settlement:
    """What became of the rows `QueueWindow.take` handed out to one job, built up by the job and given back
    in one `QueueWindow.settle` call: `done` are no longer queued, `retried` (id, epoch written) wait out
    their retry backoff, `fresh` are newer snapshots, `claimed` are under a claim of ours whose outcome was
    not written (they wait out the lease), `deferred` (id, db time) are left alone until then; the others
    are as they were."""

    hook_phid: str
    rows: Sequence[RequestRow]
    done: list[int] = field(default_factory=list)
    retried: list[tuple[int, int]] = field(default_factory=list)
    fresh: list[RequestRow] = field(default_factory=list)  # the window keeps no properties text
    claimed: list[int] = field(default_factory=list)
    deferred: list[tuple[int, int]] = field(default_factory=list)
