"""A partitioned Phorge cluster as the tests describe it: `cluster.databases` maps, the herald URL, a local file."""

from __future__ import annotations

import json
from typing import Any

HERALD_MASTER = "db-a.example.org:3306"


OTHER_MASTER = "db-b.example.org:3306"


ELSEWHERE = ["maniphest", "user", "config", "worker", "repository"]


CLUSTER: list[dict[str, Any]] = [
    {"host": "db-a.example.org", "role": "master", "port": 3306, "user": "svc/phorge", "pass": "secret-a"},
    {"host": "db-b.example.org", "role": "master", "port": 3306, "partition": ELSEWHERE},
    {"host": "db-a-r.example.org", "role": "replica", "port": 3306, "master": HERALD_MASTER, "persistent": False},
]


CLUSTER[0]["partition"] = ["default"]


SINGLE: list[dict[str, Any]] = [{"host": "db-a.example.org", "role": "master", "port": 3306}]


HERALD_URL = "mysql://svc:herald%2Fpw@db-a.example.org:3306/phabricator_herald"


def local_file(tmp_path: Any, values: dict[str, Any]) -> str:
    path = tmp_path / "local.json"
    path.write_text(json.dumps(values, indent=4) + "\n")  # as `bin/config set` writes it
    return str(path)


def config_from(path: str, **env: str) -> Any:
    from webhook_delivery.phorge.formats import load_config

    return load_config({"GORGE_WEBHOOK_DATABASE_URL": HERALD_URL, "GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG": path, **env})
