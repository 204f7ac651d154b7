"""Sending on the channels: each channel sent on by the one watcher holding its lease, from a thread of its
own bounded by the channel timeout, so that a failing channel never holds up another or a delivery; a failed
send logged once, counted and retried with a growing wait; notifications a channel keeps refusing given up.

A channel's outlet says what one pass sends on it (`parts`, in the watcher's thread), how each part is sent
(`starter`, in the channel's thread: no database there) and what the parts that went out leave behind
(`settle`, in the watcher's thread again). E-mail, the chat webhook and each Apprise URL send digests; the
`phorge` channel sends task operations (phorge_tasks.py).
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from django.db.models import Q

from ..config import IPNetwork
from . import apprise_channels, metrics
from .channels import LIMITS, ChannelError, Limits, send_email
from .config import PHORGE_CHANNEL, AlertConfig
from .digests import Digest, Note
from .digests import digests as split_digests
from .models import AlertChannel, AlertNotification
from .phorge_tasks import PhorgeTasks

logger = logging.getLogger("webhook_delivery.alerts.watcher")

RETRY_MAX_SEC = 900.0  # a failing channel is tried at least this often
REFUSALS_GIVEN_UP = 3  # refused this many times in a row: those notifications are dropped


@dataclass
class TickResult:
    entered: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    lost: int = 0
    sent: dict[str, int] = field(default_factory=dict)  # channel: notifications carried
    failed: dict[str, str] = field(default_factory=dict)  # channel: safe error


class Outlet(Protocol):
    def parts(self, pending: list[AlertNotification]) -> list[Any]: ...

    def starter(self) -> Callable[[Any], None]: ...

    def settle(self, done: list[Any], failed: Any | None) -> None: ...

    def test(self) -> None: ...


class Digests:
    """A channel that carries its pending notifications as digests, within its limits."""

    def __init__(self, limits: Limits, sender: Callable[[str, str], None]) -> None:
        self.limits = limits
        self.sender = sender

    def parts(self, pending: list[AlertNotification]) -> list[Any]:
        return digests(pending, self.limits)

    def starter(self) -> Callable[[Any], None]:
        return lambda part: self.sender(part.subject, part.body)

    def settle(self, done: list[Any], failed: Any | None) -> None:
        pass  # what went out is marked sent by its notifications' ids

    def test(self) -> None:
        self.sender(
            "[gorge-webhook] test message",
            f"A test message from the gorge-webhook alert watcher on {socket.gethostname()}: this channel works.",
        )


def outlets(config: AlertConfig, blacklist: Callable[[], Sequence[IPNetwork]] = tuple) -> dict[str, Outlet]:
    """Every configured channel by its name, in order: e-mail, the chat webhook, each usable Apprise URL (sent
    to no address in `blacklist()` at the time of the send), Phorge's incident tasks."""
    found: dict[str, Outlet] = {}
    if config.email_to:
        found["email"] = Digests(LIMITS["email"], functools.partial(send_email, config))
    if config.chat_url:
        found["chat"] = Digests(
            LIMITS["chat"], _guarded(functools.partial(apprise_channels.send_chat, config), blacklist)
        )
    for target in apprise_channels.targets(config.apprise_urls) if config.apprise_urls else ():
        send = functools.partial(apprise_channels.send, target, config.channel_timeout_sec)
        found[target.name] = Digests(LIMITS["chat"], _guarded(send, blacklist))
    if config.phorge_token:
        found[PHORGE_CHANNEL] = PhorgeTasks(config)
    return found


def _guarded(
    send: Callable[[str, str, Sequence[IPNetwork]], None], blacklist: Callable[[], Sequence[IPNetwork]]
) -> Callable[[str, str], None]:
    return lambda subject, body: send(subject, body, blacklist())


def channel_names(config: AlertConfig) -> tuple[str, ...]:
    return tuple(outlets(config))


@dataclass
class _Send:
    ids: list[int]  # the part being sent (left: the part that failed)
    thread: threading.Thread | None = None
    sent: list[int] = field(default_factory=list)  # the notifications of the parts that went out
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None
    refused: bool = False  # the channel refused what it was given: sending it again gets the same answer
    finished: list[Any] = field(default_factory=list)  # the parts that went out
    failed: Any | None = None  # the part that did not


class Channels:
    def __init__(self, config: AlertConfig, owner: str) -> None:
        self.config = config
        self.owner = owner
        self._sending: dict[str, _Send] = {}
        # Phorge's outbound blacklist as the watcher last read it (its thread reads the database, not theirs).
        self.blacklist: tuple[IPNetwork, ...] = ()
        self.outlets = outlets(config, lambda: self.blacklist)
        self.names = tuple(self.outlets)  # the configured channels

    def _lease(self, channel: str) -> bool:
        AlertChannel.objects.get_or_create(name=channel)
        now = datetime.now(UTC)
        lease = timedelta(seconds=3 * self.config.channel_timeout_sec + 30)
        return bool(
            AlertChannel.objects.filter(name=channel)
            .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now) | Q(lease_owner=self.owner))
            .update(lease_owner=self.owner, lease_until=now + lease)
        )

    def _release(self, channel: str) -> None:
        AlertChannel.objects.filter(name=channel, lease_owner=self.owner).update(lease_until=None, lease_owner="")

    def deliver(self, result: TickResult) -> None:
        """Send every channel's pending notifications, each channel from a thread of its own."""
        started: dict[str, _Send] = {}
        now = datetime.now(UTC)
        for channel in self.names:
            running = self._sending.get(channel)
            if running is not None:
                if not running.done.is_set():
                    self._lease(channel)  # still in flight from an earlier pass: keep the lease, wait
                    continue
                self._finish(channel, running, result)
            if AlertChannel.objects.filter(name=channel, retry_at__gt=now).exists():
                continue  # backing off after a failed send
            if not self._lease(channel):
                continue  # another watcher sends on this channel now
            pending = list(
                AlertNotification.objects.filter(channel=channel, sent_at__isnull=True).order_by("id")[:5000]
            )
            parts = self.outlets[channel].parts(pending)
            if not parts:
                self._release(channel)
                continue
            started[channel] = self._start(channel, parts)
        end = time.monotonic() + self.config.channel_timeout_sec + 2
        for send in started.values():
            send.done.wait(max(0.0, end - time.monotonic()))  # in parallel: a hanging channel costs the other nothing
        for channel, send in started.items():
            if send.done.is_set():
                self._finish(channel, send, result)
            else:
                self._sending[channel] = send

    def _start(self, channel: str, parts: list[Any]) -> _Send:
        """Send the parts in order from a thread of their own; the first that fails ends the send."""
        sender = self.outlets[channel].starter()
        holder: list[_Send] = []

        def run() -> None:
            send = holder[0]
            part = None
            try:
                for part in parts:
                    send.ids = list(part.ids)
                    sender(part)
                    send.sent += send.ids
                    send.finished.append(part)
                send.ids = []
            except ChannelError as exc:
                send.error, send.refused, send.failed = str(exc), exc.refused, part
            except Exception as exc:  # noqa: BLE001 - any failure of a channel is that channel's outage
                send.error, send.failed = type(exc).__name__, part
            finally:
                send.done.set()

        thread = threading.Thread(target=run, name=f"alert-{channel}"[:60], daemon=True)
        send = _Send(ids=[], thread=thread)
        holder.append(send)
        thread.start()
        return send

    def _finish(self, channel: str, send: _Send, result: TickResult) -> None:
        self._sending.pop(channel, None)
        now = datetime.now(UTC)
        self.outlets[channel].settle(send.finished, send.failed)
        if send.sent:
            AlertNotification.objects.filter(pk__in=send.sent, sent_at__isnull=True).update(sent_at=now)
            metrics.NOTIFICATIONS_SENT.labels(channel).inc()
            result.sent[channel] = len(send.sent)
        if send.error is None:
            back = AlertChannel.objects.filter(name=channel, failing_since__isnull=False).update(
                failing_since=None, last_sent_at=now, failures=0, refusals=0, retry_at=None
            )
            if back:
                logger.info(
                    "alert channel works again: pending alerts sent",
                    extra={"event": "alert.channel_back", "channel": channel},
                )
            else:
                AlertChannel.objects.filter(name=channel).update(last_sent_at=now, failures=0, refusals=0)
            self._release(channel)
            return
        metrics.NOTIFICATIONS_FAILED.labels(channel).inc()
        result.failed[channel] = send.error
        state = AlertChannel.objects.get(name=channel)
        failures = state.failures + 1
        refusals = state.refusals + 1 if send.refused else 0
        wait = min(self.config.interval_sec * 2 ** (failures - 1), RETRY_MAX_SEC)
        AlertChannel.objects.filter(name=channel).update(
            failures=failures, refusals=refusals, retry_at=now + timedelta(seconds=wait), last_failed_at=now
        )
        began = AlertChannel.objects.filter(name=channel, failing_since__isnull=True).update(
            failing_since=now, last_error=send.error[:200]
        )
        if began:
            logger.error(
                "alert channel failing: alerts wait and are retried, less often while it keeps failing",
                extra={"event": "alert.channel_failing", "channel": channel, "error": send.error},
            )
        if refusals >= REFUSALS_GIVEN_UP:
            # The channel refuses these very notifications every time (too large, malformed for it): drop
            # them, so that the ones after them can go out.
            dropped = AlertNotification.objects.filter(pk__in=send.ids, sent_at__isnull=True).update(
                sent_at=now, given_up=True
            )
            metrics.NOTIFICATIONS_GIVEN_UP.labels(channel).inc(dropped)
            AlertChannel.objects.filter(name=channel).update(refusals=0, retry_at=None)
            logger.error(
                "alert channel refused the same alerts %d times: given up on them (they stay on the dashboard)",
                REFUSALS_GIVEN_UP,
                extra={"event": "alert.given_up", "channel": channel, "error": send.error, "notifications": dropped},
            )
        self._release(channel)

    def send_test(self) -> dict[str, str | None]:
        """A test on every configured channel, now, in parallel: a message on each (the `phorge` channel asks
        Phorge who its token is); {channel: None if it worked, else the error}."""
        outcome: dict[str, str | None] = {}
        sends = {}
        for channel in self.names:
            test = self.outlets[channel].test
            send = _Send(ids=[])
            thread = threading.Thread(target=_tested, args=(test, send), name=f"alert-test-{channel}"[:60], daemon=True)
            send.thread = thread
            thread.start()
            sends[channel] = send
        end = time.monotonic() + self.config.channel_timeout_sec + 2
        for channel, send in sends.items():
            send.done.wait(max(0.0, end - time.monotonic()))
            outcome[channel] = send.error if send.done.is_set() else "timed out"
        return outcome


def _tested(test: Callable[[], None], send: _Send) -> None:
    try:
        test()
    except ChannelError as exc:
        send.error = str(exc)
    except Exception as exc:  # noqa: BLE001 - any failure of a channel is that channel's outage
        send.error = type(exc).__name__
    finally:
        send.done.set()


def digests(notes: list[AlertNotification], limits: Limits) -> list[Digest]:
    """The messages that carry a channel's pending notifications, within what the channel accepts."""
    return split_digests(
        [Note(note.transition, note.subject, note.text, note.pk) for note in notes],
        max_chars=limits.chars,
        max_entries=limits.entries,
        max_parts=limits.parts,
    )
