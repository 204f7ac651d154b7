"""Only error codes Phorge can answer are shown (answers.py): a secret changed a little is never one."""

from __future__ import annotations

import pytest

from webhook_delivery import answers

TOKEN = "api-" + "k3y9" * 7  # a Conduit API token: api- and 28 lower-case letters and digits
SECRET = "Zq7" * 10 + "ab"  # an OAuth client secret


def variants(secret: str) -> list[str]:
    body = secret.removeprefix("api-")
    half = len(secret) // 2
    return [
        secret,
        secret.upper(),
        body,
        body.upper(),
        secret[:half],
        secret[half:],
        secret[:half].upper(),
        secret[::-1],
        secret[::-1].upper(),
        f"ERR-{secret.upper()}",
        f"ERR-{body.upper()}",
        f"ERR_{secret[:half].upper()}",
        f"ERR-{secret[::-1].upper()}",
    ]


@pytest.mark.parametrize("shown", variants(TOKEN))
def test_a_conduit_token_changed_a_little_is_no_error_code(shown: str) -> None:
    said = answers.conduit_code(shown, secrets=(TOKEN,))
    assert said == f"an error code not known to Conduit (text of {len(shown)} characters)"
    assert answers.conduit_code(shown) == said, "without being told the secret too"
    assert answers.conduit_label(shown) == "other"


@pytest.mark.parametrize("shown", variants(SECRET))
def test_an_oauth_secret_changed_a_little_is_no_error_code(shown: str) -> None:
    assert answers.oauth_code(shown) == f"an error code not known to OAuth (text of {len(shown)} characters)"


def test_the_codes_phorge_answers_are_shown() -> None:
    for code in ("ERR-INVALID-AUTH", "ERR-CONDUIT-CORE", "ERR-INVALID-SESSION", "ERR_BAD_TASK", "ERR-OAUTH-ACCESS"):
        assert answers.conduit_code(code, secrets=(TOKEN,)) == code
        assert answers.conduit_label(code) == code
    for code in ("invalid_grant", "access_denied", "invalid_client", "server_error"):
        assert answers.oauth_code(code, secrets=(SECRET,)) == code
    assert len(answers.CONDUIT_CODES) == 76 and len(answers.OAUTH_CODES) == 7


def test_codes_of_conduits_form_that_phorge_never_answers_are_not_shown() -> None:
    for made_up in ("ERR-MADE-UP", "ERR-USER-DISABLED", "ERR-" + "A" * 28, "err-invalid-auth", "ERR-INVALID-AUTH "):
        assert answers.conduit_code(made_up).startswith("an error code not known to Conduit (text of ")
    for made_up in ("invalid_scope", "temporarily_unavailable", "INVALID_GRANT"):
        assert answers.oauth_code(made_up).startswith("an error code not known to OAuth (text of ")
    assert answers.conduit_code(None) == "an error code not known to Conduit (null)"
    assert answers.oauth_code(["invalid_grant"]) == "an error code not known to OAuth (a list of 1 item)"
