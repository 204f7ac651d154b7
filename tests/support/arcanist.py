"""A test arcanist tree, where a Phorge administrator gives PHP a private CA (`resources/ssl/custom.pem`), and
the CA bundle the service then uses, found from the settings as the service finds it (phorge/cabundle.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from webhook_delivery.phorge.cabundle import CaBundle, CaBundleFile
from webhook_delivery.phorge.formats import load_config

# Stands for arcanist's shipped default.pem (Mozilla's roots, as curl extracts them): Debian's bundle of the
# same roots (ca-certificates), which no throwaway CA of the suite is in.
MOZILLA_ROOTS = Path("/etc/ssl/certs/ca-certificates.crt")


def arcanist_tree(root: Path, *, custom: Path | None = None, default: bool = True) -> Path:
    """`root`/arcanist with resources/ssl/default.pem (unless a packaging without it) and, when given,
    `custom` as resources/ssl/custom.pem."""
    ssl_dir = root / "arcanist" / "resources" / "ssl"
    ssl_dir.mkdir(parents=True, exist_ok=True)
    if default:
        shutil.copyfile(MOZILLA_ROOTS, ssl_dir / "default.pem")
    if custom is not None:
        shutil.copyfile(custom, ssl_dir / "custom.pem")
    return root / "arcanist"


def bundle_in_force(**env: str) -> CaBundle:
    """The bundle the service uses with these settings (they must be valid)."""
    loaded = load_config(env)
    assert not loaded.errors, loaded.errors
    return CaBundleFile(loaded.delivery.trust).current()
