"""Phorge's text is neutral in each Apprise service's own markup (issue 39, finding 6), through Apprise's real
plugins against a local stand-in of every service the docs name (tests/support/chat_services.py): Mattermost,
Slack, Discord, Teams, Zulip, Matrix, Telegram, ntfy, Gotify, and the generic JSON and form receivers.

Before, Apprise was handed plain text and left to escape it: Mattermost and Discord got `<!channel>`,
`**bold**` and `<@id>` verbatim (Mattermost's webhooks turn `<!channel>` into `@channel`), Telegram's plugin
took Phorge's `<b>` for HTML, and Apprise's Markdown escaping left `<` alone."""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import markdown as python_markdown
import pytest

from tests.support.chat_services import ChatServices, Posted
from webhook_delivery.alerts import apprise_channels, messages
from webhook_delivery.wording import LINK_INDENT

# Teams' stand-in speaks TLS with a throwaway certificate, which its URL says not to verify (?verify=no).
pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
JOINER = messages.JOINER
NAME = (
    "<!channel> <!here|x> <@U123> <@&456> <#C1> <:e:1> <t:1:R> <https://evil.example|x> <b>bold</b> **bold** "
    "__u__ _it_ ~~s~~ `c` ||spoil|| # h > q [x](https://evil.example) ![i](https://evil.example/i.png) "
    "www.evil.example @here @everyone @room @**all** #**stream** $$x$$ :smile: &amp; \\*"
)
SHOWN = messages.plain(NAME).replace(JOINER, "")  # what a reader sees of it (plain() keeps 200 characters)
MENTION = re.compile(r"@(here|channel|everyone|all|room)\b|@\*\*")
MARKUP_CHARS = re.compile(r"(?<!\\)[`*_~|\[\]#$]")  # Markdown's, Discord's, Zulip's: each escaped


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ChatServices, ChatServices]]:
    plain = ChatServices().start()
    tls = ChatServices(tls=Path(tmp_path_factory.mktemp("tls"))).start()
    yield plain, tls
    plain.stop()
    tls.stop()


def alert() -> messages.Message:
    hook = messages.HookRef("PHID-HWBH-abcdefghijklmnopqrst", NAME, 3)
    facts = messages.Failing(
        hook=hook,
        now=1_800_000_000,
        since=1_800_000_000 - 600,
        last_success=None,
        failed=3,
        errors=(("http", "[y](https://evil.example) <!here>", 3),),
        last_error=("http", "500"),
        queued=3,
        due=3,
    )
    return messages.failing(facts, messages.Links(site="https://gorge.example.com", phorge="https://phorge.example"))


def _json(field: str) -> Callable[[list[Posted]], list[str]]:
    return lambda posted: [str(posted[-1].json()[field])]


def _form(*fields: str) -> Callable[[list[Posted]], list[str]]:
    return lambda posted: [parse_qs(posted[-1].body.decode())[field][0] for field in fields]


def _workflows(posted: list[Posted]) -> list[str]:
    card = posted[-1].json()["attachments"][0]["content"]
    return [block["text"] for block in card["body"] if block["type"] == "TextBlock"]


def _slack(posted: list[Posted]) -> list[str]:
    payload = posted[-1].json()
    assert payload["mrkdwn"] is False
    return [payload["attachments"][0]["title"], payload["attachments"][0]["text"]]


# service: (URL, where it posts, the texts in its payload, how the service reads them)
SERVICES: dict[str, tuple[str, str, Callable[[list[Posted]], list[str]], str]] = {
    "mattermost": ("mmost://{plain}/m0token", "/hooks/", _json("text"), "markdown"),
    "slack": (
        "https://hooks.slack.com/services/T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7",
        "/services/",
        _slack,
        "slack",
    ),
    "discord": ("discord://1234/d0token", "/api/webhooks/", _json("content"), "markdown"),
    "teams": ("workflows://{tls}/WORKFLOW/SIGNATURE/?verify=no", "/workflows/", _workflows, "markdown"),
    "zulip": ("zulip://gorge@org.localhost/" + "z" * 32, "/zulip/", _form("content"), "markdown"),
    "matrix": ("matrix://gorge:pw@{plain}/#ops", "/_matrix/client/v3/rooms/", _json("body"), "plain"),
    "telegram": ("tgram://123456789:abcdefg_hijklmnopqrstuvwxyzABCDEFGH/12345", "/bot", _json("text"), "html"),
    "ntfy": ("ntfy://{plain}/alerts", "/", _json("message"), "plain"),
    "gotify": ("gotify://{plain}/g0token", "/message", _json("message"), "plain"),
    "json": ("json://{plain}/json", "/json", _json("message"), "plain"),
    "form": ("form://{plain}/form", "/form", _form("message", "title"), "plain"),
}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def assert_neutral(text: str, reads_as: str) -> None:
    """Nothing a service would act on, whatever its markup; and the words still read as Phorge wrote them."""
    assert not MENTION.search(text), "a mention"
    assert "https://evil" not in text and "www.evil" not in text, "a link"
    if reads_as == "html":
        page = _Tags()
        page.feed(text)
        assert page.tags == ["b"], f"Phorge's text made HTML: {page.tags}"  # the title, Telegram's own <b>
        shown = html.unescape("".join(page.text))
    elif reads_as == "slack":
        assert "<" not in text and ">" not in text, "Slack's <!channel>, <@id> and <url|label> start with <"
        shown = html.unescape(text)
    else:
        assert not re.search(f"<(?!{JOINER})", text), "a tag, an autolink, <!channel>, <@id> or <t:...>"
        if reads_as == "markdown":
            ours = [line for line in text.split("\n") if not line.startswith(LINK_INDENT)]
            assert not MARKUP_CHARS.search("\n".join(ours)), "Markdown's or a chat's own markup, unescaped"
            rendered = _Tags()
            rendered.feed(python_markdown.markdown(text))
            assert set(rendered.tags) <= {"p", "br"}, f"rendered as markup: {rendered.tags}"
            text = re.sub(r"\\(.)", r"\1", text)
        shown = text
    shown = shown.replace(JOINER, "")
    assert SHOWN[:60] in shown, "it still reads as Phorge wrote it"


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_a_hostile_hook_name_is_neutral_in_each_service_the_docs_name(
    service: str, services: tuple[ChatServices, ChatServices], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    plain, tls = services
    plain.point(monkeypatch, tmp_path)
    url, prefix, texts, reads_as = SERVICES[service]
    [target] = apprise_channels.targets((url.format(plain=f"127.0.0.1:{plain.port}", tls=f"127.0.0.1:{tls.port}"),))
    message = alert()
    server = tls if "{tls}" in url else plain
    before = len(server.received(prefix))
    apprise_channels.send(target, 5, message.subject, message.text("entered"))
    posted = server.received(prefix)[before:]
    assert posted, f"nothing reached {service}'s stand-in"
    found = texts(posted)
    body = next(text for text in found if "has been failing" in text)
    assert_neutral(body, reads_as)
    for text in found:
        assert not MENTION.search(text) and "https://evil" not in text
    assert "https://gorge.example.com/hooks/PHID-HWBH-abcdefghijklmnopqrst/" in body, "our own link stays a link"
