"""What etcd's JSON gateway answers mean: gRPC codes, error bodies, auth tokens and TLS.

Flavour-free: the gateway (``_async/gateway.py``, generated for threads) sends the requests
and fails over; this module reads one member's answer into the JSON it carries or the error
it is, and builds the TLS context the members are checked with.
"""

from __future__ import annotations

import json
import ssl
from typing import Any

import httpx

from tenure._errors import ConfigurationError
from tenure.backends.etcd._config import EtcdSettings
from tenure.backends.etcd._errors import EtcdError, NotFound

__all__ = [
    "AUTH_NOT_ENABLED", "FAILED_PRECONDITION", "JSON", "NO_TOKEN", "UNAVAILABLE",
    "TokenRejected", "Unavailable", "auth_header", "code_and_message", "decode",
    "tls_context", "tls_failure",
]

JSON = dict[str, Any]

UNAVAILABLE = 14
"""gRPC's UNAVAILABLE: etcd's "leader changed" and "no leader", while members elect."""
INVALID_ARGUMENT = 3
"""gRPC's INVALID_ARGUMENT: among others "user name is empty" (auth on, no token sent) and
"authentication failed, invalid user ID or password"."""
FAILED_PRECONDITION = 9
"""gRPC's FAILED_PRECONDITION: among others "authentication is not enabled"."""
PERMISSION_DENIED = 7
UNAUTHENTICATED = 16
"""gRPC's UNAUTHENTICATED (HTTP 401): "invalid auth token", e.g. an expired one."""
NO_USER = "user name is empty"
"""etcd's answer to a request without a token once auth is enabled."""
AUTH_NOT_ENABLED = "authentication is not enabled"
NO_TOKEN = ""
"""``_token`` when the server has auth disabled: send no token, do not log in again."""


class Unavailable(Exception):
    """A member answered UNAVAILABLE: try again until the request's deadline."""


class TokenRejected(Exception):
    """The token sent was refused (expired, or none sent while auth is on): log in again."""


def code_and_message(response: httpx.Response) -> tuple[Any, str]:
    """gRPC code and message of an error answer (the gateway's JSON error body)."""
    try:
        answer = json.loads(response.text.splitlines()[0]) if response.text.strip() else {}
    except ValueError:
        answer = {}
    if not isinstance(answer, dict):
        answer = {}
    message = answer.get("message") or answer.get("error") or response.text[:200]
    return answer.get("code"), str(message)


def tls_failure(exc: BaseException | None) -> ssl.SSLError | None:
    """The TLS error under a transport error (httpx wraps httpcore wraps ssl), if any."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, ssl.SSLError):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def decode(path: str, response: httpx.Response, settings: EtcdSettings) -> list[JSON]:
    """The answers of a 200, else the error it is: NotFound (gRPC code 5), Unavailable,
    TokenRejected, or an EtcdError saying what the member answered."""
    if response.status_code == 200:
        try:
            answers: list[JSON] = [
                json.loads(line) for line in response.text.splitlines() if line.strip()
            ]
        except ValueError as exc:
            raise EtcdError(
                f"{path} answered 200 with no JSON"
            ) from exc
        if answers:
            return answers
    code, message = code_and_message(response)
    if code == 5:
        raise NotFound(message)
    if code == UNAVAILABLE:
        raise Unavailable(f"{message} (code {code})")
    if code == UNAUTHENTICATED or response.status_code == 401 or (
        code == INVALID_ARGUMENT and NO_USER in message
    ):
        raise TokenRejected(message)
    hint = ""
    if code == PERMISSION_DENIED:
        hint = (
            f"; user {settings.username!r} needs read and write permission on the "
            f"keys with prefix {settings.namespace + '/'!r}"
        )
    raise EtcdError(
        f"{path}: {message} "
        f"(code {code}, HTTP {response.status_code}){hint}"
    )


def auth_header(token: str | None) -> dict[str, str]:
    """The header that carries an auth token (none without one)."""
    return {"Authorization": token} if token else {}


def tls_context(settings: EtcdSettings) -> ssl.SSLContext:
    """The TLS context of ``etcds://`` members: the server's certificate checked against
    ``ssl_ca`` or the system store, and the client certificate presented when given.
    ConfigurationError when a file cannot be read or the key does not match."""
    try:
        context = ssl.create_default_context(cafile=settings.ssl_ca or None)
        if settings.ssl_cert:
            context.load_cert_chain(settings.ssl_cert, settings.ssl_key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(
            f"etcd {settings.display}: cannot use the TLS files (ssl_ca={settings.ssl_ca!r}, "
            f"ssl_cert={settings.ssl_cert!r}, ssl_key={settings.ssl_key!r}): {exc}"
        ) from exc
    return context
