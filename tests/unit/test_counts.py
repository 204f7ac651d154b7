"""How often the counts are refreshed (reads/counts.py): the period, longer after a long refresh, soon during
a first count, and further apart while nothing can change."""

from __future__ import annotations

from webhook_delivery.config import DeliveryConfig
from webhook_delivery.reads.counts import BUILD_PAUSE_SEC, IDLE_MAX_SEC, _next_in


def test_the_next_refresh_waits_the_period_or_twenty_times_the_last_and_longer_while_idle() -> None:
    config = DeliveryConfig(counts_refresh_sec=5)
    assert _next_in(config, True, 0.01) == 5
    assert _next_in(config, True, 0.5) == 10  # a refresh of half a second: at most 5 % of the time
    assert _next_in(config, False, 0.01) == BUILD_PAUSE_SEC  # a first count goes on soon
    assert _next_in(config, False, 0.5) == 10  # but takes no more than a twentieth of the time
    assert [_next_in(config, True, 0.01, idle=n) for n in (1, 2, 3, 9)] == [10, 20, 20, 20]
    assert IDLE_MAX_SEC == 20
    assert _next_in(DeliveryConfig(counts_refresh_sec=0), True, 3.0, idle=4) == 0  # every read refreshes
