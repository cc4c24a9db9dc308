"""No secret from any part of a URL (user info, query options such as ``password`` or
``sslpassword``, keyword options) is ever printed: not by ``repr``, not in an error, not in a
DEBUG log line. Every backend's URLs pass through one redaction (``tenure._urls.redact``);
these tests hold each scheme to it."""

from __future__ import annotations

import logging

import pytest

import tenure
from tenure._urls import redact, scrub_error, url_secrets

SECRETS = ("pw1secret", "pw2secret", "pw3secret", "pw4secret")


def shown(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


# Every scheme, with a password in its user info and, where the scheme's driver reads one,
# secrets in its query string. Port 1 refuses connections at once.
URLS = [
    "postgresql://app:pw1secret@127.0.0.1:1/db?password=pw2secret&sslpassword=pw3secret",
    "postgres://app@127.0.0.1:1/db?sslmode=disable&password=pw2secret",
    "postgresql://app:pw1secret@127.0.0.1:1/db?sslmode=disable&password=pw2secret&x=%",
    "mysql://root:pw1secret@127.0.0.1:1/db?password=pw2secret",
    "mysql://root:pw1secret@127.0.0.1:1/db?charset=utf8mb4&passwd=pw2secret",
    "redis://user:pw1secret@127.0.0.1:1/0?password=pw2secret",
    "rediss://:pw1secret@127.0.0.1:1/0?ssl_password=pw2secret",
    "unix://:pw1secret@/tmp/tenure-no-such.sock?db=0&password=pw2secret",
    "redis+cluster://:pw1secret@127.0.0.1:1,127.0.0.1:2?password=pw2secret",
    "redis+sentinel://:pw1secret@127.0.0.1:1/svc?sentinel_password=pw2secret",
    "redlock://:pw1secret@127.0.0.1:1,:pw1secret@127.0.0.1:2,:pw1secret@127.0.0.1:3"
    "?password=pw2secret",
    "redlock://:pw1secret@127.0.0.1:1,127.0.0.1:2,:pw3secret@127.0.0.1:3",
    "mongodb://app:pw1secret@127.0.0.1:1/db?tlsCertificateKeyFilePassword=pw2secret",
    "mongodb://AKID:pw1secret@127.0.0.1:1/db?authMechanism=MONGODB-AWS"
    "&authMechanismProperties=AWS_SESSION_TOKEN:pw2secret",
    "mongodb://app:pw1secret@127.0.0.1:1/db?bogusOption=1&password=pw2secret",
    "mongodb+srv://app:pw1secret@cluster.invalid/db?authSource=admin;password=pw2secret",
    "etcd://root:pw1secret@127.0.0.1:1,127.0.0.1:2?password=pw2secret",
    "etcds://root:pw1secret@127.0.0.1:1?token=pw2secret",
    "zookeeper://app:pw1secret@127.0.0.1:1/chroot?password=pw2secret",
    "zk://app:pw1secret@127.0.0.1:1?secret=pw2secret",
    "sqlite:///tenure-secrets-test.db?password=pw2secret",
    "memory://?password=pw2secret",
    "nope://app:pw1secret@host/?password=pw2secret",
    "host=127.0.0.1 password=pw2secret",  # a libpq key=value string given as a URL
    "app:pw1secret@127.0.0.1:5432/db",  # a URL without its scheme
]


@pytest.mark.parametrize("url", URLS)
def test_redact_hides_every_secret(url: str) -> None:
    assert shown(redact(url)) == []


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql://app@h/db?password=hunter5&sslmode=require",
            "postgresql://app@h/db?password=***&sslmode=require",
        ),
        ("postgresql://h/db?sslpassword=x&application_name=a",
         "postgresql://h/db?sslpassword=***&application_name=a"),
        ("postgresql:///db?host=/run/pg&PassWord=x", "postgresql:///db?host=/run/pg&PassWord=***"),
        ("mongodb://h/?authMechanismProperties=AWS_SESSION_TOKEN:x&w=1",
         "mongodb://h/?authMechanismProperties=***&w=1"),
        ("redis://h:1/0?socket_timeout=2", "redis://h:1/0?socket_timeout=2"),
    ],
)
def test_redact_changes_only_the_secret_values(url: str, expected: str) -> None:
    assert redact(url) == expected


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_connect_repr_and_errors_show_no_secret(
    url: str, flavour: str, caplog: pytest.LogCaptureFixture, tmp_path: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(str(tmp_path))
    caplog.set_level(logging.DEBUG)
    connect = tenure.connect if flavour == "sync" else tenure.connect_async
    try:
        locks = connect(url)
    except tenure.TenureError as exc:
        assert shown(_chain(exc)) == []
    else:
        assert shown(repr(locks)) == []
        assert shown(locks.backend.describe()) == []
    assert shown(caplog.text) == []


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("redis://127.0.0.1:1/0", {"password": b"pw3secret"}),
        ("redis://127.0.0.1:1/0", {"ssl_password": 7, "username": "pw4secret"}),
        ("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", {"password": b"pw3secret"}),
        ("redis+sentinel://127.0.0.1:1/svc", {"sentinel_password": b"pw3secret"}),
        ("mongodb://127.0.0.1:1/db", {"password": b"pw3secret"}),
        ("mysql://root@127.0.0.1:1/db", {"password": b"pw3secret", "bogus": 1}),
        ("mysql://root@127.0.0.1:1/db", {"password": "pw3secret"}),
        ("postgresql://app@127.0.0.1:1/db", {"password": "pw3secret"}),
        ("postgresql://app@127.0.0.1:1/db", {"sslpassword": b"pw3secret", "timeout": "x"}),
        ("redis+cluster://127.0.0.1:1", {"password": "pw3secret", "db": "pw4secret"}),
        ("mongodb+srv://cluster.invalid/db", {"password": 12, "tlsCertificateKeyFilePassword":
                                              b"pw3secret"}),
        ("etcd://root@127.0.0.1:1", {"password": "pw3secret"}),
        ("etcd://root@127.0.0.1:1", {"password": b"pw3secret", "timeout": "pw4secret"}),
        ("zookeeper://app@127.0.0.1:1", {"password": "pw3secret"}),
        ("zk://127.0.0.1:1", {"auth_password": b"pw3secret", "timeout": 0}),
        ("sqlite:///tenure-secrets-test.db", {"password": "pw3secret"}),
        ("memory://", {"token": b"pw3secret"}),
    ],
)
def test_secret_keyword_options_are_never_echoed(
    url: str, options: dict[str, object], tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(str(tmp_path))
    try:
        locks = tenure.connect(url, **options)
    except tenure.TenureError as exc:
        assert shown(_chain(exc).replace("pw4secret", "")) == []
    else:
        assert shown(repr(locks)) == []
        locks.close()


def _chain(exc: BaseException) -> str:
    """The error as the CLI or a traceback would print it: every message in its chain."""
    parts = []
    seen: BaseException | None = exc
    while seen is not None:
        parts.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app:pw1secret@127.0.0.1:1/db?password=pw2secret&sslpassword=pw3secret",
        "mysql://root:pw1secret@127.0.0.1:1/db",
        "redis://user:pw1secret@127.0.0.1:1/0",
        "redlock://:pw1secret@127.0.0.1:1,:pw1secret@127.0.0.1:2,:pw1secret@127.0.0.1:3",
        "mongodb://app:pw1secret@127.0.0.1:1/db?timeout=1&tlsCertificateKeyFilePassword=pw2secret",
        "rediss://:pw1secret@127.0.0.1:1/0",
        "redis+cluster://:pw1secret@127.0.0.1:1,127.0.0.1:2",
        "redis+sentinel://:pw1secret@127.0.0.1:1/svc",
        "postgres://app:pw1secret@127.0.0.1:1/db?sslmode=disable",
        "mysql://root:pw1secret@127.0.0.1:1/db?ssl_verify_cert=false",
        "etcd://root:pw1secret@127.0.0.1:1,127.0.0.1:2?timeout=1",
        "zookeeper://app:pw1secret@127.0.0.1:1/chroot?timeout=1",
    ],
)
def test_a_failing_server_shows_no_secret(url: str, caplog: pytest.LogCaptureFixture) -> None:
    # Port 1 refuses: the BackendError, its chain and the DEBUG log lines quote the URL.
    caplog.set_level(logging.DEBUG)
    with tenure.connect(url) as locks, pytest.raises(tenure.BackendError) as raised:
        locks.lock("secrets:job", ttl=5).acquire(timeout=0)
    assert "127.0.0.1" in str(raised.value)
    assert shown(_chain(raised.value)) == []
    assert shown(caplog.text) == []


@pytest.mark.parametrize(
    ("url", "hosts"),
    [
        (
            "redlock://:pw1secret@127.0.0.1:6701,127.0.0.1:6702,:pw1secret@127.0.0.1:6703",
            "redlock://***@127.0.0.1:6701,127.0.0.1:6702,***@127.0.0.1:6703",
        ),
        (
            "etcd://root:pw1secret@[::1]:2379,[::1]:2380,root:pw1secret@[::1]:2381",
            "etcd://***@[::1]:2379,[::1]:2380,***@[::1]:2381",
        ),
        # An unencoded ',' in a password: its pieces look like hosts, and are hidden.
        ("redlock://app:pw1,pw2secret@h1:1,h2:2,h3:3", "redlock://***,***@h1:1,h2:2,h3:3"),
        ("redlock://:pw3secret,x@h1:1,h2:2,h3:3", "redlock://***,***@h1:1,h2:2,h3:3"),
        ("redlock://app:12,pw2secret@h1:1,h2:2,h3:3", "redlock://***,***@h1:1,h2:2,h3:3"),
    ],
)
def test_ambiguous_credentials_show_the_hosts(url: str, hosts: str) -> None:
    # The user must see which hosts got credentials and which did not; only secrets go.
    assert redact(url) == hosts
    with pytest.raises(tenure.ConfigurationError, match="cannot tell which credentials") as raised:
        tenure.connect(url)
    assert hosts in str(raised.value)
    assert shown(str(raised.value)) == []


@pytest.mark.parametrize(
    "url", ["sqlite://ops:hunter2@host/x.db", "memory://ops:hunter2@store/x"]
)
def test_a_refused_local_url_does_not_print_its_password(url: str) -> None:
    # The embedded stores refuse a URL with a host; their error quotes the URL, redacted.
    with pytest.raises(tenure.ConfigurationError) as refused:
        tenure.connect(url)
    assert "hunter2" not in str(refused.value) and "***" in str(refused.value)


# Every scheme with a password (and, where the scheme reads one, a secret query option) that
# is not valid percent-encoding: a parser that refuses it must not quote it (libpq's
# 'invalid percent-encoded token: "..."' did), one that accepts it must not print it.
MALFORMED = ("pw1secret%zz", "pw1%ZZsecret", "pw1secret%0", "pw1secret%00", "%pw1secret%")


def _schemes_with(password: str) -> list[str]:
    return [
        f"postgresql://app:{password}@127.0.0.1:1/db",
        f"postgres://app@127.0.0.1:1/db?password={password}",
        f"postgresql://app@127.0.0.1:1/db?sslpassword={password}",
        f"mysql://root:{password}@127.0.0.1:1/db",
        f"mysql://root@127.0.0.1:1/db?passwd={password}",
        f"redis://user:{password}@127.0.0.1:1/0",
        f"redis://127.0.0.1:1/0?password={password}",
        f"rediss://:{password}@127.0.0.1:1/0",
        f"unix://:{password}@/tmp/tenure-no-such.sock",
        f"redis+cluster://:{password}@127.0.0.1:1,127.0.0.1:2",
        f"redis+sentinel://:{password}@127.0.0.1:1/svc",
        f"redlock://:{password}@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
        f"redlock://:{password}@127.0.0.1:1,:{password}@127.0.0.1:2,:{password}@127.0.0.1:3",
        f"mongodb://app:{password}@127.0.0.1:1/db",
        f"mongodb://app@127.0.0.1:1/db?tlsCertificateKeyFilePassword={password}",
        f"mongodb+srv://app:{password}@cluster.invalid/db",
        f"etcd://root:{password}@127.0.0.1:1",
        f"etcds://root:{password}@127.0.0.1:1,127.0.0.1:2",
        f"zookeeper://app:{password}@127.0.0.1:1/chroot",
        f"zk://app:{password}@127.0.0.1:1",
    ]


@pytest.mark.parametrize("password", MALFORMED)
@pytest.mark.parametrize("index", range(len(_schemes_with(""))))
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_malformed_percent_encoding_is_never_echoed(
    password: str, index: int, flavour: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = _schemes_with(password)[index]
    caplog.set_level(logging.DEBUG)
    connect = tenure.connect if flavour == "sync" else tenure.connect_async
    try:
        locks = connect(url)
    except tenure.TenureError as exc:
        printed = [_chain(exc)]
    else:
        printed = [repr(locks), locks.backend.describe()]
    for text in (*printed, caplog.text):
        # As written and as a parser may have decoded it ("pw1%ZZsecret" holds no "pw1secret").
        assert shown(text) == [] and password not in text and "ZZsecret" not in text, url


def test_the_postgresql_parse_error_still_says_what_is_wrong() -> None:
    # The secret goes, libpq's reason stays: the user can still find the bad '%'.
    with pytest.raises(tenure.ConfigurationError) as raised:
        tenure.connect("postgresql://app:50%zzoff@h/db")
    message = str(raised.value)
    assert "50%zzoff" not in message and "zzoff" not in message, message
    assert message.startswith("bad PostgreSQL URL 'postgresql://app:***@h/db': "), message
    assert "percent-encoded" in message, message


@pytest.mark.parametrize(
    ("url", "options", "expected"),
    [
        ("postgresql://app:50%zzoff@h/db", {}, {"50%zzoff"}),
        ("redis://:a%2Cb+c@h/0", {}, {"a%2Cb+c", "a,b+c", "a,b c"}),
        ("redlock://:p1@h1:1,:p2@h2:2,h3:3", {}, {":p1@h1:1,:p2", "p1", "p2"}),  # unsplittable
        ("mongodb://h/?w=1;authMechanismProperties=AWS_SESSION_TOKEN:tok", {},
         {"AWS_SESSION_TOKEN:tok"}),
        ("host=h password='s p'", {}, {"s p"}),
        ("etcd://h:1", {"password": b"kw", "timeout": "5", "ssl_password": "kw2"}, {"kw", "kw2"}),
    ],
)
def test_url_secrets_finds_each_secret_as_written_and_decoded(
    url: str, options: dict[str, object], expected: set[str]
) -> None:
    assert set(url_secrets(url, options)) == expected


def test_scrub_error_hides_the_secrets_of_a_message_and_cuts_a_chain_that_shows_them() -> None:
    # The net under every backend's parsing: connect() passes what they raise through it.
    secrets = url_secrets("postgresql://app:hunter%zz@h/db")
    try:
        try:
            raise ValueError('bad token "hunter%zz"')
        except ValueError as driver:
            raise tenure.ConfigurationError(f"bad URL: {driver}") from driver
    except tenure.ConfigurationError as exc:
        scrub_error(exc, secrets)
        assert str(exc) == 'bad URL: bad token "***"'
        assert exc.__cause__ is None and exc.__context__ is None
