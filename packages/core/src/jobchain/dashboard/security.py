"""Authentication, sessions, CSRF tokens and security headers of the dashboard.

A session is a signed cookie (HMAC-SHA256, no server-side store): a random id, whether it
has logged in, and its expiry. The signing key is derived from the settings' secret key and
the credentials, so changing a password or token ends every session. Requests may also
authenticate per request with ``Authorization: Bearer <token>`` or HTTP basic credentials.

Every action is a POST carrying ``csrf_token``: an HMAC of the session id, so a page from
another site cannot forge one (it cannot read the cookie nor our pages). A request whose
``Origin`` names another host is refused too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from starlette.datastructures import MutableHeaders
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobchain.dashboard.settings import DashboardCredentialsError, DashboardSettings
from jobchain.errors import JobchainError

if TYPE_CHECKING:
    from jobchain.dashboard.revocation import Revocations

COOKIE: Final = "jobchain_dashboard"
CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""No inline script or style anywhere: injected markup could not run even if it escaped."""
MAX_TRACKED_CLIENTS: Final = 10_000
"""Addresses whose failed logins are remembered at most (memory stays bounded)."""


class FailedLogins:
    """Wrong credentials per client address: after ``limit`` within ``window`` seconds that
    address is refused (429) until the oldest of them is ``window`` seconds old.

    In memory, per process. Behind a proxy every client may share one address: a burst of
    wrong guesses then locks everyone out for a minute, which is the price of slowing down a
    guesser at all.
    """

    def __init__(self, limit: int = 10, window: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.limit = limit
        self.window = window
        self._clock = clock
        self._seen: dict[str, deque[float]] = {}

    def _recent(self, client: str) -> deque[float]:
        times = self._seen.get(client)
        if times is None:
            return deque()
        horizon = self._clock() - self.window
        while times and times[0] <= horizon:
            times.popleft()
        if not times:
            del self._seen[client]
        return times

    def blocked(self, client: str) -> bool:
        return len(self._recent(client)) >= self.limit

    def record(self, client: str) -> None:
        if len(self._seen) >= MAX_TRACKED_CLIENTS and client not in self._seen:
            self._seen.pop(next(iter(self._seen)))  # the longest-tracked address goes first
        self._recent(client)
        self._seen.setdefault(client, deque()).append(self._clock())


@dataclass(frozen=True, slots=True)
class Session:
    """The caller's session: ``sid`` keys its CSRF token; ``authenticated`` after a login."""

    sid: str
    authenticated: bool
    expires: int


class Guard:
    """Checks credentials, signs sessions and CSRF tokens for one dashboard app."""

    def __init__(self, settings: DashboardSettings) -> None:
        if not settings.has_credentials and not settings.allow_anonymous:
            raise DashboardCredentialsError(
                "the dashboard needs credentials: DashboardSettings(token=...) or username= and "
                "password= (or JOBCHAIN_DASHBOARD_TOKEN); allow_anonymous=True only when your own "
                "app authenticates every request before it reaches the dashboard"
            )
        self.settings = settings
        self.failures = FailedLogins()
        self.revocations: Revocations | None = None
        """Sessions ended by logout (:mod:`jobchain.dashboard.revocation`); the app sets it."""
        secret = settings.secret_key or secrets.token_bytes(32)
        material = "\0".join([settings.token or "", settings.username or "", settings.password or ""])
        self._key = hmac.new(secret, b"jobchain-dashboard\0" + material.encode(), hashlib.sha256).digest()

    # ------------------------------------------------------------ credentials

    def check_authorization(self, header: str | None) -> bool:
        """True when an ``Authorization`` header carries valid bearer or basic credentials."""
        if not header:
            return False
        scheme, _, value = header.partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer":
            return self.check_token(value.strip())
        if scheme == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode()
            except ValueError:  # not base64 (binascii.Error), not ASCII, or not UTF-8 once decoded
                return False
            user, colon, password = decoded.partition(":")
            return bool(colon) and self.check_password(user, password)
        return False

    def check_token(self, token: str) -> bool:
        expected = self.settings.token
        return expected is not None and _same(token, expected)

    def check_password(self, username: str, password: str) -> bool:
        user, expected = self.settings.username, self.settings.password
        if user is None or expected is None:
            return False
        # Both compared, always: the time taken does not say which one was wrong.
        return _same(username, user) & _same(password, expected)

    # ------------------------------------------------------------ sessions

    def new_session(self, *, authenticated: bool) -> Session:
        max_age = int(self.settings.session_max_age.total_seconds())
        return Session(secrets.token_urlsafe(18), authenticated, int(time.time()) + max_age)

    def dump(self, session: Session) -> str:
        body = f"{session.sid}.{int(session.authenticated)}.{session.expires}"
        return f"{body}.{self._sign(body)}"

    def load(self, cookie: str | None) -> Session | None:
        """The session in ``cookie`` if its signature holds and it has not expired."""
        if not cookie:
            return None
        body, _, signature = cookie.rpartition(".")
        if not body or not _same(signature, self._sign(body)):
            return None
        sid, flag, expires = [*body.split("."), "", "", ""][:3]
        if not expires.isdigit() or int(expires) < time.time() or flag not in ("0", "1"):
            return None
        return Session(sid, flag == "1", int(expires))

    def csrf_token(self, session: Session) -> str:
        return self._sign("csrf." + session.sid)

    def check_csrf(self, session: Session, token: object) -> bool:
        return isinstance(token, str) and _same(token, self.csrf_token(session))

    def _sign(self, text: str) -> str:
        digest = hmac.new(self._key, text.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _same(given: str, expected: str) -> bool:
    """Constant-time equality of a client's string and ours, whatever characters it holds.

    Compared as UTF-8 bytes: ``hmac.compare_digest`` refuses a non-ASCII ``str`` with a
    TypeError, which a hostile cookie or form field would turn into a 500 per request;
    ``surrogatepass`` so that not even a lone surrogate can make the encoding fail.
    """
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )


def client_address(scope: Scope) -> str:
    """The peer's address, which keys the login throttle.

    The server may have replaced it with ``X-Forwarded-For``: ``jobchain dashboard`` lets
    uvicorn do so only for the proxies named by ``--forwarded-allow-ips``. Mounted in your own
    app, your server decides (uvicorn believes 127.0.0.1 unless ``--no-proxy-headers``).
    """
    client = scope.get("client")
    return str(client[0]) if client else ""


async def too_many_failures(scope: Scope, receive: Receive, send: Send) -> None:
    from starlette.responses import PlainTextResponse

    response = PlainTextResponse(
        "too many failed logins from this address: wait a minute",
        status_code=429,
        headers={"Retry-After": "60"},
    )
    await response(scope, receive, send)


def route_path(scope: Scope) -> str:
    """The request path below the app's mount point (``root_path``)."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    return path[len(root) :] or "/" if root and path.startswith(root) else path


def cookie_header(guard: Guard, session: Session, scope: Scope) -> str:
    secure = "; Secure" if scope.get("scheme") == "https" else ""
    path = scope.get("root_path") or "/"
    max_age = int(guard.settings.session_max_age.total_seconds())
    return (
        f"{COOKIE}={guard.dump(session)}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
    )


class GuardMiddleware:
    """Authenticates every request but static files and the login page, keeps the session
    cookie and adds the security headers to every response."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        guard = self.guard
        connection = HTTPConnection(scope)
        session = guard.load(connection.cookies.get(COOKIE))
        fresh = session is None
        if session is None:
            session = guard.new_session(authenticated=False)
        header = connection.headers.get("authorization")
        client = client_address(scope)
        if header and guard.failures.blocked(client):
            await too_many_failures(scope, receive, send)
            return
        by_header = guard.check_authorization(header)
        if header and not by_header:
            guard.failures.record(client)
        failed: JobchainError | None = None
        if guard.revocations is not None:  # a logged-out cookie counts as no session (and is replaced)
            try:
                if await guard.revocations.refuses(session, scope, by_header=by_header):
                    session, fresh = guard.new_session(authenticated=False), True
            except JobchainError as exc:
                failed = exc
        authenticated = session.authenticated or by_header or guard.settings.allow_anonymous
        scope.setdefault("state", {})
        scope["state"].update(jobchain_session=session, jobchain_authenticated=authenticated)
        path = route_path(scope)
        static = path.startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("Content-Security-Policy", CSP)
                headers.setdefault("X-Frame-Options", "DENY")
                headers.setdefault("X-Content-Type-Options", "nosniff")
                headers.setdefault("Referrer-Policy", "same-origin")
                if not static:
                    headers.setdefault("Cache-Control", "no-store")
                    if fresh and "set-cookie" not in headers:
                        headers.append("Set-Cookie", cookie_header(guard, session, scope))
            await send(message)

        if failed is not None:  # the revocation look-up failed: its error page, nothing else
            from jobchain.dashboard.revocation import backend_failed

            await backend_failed(scope, receive, send_with_headers, failed)
            return
        if authenticated or static or path == "/login":
            await self.app(scope, receive, send_with_headers)
            return
        await refuse(scope, receive, send_with_headers, guard)


async def refuse(scope: Scope, receive: Receive, send: Send, guard: Guard) -> None:
    """401 for scripts; a browser asking for a page is sent to the login form."""
    from urllib.parse import urlencode

    from starlette.responses import PlainTextResponse, RedirectResponse

    connection = HTTPConnection(scope)
    wants_page = scope.get("method") == "GET" and "text/html" in connection.headers.get("accept", "")
    if wants_page and "authorization" not in connection.headers:
        root = scope.get("root_path", "")
        target = root + route_path(scope)
        if connection.url.query:
            target += "?" + connection.url.query
        response: PlainTextResponse | RedirectResponse = RedirectResponse(
            f"{root}/login?{urlencode({'next': target})}", status_code=303
        )
    else:
        challenge = 'Basic realm="jobchain", charset="UTF-8"' if guard.settings.username else "Bearer"
        response = PlainTextResponse(
            "authentication required: log in, or send a bearer token or basic credentials",
            status_code=401,
            headers={"WWW-Authenticate": challenge},
        )
    await response(scope, receive, send)


__all__ = [
    "COOKIE",
    "CSP",
    "FailedLogins",
    "Guard",
    "GuardMiddleware",
    "Session",
    "cookie_header",
    "route_path",
]
