"""The delivery id header (phorge/delivery_id.py) on real deliveries: sent only for the configured hooks, the
same on every retry and after a requeue."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from tests.support.helpers import PHORGE_DB

PHORGE_HEADERS = ["Host", "User-Agent", "Accept", "Content-Type", "X-Phabricator-Webhook-Signature"]


@PHORGE_DB
def test_the_delivery_id_is_sent_only_for_configured_hooks_and_is_the_same_on_every_retry(
    phorge: Any, receiver: Any, delivery_config: Any
) -> None:
    import dataclasses

    from webhook_delivery.phorge.delivery_id import parse_delivery_id_hooks
    from webhook_delivery.worker.loop import build_worker

    chosen = phorge.hook(receiver.url("/dedup/s503"))
    other = phorge.hook(receiver.url("/plain/ok"))
    redirected = phorge.hook(receiver.url("/dedup-moved/r307"))
    retried = phorge.request(chosen, retry="forever")
    plain = phorge.request(other)
    moved = phorge.request(redirected)
    config = dataclasses.replace(
        delivery_config, retry_backoff_sec=0, delivery_id_hooks=parse_delivery_id_hooks(f"{chosen},{redirected}")
    )
    build_worker(config, once=True).run()  # the first attempt fails (503): the row stays queued, to be retried
    assert phorge.row(retried)["status"] == "queued"
    phorge.execute("UPDATE herald_webhook SET webhookURI = %s WHERE phid = %s", [receiver.url("/dedup/ok"), chosen])
    build_worker(config, once=True).run()
    assert phorge.row(retried)["status"] == "sent"

    to_chosen = [r for r in receiver.requests if r.path.startswith("/dedup/")]
    paths = [r.path for r in to_chosen]
    assert paths[-1] == "/dedup/ok" and len(paths) >= 2 and set(paths[:-1]) == {"/dedup/s503"}
    assert [r.header("webhook-id") for r in to_chosen] == [retried] * len(to_chosen)
    assert len({r.body for r in to_chosen}) == 1
    names = [name for name, _ in to_chosen[0].headers]
    assert names == [*PHORGE_HEADERS, "webhook-id", "Accept-Encoding", "Content-Length"]  # libcurl's order

    hops = [r for r in receiver.requests if r.path.startswith("/dedup-moved/")]
    assert [r.path for r in hops] == ["/dedup-moved/r307", "/dedup-moved/redirected"]
    assert [r.header("webhook-id") for r in hops] == [moved, moved]  # every hop

    unlisted = [r for r in receiver.requests if r.path.startswith("/plain/")]
    assert len(unlisted) == 1 and unlisted[0].header("webhook-id") is None
    assert [name for name, _ in unlisted[0].headers] == [*PHORGE_HEADERS, "Accept-Encoding", "Content-Length"]
    assert phorge.row(plain)["status"] == "sent"


@PHORGE_DB
def test_no_delivery_id_by_default_and_for_every_hook_with_a_star(
    phorge: Any, receiver: Any, delivery_config: Any
) -> None:
    import dataclasses

    from webhook_delivery.phorge.delivery_id import ALL
    from webhook_delivery.worker.loop import build_worker

    assert settings.GORGE_WEBHOOK.delivery_id_hooks.off  # unset: off
    hook = phorge.hook(receiver.url("/default/ok"))
    first = phorge.request(hook)
    build_worker(delivery_config, once=True).run()
    second = phorge.request(hook)
    build_worker(dataclasses.replace(delivery_config, delivery_id_hooks=ALL), once=True).run()
    assert [r.header("webhook-id") for r in receiver.requests] == [None, second]
    assert phorge.row(first)["status"] == phorge.row(second)["status"] == "sent"


@PHORGE_DB
def test_the_delivery_id_is_the_same_when_a_failed_request_is_requeued(
    phorge: Any, receiver: Any, delivery_config: Any
) -> None:
    import dataclasses
    import io

    from django.core.management import call_command

    from webhook_delivery.phorge.delivery_id import ALL
    from webhook_delivery.worker.loop import build_worker

    hook = phorge.hook(receiver.url("/again/s500"))
    phid = phorge.request(hook, retry="never")
    config = dataclasses.replace(delivery_config, delivery_id_hooks=ALL)
    build_worker(config, once=True).run()
    assert phorge.row(phid)["status"] == "failed"
    phorge.execute("UPDATE herald_webhook SET webhookURI = %s WHERE phid = %s", [receiver.url("/again/ok"), hook])
    call_command("requeue_webhooks", "--hook", hook, stdout=io.StringIO())
    build_worker(config, once=True).run()
    assert phorge.row(phid)["status"] == "sent"
    assert [(r.path, r.header("webhook-id")) for r in receiver.requests] == [("/again/s500", phid), ("/again/ok", phid)]
