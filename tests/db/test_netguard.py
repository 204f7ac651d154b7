"""phorge/netguard.py: addresses judged as Phorge's outbound blacklist judges them (NAT64 and 6to4 by the IPv4
address they reach, the example list blocking every way to this host, names by IDNA 2008)."""

from __future__ import annotations

import ipaddress

from tests.support import ROOT
from tests.support.helpers import PHORGE_DB

pytestmark = PHORGE_DB


def test_nat64_and_6to4_addresses_are_judged_by_the_ipv4_address_they_reach() -> None:
    from webhook_delivery.config import default_blacklist, parse_blacklist
    from webhook_delivery.phorge.netguard import is_blocked, local_gaps

    default = default_blacklist()
    public, private = "93.184.216.34", "10.1.2.3"
    assert not is_blocked(ipaddress.ip_address(f"64:ff9b::{public}"), default)  # DNS64 for a public host
    assert is_blocked(ipaddress.ip_address(f"64:ff9b::{private}"), default)
    assert is_blocked(ipaddress.ip_address("64:ff9b::127.0.0.1"), default)
    six_to_four = ipaddress.IPv6Address((0x2002 << 112) | (int(ipaddress.IPv4Address(private)) << 80) | 1)
    assert is_blocked(six_to_four, default)
    assert not is_blocked(ipaddress.IPv6Address((0x2002 << 112) | (int(ipaddress.IPv4Address(public)) << 80)), default)
    assert is_blocked(ipaddress.ip_address("::ffff:10.0.0.1"), default)
    assert is_blocked(ipaddress.ip_address("fd00::1"), default)
    ipv4_only = parse_blacklist("10.0.0.0/8,127.0.0.0/8,169.254.0.0/16")
    assert is_blocked(ipaddress.ip_address("64:ff9b::a00:1"), ipv4_only)  # 10.0.0.1 through NAT64
    assert local_gaps(ipv4_only) == [
        "this host 0.0.0.0/8",
        "unspecified ::/128",
        "loopback ::1/128",
        "IPv4-mapped ::ffff:0:0/96",
        "unique-local fc00::/7",
        "link-local fe80::/10",
    ]
    assert local_gaps(default) == [] and local_gaps(()) == []


def test_the_example_blacklist_blocks_every_way_to_this_host_and_a_blank_value_is_an_error() -> None:
    from webhook_delivery.config import parse_blacklist
    from webhook_delivery.phorge.formats import load_config
    from webhook_delivery.phorge.netguard import is_blocked, local_gaps

    line = next(
        line for line in (ROOT / ".env.example").read_text().splitlines() if "GORGE_WEBHOOK_OUTBOUND_BLACKLIST=" in line
    )
    example = parse_blacklist(line.split("=", 1)[1])
    for address in ["0.0.0.0", "0.1.2.3", "127.0.0.1", "::", "::1", "::ffff:127.0.0.1", "::ffff:0.0.0.0", "fe80::1"]:
        assert is_blocked(ipaddress.ip_address(address), example), address
    assert local_gaps(example) == []
    blank = load_config({"GORGE_WEBHOOK_OUTBOUND_BLACKLIST": "  \t "})
    assert [e.variable for e in blank.errors] == ["GORGE_WEBHOOK_OUTBOUND_BLACKLIST"]
    assert "only blanks" in blank.errors[0].message
    assert load_config({"GORGE_WEBHOOK_OUTBOUND_BLACKLIST": ""}).errors == ()


def test_international_names_follow_idna_2008() -> None:
    from webhook_delivery.phorge.netguard import parse_target

    assert parse_target("http://faß.de/").host == "xn--fa-hia.de"  # IDNA 2003 would say fass.de
    assert parse_target("https://bücher.example/x").host == "xn--bcher-kva.example"
