"""alerts/config.py: GORGE_ALERT_* numbers beyond their range are refused at start, naming the variable."""

from __future__ import annotations

import pytest

from webhook_delivery.alerts.config import AlertConfig, load_alert_config


@pytest.mark.parametrize(
    "name",
    [
        "GORGE_ALERT_CHANNEL_TIMEOUT_SEC",
        "GORGE_ALERT_GC_HOURS",
        "GORGE_ALERT_INTERVAL_SEC",
        "GORGE_ALERT_FAILING_MINUTES",
        "GORGE_ALERT_WORKER_DEAD_SEC",
        "GORGE_ALERT_PHP_HOLD_SEC",
    ],
)
@pytest.mark.parametrize(
    "value", ["1e300", "inf", "nan", "0", "-5", "1e-300", "0.5", "\u0661\u0665", "1_0", "\uff11\uff15", " 1e1"]
)
def test_alert_numbers_beyond_their_range_are_refused_at_start(name: str, value: str) -> None:
    loaded, errors = load_alert_config({name: value})
    assert [error.variable for error in errors] == [name]
    assert "expected a number from 1 to " in str(errors[0]) and repr(value.strip()) in str(errors[0])
    assert loaded == AlertConfig()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://chat.example/hooks/s3cret", "expected an http:// or https:// URL"),
        ("https://chat.example:99999/hooks/s3cret", "not a URL that can be read (its host or port)"),
        ("https://[::1/hooks/s3cret", "not a URL that can be read (its host or port)"),
        ("https://:443/hooks/s3cret", "no host in the URL"),
    ],
)
def test_a_chat_url_that_cannot_be_sent_to_is_refused_at_start_without_a_word_of_it(url: str, says: str) -> None:
    loaded, errors = load_alert_config({"GORGE_ALERT_WEBHOOK_URL": url})
    assert [(error.variable, error.message) for error in errors] == [("GORGE_ALERT_WEBHOOK_URL", says)]
    assert "s3cret" not in str(errors[0]) and loaded.chat_url == ""


def test_a_chat_url_with_credentials_a_query_and_an_ipv6_host_is_taken() -> None:
    url = "https://u%40x:p@[2001:db8::1]:8443/hooks/s3cret?channel=ops"
    loaded, errors = load_alert_config({"GORGE_ALERT_WEBHOOK_URL": url})
    assert errors == [] and loaded.chat_url == url
