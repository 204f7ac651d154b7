"""`bench/run.py --quick --smoke` works end to end: it exits 0 and reports every request delivered exactly once.

Timing figures are not asserted (the benchmark is a report); only that the command runs and checks itself.

Here: what needs no database and no server process; the rest is in tests/process/test_bench_smoke.py."""

from __future__ import annotations


def test_the_bench_check_catches_a_duplicate_a_lost_request_and_a_row_not_sent() -> None:
    from bench.herald import Hook, Request
    from bench.receivers import Hit
    from bench.scenarios import exactly_once

    hook = Hook("PHID-HWBH-aaaaaaaaaaaaaaaaaaaa", "k" * 32, "http://127.0.0.1/h")
    properties = '{"retry":"forever","transactionPHIDs":[],"triggerPHIDs":["PHID-HWBH-aaaaaaaaaaaaaaaaaaaa"]}'
    seeded = [Request(f"PHID-HWBR-{i:020d}", hook, f"PHID-TASK-{i:020d}", properties, 1_700_000_000) for i in range(3)]
    signatures = [request.signature() for request in seeded]
    assert len(set(signatures)) == 3  # the signature identifies the request

    hits = [Hit(1.0, 200, "/h", signatures[0]), Hit(1.1, 200, "/h", signatures[1]), Hit(1.2, 200, "/h", signatures[2])]
    good = exactly_once("good", {("sent", "okay"): 3}, seeded, hits)
    assert good.ok and (good.received, good.duplicates, good.lost) == (3, 0, 0)

    twice = exactly_once("twice", {("sent", "okay"): 3}, seeded, [*hits, Hit(1.3, 200, "/h", signatures[1])])
    assert not twice.ok and twice.duplicates == 1

    lost = exactly_once("lost", {("sent", "okay"): 2, ("queued", "none"): 1}, seeded, hits[:2])
    assert not lost.ok and lost.lost == 1 and lost.sent == 2 and lost.db_other == {"queued/none": 1}
