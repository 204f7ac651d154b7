"""What the pages read live of each hook's requests, whatever the history's length: each a few entries of
key_ratelimit (webhookPHID, lastRequestResult, lastRequestEpoch) per hook, never a count of the history.

* the last success and the last failed attempt: the largest lastRequestEpoch of the hook's `okay` and
  `fail` slices (MariaDB reads one entry per slice: "Using index for group-by");
* the failed attempts inside the breaker window: the end of the hook's `fail` slice, as many entries as
  Phorge's breaker lets a hook fail in its window (it stops calling the hook at the threshold).

The hooks are named in the statement (an IN list): a subquery there would let the optimizer scan the index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..phorge.herald import text
from .herald import as_int, fetch_rows, hook_filter, read_dialect


@dataclass(frozen=True)
class Latest:
    last_success: int | None = None
    last_failed_attempt: int | None = None
    window_failures: int = 0


def latest(hook_phids: Sequence[str], window_start: int) -> dict[str, Latest]:
    if not hook_phids:
        return {}
    table = read_dialect().requests_by_result
    where, params = hook_filter(list(hook_phids))
    newest = fetch_rows(
        f"SELECT webhookPHID, lastRequestResult, MAX(lastRequestEpoch) FROM {table} "
        f"WHERE {where} AND lastRequestResult IN ('okay', 'fail') GROUP BY webhookPHID, lastRequestResult",
        params,
    )
    window = fetch_rows(
        f"SELECT webhookPHID, COUNT(*) FROM {table} WHERE {where} AND lastRequestResult = 'fail' "
        "AND lastRequestEpoch >= %(window_start)s GROUP BY webhookPHID",
        {**params, "window_start": window_start},
    )
    success: dict[str, int] = {}
    failed: dict[str, int] = {}
    for hook, result, epoch in newest:
        (success if text(result) == "okay" else failed)[text(hook)] = as_int(epoch)
    in_window = {text(hook): as_int(count) for hook, count in window}
    return {
        phid: Latest(success.get(phid) or None, failed.get(phid) or None, in_window.get(phid, 0)) for phid in hook_phids
    }
