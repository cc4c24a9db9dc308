"""etcd over TLS (``etcds://``, ``ssl_ca``/``ssl_cert``/``ssl_key``) and with etcd's auth
(``etcd://user:password@...``), against real members started by ``tests.servers.etcd``: one
over TLS, one that requires client certificates (``--client-cert-auth``), and one with auth
enabled whose unused tokens end after ``AUTH_TOKEN_TTL`` seconds. The certificates come from a
throwaway CA made with openssl in a temp dir for the session.

Each TLS or auth fault must be a clear error at once (a ``ConfigurationError`` for options that
cannot work, a ``BackendError`` naming TLS or auth), and an expired or forgotten token must
lead to a new login, never to a ``BackendError`` on every later call.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
import time
import urllib.parse

import pytest

import tenure
from tests.servers.etcd import (
    AUTH_TOKEN_TTL,
    AUTH_USER,
    EtcdServer,
    GatewayRefused,
    TlsFiles,
    enable_auth,
    running_etcd_member,
)

pytestmark = [pytest.mark.etcd]


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def tls_url(member: EtcdServer, tls: TlsFiles, *, ca: bool = True, cert: bool = True) -> str:
    """``etcds://`` with the TLS options in the query string, as users write them."""
    options = {}
    if ca:
        options["ssl_ca"] = str(tls.ca)
    if cert:
        options["ssl_cert"] = str(tls.client_cert)
        options["ssl_key"] = str(tls.client_key)
    query = "&".join(f"{key}={value}" for key, value in options.items())
    return f"etcds://{member.address}" + (f"?{query}" if query else "")


def auth_url(member: EtcdServer, user: str | None = None, password: str | None = None) -> str:
    name, secret = AUTH_USER
    name, secret = user or name, password or secret
    return f"etcd://{name}:{urllib.parse.quote(secret, safe='')}@{member.address}"


def free(locks: tenure.Locks, name: str, kind: str = "lock") -> bool:
    """Nobody holds ``name`` (its last fence is still remembered)."""
    info = locks.inspect(name, kind=kind)
    return info is None or (info.holder is None and not info.leases)


def exercise(url: str, **options: str) -> None:
    """A lock (exclusive, fences increasing across holders), a semaphore of two, and
    inspect, all on ``url``."""
    lock_name, semaphore_name = unique("lock"), unique("permits")
    with tenure.connect(url, **options) as locks, tenure.connect(url, **options) as others:
        first = locks.lock(lock_name, ttl=10)
        assert first.acquire(timeout=5)
        assert not others.lock(lock_name, ttl=10).acquire(blocking=False)
        info = locks.inspect(lock_name)
        assert info is not None and info.fence == first.fence
        fence = first.fence
        first.release()
        second = others.lock(lock_name, ttl=10)
        assert second.acquire(timeout=5)
        assert second.fence is not None and fence is not None and second.fence > fence
        second.release()

        permits = [
            client.semaphore(semaphore_name, limit=2, ttl=10) for client in (locks, others, locks)
        ]
        assert permits[0].acquire(timeout=5) and permits[1].acquire(timeout=5)
        assert not permits[2].acquire(blocking=False)
        permits[0].release()
        assert permits[2].acquire(timeout=5)
        for permit in permits[1:]:
            permit.release()
        assert free(locks, semaphore_name, kind="semaphore")


# ---- TLS: the server's certificate checked, renewals over TLS -------------------------------


def test_tls_with_ssl_ca_locks_semaphores_and_fences(
    etcd_tls: EtcdServer, etcd_tls_files: TlsFiles
) -> None:
    exercise(tls_url(etcd_tls, etcd_tls_files, cert=False))


def test_tls_renewal_keeps_the_lock_past_its_ttl(
    etcd_tls: EtcdServer, etcd_tls_files: TlsFiles
) -> None:
    name = unique("renewed")
    lost: list[object] = []
    url = tls_url(etcd_tls, etcd_tls_files, cert=False)
    with tenure.connect(url) as locks, tenure.connect(url) as others:
        lock = locks.lock(name, ttl=1.5, renew=True, on_lost=lost.append)
        assert lock.acquire(timeout=5)
        time.sleep(4.5)  # three ttls: held only if the renewals went through
        assert lock.owned() and not lost
        assert not others.lock(name, ttl=5).acquire(blocking=False)
        lock.release()
        assert others.lock(name, ttl=5).acquire(timeout=5)


def test_tls_async_flavour(etcd_tls: EtcdServer, etcd_tls_files: TlsFiles) -> None:
    async def main() -> None:
        async with tenure.connect_async(tls_url(etcd_tls, etcd_tls_files, cert=False)) as locks:
            lock = locks.lock(unique("async"), ttl=5)
            assert await lock.acquire(timeout=5)
            assert lock.fence is not None
            await lock.release()

    asyncio.run(main())


def test_tls_server_not_trusted_is_a_certificate_error(
    etcd_tls: EtcdServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No ssl_ca: the system store, which does not know the throwaway CA.
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with (
        tenure.connect(f"etcds://{etcd_tls.address}") as locks,
        pytest.raises(tenure.BackendError, match="TLS") as raised,
    ):
        locks.lock(unique("untrusted"), ttl=5).acquire(timeout=5)
    assert "certificate verify failed" in str(raised.value)


# ---- client certificates (--client-cert-auth) -----------------------------------------------


def test_client_certificate_accepted(
    etcd_client_cert_auth: EtcdServer, etcd_tls_files: TlsFiles
) -> None:
    exercise(tls_url(etcd_client_cert_auth, etcd_tls_files))


def test_no_client_certificate_is_a_clear_tls_error(
    etcd_client_cert_auth: EtcdServer, etcd_tls_files: TlsFiles
) -> None:
    url = tls_url(etcd_client_cert_auth, etcd_tls_files, cert=False)
    with tenure.connect(url, timeout=30) as locks:
        started = time.monotonic()
        with pytest.raises(tenure.BackendError, match="TLS with the members failed") as raised:
            locks.lock(unique("anonymous"), ttl=5).acquire(timeout=30)
        # Refused at the handshake: not a member that never answers (the request's 30 s).
        assert time.monotonic() - started < 15
    assert "certificate" in str(raised.value) and "ssl_cert" in str(raised.value)


def test_client_certificate_is_sent_without_ssl_ca(
    etcd_client_cert_auth: EtcdServer, etcd_tls_files: TlsFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ssl_cert/ssl_key without ssl_ca: the server's certificate is checked against the
    system store (here OpenSSL's SSL_CERT_FILE, naming the throwaway CA) and the client
    certificate is still presented. It used to be loaded only with ssl_ca: the member
    refused the handshake."""
    monkeypatch.setenv("SSL_CERT_FILE", str(etcd_tls_files.ca))
    exercise(tls_url(etcd_client_cert_auth, etcd_tls_files, ca=False))


def test_forked_child_opens_its_own_tls_connections(
    etcd_client_cert_auth: EtcdServer, etcd_tls_files: TlsFiles
) -> None:
    """A forked child shares its parent's TLS context (no sockets in it), never its
    connections: through the same client it sees the parent's lock held and takes another."""
    name = unique("parent")
    with tenure.connect(tls_url(etcd_client_cert_auth, etcd_tls_files)) as locks:
        lock = locks.lock(name, ttl=10)
        assert lock.acquire(timeout=5)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, never return into pytest
            try:
                verdict = [not locks.lock(name, ttl=5).acquire(blocking=False)]
                other = locks.lock(name + "-child", ttl=5)
                verdict.append(other.acquire(timeout=5))
                other.release()
                os.write(write_end, b"".join(b"1" if v else b"0" for v in verdict))
            finally:
                os._exit(0)
        os.close(write_end)
        os.waitpid(pid, 0)
        verdict = os.read(read_end, 16)
        os.close(read_end)
        assert verdict == b"11", verdict
        assert lock.owned()  # the parent's connections still work
        lock.release()


def test_client_certificate_without_ssl_ca_still_checks_the_server(
    etcd_client_cert_auth: EtcdServer, etcd_tls_files: TlsFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with (
        tenure.connect(tls_url(etcd_client_cert_auth, etcd_tls_files, ca=False)) as locks,
        pytest.raises(tenure.BackendError, match="certificate verify failed"),
    ):
        locks.lock(unique("unchecked"), ttl=5).acquire(timeout=5)


def test_tls_options_that_cannot_work_are_configuration_errors(
    etcd_tls: EtcdServer, etcd_tls_files: TlsFiles, tmp_path: object
) -> None:
    base = f"etcds://{etcd_tls.address}"
    with pytest.raises(tenure.ConfigurationError, match="ssl_cert and ssl_key go together"):
        tenure.connect(base, ssl_cert=str(etcd_tls_files.client_cert))
    with pytest.raises(tenure.ConfigurationError, match="need an etcds:// URL"):
        tenure.connect(f"etcd://{etcd_tls.address}", ssl_ca=str(etcd_tls_files.ca))
    # Missing files and a key that is not the certificate's fail at connect(), not later.
    with pytest.raises(tenure.ConfigurationError, match="cannot use the TLS files"):
        tenure.connect(base, ssl_ca=str(etcd_tls_files.ca) + ".missing")
    with pytest.raises(tenure.ConfigurationError, match="cannot use the TLS files"):
        tenure.connect(base, ssl_cert=str(etcd_tls_files.client_cert),
                       ssl_key=str(etcd_tls_files.server_key))


# ---- etcd auth: credentials in the URL ------------------------------------------------------


def test_auth_with_credentials_locks_semaphores_and_fences(etcd_auth: EtcdServer) -> None:
    exercise(auth_url(etcd_auth))


def test_auth_async_flavour(etcd_auth: EtcdServer) -> None:
    async def main() -> None:
        async with tenure.connect_async(auth_url(etcd_auth)) as locks:
            lock = locks.lock(unique("async"), ttl=5)
            assert await lock.acquire(timeout=5)
            await lock.release()

    asyncio.run(main())


def test_auth_without_credentials_is_a_clear_error(etcd_auth: EtcdServer) -> None:
    with (
        tenure.connect(f"etcd://{etcd_auth.address}") as locks,
        pytest.raises(tenure.BackendError, match="authentication enabled") as raised,
    ):
        locks.lock(unique("anonymous"), ttl=5).acquire(timeout=5)
    assert "user:password" in str(raised.value)


def test_auth_wrong_password_is_a_clear_error(etcd_auth: EtcdServer) -> None:
    user, _ = AUTH_USER
    with (
        tenure.connect(auth_url(etcd_auth, password="not-the-password")) as locks,
        pytest.raises(tenure.BackendError, match="authentication failed") as raised,
    ):
        locks.lock(unique("wrong"), ttl=5).acquire(timeout=5)
    assert repr(user) in str(raised.value)
    assert "not-the-password" not in str(raised.value)


def test_auth_without_permission_names_the_prefix(etcd_auth: EtcdServer) -> None:
    # The user may read and write under tenure/ only.
    with (
        tenure.connect(auth_url(etcd_auth), namespace="elsewhere") as locks,
        pytest.raises(tenure.BackendError, match="permission denied") as raised,
    ):
        locks.lock(unique("outside"), ttl=5).acquire(timeout=5)
    assert "'elsewhere/'" in str(raised.value)


@pytest.mark.slow
def test_auth_token_expiry_logs_in_again(etcd_auth: EtcdServer) -> None:
    user, password = AUTH_USER
    name = unique("expiry")
    with tenure.connect(auth_url(etcd_auth)) as locks:
        lock = locks.lock(name, ttl=30)
        assert lock.acquire(timeout=5)
        first = lock.fence
        # A token of the same user, taken now and left unused as long as the client's: the
        # member's answer to it afterwards shows that the client's token has ended too.
        witness = etcd_auth.call("/v3/auth/authenticate", {"name": user, "password": password})
        time.sleep(AUTH_TOKEN_TTL + 2)  # etcd sweeps expired tokens once a second
        with pytest.raises(GatewayRefused) as refused:
            etcd_auth.call("/v3/kv/range", {"key": "dGVudXJlLw=="}, token=witness["token"])
        assert refused.value.status == 401 and "invalid auth token" in refused.value.text
        lock.release()  # the client's token is as old: it logs in again
        assert free(locks, name)
        assert lock.acquire(timeout=5)
        assert lock.fence is not None and first is not None and lock.fence > first
        lock.release()


@pytest.mark.slow
def test_auth_tokens_forgotten_by_a_restart_do_not_lose_a_renewed_lock() -> None:
    """etcd keeps simple tokens in memory: a member that restarts refuses every token it
    issued before. A renewing holder logs in again and keeps its lease (leases survive the
    restart), instead of failing every renewal until the lease is lost."""
    with running_etcd_member() as member:
        enable_auth(member)
        name = unique("restart")
        lost: list[object] = []
        with tenure.connect(auth_url(member), timeout=2) as locks:
            lock = locks.lock(name, ttl=6, renew=True, on_lost=lost.append)
            assert lock.acquire(timeout=5)
            member.server.restart()
            time.sleep(6 + 1)  # past the ttl: only renewals after the restart kept it
            assert lock.owned() and not lost
            lock.release()
            assert free(locks, name)


@pytest.mark.slow
def test_credentials_for_a_server_without_auth_and_auth_enabled_later() -> None:
    """Credentials against a member with auth disabled work without a token (as etcd's own
    client does); once auth is enabled the same client logs in at the first refusal."""
    with running_etcd_member() as member:
        url = auth_url(member)
        with tenure.connect(url) as locks:
            lock = locks.lock(unique("before"), ttl=10)
            assert lock.acquire(timeout=5)
            lock.release()
            enable_auth(member)
            # The same client, now logged in: a holder, and a waiter woken by its release.
            name = unique("after")
            holder = locks.lock(name, ttl=10)
            assert holder.acquire(timeout=5)
            got: list[int | None] = []

            def wait() -> None:
                waiter = locks.lock(name, ttl=10)
                if waiter.acquire(timeout=10):
                    got.append(waiter.fence)
                    waiter.release()

            thread = threading.Thread(target=wait)
            thread.start()
            time.sleep(0.5)
            fence = holder.fence
            holder.release()
            thread.join(15)
            assert len(got) == 1 and got[0] is not None and fence is not None and got[0] > fence
