"""phorge/delivery_id.py: GORGE_WEBHOOK_DELIVERY_ID_HOOKS parsed strictly (the header itself, on real deliveries:
tests/db/test_delivery_id.py)."""

from __future__ import annotations

import pytest


def test_delivery_id_hooks_are_parsed_strictly() -> None:
    from webhook_delivery.phorge.delivery_id import DeliveryIdHooks, parse_delivery_id_hooks

    a, b = "PHID-HWBH-aaaaaaaaaaaaaaaaaaaa", "PHID-HWBH-bbbbbbbbbbbbbbbbbbbb"
    assert parse_delivery_id_hooks("").off and parse_delivery_id_hooks("  ").off
    assert parse_delivery_id_hooks(" * ").applies_to(a)
    listed = parse_delivery_id_hooks(f"{a}, {b}")
    assert listed == DeliveryIdHooks(hooks=frozenset({a, b}))
    assert listed.applies_to(b) and not listed.applies_to("PHID-HWBH-cccccccccccccccccccc")
    for bad in [f"{a},", "PHID-HWBR-aaaaaaaaaaaaaaaaaaaa", f"*,{a}", "yes", f"{a} {b}", "PHID-HWBH-a\nb"]:
        with pytest.raises(ValueError):
            parse_delivery_id_hooks(bad)
