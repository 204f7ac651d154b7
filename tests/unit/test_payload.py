"""Payload bytes, signatures and the PHP JSON codec (pure code, no database)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook_delivery.phorge.locks import webhook_lock_name
from webhook_delivery.phorge.payload import (
    build_payload,
    payload_document,
    phid_get_type,
    sign,
    transactions_newest_first,
)
from webhook_delivery.phorge.phpjson import UndecodableProperties, decode_properties, encode_compact, encode_formatted

K1 = "abcdefghijklmnopqrstuvwxyz234567"
K2 = "0123456789abcdef0123456789abcdef"


def _php_string(text: str, *, escape_slashes: bool) -> str:
    """An independent oracle for PHP's json_encode of one string, character by character."""
    out = ['"']
    named = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    for ch in text:
        code = ord(ch)
        if ch in named:
            out.append(named[ch])
        elif ch == "/":
            out.append("\\/" if escape_slashes else "/")
        elif code < 0x20:
            out.append(f"\\u{code:04x}")
        elif code < 0x80:
            out.append(ch)  # DEL (0x7f) included: PHP leaves it raw
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
    out.append('"')
    return "".join(out)


def _example(object_phid: str, triggers: list[str], test: bool, epoch: int, xactions: list[str]) -> bytes:
    properties: dict[str, Any] = {"triggerPHIDs": triggers, "test": test, "silent": False, "secure": False}
    return build_payload(object_phid=object_phid, properties=properties, date_created=epoch, transaction_phids=xactions)


def test_reference_example_a_bytes_and_signatures() -> None:
    body = _example(
        "PHID-TASK-abcdefghijklmnopqrst",
        ["PHID-HWTR-trigger0000000001"],
        True,
        1700000000,
        ["PHID-XACT-TASK-transaction01"],
    )
    assert len(body) == 349
    assert body.endswith(b"\n}\n")
    assert b'"epoch": 1700000000' in body
    assert sign(body, K1) == "568e64c9e831a68db11426c9f2b0a44f27ac6a51da1f7c9d22d4c784bef6aa40"
    assert sign(body, K2) == "a6c88fca99c5528d5205c10eb87e505859851db19b2e17967e0bc91032897312"


def test_reference_example_b_orders_transactions_newest_first() -> None:
    stored = ["PHID-XACT-DREV-2yvd5h2zh6mpyb4", "PHID-XACT-DREV-nbq4ylbv7bsbqr3"]
    body = _example(
        "PHID-DREV-x7k2m4q6s8u2w4y6a2c4",
        ["PHID-HWBH-5dkl7q2vgo3ijkstr6wa"],
        False,
        1735689600,
        transactions_newest_first(stored),
    )
    assert len(body) == 415
    assert sign(body, K1) == "fafaeb19c22208011334f95c79856e8ddc4d9c7b2026d571854bf83f9e588015"
    assert sign(body, K2) == "80cd30d62d8a710ee68e83d788e7a09f5bf7b617a32ffff83ba8d0245e667006"


def test_reference_example_c_empty_lists() -> None:
    body = _example("PHID-HWBH-5dkl7q2vgo3ijkstr6wa", [], True, 1735689600, [])
    assert len(body) == 230
    assert b'"triggers": [],\n' in body and b'"transactions": []\n' in body
    assert sign(body, K1) == "c109e2fc0f4cc98f64d6a7e90aaff05f179941f9fa09fdc95556f96dbc57dae7"
    assert sign(body, K2) == "f5a78cd27ee4048c8ac91b4f50a5c49af2df8a26b02c626a59cf7c3a2e66fc70"


@pytest.mark.parametrize(
    ("phid", "expected"),
    [
        ("PHID-TASK-abc", "TASK"),
        ("PHID-HWBH-x", "HWBH"),
        ("nonsense", "????"),
        ("PHID-AB-x", "????"),
        ("PHID-ABCDE-x", "????"),
        ("", "????"),
        ("PHID-XACT-TASK-abc", "XACT"),
    ],
)
def test_object_type_follows_php_phid_get_type(phid: str, expected: str) -> None:
    assert phid_get_type(phid) == expected


def test_transaction_order_rules() -> None:
    assert transactions_newest_first({"5": "e", "12": "l", "7": "g"}) == ["l", "g", "e"]
    assert transactions_newest_first({"PHID-XACT-A": "a", "PHID-XACT-B": "b"}) == ["b", "a"]
    assert transactions_newest_first(["a", "b", "c"]) == ["c", "b", "a"]
    assert transactions_newest_first([]) == []
    assert transactions_newest_first(None) == []


def test_lock_names_match_phorge() -> None:
    hook = "PHID-HWBH-5dkl7q2vgo3ijkstr6wa"
    assert webhook_lock_name("phabricator", hook) == "ph:phabric-6rILUDHKjHKu:webhook-4zE.685NTktg"
    assert webhook_lock_name("phorge", hook) == "ph:phorge-.nBW.TjxAch.:webhook-4zE.685NTktg"


def test_properties_edit_in_place_keeps_order_and_php_types() -> None:
    text = '{"retry":"forever","transactionPHIDs":{"7":"PHID-XACT-TASK-a"},"errorType":"hook","errorCode":"uri","x":1}'
    properties = decode_properties(text)
    properties["errorType"] = "http"
    properties["errorCode"] = 200
    assert encode_compact(properties) == (
        '{"retry":"forever","transactionPHIDs":{"7":"PHID-XACT-TASK-a"},"errorType":"http","errorCode":200,"x":1}'
    )


@pytest.mark.parametrize(
    ("text", "php"),
    [
        ('{"a":{}}', '{"a":[]}'),
        ('{"a":{"0":"x","1":"y"}}', '{"a":["x","y"]}'),
        ('{"a":{"1":"x","0":"y"}}', '{"a":{"1":"x","0":"y"}}'),
        ('{"a":"p\\/q","b":"\\u00e9"}', '{"a":"p\\/q","b":"\\u00e9"}'),
        ('{"a":"é/ü"}', '{"a":"\\u00e9\\/\\u00fc"}'),
        ("[]", "[]"),
        ("[1]", "[1]"),
    ],
)
def test_php_array_round_trip(text: str, php: str) -> None:
    assert encode_compact(decode_properties(text)) == php


@pytest.mark.parametrize("text", ["", "null", '"x"', "{", '{"a":NaN}', "17", "true"])
def test_undecodable_properties(text: str) -> None:
    with pytest.raises(UndecodableProperties):
        decode_properties(text)


ANY_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40) | st.sampled_from(
    ["\x7f", "\\u007f", "\\\x7f", "a/b", "\u2028\u2029", "\U0001f600", '"\\"', "\x00\x1f"]
)


@settings(max_examples=400, deadline=None)
@given(ANY_TEXT)
def test_compact_strings_match_php(text: str) -> None:
    assert encode_compact({"k": text}) == '{"k":' + _php_string(text, escape_slashes=True) + "}"
    assert json.loads(encode_compact({"k": text}))["k"] == text


@settings(max_examples=400, deadline=None)
@given(ANY_TEXT)
def test_formatted_strings_match_phutil_json(text: str) -> None:
    expected = '{\n  "k": ' + _php_string(text, escape_slashes=False) + "\n}\n"
    assert encode_formatted({"k": text}) == expected


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | ANY_TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(ANY_TEXT, children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(ANY_TEXT, JSON_VALUES, min_size=1, max_size=5))
def test_properties_codec_is_stable(properties: dict[str, Any]) -> None:
    """Encoding is idempotent through our decoder, keeps key order, and stays ASCII but for DEL."""
    once = encode_compact(properties)
    assert encode_compact(decode_properties(once)) == once
    assert all(ch < "\x80" for ch in once)
    assert all(ch >= " " for ch in once)
    assert "/" not in once.replace("\\/", "")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(ANY_TEXT, max_size=5),
    st.lists(ANY_TEXT, max_size=5),
    st.integers(0, 2**32 - 1),
    st.booleans(),
)
def test_payload_layout(triggers: list[str], xactions: list[str], epoch: int, test: bool) -> None:
    body = _example("PHID-TASK-x", triggers, test, epoch, xactions).decode("ascii")
    assert body.endswith("}\n") and body.count("\n}\n") == 1
    document = json.loads(body)
    assert list(document) == ["object", "triggers", "action", "transactions"]
    assert list(document["action"]) == ["test", "silent", "secure", "epoch"]
    assert [t["phid"] for t in document["triggers"]] == triggers
    assert [t["phid"] for t in document["transactions"]] == xactions
    if not triggers:
        assert '"triggers": [],' in body


ODD_VALUES = JSON_VALUES | st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(ODD_VALUES, max_size=4),
    st.lists(ODD_VALUES, max_size=4),
    ODD_VALUES,
    ANY_TEXT,
    st.integers(0, 2**32 - 1),
)
def test_payload_template_equals_the_general_encoder(
    triggers: list[Any], xactions: list[Any], flag: Any, object_phid: str, epoch: int
) -> None:
    """The fast template and PhutilJSON's general layout agree on every input, odd stored values included."""
    properties = {"triggerPHIDs": triggers, "test": flag, "silent": False}
    arguments = {"object_phid": object_phid, "properties": properties, "date_created": epoch}
    expected = encode_formatted(payload_document(**arguments, transaction_phids=xactions)).encode("ascii")
    assert build_payload(**arguments, transaction_phids=xactions) == expected


def test_transaction_ids_of_any_length_are_ordered_without_int() -> None:
    from webhook_delivery.phorge.payload import transactions_newest_first

    long_id = "9" * 5000  # beyond int()'s 4300 digits
    stored = {"2": "PHID-b", long_id: "PHID-long", "010": "PHID-ten", "1": "PHID-a"}
    assert transactions_newest_first(stored) == ["PHID-long", "PHID-ten", "PHID-b", "PHID-a"]
    with pytest.raises(ValueError, match="not a transaction ID"):
        transactions_newest_first({"\u00b2": "PHID-x"})
