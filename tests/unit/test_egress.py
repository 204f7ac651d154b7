"""GORGE_WEBHOOK_PROXY and GORGE_WEBHOOK_NO_PROXY read as libcurl takes them, and refused with the variable
named when libcurl would not (webhook_delivery/egress.py). The CA bundle's settings are in test_cabundle.py."""

from __future__ import annotations

import pytest

from webhook_delivery.phorge.formats import load_config


@pytest.mark.parametrize(
    ("url", "scheme", "host", "port"),
    [
        ("http://proxy.internal:3128", "http", "proxy.internal", 3128),
        ("http://proxy.internal", "http", "proxy.internal", 1080),  # libcurl's default proxy port, not 80
        ("https://proxy.internal/", "https", "proxy.internal", 443),
        ("socks5h://10.0.0.5:1080", "socks5h", "10.0.0.5", 1080),
        ("http://ops:s3cret@[fd00::5]:8080", "http", "fd00::5", 8080),
    ],
)
def test_a_proxy_is_read_as_libcurl_reads_it(url: str, scheme: str, host: str, port: int) -> None:
    loaded = load_config({"GORGE_WEBHOOK_PROXY": url, "GORGE_WEBHOOK_NO_PROXY": "localhost, .internal,10.0.0.0/8"})
    proxy = loaded.delivery.proxy
    assert loaded.errors == () and proxy is not None
    assert (proxy.url, proxy.scheme, proxy.host, proxy.port) == (url, scheme, host, port)
    assert proxy.no_proxy == "localhost, .internal,10.0.0.0/8"
    assert "s3cret" not in proxy.shown + repr(proxy) and "ops" not in proxy.shown
    assert proxy.shown.startswith(f"{scheme}://") and proxy.shown.endswith(", not for localhost, .internal,10.0.0.0/8")


@pytest.mark.parametrize(
    "url",
    [
        "socks5://10.0.0.5:1080",  # names resolved here, past the hop check: only socks5h
        "socks4://10.0.0.5",
        "HTTP://proxy.internal:3128",
        "proxy.internal:3128",
        "http://",
        "http://proxy.internal:0",
        "http://proxy.internal:99999",
        "http://proxy.internal:3128/path",
        "http://proxy.internal:3128/?x=s3cret",
        "http://bad_host!:3128",
    ],
)
def test_a_proxy_libcurl_would_not_take_as_meant_stops_start_up(url: str) -> None:
    errors = load_config({"GORGE_WEBHOOK_PROXY": url}).errors
    assert [error.variable for error in errors] == ["GORGE_WEBHOOK_PROXY"]
    assert "s3cret" not in str(errors[0])


def test_no_proxy_needs_a_proxy_and_only_hosts() -> None:
    assert [e.variable for e in load_config({"GORGE_WEBHOOK_NO_PROXY": "localhost"}).errors] == [
        "GORGE_WEBHOOK_NO_PROXY"
    ]
    odd = load_config({"GORGE_WEBHOOK_PROXY": "http://proxy:3128", "GORGE_WEBHOOK_NO_PROXY": "a;rm -rf"})
    assert [e.variable for e in odd.errors] == ["GORGE_WEBHOOK_NO_PROXY"]
    assert load_config({}).delivery.proxy is None
