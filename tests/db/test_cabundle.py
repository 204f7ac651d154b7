"""Which CA bundle deliveries trust, and where it came from, said where Phorge's other settings are said: the
dashboard, /api/webhook/health, `manage.py check --deploy`; and again once arcanist's custom.pem appears (each
read here by a new reader; how soon a running one sees it is in tests/unit/test_cabundle.py).

How the bundle is found is in tests/unit/test_cabundle.py, the deliveries it verifies in test_transport.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils.html import escape

from tests.support.arcanist import MOZILLA_ROOTS, arcanist_tree
from tests.support.helpers import PHORGE_DB, viewer
from webhook_delivery import checks
from webhook_delivery.phorge.formats import load_config
from webhook_delivery.reads import phorge_status

pytestmark = PHORGE_DB
TOKEN = "cabundle-t0ken"


def _said(client: Any) -> tuple[dict[str, Any], str, str]:
    """(the CA bundle's row in the health JSON, the dashboard, check --deploy's gorge.I002)."""
    phorge_status._phorge_settings.cache_clear()
    health = json.loads(client.get("/api/webhook/health", HTTP_X_SERVICE_TOKEN=TOKEN).content)["data"]
    [row] = [row for row in health["phorge_settings"]["settings"] if row["option"] == "CA bundle"]
    [info] = [message.msg for message in checks.php_delivery() if message.id == "gorge.I002"]
    return row, client.get("/").content.decode(), info


def test_the_bundle_in_force_and_its_source_are_said_and_follow_custom_pem(
    client: Any, django_user_model: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    client.force_login(viewer(django_user_model))
    tree = arcanist_tree(tmp_path)
    loaded = load_config({"GORGE_WEBHOOK_ARCANIST_ROOT": str(tree), "GORGE_WEBHOOK_PROXY": "http://ops:s3cret@px:3128"})
    config = dataclasses.replace(
        settings.GORGE_WEBHOOK, service_token=TOKEN, trust=loaded.delivery.trust, proxy=loaded.delivery.proxy
    )
    monkeypatch.setattr(settings, "GORGE_WEBHOOK", config)
    default = str(tree / "resources" / "ssl" / "default.pem")

    row, page, info = _said(client)
    where = f"default.pem: no custom.pem, no curl.cainfo; arcanist at {tree} (GORGE_WEBHOOK_ARCANIST_ROOT)"
    assert row == {"option": "CA bundle", "value": default, "source": "arcanist", "where": where}
    assert f"<td>{escape(default)}</td><td>arcanist ({escape(where)})</td>" in page
    assert info == f"https deliveries trust the CA bundle {default} ({where}); outbound proxy: http://px:3128"
    assert '<tr data-option="outbound proxy"><td><code>outbound proxy</code></td><td>http://px:3128</td>' in page
    assert "s3cret" not in page + info + json.dumps(row)

    custom = tree / "resources" / "ssl" / "custom.pem"
    custom.write_bytes(MOZILLA_ROOTS.read_bytes())  # where Phorge's administrators put a private CA
    row, page, info = _said(client)
    assert (row["value"], row["source"]) == (str(custom), "arcanist")
    assert row["where"].startswith("custom.pem, arcanist at")
    assert f"<td>{escape(str(custom))}</td>" in page and info.startswith(
        f"https deliveries trust the CA bundle {custom} ("
    )
