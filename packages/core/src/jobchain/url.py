"""BackendURL: the immutable value behind every backend config string.

Shape: ``scheme[+driver]://[username[:password]@][host][:port][/database][?key=value&…]``,
as in SQLAlchemy. Examples::

    postgresql+psycopg://app:secret@db:5432/app?schema=jobs
    sqlite:///relative.db        sqlite:////abs/path.db        sqlite:///:memory:
    redis://cache:6379/0         rediss://cache:6380/0         nats://nats:4222
    memory://                    memory://shared
    none                         (notify only: no notify backend, workers poll)

The password never appears in ``repr``, ``str`` or error messages; drivers that need it
call ``render(hide_password=False)``.
"""

from __future__ import annotations

import difflib
import string
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlencode, urlsplit

from jobchain.errors import InvalidURLError

NONE_URL: Final = "none"
"""The literal that selects no notify backend (workers fall back to polling)."""

MASK: Final = "***"

_SCHEME_CHARS: Final = frozenset(string.ascii_lowercase + string.digits + "-.")
_EMPTY_QUERY: Final[Mapping[str, str]] = MappingProxyType({})
_SECRET_QUERY_KEYS: Final = frozenset({"password", "passwd", "pwd", "secret", "token", "sslpassword"})


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendURL:
    """A parsed backend URL; build it with ``BackendURL.parse(text)``.

    ``database`` is the path without its leading ``/``: a database name for servers, a file
    path for SQLite (``sqlite:////abs/x.db`` → ``/abs/x.db``), a number for Redis.
    ``host`` is lower-cased, as DNS names are case-insensitive.
    """

    scheme: str
    driver: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    host: str | None = None
    port: int | None = None
    database: str | None = None
    query: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Freeze the query into a read-only view of a private copy, so callers can't mutate it.
        object.__setattr__(self, "query", MappingProxyType(dict(self.query)))

    def __hash__(self) -> int:
        return hash(
            (
                self.scheme,
                self.driver,
                self.username,
                self.password,
                self.host,
                self.port,
                self.database,
                tuple(sorted(self.query.items())),
            )
        )

    @classmethod
    def parse(cls, text: object) -> BackendURL:
        """Parse ``text``; raise InvalidURLError naming the malformed part (password masked)."""
        if not isinstance(text, str):
            raise InvalidURLError(f"a backend URL must be a string, got {type(text).__name__}")
        if not text.strip():
            raise InvalidURLError("the backend URL is empty; expected e.g. 'sqlite:///jobchain.db'")
        if any(ch.isspace() for ch in text):
            raise InvalidURLError(f"the backend URL {mask_url(text)!r} contains whitespace; remove it")
        if text == NONE_URL:
            return cls(scheme=NONE_URL)
        if "://" not in text:
            raise InvalidURLError(
                f"the backend URL {mask_url(text)!r} has no scheme; "
                "expected 'scheme://…', e.g. 'postgresql://user@host/db'"
            )
        masked = mask_url(text)
        # Validate the scheme first: urlsplit silently treats an invalid scheme as part of the path.
        scheme, driver = _parse_scheme(text.partition("://")[0], masked)
        try:
            parts = urlsplit(text)
        except ValueError as exc:  # e.g. an unbalanced '[' in an IPv6 host
            raise InvalidURLError(f"the host of {masked!r} is malformed: {exc}") from None
        if parts.fragment:
            raise InvalidURLError(f"the backend URL {masked!r} has a '#fragment'; remove it")
        username, password, host, port = _parse_netloc(parts.netloc, masked)
        database = unquote(parts.path[1:]) if parts.path.startswith("/") else unquote(parts.path)
        if parts.netloc == ":memory:":
            # 'sqlite://:memory:' is common shorthand; it means the same as 'sqlite:///:memory:'.
            database = ":memory:"
        return cls(
            scheme=scheme,
            driver=driver,
            username=username,
            password=password,
            host=host,
            port=port,
            database=database or None,
            query=_parse_query(parts.query, masked),
        )

    @property
    def is_none(self) -> bool:
        """True for the literal ``none`` (no notify backend)."""
        return self.scheme == NONE_URL

    @property
    def drivername(self) -> str:
        """``scheme+driver`` as written, or just the scheme."""
        return f"{self.scheme}+{self.driver}" if self.driver else self.scheme

    def render(self, *, hide_password: bool = True) -> str:
        """The URL as a string; pass ``hide_password=False`` only when handing it to a driver."""
        if self.is_none:
            return NONE_URL
        netloc = ""
        if self.username is not None:
            token = self.password is None and self.scheme in _TOKEN_SCHEMES
            netloc = MASK if token and hide_password else quote(self.username, safe="")
            if self.password is not None:
                netloc += ":" + (MASK if hide_password else quote(self.password, safe=""))
            netloc += "@"
        if self.host is not None:
            netloc += f"[{self.host}]" if ":" in self.host else self.host
        if self.port is not None:
            netloc += f":{self.port}"
        text = f"{self.drivername}://{netloc}"
        if self.database is not None:
            text += "/" + quote(self.database, safe="/:@~+,;=")
        if self.query:
            text += "?" + "&".join(
                f"{quote_plus(key)}={MASK}"
                if hide_password and key.lower() in _SECRET_QUERY_KEYS
                else urlencode([(key, value)])
                for key, value in self.query.items()
            )
        return text

    def __str__(self) -> str:
        return self.render()

    def __repr__(self) -> str:
        return f"BackendURL({self.render()!r})"


def check_query_keys(
    url: BackendURL, known: Collection[str], *, backend: str, also: Collection[str] = (), also_note: str = ""
) -> None:
    """Raise InvalidURLError if ``url`` has a query key that is neither in ``known`` nor in ``also``.

    The message names the key, a close match ("did you mean 'schema'?"), the valid keys of
    ``backend`` and ``also_note`` (e.g. "libpq connection parameters are accepted too"), on one
    line. Backends call it before connecting, so a typo never reaches the driver.
    """
    unknown = [key for key in url.query if key not in known and key not in also]
    if not unknown:
        return
    key = unknown[0]
    candidates = sorted(set(known) | set(also))
    close = difflib.get_close_matches(key.lower(), candidates, n=1, cutoff=0.6)
    text = f"unknown option {key!r}"
    if len(unknown) > 1:
        text += f" (and {', '.join(repr(k) for k in unknown[1:])})"
    text += f" in {url}"
    if close:
        text += f" (did you mean {close[0]!r}?)"
    text += (
        f"; {backend} options are {', '.join(sorted(known))}"
        if known
        else f"; {backend} URLs take no options"
    )
    if also_note:
        text += f"; {also_note}"
    raise InvalidURLError(text)


_TOKEN_SCHEMES = frozenset({"nats", "tls"})
"""Schemes whose user part without a password is a token (``nats://TOKEN@host``)."""


def mask_url(text: str) -> str:
    """Return ``text`` with its password (and ``?password=``-like values) replaced by ``***``.

    Works on strings that fail to parse too, so error messages never leak a password.
    """
    head, sep, rest = text.partition("://")
    if not sep:
        return text
    # The netloc ends at the first '/', '?' or '#', exactly as urllib.parse.urlsplit cuts it.
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    netloc, tail = rest[:end], rest[end:]
    if "@" in tail:
        # An unencoded '/', '?' or '#' in a password cuts the netloc inside it, leaving the rest
        # of the password in the tail: mask everything up to the last '@' instead. This may hide
        # more than a password (an '@' in a query value), never less.
        userinfo, _, after = rest.rpartition("@")
        user, colon, _password = userinfo.partition(":")
        shown = f"{user}:{MASK}" if colon and not set(user) & set("/?#") else MASK
        return f"{head}://{shown}@{_mask_query(after)}"
    userinfo, at, hostinfo = netloc.rpartition("@")
    user, colon, _password = userinfo.partition(":")
    if at and colon:
        netloc = f"{user}:{MASK}@{hostinfo}"
    elif at and head.lower() in _TOKEN_SCHEMES:
        netloc = f"{MASK}@{hostinfo}"  # nats://TOKEN@host: the user part is the secret
    return f"{head}://{netloc}{_mask_query(tail)}"


def _mask_query(tail: str) -> str:
    path, question, query = tail.partition("?")
    if not question:
        return tail
    query, hash_sign, fragment = query.partition("#")
    fields = []
    for item in query.split("&"):
        key, equals, _value = item.partition("=")
        secret = equals and unquote(key).lower() in _SECRET_QUERY_KEYS
        fields.append(f"{key}={MASK}" if secret else item)
    return f"{path}?{'&'.join(fields)}{hash_sign}{fragment}"


def _parse_scheme(raw: str, masked: str) -> tuple[str, str | None]:
    if not raw:
        raise InvalidURLError(f"the backend URL {masked!r} has an empty scheme before '://'")
    scheme, plus, driver = raw.lower().partition("+")
    for label, value in (("scheme", scheme), ("driver", driver)):
        if (label == "scheme" or plus) and not value:
            raise InvalidURLError(f"the {label} of {masked!r} is empty; expected 'scheme[+driver]://'")
        if value and (not value[0].isalpha() or not set(value) <= _SCHEME_CHARS):
            raise InvalidURLError(
                f"the {label} {value!r} of {masked!r} is invalid; use letters, digits, '-' and '.', "
                "starting with a letter"
            )
    return scheme, driver or None


def _parse_netloc(netloc: str, masked: str) -> tuple[str | None, str | None, str | None, int | None]:
    if netloc == ":memory:":
        return None, None, None, None
    userinfo, at, hostinfo = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user)
        password = unquote(secret) if colon else None
    # Read host and port through urlsplit's own accessors on the password-free part.
    probe = urlsplit(f"//{hostinfo}")
    try:
        port = probe.port
    except ValueError:
        port_text = hostinfo.rpartition("]")[2] if hostinfo.startswith("[") else hostinfo
        raise InvalidURLError(
            f"the port {port_text.partition(':')[2]!r} of {masked!r} is invalid; "
            "expected an integer from 1 to 65535"
        ) from None
    if port == 0 or (port is None and hostinfo.endswith(":")):
        raise InvalidURLError(f"the port of {masked!r} is missing or zero; expected 1 to 65535")
    host = probe.hostname or None
    if at and not username and password is None:
        raise InvalidURLError(f"the user name of {masked!r} is empty; remove the '@' or add a name")
    if at and not username:
        username = ""  # ``redis://:secret@host``: a password with no user name (Redis AUTH)
    return username, password, host, port


def _parse_query(query: str, masked: str) -> Mapping[str, str]:
    if not query:
        return _EMPTY_QUERY
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise InvalidURLError(
            f"the query of {masked!r} is malformed; expected 'key=value&key=value'"
        ) from None
    result: dict[str, str] = {}
    for key, value in pairs:
        if key in result:
            raise InvalidURLError(f"the query parameter {key!r} appears twice in {masked!r}")
        result[key] = value
    return MappingProxyType(result)


__all__ = ["MASK", "NONE_URL", "BackendURL", "check_query_keys", "mask_url"]
