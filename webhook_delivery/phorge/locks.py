"""Phorge's global lock names (PhabricatorGlobalLock), so we and PHP's workers exclude each other. Pure."""

from __future__ import annotations

import hashlib

_INDEX_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ._"


def digest_for_index(text: str) -> str:
    """PhabricatorHash::digestForIndex: 12 bytes of SHA-1, each mapped onto 64 characters."""
    return "".join(
        _INDEX_ALPHABET[byte & 0x3F] for byte in hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).digest()[:12]
    )


def digest_to_length(text: str, length: int = 20) -> str:
    return f"{text[: length - 13]}-{digest_for_index(text)}"


def webhook_lock_name(namespace: str, hook_phid: str) -> str:
    """The name PHP's HeraldWebhookWorker locks: newLock('webhook(<hookPHID>)') with no parameters."""
    return f"ph:{digest_to_length(namespace)}:{digest_to_length(f'webhook({hook_phid})()')}"
