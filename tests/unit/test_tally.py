"""The tally's values (reads/tally.py): runs of ids, and what a group of requests counts for."""

from __future__ import annotations

import itertools
import random

from hypothesis import given
from hypothesis import strategies as st

from webhook_delivery.reads.tally import (
    Chunk,
    Group,
    Settled,
    Waiting,
    add_chunk,
    chunks_of,
    clip,
    minus,
    normalized,
    settled_of,
    size,
    union,
)

ids = st.sets(st.integers(min_value=1, max_value=200), max_size=60)


def runs_of(found: set[int]) -> list[tuple[int, int]]:
    return normalized((one, one) for one in found)


def members(runs: list[tuple[int, int]]) -> set[int]:
    return {one for low, high in runs for one in range(low, high + 1)}


@given(ids, ids)
def test_runs_are_sets_of_ids(a: set[int], b: set[int]) -> None:
    left, right = runs_of(a), runs_of(b)
    assert members(union(left, right)) == a | b
    assert members(minus(left, right)) == a - b
    assert members(clip(left, 50, 120)) == {one for one in a if 50 <= one <= 120}
    assert size(left) == len(a)
    for runs in (union(left, right), minus(left, right)):
        assert runs == normalized(runs)  # sorted, and no two touch
        assert all(high + 1 < low for (_a, high), (low, _b) in itertools.pairwise(runs))


def test_runs_merge_what_touches_and_chunks_are_ten_thousand_ids() -> None:
    assert normalized([(5, 9), (1, 4), (11, 12), (20, 19)]) == [(1, 9), (11, 12)]
    assert chunks_of([(9_999, 10_000), (35_000, 35_000)]) == {0, 1, 3}


def group(status: str, result: str, requests: int = 1, error: tuple[str, str] | None = None, **more: int) -> Group:
    return Group(
        0,
        "PHID-HWBH-a",
        status,
        result,
        error,
        requests,
        more.get("refused_at", 0),
        100,
        **{key: value for key, value in more.items() if key in ("due", "due_since")},
    )


def test_what_a_group_counts_for_as_the_pages_always_counted() -> None:
    assert settled_of(group("sent", "okay", 3)) == Settled(sent=3)
    assert settled_of(group("failed", "fail", 2, ("http", "500"))) == Settled(failed=2, errors={("http", "500"): 2})
    refused = settled_of(group("failed", "none", 1, ("hook", "uri"), refused_at=77))
    assert refused == Settled(failed=1, refused_at=77, errors={("hook", "uri"): 1})
    assert settled_of(group("sent", "weird", 4)).empty  # a result Phorge never writes counts for nothing
    waiting = Waiting()
    waiting.add(group("queued", "fail", 2, ("http", "503"), due=1, due_since=50))
    waiting.add(group("queued", "none", 3, due=3, due_since=40))
    assert waiting == Waiting(queued=5, due=4, due_since=40, errors={("http", "503"): 2})
    assert Waiting.from_json(waiting.to_json()) == waiting


def test_chunks_add_and_take_away_from_the_totals_and_say_when_the_newest_refusal_may_be_gone() -> None:
    rng = random.Random(5)
    chunks = []
    for number in range(4):
        chunk = Chunk(number)
        chunk.add(group("sent", "okay", rng.randint(1, 9)))
        chunk.add(group("failed", "none", 1, ("hook", "uri"), refused_at=10 * number))
        chunks.append(chunk)
    totals: dict[str, Settled] = {}
    for chunk in chunks:
        assert add_chunk(totals, chunk, 1) == set()
    assert totals["PHID-HWBH-a"].refused_at == 30 and totals["PHID-HWBH-a"].failed == 4
    assert add_chunk(totals, chunks[1], -1) == set()  # an older refusal: the newest stays
    assert add_chunk(totals, chunks[3], -1) == {"PHID-HWBH-a"}  # the newest: found again among the chunks
    assert totals["PHID-HWBH-a"].failed == 2
    assert Chunk.from_json(2, chunks[2].to_json()) == chunks[2]
