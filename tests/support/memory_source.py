"""An in-memory QueueSource with the semantics of store.Store's reads, for the window's unit tests.

It also counts what each read touched, so tests can check that a poll never reads retained history.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

from webhook_delivery.phorge.herald import RequestRow


class MemorySource:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now
        self.rows: dict[int, RequestRow] = {}
        self.hook_table: list[str] = []
        self.next_id = 1
        self.touched: Counter[str] = Counter()  # rows each kind of read looked at

    # -- writing, as Phorge and the deliverer would --

    def add(self, hook: str, *, status: str = "queued", result: str = "none", epoch: int = 0, **extra: int) -> int:
        row_id = extra.pop("id", self.next_id)
        self.next_id = max(self.next_id, row_id + 1)
        created = extra.pop("created", self.now)
        modified = extra.pop("modified", created if result == "none" else max(created, epoch))
        self.rows[row_id] = RequestRow(
            row_id, f"PHID-HWBR-{row_id:020d}", hook, "PHID-TASK-x", status, result, epoch, created, modified
        )
        if hook not in self.hook_table and extra.pop("listed", 1):
            self.hook_table.append(hook)
        return row_id

    def update(self, row_id: int, **changes: object) -> None:
        self.rows[row_id] = dataclasses.replace(self.rows[row_id], **changes)  # type: ignore[arg-type]

    def send(self, row_id: int) -> None:
        self.update(row_id, status="sent", last_result="okay", last_epoch=self.now, date_modified=self.now)

    def fail(self, row_id: int) -> None:
        self.update(row_id, last_result="fail", last_epoch=self.now, date_modified=self.now)

    # -- QueueSource --

    def _clock(self, rows: list[RequestRow]) -> tuple[list[RequestRow], int | None]:
        return rows, (self.now if rows else None)

    def max_request_id(self) -> tuple[int, int]:
        return max(self.rows, default=0), self.now

    def scan_after(self, after_id: int, limit: int) -> tuple[list[RequestRow], int | None]:
        found = sorted(i for i in self.rows if i > after_id)[:limit]
        self.touched["scan"] += len(found)
        return self._clock([self.rows[i] for i in found])

    def in_ranges(self, ranges: Sequence[tuple[int, int]], limit: int) -> tuple[list[RequestRow], int | None]:
        found = sorted(i for i in self.rows if any(low <= i <= high for low, high in ranges))[:limit]
        self.touched["ranges"] += len(found)
        return self._clock([self.rows[i] for i in found])

    def untried(self, cursors: Sequence[tuple[str, int]], limit: int) -> tuple[list[RequestRow], int | None]:
        out: list[RequestRow] = []
        for hook, after in cursors:
            # The (hook, 'none', 0) index range in id order; status is checked row by row.
            entries = sorted(
                i
                for i, r in self.rows.items()
                if r.webhook_phid == hook and r.last_result == "none" and r.last_epoch == 0 and i > after
            )
            taken = 0
            for i in entries:
                self.touched["untried"] += 1
                if self.rows[i].status == "queued":
                    out.append(self.rows[i])
                    taken += 1
                    if taken == limit:
                        break
        return self._clock(out)

    def retries(
        self, cursors: Sequence[tuple[str, int, int]], cutoff: int, limit: int
    ) -> tuple[list[RequestRow], int | None]:
        out: list[RequestRow] = []
        for hook, epoch, after in cursors:
            entries = sorted(
                (r.last_epoch, i)
                for i, r in self.rows.items()
                if r.webhook_phid == hook
                and r.last_result == "fail"
                and r.last_epoch <= cutoff
                and (r.last_epoch, i) > (epoch, after)
            )
            taken = 0
            for _epoch, i in entries:
                self.touched["retries"] += 1
                if self.rows[i].status == "queued":
                    out.append(self.rows[i])
                    taken += 1
                    if taken == limit:
                        break
        return self._clock(out)

    def next_failures(self, hooks: Sequence[str], after_epoch: int) -> dict[str, int]:
        found: dict[str, int] = {}
        for r in self.rows.values():
            if r.webhook_phid in hooks and r.last_result == "fail" and r.last_epoch > after_epoch:
                found[r.webhook_phid] = min(found.get(r.webhook_phid, r.last_epoch), r.last_epoch)
        return found

    def hook_phids(self) -> list[str]:
        return list(self.hook_table)

    def request_hooks_after(self, after: str, limit: int) -> list[str]:
        return sorted({r.webhook_phid for r in self.rows.values() if r.webhook_phid > after})[:limit]
