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


def test_the_comparison_reads_every_row_once_under_a_name_of_its_own() -> None:
    from bench.compare import figures

    table = """\
figure                                                     median       min .. max  target      mark
------------------------------------------------------------------------------------------------------
2. one process, 16 hooks (N / wall)                      1,444 /s   1,401 .. 1,575  >= 600/s    PASS
   ... that, as % of the bare client (same run)             108 %        88 .. 133  >= 90%      PASS
   the same on one core (taskset -c)                     1,428 /s   1,406 .. 1,700
   ... that, as % of the bare client (same run)             100 %        80 .. 110  >= 90%      PASS
10. many in flight: deliveries in flight at the peak         256       256 .. 256  256         PASS
   connections to Phorge's database                            6           6 .. 6  <= 8        PASS
   RSS at the peak                                          68 MB         68 .. 68

correctness: 1 sent
"""
    assert figures(table) == {
        "2. one process, 16 hooks (N / wall)": (1444.0, "/s"),
        "2. ... that, as % of the bare client (same run)": (108.0, "%"),
        "2. the same on one core (taskset -c)": (1428.0, "/s"),
        "2. the same on one core (taskset -c) ... that, as % of the bare client (same run)": (100.0, "%"),
        "10. many in flight: deliveries in flight at the peak": (256.0, ""),
        "10. connections to Phorge's database": (6.0, ""),
        "10. RSS at the peak": (68.0, "MB"),
    }
