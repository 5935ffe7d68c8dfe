"""What a decide route checks before litestar decodes its body: a JSON media type and a bounded depth.

msgspec decodes JSON recursively, so a body nested a thousand levels deep raised RecursionError
inside litestar and came back as a 500. One scan over the body's brackets (strings removed, so a
bracket inside a text does not count) refuses it first, as a 400 that names the limit. A body in
another media type (a form, plain text, none at all) is refused with 415 rather than read as JSON
anyway: a client that sends the wrong type has a bug it should hear about.
"""

import re

from litestar import Request

from jev.serve.problems import ProblemError
from jev.serve.wire import Problem

JSON_MEDIA_TYPE = "application/json"
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_OPENING = frozenset(b"[{")


def json_depth(body: bytes, limit: int) -> int:
    """How deep arrays and objects nest in `body` (JSON text); counting stops past `limit`."""
    depth = deepest = 0
    for byte in _STRING.sub(b"", body).translate(None, _NOT_BRACKET):
        if byte in _OPENING:
            depth += 1
            deepest = max(deepest, depth)
            if depth > limit:
                break
        else:
            depth -= 1
    return deepest


def is_json(media_type: str, options: dict[str, str]) -> bool:
    """`application/json` or a `+json` type, in UTF-8 (the only encoding JSON allows, RFC 8259)."""
    kind = media_type.lower()
    charset = options.get("charset", "utf-8").lower()
    return (kind == JSON_MEDIA_TYPE or (kind.startswith("application/") and kind.endswith("+json"))) and charset in (
        "utf-8", "utf8",
    )


async def check_json_body(request: Request) -> None:
    """The decide routes' `before_request` hook: 415 unless the body is JSON, 400 if it nests too deep."""
    media_type, options = request.content_type
    if not is_json(media_type, options):
        sent = request.headers.get("content-type")
        raise ProblemError(
            Problem(
                title="Unsupported media type", status=415,
                detail=f"the body must be JSON sent as 'Content-Type: {JSON_MEDIA_TYPE}'; this request sent "
                + (f"{sent!r}" if sent else "no Content-Type"),
            ),
            {"Accept-Post": JSON_MEDIA_TYPE},
        )
    limit = request.app.state["max_json_depth"]
    depth = json_depth(await request.body(), limit)
    if depth > limit:
        raise ProblemError(Problem(
            title="JSON nested too deep", status=400, limit=limit,
            detail=f"the body nests arrays and objects more than {limit} levels deep; a decide request needs only "
            "a few. Flatten the input, or raise the limit with --max-json-depth / JEV_MAX_JSON_DEPTH",
        ))
