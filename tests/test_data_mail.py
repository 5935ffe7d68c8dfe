"""SpamAssassin parsing on hand-made mails in ``tests/fixtures/data/mail``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jev.data.mail import mail_key, parse_mail, read_mails, strip_html

FIXTURES = Path(__file__).parent / "fixtures" / "data" / "mail"
MULTIPART = "0df66e4c59cb2c1fcf5c1f9d997df58a"
BASE64 = "663118a30093c6674c5b270aac656d66"
PLAIN = "d6b1241b8f546b3543a75b5fe729a7b8"
ATTACHMENT_ONLY = "95bd66cb633a8e40722dc69fcbdefa96"
BLANK = "40a3b822109196b0f7b7219408556858"
HTML_ONLY = "4ca5c0cac626b9f93d29a08f6fd29b45"


def _eml(md5: str) -> tuple[str, str]:
    """The text and folder of the fixture mail with this md5 (first match)."""
    path = next(iter(sorted(FIXTURES.glob(f"*/*.{md5}.eml"))))
    return path.read_text(encoding="utf-8"), path.parent.name


def _parse(md5: str) -> dict | None:
    text, folder = _eml(md5)
    return parse_mail(text, md5, folder)


@pytest.fixture
def package_tree(tmp_path: Path) -> Path:
    """The fixture mails laid out as the npm package has them: ``<folder>/<n>.<md5>.json``."""
    for eml in FIXTURES.glob("*/*.eml"):
        number, md5, _ = eml.name.split(".")
        record = {
            "id": number,
            "group": eml.parent.name,
            "checksum": {"type": "MD5", "value": md5},
            "text": eml.read_text(encoding="utf-8"),
        }
        target = tmp_path / eml.parent.name / f"{number}.{md5}.json"
        target.parent.mkdir(exist_ok=True)
        target.write_text(json.dumps(record), encoding="utf-8")
    return tmp_path


def test_multipart_decodes_quoted_printable_and_strips_base64_html() -> None:
    row = _parse(MULTIPART)
    assert row is not None
    assert row["input"]["body"] == "Café menu for the week\n\n   Café  menu   <>Bon appétit"
    assert row["label"] == {"kind": "easy_ham", "mailing_list": True, "reply": False}
    assert row["subject"] == "[cafe] Weekly\n    menu", "subject is the raw folded header"
    assert "List-Id" not in row["input"]["body"]


def test_base64_without_charset_decodes_as_latin1_and_in_reply_to_is_reply() -> None:
    row = _parse(BASE64)
    assert row is not None
    assert row["input"]["body"] == "Meeting moved to 3pm.\nBring the café receipts."
    assert row["label"] == {"kind": "easy_ham", "mailing_list": False, "reply": True}


def test_plain_mail_with_references_and_list_unsubscribe() -> None:
    row = _parse(PLAIN)
    assert row == {
        "id": PLAIN,
        "input": {"body": "plain text, no MIME headers at all"},
        "label": {"kind": "easy_ham", "mailing_list": True, "reply": True},
        "subject": "=?utf-8?q?caf=C3=A9?= news",
        "source": "easy-ham-2",
    }


def test_html_only_spam_and_blank_references_header_is_not_a_reply() -> None:
    row = _parse(HTML_ONLY)
    assert row is not None
    assert row["input"]["body"] == "CLICK & WIN \n now"
    assert row["label"] == {"kind": "spam", "mailing_list": False, "reply": False}


@pytest.mark.parametrize("md5", [ATTACHMENT_ONLY, BLANK])
def test_mail_without_body_text_is_dropped(md5: str) -> None:
    assert _parse(md5) is None


def test_strip_html_replaces_tags_by_spaces_and_unescapes() -> None:
    assert strip_html("<p>a&lt;b</p><br/>c<>") == " a<b  c<>"


def test_read_mails_drops_duplicates_and_empty_bodies(package_tree: Path) -> None:
    rows = list(read_mails(package_tree))
    assert [row["id"] for row in rows] == [MULTIPART, BASE64, PLAIN, HTML_ONLY]
    assert [row["source"] for row in rows] == ["easy-ham-1", "easy-ham-1", "easy-ham-2", "spam-1"]
    assert [mail_key(row) for row in rows] == [row["id"] for row in rows]
    assert list(rows[0]) == ["id", "input", "label", "subject", "source"]


def test_read_mails_names_a_missing_folder(package_tree: Path) -> None:
    for path in (package_tree / "spam-2").iterdir():
        path.unlink()
    (package_tree / "spam-2").rmdir()
    with pytest.raises(FileNotFoundError, match="spam-2"):
        list(read_mails(package_tree))
