"""A local stand-in for Phorge's Conduit endpoint, the parts the alert watcher's `phorge` channel uses, answering
as Phorge's source does (PhabricatorConduitAPIController, ManiphestEditConduitAPIMethod and the edit engine's
conduit transactions, the search engine's *.search answers, UserWhoAmIConduitAPIMethod):

* POST (or GET) /api/<method>. The parameters arrive in one of the three encodings the controller decodes
  (decodeConduitParams): `params` as one JSON object (arcanist's ConduitClient, with `__conduit__` inside it
  holding the token); `params[<key>]=<JSON value>` fields (the web console); or plain form fields, PHP's
  bracket syntax making arrays (`transactions[0][type]=title`, the curl example on each method's page),
  with `api.<key>` fields as metadata (`api.token=...`). A body sent as `Content-Type: application/json` is
  refused with Phorge's own message.
* Every answer is HTTP 200 with {"result": ..., "error_code": ..., "error_info": ...}, errors included;
  ERR-INVALID-AUTH for a token of the wrong length or prefix, an unknown or expired one (Phorge's messages
  quote the token, as Phorge's do), ERR-INVALID-SESSION when none is given, ERR-CONDUIT-CORE for an
  exception (an unknown transaction type, a missing object) and for a policy refusal, with
  PhabricatorPolicyFilter's "[You Shall Not Pass: <object>] (Can Edit) <rejection> // <explanation>".
* maniphest.edit: no objectIdentifier creates a task (the bot must be allowed to: `can_create`); with one (a
  PHID, an id or a monogram), edits it (`editable`, per task). Transaction types: title, description,
  priority (a keyword of Phorge's default priorities), status, comment, projects.add (PHIDs or tags, resolved
  as PhabricatorProjectPHIDResolver does: a tag Phorge cannot resolve stays as it is and is refused).
  The result: {"object": {"id", "phid"}, "transactions": [{"phid"}, ...]}.
* maniphest.search: constraints phids, ids, authorPHIDs, createdStart, statuses; `limit`; data items of
  {"id", "type": "TASK", "phid", "fields": {..., "status": {"value", "name", "color"}, "dateClosed",
  "closerPHID", "description": {"raw"}}, "attachments": {}}, with "maps", "query" and "cursor".
* user.whoami and conduit.ping.

Test controls: `close(task_id, status)` closes a task as a human would, `outage` answers 502 (a proxy
before a dead Phorge), `stop()` refuses connections, `hold` holds every answer (a hung Phorge), `lose_edits`
makes the next edits and drops their answers, `can_create` and a task's `editable` refuse by policy, and
`forge(method, answer)` replaces what Phorge answered (after the call was made) with what a hostile or broken
endpoint would say instead (None keeps the answer). Every token it knows is in `tokens`, for a test to prove
none reached a log line or a page.
"""

from __future__ import annotations

import copy
import json
import re
import secrets as random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.support.rawserver import serve_in_thread

# Phorge's default maniphest.priorities (PhabricatorManiphestConfigOptions): keyword -> (value, name)
PRIORITIES = {
    "unbreak": (100, "Unbreak Now!"),
    "triage": (90, "Needs Triage"),
    "high": (80, "High"),
    "normal": (50, "Normal"),
    "low": (25, "Low"),
    "wish": (0, "Wishlist"),
    "wishlist": (0, "Wishlist"),
}
# maniphest.statuses: value -> (name, closed)
STATUSES = {
    "open": ("Open", False),
    "resolved": ("Resolved", True),
    "wontfix": ("Wontfix", True),
    "invalid": ("Invalid", True),
    "duplicate": ("Duplicate", True),
    "spite": ("Spite", True),
}
EDIT_TYPES = ("title", "description", "priority", "status", "comment", "projects.add", "projects.remove")


def _token() -> str:
    return "api-" + "".join(random.choice("abcdefghijklmnopqrstuvwxyz234567") for _ in range(28))


def _phid(kind: str) -> str:
    return f"PHID-{kind}-" + "".join(random.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(20))


class ConduitException(Exception):
    """A method's error: its code and Phorge's description."""

    def __init__(self, code: str, info: str) -> None:
        super().__init__(code)
        self.code = code
        self.info = info


def _core(info: str) -> ConduitException:
    # An Exception other than ConduitException inside a method: the controller answers ERR-CONDUIT-CORE with
    # the exception's message.
    return ConduitException("ERR-CONDUIT-CORE", info)


def _policy(object_name: str, explanation: str) -> ConduitException:
    return _core(
        f"[You Shall Not Pass: {object_name}] (Can Edit) You do not have permission to edit this object. // "
        f"{explanation}"
    )


@dataclass
class Task:
    id: int
    phid: str
    title: str
    description: str
    author: str
    priority: str = "normal"
    status: str = "open"
    projects: list[str] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    created: int = field(default_factory=lambda: int(time.time()))
    closed: int | None = None
    closer: str | None = None
    editable: bool = True  # the bot may edit it (a human may restrict the task's edit policy)


@dataclass
class Call:
    method: str
    encoding: str  # "params-json", "params-fields" or "form"
    params: dict[str, Any]
    user: str | None  # the PHID the token belongs to
    error_code: str | None


@dataclass
class ConduitStandin:
    bot_phid: str = field(default_factory=lambda: _phid("USER"))
    bot_name: str = "gorge-alerts"
    token: str = field(default_factory=_token)
    can_create: bool = True
    projects: dict[str, str] = field(default_factory=dict)  # tag -> PHID of a project the bot can see
    tasks: dict[int, Task] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    expired: set[str] = field(default_factory=set)
    outage: bool = False
    hold: bool = False
    lose_edits: int = 0  # the next edits are made, and their answers lost (the connection drops)
    forge: Callable[[str, dict[str, Any]], dict[str, Any] | None] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _port: int = 0
    _released: threading.Event = field(default_factory=threading.Event)

    # ---- test controls --------------------------------------------------------------------------
    @property
    def tokens(self) -> list[str]:
        return [self.token, *self.expired]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def add_project(self, tag: str) -> str:
        phid = _phid("PROJ")
        self.projects[tag] = phid
        return phid

    def close(self, task_id: int, status: str = "resolved", by: str = "PHID-USER-human") -> None:
        """A human closes the task (or sets any closed status)."""
        with self.lock:
            task = self.tasks[task_id]
            task.status, task.closed, task.closer = status, int(time.time()), by

    def task_list(self) -> list[Task]:
        with self.lock:
            return sorted(self.tasks.values(), key=lambda task: task.id)

    def edits(self) -> list[Call]:
        with self.lock:
            return [call for call in self.calls if call.method == "maniphest.edit"]

    def start(self) -> ConduitStandin:
        server = ThreadingHTTPServer(("127.0.0.1", self._port), _handler(self))
        server.daemon_threads = True
        self._server = server
        self._port = int(server.server_address[1])
        serve_in_thread(server)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def release(self) -> None:
        self.hold = False
        self._released.set()

    # ---- the controller -------------------------------------------------------------------------
    def answer(self, method: str, content_type: str, query: str, body: bytes) -> dict[str, Any]:
        encoding = "form"
        user: str | None = None
        try:
            if content_type.split(";")[0].strip().lower() == "application/json":
                raise _core(
                    "Use form-encoded data to submit parameters to Conduit endpoints. Sending a JSON-encoded body "
                    "and setting 'Content-Type': 'application/json' is not currently supported."
                )
            fields = parse_qsl(query, keep_blank_values=True) + parse_qsl(
                body.decode("utf-8", "replace"), keep_blank_values=True
            )
            encoding, metadata, params = _decode(method, fields)
            user = self._authenticate(metadata)
            result = self._execute(method, params, user)
            error_code, error_info = None, None
        except ConduitException as exc:
            result, error_code, error_info = None, exc.code, exc.info
            params = {}
        with self.lock:
            self.calls.append(Call(method, encoding, params, user, error_code))
        return {"result": result, "error_code": error_code, "error_info": error_info}

    def _authenticate(self, metadata: dict[str, Any]) -> str:
        token = str(metadata.get("token") or "")
        if token:
            if len(token) != 32:
                raise ConduitException(
                    "ERR-INVALID-AUTH",
                    f'API token "{token}" has the wrong length. API tokens should be 32 characters long.',
                )
            if token.split("-", 1)[0] not in ("api", "cli", "clr"):
                raise ConduitException(
                    "ERR-INVALID-AUTH",
                    f'API token "{token}" has the wrong format. API tokens should be 32 characters long and begin '
                    "with one of these prefixes: api, cli, clr.",
                )
            if token in self.expired:
                raise ConduitException(
                    "ERR-INVALID-AUTH", f'API token "{token}" was previously valid, but has expired.'
                )
            if token != self.token:
                raise ConduitException("ERR-INVALID-AUTH", f'API token "{token}" is not valid.')
            return self.bot_phid
        if metadata.get("access_token"):
            raise ConduitException("ERR-INVALID-AUTH", "Access token does not exist.")
        raise ConduitException("ERR-INVALID-SESSION", "Session key is not present.")

    def _execute(self, method: str, params: dict[str, Any], user: str) -> Any:
        if method == "conduit.ping":
            return "phorge.standin"
        if method == "user.whoami":
            return {
                "phid": user,
                "userName": self.bot_name,
                "realName": "Gorge alerts",
                "image": "",
                "uri": f"{self.url}/p/{self.bot_name}/",
                "roles": ["bot", "verified", "approved", "activated"],
                "primaryEmail": "gorge-alerts@example.org",
            }
        if method == "maniphest.edit":
            return self._edit(params, user)
        if method == "maniphest.search":
            return self._search(params)
        raise ConduitException("ERR-CONDUIT-CALL", f'The method "{method}" does not exist.')

    def _edit(self, params: dict[str, Any], user: str) -> dict[str, Any]:
        xactions = params.get("transactions")
        if isinstance(xactions, dict) and all(str(k).isdigit() for k in xactions):
            xactions = [xactions[k] for k in sorted(xactions, key=int)]
        if not isinstance(xactions, list):
            raise _core('Parameter "transactions" is not a list of transactions.')
        for key, xaction in enumerate(xactions):
            if not isinstance(xaction, dict):
                raise _core(
                    'Parameter "transactions" must contain a list of transaction descriptions, but item with key '
                    f'"{key}" is not a dictionary.'
                )
            for part in ("type", "value"):
                if part not in xaction:
                    raise _core(
                        'Parameter "transactions" must contain a list of transaction descriptions, but item with '
                        f'key "{key}" is missing a "{part}" field. Each transaction must have a {part} field.'
                    )
            if xaction["type"] not in EDIT_TYPES:
                raise _core(
                    f'Transaction with key "{key}" has invalid type "{xaction["type"]}". This type is not '
                    f"recognized. Valid types are: {', '.join(EDIT_TYPES)}."
                )
        with self.lock:
            identifier = params.get("objectIdentifier")
            if identifier:
                found = self._find(str(identifier))
                task = copy.deepcopy(found)  # transactions apply together or not at all
                if not task.editable:
                    raise _policy(f"T{task.id} {task.title}", "Only members of the project can take this action.")
            else:
                if not self.can_create:
                    raise _policy("Maniphest", 'Users must be given the "Can Create Tasks" capability.')
                task_id = max(self.tasks, default=0) + 1
                task = Task(task_id, _phid("TASK"), "", "", user)
            changed = _apply(task, xactions, self.projects)
            if not task.title:
                raise _core("Validation errors:\n  - Tasks must have a title.")
            self.tasks[task.id] = task
        return {
            "object": {"id": task.id, "phid": task.phid},
            "transactions": [{"phid": _phid("XACT-TASK")} for _ in range(changed)],
        }

    def _find(self, identifier: str) -> Task:
        for task in self.tasks.values():
            if identifier in (task.phid, str(task.id), f"T{task.id}"):
                return task
        if identifier.startswith("PHID-"):
            raise _core(f'No object exists with PHID "{identifier}".')
        if identifier.isdigit():
            raise _core(f'No object exists with ID "{identifier}".')
        raise _core(f'Monogram "{identifier}" does not identify a valid object.')

    def _search(self, params: dict[str, Any]) -> dict[str, Any]:
        constraints = params.get("constraints") or {}
        if not isinstance(constraints, dict):
            raise _core('Parameter "constraints" must be a map.')
        limit = int(params.get("limit") or 100)
        with self.lock:
            found = []
            for task in sorted(self.tasks.values(), key=lambda item: -item.id):
                if "phids" in constraints and task.phid not in constraints["phids"]:
                    continue
                if "ids" in constraints and task.id not in [int(i) for i in constraints["ids"]]:
                    continue
                if "authorPHIDs" in constraints and task.author not in constraints["authorPHIDs"]:
                    continue
                if "createdStart" in constraints and task.created < int(constraints["createdStart"]):
                    continue
                if "statuses" in constraints and task.status not in constraints["statuses"]:
                    continue
                found.append(_wire(task))
        return {
            "data": found[:limit],
            "maps": {},
            "query": {"queryKey": None},
            "cursor": {"limit": limit, "after": None, "before": None, "order": params.get("order")},
        }


def _apply(task: Task, xactions: list[dict[str, Any]], projects: dict[str, str]) -> int:
    for xaction in xactions:
        kind, value = xaction["type"], xaction["value"]
        if kind == "title":
            task.title = str(value)
        elif kind == "description":
            task.description = str(value)
        elif kind == "comment":
            task.comments.append(str(value))
        elif kind == "priority":
            if value not in PRIORITIES:
                raise _core(f'Value for "priority" is invalid: "{value}".')
            task.priority = str(value)
        elif kind == "status":
            if value not in STATUSES:
                raise _core(f'Value for "status" is invalid: "{value}".')
            task.status = str(value)
            closed = STATUSES[task.status][1]
            task.closed = int(time.time()) if closed else None
            task.closer = task.author if closed else None
        elif kind in ("projects.add", "projects.remove"):
            phids = [projects.get(str(item).removeprefix("#"), str(item)) for item in (value or [])]
            unknown = [phid for phid in phids if phid not in projects.values()]
            if unknown:
                raise _core(f'Validation errors:\n  - Some of these PHIDs are not valid: "{unknown[0]}".')
            for phid in phids:
                if kind == "projects.add" and phid not in task.projects:
                    task.projects.append(phid)
                elif kind == "projects.remove" and phid in task.projects:
                    task.projects.remove(phid)
    return len(xactions)


def _wire(task: Task) -> dict[str, Any]:
    value, name = PRIORITIES[task.priority]
    return {
        "id": task.id,
        "type": "TASK",
        "phid": task.phid,
        "fields": {
            "name": task.title,
            "description": {"raw": task.description},
            "authorPHID": task.author,
            "ownerPHID": None,
            "status": {"value": task.status, "name": STATUSES[task.status][0], "color": None},
            "priority": {"value": value, "name": name, "color": "red" if value >= 80 else "orange"},
            "points": None,
            "subtype": "default",
            "closerPHID": task.closer,
            "dateClosed": task.closed,
            "spacePHID": None,
            "dateCreated": task.created,
            "dateModified": task.created,
            "policy": {"view": "users", "interact": "users", "edit": "users"},
        },
        "attachments": {},
    }


# -- decoding, as PhabricatorConduitAPIController::decodeConduitParams --------------------------------------

_META_KEYS = ("access_token", "scope", "output", "__conduit__")


def _decode(method: str, fields: list[tuple[str, str]]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(encoding, metadata, params)."""
    nested = _php_fields(fields)
    raw_params = nested.get("params")
    if isinstance(raw_params, dict):
        params: dict[str, Any] = {}
        for key, value in raw_params.items():
            value = "null" if value == "" else value
            try:
                decoded = json.loads(value) if isinstance(value, str) else None
            except ValueError:
                decoded = None
            if decoded is None and str(value).lower() != "null":
                raise _core(
                    f"The value for parameter '{key}' is not valid JSON. All parameters must be encoded as JSON "
                    "values, including strings (which means you need to surround them in double quotes). Check your "
                    f"syntax. Value was: {value}."
                )
            params[key] = decoded
        metadata = params.pop("__conduit__", None) or {}
        return "params-fields", metadata if isinstance(metadata, dict) else {}, params
    if isinstance(raw_params, str) and raw_params:
        try:
            params = json.loads(raw_params)
        except ValueError:
            params = None
        if not isinstance(params, dict):
            raise _core(f"Invalid parameter information was passed to method '{method}'.")
        metadata = params.pop("__conduit__", None) or {}
        return "params-json", metadata if isinstance(metadata, dict) else {}, params
    metadata, params = {}, {}
    for key, value in nested.items():
        if key.startswith("api."):
            metadata[key[4:]] = value
        elif key in _META_KEYS:
            metadata[key] = value
        else:
            params[key] = value
    return "form", metadata, params


_BRACKETS = re.compile(r"\[([^\]]*)\]")


def _php_fields(fields: list[tuple[str, str]]) -> dict[str, Any]:
    """Form fields as PHP's $_POST has them: `a[b][0]=x` makes nested arrays (lists where the keys are 0..n-1)."""
    root: dict[str, Any] = {}
    for name, value in fields:
        head = name.split("[", 1)[0]
        keys = [head, *_BRACKETS.findall(name[len(head) :])] if "[" in name else [name]
        node = root
        for index, key in enumerate(keys):
            last = index == len(keys) - 1
            if key == "":
                key = str(len(node))
            if last:
                node[key] = value
            else:
                child = node.get(key)
                if not isinstance(child, dict):
                    child = {}
                    node[key] = child
                node = child
    return _listify(root)


def _listify(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    items = {key: _listify(item) for key, item in value.items()}
    if items and all(key.isdigit() for key in items) and sorted(int(key) for key in items) == list(range(len(items))):
        return [items[str(index)] for index in range(len(items))]
    return items


def _handler(standin: ConduitStandin) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if standin.hold:
                standin._released.wait(30)
                return
            if standin.outage:
                self._send(502, b"<html><body>502 Bad Gateway</body></html>", "text/html")
                return
            parts = urlsplit(self.path)
            if not parts.path.startswith("/api/"):
                self._send(404, b"not found", "text/plain")
                return
            method = parts.path.removeprefix("/api/")
            answer = standin.answer(method, self.headers.get("Content-Type") or "", parts.query, body)
            if standin.forge is not None:
                answer = standin.forge(method, answer) or answer
            with standin.lock:
                lose = method == "maniphest.edit" and standin.lose_edits > 0
                standin.lose_edits -= 1 if lose else 0
            if lose:
                self.close_connection = True  # done in Phorge, and no answer ever comes
                return
            self._send(200, json.dumps(answer).encode(), "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = _serve  # noqa: N815 - BaseHTTPRequestHandler's names
        do_POST = _serve  # noqa: N815

    return Handler
