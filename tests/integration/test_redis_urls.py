"""Redis URL forms and options: parsing, defaults, errors, and what reaches redis-py. No server:
building a backend connects nothing (the first operation does)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio

import tenure
from tenure._errors import BackendError, ConfigurationError
from tenure.backends.redis._config import parse
from tenure.backends.redis._sync import Direct, RedisBackend


def retries(retry: Any) -> int:
    """A redis-py Retry's count: get_retries() from redis-py 6, the attribute before."""
    count: int = retry.get_retries() if hasattr(retry, "get_retries") else retry._retries
    return count


def settings(url: str, **options: Any) -> Any:
    return parse(url, options)


def test_plain_url_defaults() -> None:
    found = settings("redis://example.com")
    assert found.topology == "single"
    assert found.addresses == (("example.com", 6379),)
    assert found.db == 0
    assert (found.username, found.password) == (None, None)
    assert found.tls is False
    assert found.namespace == "tenure"
    # A dead server must be an error within seconds: explicit timeouts, no driver retries.
    assert found.socket_timeout == 3.0
    assert found.socket_connect_timeout == 3.0
    assert found.retries == 0


def test_credentials_port_db_and_query_options() -> None:
    found = settings(
        "redis://al%40ice:p%3Ass@10.0.0.5:7000/3?socket_timeout=1.5&namespace=app.locks&retries=2"
    )
    assert found.addresses == (("10.0.0.5", 7000),)
    assert (found.username, found.password) == ("al@ice", "p:ss")
    assert found.db == 3
    assert found.socket_timeout == 1.5
    assert found.namespace == "app.locks"
    assert found.retries == 2
    assert found.display == "redis://al%40ice:***@10.0.0.5:7000/3?socket_timeout=1.5&namespace=app.locks&retries=2"


def test_password_only_and_ipv6() -> None:
    found = settings("redis://:secret@[::1]:6380")
    assert (found.username, found.password) == (None, "secret")
    assert found.addresses == (("::1", 6380),)


def test_keywords_win_over_the_url() -> None:
    found = settings("redis://h/1?socket_timeout=9", socket_timeout=0.25, db=2, password="kw")
    assert (found.socket_timeout, found.db, found.password) == (0.25, 2, "kw")


def test_rediss_passes_tls_options_through() -> None:
    found = settings(
        "rediss://cache.internal:6390/0?ssl_cert_reqs=required",
        ssl_ca_certs="/etc/ca.pem", ssl_certfile="/c.pem", ssl_keyfile="/k.pem",
        ssl_check_hostname=True, ssl_min_version="TLSv1_2",
    )
    assert found.tls is True
    kwargs = found.connection_kwargs()
    assert kwargs["ssl"] is True
    assert kwargs["ssl_ca_certs"] == "/etc/ca.pem"
    assert kwargs["ssl_certfile"] == "/c.pem"
    assert kwargs["ssl_keyfile"] == "/k.pem"
    assert kwargs["ssl_cert_reqs"] == "required"
    assert kwargs["ssl_check_hostname"] is True


def test_tls_options_need_tls() -> None:
    with pytest.raises(ConfigurationError, match="rediss"):
        settings("redis://h", ssl_ca_certs="/ca.pem")
    with pytest.raises(ConfigurationError, match="ssl_cert_reqs"):
        settings("rediss://h", ssl_cert_reqs="sometimes")


def test_unix_socket_url() -> None:
    found = settings("unix:///var/run/redis/redis.sock?db=4")
    assert found.unix_path == "/var/run/redis/redis.sock"
    assert found.db == 4
    assert found.addresses == ()
    found = settings("unix://:pw@/tmp/r%20s.sock")
    assert (found.unix_path, found.password) == ("/tmp/r s.sock", "pw")
    with pytest.raises(ConfigurationError, match="absolute"):
        settings("unix://relative.sock")
    with pytest.raises(ConfigurationError, match="TLS"):
        settings("unix:///tmp/r.sock", ssl=True)


def test_cluster_url() -> None:
    found = settings("redis+cluster://u:p@10.0.0.1:7000,10.0.0.2:7001,[::1]:7002")
    assert found.topology == "cluster"
    assert found.addresses == (("10.0.0.1", 7000), ("10.0.0.2", 7001), ("::1", 7002))
    assert (found.username, found.password) == ("u", "p")
    assert settings("redis+cluster://n1").addresses == (("n1", 6379),)
    with pytest.raises(ConfigurationError, match="database 0"):
        settings("redis+cluster://n1:7000/2")
    assert settings("redis+cluster://n1:7000?ssl=true").tls is True


def test_sentinel_url() -> None:
    found = settings(
        "redis+sentinel://:masterpw@s1:26379,s2,s3:26380/mymaster/2?socket_timeout=1",
        sentinel_password="sentinelpw",
    )
    assert found.topology == "sentinel"
    assert found.addresses == (("s1", 26379), ("s2", 26379), ("s3", 26380))
    assert found.service_name == "mymaster"
    assert found.db == 2
    assert found.password == "masterpw"
    assert found.sentinel_extra == {"password": "sentinelpw"}
    with pytest.raises(ConfigurationError, match="service"):
        settings("redis+sentinel://s1:26379")
    with pytest.raises(ConfigurationError, match="sentinel"):
        settings("redis://h", sentinel_password="x")


@pytest.mark.parametrize(
    ("url", "options", "message"),
    [
        ("redis://h?colour=blue", {}, "unknown redis option"),
        ("redis://h", {"colour": "blue"}, "unknown redis option"),
        ("redis://h:99999", {}, "bad port"),
        ("redis://h:abc", {}, "bad port"),
        ("redis://h1:1,h2:2", {}, "one host"),
        ("redis://h/x", {}, "integer"),
        ("redis://h/1/2", {}, "unexpected path"),
        ("redis://h?socket_timeout=0", {}, "> 0"),
        ("redis://h?socket_timeout=soon", {}, "number"),
        ("redis://h?retries=-1", {}, ">= 0"),
        ("redis://h?password=x", {}, "keyword"),
        ("redis://h?db=1&db=2", {}, "twice"),
        ("redis://h", {"namespace": "a{b}"}, "namespace"),
        ("redis://h", {"namespace": "a*"}, "namespace"),
        ("redis://h#frag", {}, "fragment"),
        ("rediz://h", {}, "not a Redis URL"),
    ],
)
def test_bad_urls_and_options(url: str, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        settings(url, **options)


def test_connect_rejects_bad_options_at_once() -> None:
    with pytest.raises(ConfigurationError):
        tenure.connect("redis://127.0.0.1:1?colour=blue")


def test_describe_never_shows_the_password() -> None:
    locks = tenure.connect("redis://user:hunter2@127.0.0.1:1/0")
    try:
        assert "hunter2" not in locks.backend.describe()
        assert "hunter2" not in repr(locks)
    finally:
        locks.close()


def test_the_settings_reach_redis_py() -> None:
    backend = RedisBackend.from_url(
        "rediss://127.0.0.1:6390/5?socket_timeout=1.5&socket_connect_timeout=0.5",
        ssl_cert_reqs="none", client_name="tenure-test",
    )
    transport = backend._transport
    assert isinstance(transport, Direct)
    pool: Any = transport._pool
    assert pool.connection_class is redis.SSLConnection
    kwargs = pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("127.0.0.1", 6390, 5)
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (1.5, 0.5)
    assert retries(kwargs["retry"]) == 0
    assert kwargs["client_name"] == "tenure-test"
    backend.close()

    unix = RedisBackend.from_url("unix:///tmp/nowhere.sock?db=2")
    unix_pool: Any = unix._transport._pool  # type: ignore[union-attr]
    assert unix_pool.connection_class is redis.UnixDomainSocketConnection
    assert unix_pool.connection_kwargs["path"] == "/tmp/nowhere.sock"
    unix.close()


def test_async_flavour_builds_asyncio_connections() -> None:
    async def check() -> None:
        locks = tenure.connect_async("redis://127.0.0.1:1/0", retries=1)
        pool: Any = locks.backend._transport._pool  # type: ignore[attr-defined]
        assert isinstance(pool, redis.asyncio.ConnectionPool)
        assert retries(pool.connection_kwargs["retry"]) == 1
        await locks.aclose()

    asyncio.run(check())


def test_nothing_connects_before_first_use_and_then_it_fails_fast() -> None:
    # Port 1 on loopback: nothing listens, the connection is refused at once.
    locks = tenure.connect("redis://127.0.0.1:1/0", socket_connect_timeout=1)
    lock = locks.lock("never", ttl=5)
    with pytest.raises(BackendError) as caught:
        lock.acquire(timeout=5)
    assert isinstance(caught.value.__cause__, redis.RedisError)
    assert "127.0.0.1:1" in str(caught.value)
    locks.close()


def test_cluster_client_is_built_at_first_use() -> None:
    locks = tenure.connect("redis+cluster://127.0.0.1:1,127.0.0.1:2", socket_connect_timeout=1)
    with pytest.raises(BackendError):
        locks.lock("never", ttl=5).acquire(blocking=False)
    locks.close()
