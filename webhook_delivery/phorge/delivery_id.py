"""The opt-in delivery id: a `webhook-id` header (the Standard Webhooks name) carrying the request's PHID,
the same on every retry and redelivery of a request, for receivers that deduplicate.

Off by default, so that what is sent stays byte for byte what Phorge sends. The administrator turns it on
for every hook or for chosen ones with GORGE_WEBHOOK_DELIVERY_ID_HOOKS. Pure: no Django import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HEADER = "webhook-id"
VARIABLE = "GORGE_WEBHOOK_DELIVERY_ID_HOOKS"
HOOK_PHID_RE = re.compile(r"PHID-HWBH-[A-Za-z0-9]{1,54}")


@dataclass(frozen=True)
class DeliveryIdHooks:
    """Which hooks' requests carry the header: none (the default), all of them, or those listed."""

    all_hooks: bool = False
    hooks: frozenset[str] = frozenset()

    def applies_to(self, hook_phid: str) -> bool:
        return self.all_hooks or hook_phid in self.hooks

    @property
    def off(self) -> bool:
        return not self.all_hooks and not self.hooks


OFF = DeliveryIdHooks()
ALL = DeliveryIdHooks(all_hooks=True)


def parse_delivery_id_hooks(raw: str) -> DeliveryIdHooks:
    """GORGE_WEBHOOK_DELIVERY_ID_HOOKS: empty = off, `*` = every hook, else comma-separated hook PHIDs.

    Raises ValueError with one message saying what is wrong and what is expected (without the variable's
    name: the caller's ConfigError carries it)."""
    text = raw.strip()
    if not text:
        return OFF
    if text == "*":
        return ALL
    entries = [entry.strip() for entry in text.split(",")]
    if "*" in entries:
        raise ValueError("* (every hook) cannot be combined with hook PHIDs: give * alone, or only PHIDs")
    bad = [entry for entry in entries if not HOOK_PHID_RE.fullmatch(entry)]
    if bad:
        shown = ", ".join(repr(entry[:60]) for entry in bad[:3]) + (" ..." if len(bad) > 3 else "")
        raise ValueError(
            f"expected * (every hook) or a comma-separated list of hook PHIDs (PHID-HWBH-...), got {shown}"
        )
    return DeliveryIdHooks(hooks=frozenset(entries))
