"""Optional API keys: `Authorization: Bearer KEY` or `X-API-Key: KEY`, any of several keys.

Health probes, the page and its assets stay open (routes marked `opt={"public": True}`), so a
load balancer needs no secret and a person can open the page before typing a key into it.
"""

import hmac

from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException
from litestar.handlers.base import BaseRouteHandler
from litestar.types import Guard


def api_key_guard(keys: tuple[str, ...]) -> Guard:
    """A guard accepting any of `keys`, compared in constant time."""
    encoded = [key.encode() for key in keys]

    def guard(connection: ASGIConnection, handler: BaseRouteHandler) -> None:
        if handler.opt.get("public"):
            return
        given = presented_key(connection)
        if given is None:
            raise NotAuthorizedException("an API key is required: send 'Authorization: Bearer <key>'")
        if not any(hmac.compare_digest(given.encode(), key) for key in encoded):
            raise NotAuthorizedException("the API key is not valid")

    return guard


def presented_key(connection: ASGIConnection) -> str | None:
    header = connection.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return connection.headers.get("x-api-key") or None
