"""Test settings: the project's settings under a throwaway environment the suite makes for itself.

Nothing of the caller's environment that names a database reaches the suite: every GORGE_* variable is
dropped (a shell or container set up for production exports GORGE_WEBHOOK_DATABASE_URL), the server comes
from the suite's own GORGE_TEST_DATABASE_URL, and the database name is generated here,
`gwtest<pid>_herald`; tests/conftest.py refuses to create or drop any other.
"""

import os

from tests.support import testdb

TEST_SERVER = testdb.server().url().rstrip("/")
TEST_DATABASE = f"gwtest{os.getpid()}_herald"

for _name in [name for name in os.environ if name.startswith("GORGE_")]:
    del os.environ[_name]
os.environ.update(
    GORGE_TEST_DATABASE_URL=TEST_SERVER,
    GORGE_ENV_FILE="/dev/null",
    GORGE_WEBHOOK_DATABASE_URL=f"{TEST_SERVER}/{TEST_DATABASE}",
    GORGE_WEBHOOK_OUTBOUND_BLACKLIST="",
    GORGE_WEBHOOK_SILENT="false",  # declared, as every deployment must: tests of silent mode replace it
    GORGE_BEHIND_TLS_PROXY="false",
    # Every read that finds the counts of an earlier moment refreshes them (production waits 5 s between).
    GORGE_WEBHOOK_COUNTS_REFRESH_SEC="0",
    DATABASE_URL="sqlite://:memory:",
)
os.environ.setdefault("SECRET_KEY", "test-secret-key-not-for-production-0123456789abcdef")

from gorge_site.settings import *  # noqa: E402, F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Tests render pages straight from the apps' static directories, without collectstatic.
STORAGES = {**STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}  # noqa: F405
STATIC_ROOT = None  # type: ignore[assignment]
