"""URLs, options and the errors a misconfiguration gets."""

from __future__ import annotations

import pathlib
import re
import sys

import pytest

import tenure
from tenure._urls import default_sqlite_path, redact, resolve_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://user:s3cret@host:6379/0", "redis://user:***@host:6379/0"),
        ("mysql://root:pw@127.0.0.1:3306/db?x=1", "mysql://root:***@127.0.0.1:3306/db?x=1"),
        ("redlock://:pw@a:1,b:2,c:3", "redlock://:***@a:1,b:2,c:3"),
        ("redis://host:6379", "redis://host:6379"),
        ("postgresql://user@host/db", "postgresql://user@host/db"),
    ],
)
def test_redact_hides_passwords(url: str, expected: str) -> None:
    assert redact(url) == expected


@pytest.mark.parametrize(
    "url", ["", "nonsense", "ftp://host/x", "sqlite:/no-slashes.db", "://nothing"]
)
def test_bad_urls_are_configuration_errors(url: str) -> None:
    with pytest.raises(tenure.ConfigurationError):
        tenure.connect(url)


def test_unknown_scheme_names_the_known_ones() -> None:
    with pytest.raises(tenure.ConfigurationError, match="sqlite"):
        tenure.connect("consul://localhost:8500")


def test_error_messages_never_show_the_password() -> None:
    with pytest.raises(tenure.ConfigurationError) as raised:
        tenure.connect("nope://admin:hunter2@host/")
    assert "hunter2" not in str(raised.value)


def test_non_string_url_is_a_type_error() -> None:
    with pytest.raises(tenure.InvalidArgumentType):
        tenure.connect(42)  # type: ignore[arg-type]


def test_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in [m for m in sys.modules if m == "redis" or m.startswith(("redis.",
                   "tenure.backends.redis"))]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "redis", None)
    with pytest.raises(tenure.ConfigurationError, match=r"tenure\[redis\]"):
        tenure.connect("redis://127.0.0.1:1/0")


def test_default_url_is_the_per_user_state_file(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: pathlib.Path) -> None:
    monkeypatch.delenv("TENURE_URL", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_sqlite_path() == tmp_path / "tenure" / "locks.db"
    assert resolve_url(None) == f"sqlite:///{tmp_path}/tenure/locks.db"
    with tenure.connect() as locks:
        assert locks.lock("x").acquire()
    assert (tmp_path / "tenure" / "locks.db").exists()
    monkeypatch.setenv("TENURE_URL", "memory://from-env")
    assert resolve_url(None) == "memory://from-env"


def test_a_relative_state_home_is_ignored(monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: pathlib.Path) -> None:
    # XDG: "If an implementation encounters a relative path in any of these variables it
    # should consider the path invalid and ignore it." A relative one would give each
    # working directory its own "per-user" file.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")
    assert default_sqlite_path() == tmp_path / ".local" / "state" / "tenure" / "locks.db"


def test_an_unusable_default_location_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # /proc refuses new directories, even to root: the default file cannot be created.
    monkeypatch.delenv("TENURE_URL", raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", "/proc")
    with pytest.raises(tenure.ConfigurationError, match=r"/proc/\.local/state/tenure.*TENURE_URL"):
        tenure.connect()


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:////nonexistent-dir-for-tenure/x.db",  # no such directory
        "sqlite:////dev/null/x.db",                    # parent is not a directory
        "sqlite:///",                                  # no file
        "sqlite://host/x.db",                          # sqlite has no host
    ],
)
def test_unusable_sqlite_paths(url: str) -> None:
    with pytest.raises(tenure.ConfigurationError):
        tenure.connect(url)


def test_sqlite_path_that_is_a_directory(tmp_path: pathlib.Path) -> None:
    with pytest.raises(tenure.ConfigurationError, match=re.escape(str(tmp_path))):
        tenure.connect(f"sqlite:///{tmp_path}")


def test_sqlite_file_that_is_not_a_database(tmp_path: pathlib.Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(tenure.ConfigurationError, match=r"junk\.db"):
        tenure.connect(f"sqlite:///{junk}")


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("sqlite:///{tmp}/x.db?colour=blue", {}),
        ("sqlite:///{tmp}/x.db", {"colour": "blue"}),
        ("sqlite:///{tmp}/x.db?busy_timeout=soon", {}),
        ("sqlite:///{tmp}/x.db?busy_timeout=-1", {}),
        ("sqlite:///{tmp}/x.db?synchronous=sometimes", {}),
        ("memory://?x=1", {}),
        ("memory://", {"x": 1}),
    ],
)
def test_unknown_or_bad_options(url: str, options: dict[str, object],
                                tmp_path: pathlib.Path) -> None:
    with pytest.raises(tenure.ConfigurationError):
        tenure.connect(url.format(tmp=tmp_path), **options)


def test_relative_and_absolute_sqlite_urls(tmp_path: pathlib.Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with tenure.connect("sqlite:///relative.db") as locks:
        assert locks.lock("x").acquire()
    assert (tmp_path / "relative.db").exists()
    with tenure.connect(f"sqlite:///{tmp_path}/absolute.db") as locks:
        assert locks.lock("x").acquire()
    assert (tmp_path / "absolute.db").exists()


def test_nothing_is_written_for_rejected_input(tmp_path: pathlib.Path) -> None:
    with tenure.connect(f"sqlite:///{tmp_path}/x.db") as locks:
        for bad in ("", "x" * 2000):
            with pytest.raises(tenure.InvalidArgument):
                locks.lock(bad)
        with pytest.raises(tenure.InvalidArgument):
            locks.lock("ok", ttl=-5)
        assert locks.list_locks() == []


def test_client_options_are_checked() -> None:
    with pytest.raises(tenure.InvalidArgument):
        tenure.connect("memory://", default_ttl=0)
    with pytest.raises(tenure.ConfigurationError):
        tenure.connect("memory://", clock="monotonic")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite:///{dir}/x.db?busy_timeout=0", "sqlite option busy_timeout must be > 0 seconds"),
        ("sqlite:///{dir}/x.db?busy_timeout=inf", "busy_timeout must be a finite number"),
        ("redis://127.0.0.1:1?socket_timeout=soon", "redis option socket_timeout must be a number"),
        ("redis://127.0.0.1:1?max_connections=0", "redis option max_connections must be >= 1"),
        ("redis://127.0.0.1:1?ssl=maybe", "redis option ssl must be true or false"),
        ("redlock://a:1,b:2,c:3?clock_drift_rate=0.5", "clock_drift_rate must be < 0.5"),
        ("redlock://a:1,b:2,c:3?gc_after=-1", "redlock option gc_after must be > 0"),
        ("etcd://a:1?gc_after=soon", "etcd option gc_after must be a number"),
        ("zk://a:1?gc_after=0", "ZooKeeper option gc_after must be > 0"),
        ("mongodb://127.0.0.1:1/?timeout=-1", "mongodb option timeout must be > 0 seconds"),
        ("mysql://u@127.0.0.1:1/db?timeout=3601", "mysql option timeout must be <= 3600"),
        ("mysql://u@127.0.0.1:1/db?pool_size=1.5", "mysql option pool_size must be an integer"),
        ("postgresql://u@127.0.0.1:1/db?timeout=nan", "postgresql option timeout must be a finite"),
        ("postgresql://u@127.0.0.1:1/db?gc_after=0", "postgresql option gc_after must be > 0"),
    ],
)
def test_numeric_options_are_checked_alike_by_every_backend(
    url: str, message: str, tmp_path: pathlib.Path
) -> None:
    with pytest.raises(tenure.ConfigurationError, match=re.escape(message)):
        tenure.connect(url.replace("{dir}", str(tmp_path)))


@pytest.mark.parametrize("value", [True, None, [1], "1e400"])
def test_a_number_option_refuses_what_is_not_a_finite_number(value: object) -> None:
    with pytest.raises(tenure.ConfigurationError, match="busy_timeout"):
        tenure.connect("sqlite:///" + str(pathlib.Path.cwd() / "x.db"), busy_timeout=value)


def test_multi_host_urls_take_credentials_once_or_per_host_but_one_set() -> None:
    from tenure.backends.etcd._config import parse as parse_etcd
    from tenure.backends.redis._config import parse as parse_redis
    from tenure.backends.zookeeper._config import parse as parse_zookeeper

    for url in ("redis+cluster://:pw@a:1,b:2", "redis+cluster://:pw@a:1,:pw@b:2"):
        cluster = parse_redis(url, {})
        assert cluster.addresses == (("a", 1), ("b", 2)) and cluster.password == "pw"
    etcd = parse_etcd("etcd://u:pw@a:1,u:pw@b:2", {})
    assert len(etcd.endpoints) == 2 and etcd.password == "pw"
    zookeeper = parse_zookeeper("zk://u:pw@a:1,u:pw@b:2/chroot", {})
    assert zookeeper.hosts == "a:1,b:2/chroot"
    for parse, url in [
        (parse_redis, "redis+cluster://:pw@a:1,:other@b:2"),
        (parse_redis, "redis+sentinel://:pw@a:1,b:2,:pw@c:3/mymaster"),
        (parse_etcd, "etcd://u:pw@a:1,v:pw@b:2"),
        (parse_zookeeper, "zk://u:pw@a:1,u:other@b:2"),
    ]:
        with pytest.raises(tenure.ConfigurationError, match="credentials") as caught:
            parse(url, {})
        assert "pw" not in str(caught.value) and "other" not in str(caught.value)


def test_etcd_query_values_may_be_paths() -> None:
    """``ssl_ca=/etc/ssl/ca.pem`` in the query: its slashes are not a path of the URL (they
    were read as one, so the documented example was refused)."""
    from tenure.backends.etcd._config import parse as parse_etcd

    settings = parse_etcd(
        "etcds://app:s%2Fcret@a:2379,b?ssl_ca=/etc/ssl/ca.pem&ssl_cert=/c.pem&ssl_key=/k.pem",
        {},
    )
    assert settings.endpoints == ("https://a:2379", "https://b:2379")
    assert (settings.ssl_ca, settings.ssl_cert, settings.ssl_key) == (
        "/etc/ssl/ca.pem", "/c.pem", "/k.pem",
    )
    assert settings.username == "app" and settings.password == "s/cret"
    with pytest.raises(tenure.ConfigurationError, match="not a path"):
        parse_etcd("etcd://a:2379/prefix?namespace=x", {})
    with pytest.raises(tenure.ConfigurationError, match="ssl_cert and ssl_key go together"):
        parse_etcd("etcds://a?ssl_cert=/c.pem", {})


def test_redlock_takes_gc_after_once_for_every_node() -> None:
    from tenure.backends.redlock._config import parse

    assert parse("redlock://a:1,b:2,c:3?gc_after=30", {}).gc_after == 30.0
    assert parse("redlock://a:1,b:2,c:3", {"gc_after": "none"}).gc_after is None
    assert parse("redlock://a:1,b:2,c:3", {}).gc_after == 600.0
    with pytest.raises(tenure.ConfigurationError, match="gc_after per node"):
        parse("redlock://", {"nodes": ["redis://a:1?gc_after=5", "redis://b:2", "redis://c:3"]})
