"""MySQL connections made without TLS options share one "preferred TLS" context: PyMySQL 1.2
and later make one for every such connection (to encrypt, unverified, if the server offers
TLS), and loading the CA store for it cost 30 ms of CPU per connection. With TLS options,
each connection still gets a context of its own, built from them. No server is needed: the
connections are made with ``defer_connect``, which builds the context and stops there."""

from __future__ import annotations

import ssl
import threading

from tenure.backends.mysql._connection import SharedContextConnection


def connection(**options: object) -> SharedContextConnection:
    return SharedContextConnection(host="127.0.0.1", port=1, defer_connect=True, **options)


def test_connections_without_tls_options_share_one_context() -> None:
    first = connection()
    if not getattr(first, "ssl", False):  # PyMySQL before 1.2: no context unless asked
        assert getattr(first, "ctx", None) is None
        return
    contexts = [connection().ctx for _ in range(3)]
    made: list[ssl.SSLContext] = []
    threads = [threading.Thread(target=lambda: made.append(connection().ctx))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(context is first.ctx for context in contexts + made)
    # The same context PyMySQL would make: encrypting, verifying nothing.
    assert first.ctx.verify_mode == ssl.CERT_NONE and first.ctx.check_hostname is False


def test_connections_with_tls_options_get_their_own() -> None:
    verified = [connection(ssl_verify_cert=True) for _ in range(2)]
    assert verified[0].ctx is not verified[1].ctx
    assert verified[0].ctx.verify_mode == ssl.CERT_REQUIRED
    if getattr(connection(), "ssl", False):
        assert verified[0].ctx is not connection().ctx
