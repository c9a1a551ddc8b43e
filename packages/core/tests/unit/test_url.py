"""BackendURL: parsing every documented shape, rejecting malformed input, never leaking passwords."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobchain.errors import InvalidURLError
from jobchain.url import BackendURL, mask_url


class TestParse:
    def test_full_postgres_url_with_driver(self) -> None:
        url = BackendURL.parse("postgresql+psycopg://user:pw@host:5432/db?schema=x")
        assert url.scheme == "postgresql"
        assert url.driver == "psycopg"
        assert url.drivername == "postgresql+psycopg"
        assert url.username == "user"
        assert url.password == "pw"
        assert url.host == "host"
        assert url.port == 5432
        assert url.database == "db"
        assert dict(url.query) == {"schema": "x"}

    @pytest.mark.parametrize(
        ("text", "database"),
        [
            ("sqlite:///relative.db", "relative.db"),
            ("sqlite:////abs/path.db", "/abs/path.db"),
            ("sqlite://:memory:", ":memory:"),
            ("sqlite:///:memory:", ":memory:"),
        ],
    )
    def test_sqlite_paths(self, text: str, database: str) -> None:
        url = BackendURL.parse(text)
        assert (url.scheme, url.host, url.port, url.database) == ("sqlite", None, None, database)

    def test_both_memory_spellings_are_equal(self) -> None:
        assert BackendURL.parse("sqlite://:memory:") == BackendURL.parse("sqlite:///:memory:")

    def test_redis_nats_and_tls_schemes(self) -> None:
        redis = BackendURL.parse("redis://cache:6379/0")
        assert (redis.scheme, redis.host, redis.port, redis.database) == ("redis", "cache", 6379, "0")
        assert BackendURL.parse("rediss://cache:6380/1").scheme == "rediss"
        nats = BackendURL.parse("nats://bus:4222")
        assert (nats.scheme, nats.host, nats.port, nats.database) == ("nats", "bus", 4222, None)

    def test_memory_with_and_without_name(self) -> None:
        plain = BackendURL.parse("memory://")
        assert (plain.scheme, plain.host, plain.database) == ("memory", None, None)
        assert BackendURL.parse("memory://Shared").host == "shared"

    def test_none_literal(self) -> None:
        url = BackendURL.parse("none")
        assert url.is_none
        assert str(url) == "none"
        assert not BackendURL.parse("memory://").is_none

    def test_scheme_is_case_insensitive(self) -> None:
        assert BackendURL.parse("PostgreSQL+PsycoPG://h/db").drivername == "postgresql+psycopg"

    def test_percent_encoded_credentials_are_decoded(self) -> None:
        url = BackendURL.parse("postgresql://us%40er:p%3Aw%2Fd@[::1]:5433/my%20db")
        assert (url.username, url.password, url.host, url.port, url.database) == (
            "us@er",
            "p:w/d",
            "::1",
            5433,
            "my db",
        )

    def test_unix_socket_style_without_host(self) -> None:
        url = BackendURL.parse("postgresql:///app?host=/var/run/postgresql")
        assert (url.host, url.database, dict(url.query)) == (None, "app", {"host": "/var/run/postgresql"})


class TestValue:
    def test_is_immutable(self) -> None:
        url = BackendURL.parse("redis://h:6379/0")
        with pytest.raises(dataclasses.FrozenInstanceError):
            url.port = 1  # type: ignore[misc]  # the point: assignment must fail at run time

    def test_query_is_read_only_and_a_copy(self) -> None:
        source = {"a": "1"}
        url = BackendURL(scheme="x", host="h", query=source)
        source["a"] = "2"
        assert url.query["a"] == "1"
        with pytest.raises(TypeError):
            url.query["a"] = "3"  # type: ignore[index]  # the point: the mapping must refuse writes

    def test_equal_urls_hash_equal(self) -> None:
        a = BackendURL.parse("postgresql://u:p@h/db?b=2&a=1")
        b = BackendURL.parse("postgresql://u:p@h/db?a=1&b=2")
        assert a == b
        assert hash(a) == hash(b)
        assert len({a, b}) == 1

    @pytest.mark.parametrize(
        "text",
        [
            "postgresql+psycopg://user:pw@host:5432/db?schema=x",
            "sqlite:///relative.db",
            "sqlite:////abs/path.db",
            "sqlite:///:memory:",
            "redis://h:6379/0",
            "memory://",
            "memory://shared",
            "postgresql://u%40x:p%40w@[::1]:5/d%20b?a=1+2",
        ],
    )
    def test_render_round_trips(self, text: str) -> None:
        url = BackendURL.parse(text)
        assert BackendURL.parse(url.render(hide_password=False)) == url

    @given(
        user=st.text(min_size=1, max_size=8),
        password=st.text(min_size=1, max_size=8),
        database=st.text(max_size=8),
        port=st.integers(1, 65535),
    )
    def test_render_round_trips_any_credentials(
        self, user: str, password: str, database: str, port: int
    ) -> None:
        url = BackendURL(
            scheme="postgresql",
            username=user,
            password=password,
            host="h",
            port=port,
            database=database or None,
        )
        assert BackendURL.parse(url.render(hide_password=False)) == url


class TestPasswordMasking:
    TEXT = "postgresql+psycopg://user:s3cr3t@host:5432/db"

    def test_repr_and_str_hide_the_password(self) -> None:
        url = BackendURL.parse(self.TEXT)
        for shown in (repr(url), str(url), url.render(), f"{url}", repr([url])):
            assert "s3cr3t" not in shown
            assert "user:***@host" in shown

    def test_render_for_drivers_keeps_it(self) -> None:
        assert BackendURL.parse(self.TEXT).render(hide_password=False) == self.TEXT

    def test_password_like_query_values_are_masked(self) -> None:
        url = BackendURL.parse("postgresql://h/db?password=s3cr3t&sslmode=require")
        assert "s3cr3t" not in str(url)
        assert "password=***" in str(url)
        assert "sslmode=require" in str(url)
        assert "s3cr3t" in url.render(hide_password=False)

    @pytest.mark.parametrize(
        "text",
        [
            "postgresql://user:s3cr3t@host:notaport/db",
            "postgresql://user:s3cr3t@host:99999/db",
            "postgresql://user:s3cr3t@host/db#frag",
            "postgresql://user:s3cr3t@host/db?a=1&a=2",
            "postgresql://user:s3cr3t@[::1/db",
            "post_gres://user:s3cr3t@host/db",
            "postgresql://user:s3cr3t@host/db?password=s3cr3t&x",
        ],
    )
    def test_errors_never_contain_the_password(self, text: str) -> None:
        with pytest.raises(InvalidURLError) as info:
            BackendURL.parse(text)
        assert "s3cr3t" not in str(info.value)
        assert "***" in str(info.value)

    def test_mask_url_leaves_urls_without_password_alone(self) -> None:
        assert mask_url("redis://user@h:1/0") == "redis://user@h:1/0"
        assert mask_url("not a url") == "not a url"
        # An '@' after the host is read as the end of a password holding '/': hidden too.
        assert mask_url("x://u:p@h/a:b@c") == "x://u:***@c"

    @pytest.mark.parametrize(
        "text",
        [
            "postgresql://user:pa/s3cr3t@host/db",
            "postgresql://user:s3c?r3t@host:5432/db?sslmode=require",
            "postgresql://user:s3c#r3t@host/db",
            "postgresql://user:s3@c/r3t@host/db",
            "redis://:s3c/r3t@cache:6379/0",
            "nats://s3cr3t@localhost:4222",
            "nats://s3c/r3t@localhost:4222",
        ],
    )
    def test_a_password_or_token_the_parser_cannot_cut_out_is_masked(self, text: str) -> None:
        masked = mask_url(text)
        assert "r3t" not in masked
        assert "***" in masked
        with pytest.raises(InvalidURLError) as info:
            BackendURL.parse(text + " ")  # whitespace: an error message that quotes the URL
        assert "r3t" not in str(info.value)

    @given(
        scheme=st.sampled_from(["postgresql", "postgresql+psycopg", "redis", "nats", "sqlite", "x"]),
        user=st.text(alphabet="abc_.-", max_size=5),
        noise=st.text(alphabet="ab/?#@:%&=", max_size=4),
        host=st.sampled_from(["h", "host:5432", "[::1]:6379"]),
        tail=st.sampled_from(["", "/db", "/0?sslmode=require", "/db#x"]),
    )
    def test_no_password_survives_masking(
        self, scheme: str, user: str, noise: str, host: str, tail: str
    ) -> None:
        secret = f"Zq{noise}Kw"
        text = f"{scheme}://{user}:{secret}@{host}{tail}"
        assert secret not in mask_url(text)
        assert "Zq" not in mask_url(text)
        assert "Kw" not in mask_url(text)


class TestMalformed:
    @pytest.mark.parametrize(
        ("value", "fragment"),
        [
            (None, "must be a string, got NoneType"),
            (5432, "must be a string, got int"),
            (b"sqlite:///x.db", "must be a string, got bytes"),
            ("", "is empty"),
            ("   ", "is empty"),
            ("sqlite:///my file.db", "whitespace"),
            ("postgresql://host/db\n", "whitespace"),
            ("localhost:5432", "no scheme"),
            ("just-a-name", "no scheme"),
            ("://host/db", "empty scheme"),
            ("1pg://host", "scheme '1pg'"),
            ("pg_sql://host", "scheme 'pg_sql'"),
            ("postgresql+://host", "driver of"),
            ("+psycopg://host", "scheme of"),
            ("postgresql+psy_copg://host", "driver 'psy_copg'"),
            ("redis://host:abc/0", "port 'abc'"),
            ("redis://host:70000/0", "port '70000'"),
            ("redis://host:0/0", "port"),
            ("redis://host:/0", "port"),
            ("redis://[::1/0", "host"),
            ("redis://host/0#x", "fragment"),
            ("postgresql://h/db?a=1&a=2", "'a' appears twice"),
            ("postgresql://h/db?flag", "query"),
            ("postgresql://@h/db", "user name"),
        ],
    )
    def test_message_names_the_wrong_part(self, value: object, fragment: str) -> None:
        with pytest.raises(InvalidURLError) as info:
            BackendURL.parse(value)
        assert fragment in str(info.value)

    def test_invalid_url_error_is_a_value_error(self) -> None:
        with pytest.raises(ValueError, match="no scheme"):
            BackendURL.parse("nope")


def test_a_password_without_a_user_name_is_accepted_and_masked() -> None:
    url = BackendURL.parse("redis://:s3cret@cache:6379/0")
    assert url.username == ""
    assert url.password == "s3cret"
    assert "s3cret" not in repr(url)
    assert "s3cret" not in str(url)
    assert url.render(hide_password=False) == "redis://:s3cret@cache:6379/0"


def test_a_nats_token_in_the_user_part_is_hidden_by_repr_and_str() -> None:
    url = BackendURL.parse("nats://s3cr3t@localhost:4222")
    for shown in (repr(url), str(url), url.render()):
        assert "s3cr3t" not in shown
        assert "nats://***@localhost:4222" in shown
    assert url.render(hide_password=False) == "nats://s3cr3t@localhost:4222"
    assert str(BackendURL.parse("redis://user@h:1/0")) == "redis://user@h:1/0"
