"""The dashboard's actions (POST): log in and out, retry a job, cancel or delete a chain, pause
or resume a job type.

Every POST checks the session's CSRF token (and a same-site ``Origin``) before reading
anything else; a refused one gets 403 and changes nothing. Read-only dashboards refuse the
job actions the same way. Each action redirects back (303) to the page it came from.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobchain.dashboard.context import client_of, render
from jobchain.dashboard.security import Guard, Session, client_address, cookie_header
from jobchain.entities import validate_id
from jobchain.errors import (
    BlockerReferenceError,
    ChainNotCancellableError,
    ChainNotFoundError,
    InvalidArgumentError,
    JobNotFoundError,
    JobNotRetryableError,
)
from jobchain.job_types import validate_type_name

DEFAULT_CANCEL_REASON: Final = "cancelled from the dashboard"
RETRY_ALL_LIMIT: Final = 1_000
"""Chains one "retry all" click redrives at most (the page then says to click again)."""
REFUSED: Final = (
    BlockerReferenceError,
    ChainNotCancellableError,
    ChainNotFoundError,
    JobNotFoundError,
    JobNotRetryableError,
    InvalidArgumentError,
)
"""What an action may answer with: shown on an error page (409), never a server error."""


def _guard(request: Request) -> Guard:
    guard: Guard = request.app.state.jobchain_guard
    return guard


def _session(request: Request) -> Session:
    session: Session = request.scope["state"]["jobchain_session"]
    return session


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if origin is None:
        return True  # older browsers and scripts send none; the CSRF token still decides
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc == request.headers.get("host", "")


async def checked_form(request: Request) -> FormData:
    """The POSTed form, once its CSRF token and origin hold (else 403, nothing read further)."""
    if not _same_origin(request):
        raise HTTPException(403, "cross-site request refused")
    form = await request.form(max_files=0, max_fields=20)
    if not _guard(request).check_csrf(_session(request), form.get("csrf_token")):
        raise HTTPException(403, "missing or invalid CSRF token: reload the page and try again")
    return form


def safe_next(request: Request, value: object) -> str:
    """``value`` if it is a path inside this dashboard, else the overview (no open redirects)."""
    base: str = request.scope.get("root_path", "")
    target = value if isinstance(value, str) else ""
    inside = target == base or target.startswith(base + "/")
    if not target.startswith("/") or target.startswith("//") or "\\" in target or not inside:
        return base + "/"
    return target


def _back(request: Request, form: FormData, done: str, subject: str) -> RedirectResponse:
    target = safe_next(request, form.get("next"))
    path, _, query = target.partition("?")
    params = [(k, v) for k, v in parse_qsl(query) if k not in ("done", "subject")]
    params += [("done", done), ("subject", subject)]
    return RedirectResponse(f"{path}?{urlencode(params)}", status_code=303)


def _refused(request: Request, form: FormData, error: Exception) -> Response:
    back = safe_next(request, form.get("next"))
    return render(
        request,
        "error.html",
        {"page": "", "status": 409, "message": " ".join(str(error).split()), "back": back},
        409,
    )


async def _action_form(request: Request) -> FormData:
    form = await checked_form(request)
    if _guard(request).settings.read_only:
        raise HTTPException(403, "this dashboard is read-only: actions are disabled")
    return form


def _id(form: FormData, name: str) -> str:
    value = form.get(name)
    try:
        return validate_id(value)
    except InvalidArgumentError:
        raise HTTPException(400, f"{name} must be a job id") from None


# ---------------------------------------------------------------- job actions


async def retry(request: Request) -> Response:
    """Redrive a failed or cancelled job."""
    form = await _action_form(request)
    job_id = _id(form, "job_id")
    client = await client_of(request)
    try:
        async with client.transaction() as tx:
            await client.retry_job(tx, job_id)
    except REFUSED as exc:
        return _refused(request, form, exc)
    return _back(request, form, "retried", job_id)


async def retry_all(request: Request) -> Response:
    """Redrive every failed (or cancelled) chain matching the page's filters, oldest first,
    up to :data:`RETRY_ALL_LIMIT` per click."""
    form = await _action_form(request)
    status = str(form.get("status") or "failed")
    type_name = str(form.get("type") or "").strip()
    error_type = str(form.get("error_type") or "").strip()
    client = await client_of(request)
    try:
        async with client.transaction() as tx:
            result = await client.retry_chains(
                tx,
                type_names=[type_name] if type_name else [],
                statuses=[status],
                error_types=[error_type] if error_type else [],
                limit=RETRY_ALL_LIMIT,
            )
    except REFUSED as exc:
        return _refused(request, form, exc)
    done = "retried_more" if result.has_more else "retried_all"
    return _back(request, form, done, str(len(result.retried)))


async def cancel(request: Request) -> Response:
    """Cancel a chain (its running job's worker sees its abort signal)."""
    form = await _action_form(request)
    chain_id = _id(form, "chain_id")
    reason = str(form.get("reason") or "").strip() or DEFAULT_CANCEL_REASON
    client = await client_of(request)
    try:
        async with client.transaction() as tx:
            await client.cancel_chain(tx, chain_id, reason=reason)
    except REFUSED as exc:
        return _refused(request, form, exc)
    return _back(request, form, "cancelled", chain_id)


async def delete(request: Request) -> Response:
    """Delete a chain with its jobs (``cascade``: and the chains blocking it)."""
    form = await _action_form(request)
    chain_id = _id(form, "chain_id")
    cascade = form.get("cascade") == "on"
    client = await client_of(request)
    try:
        async with client.transaction() as tx:
            await client.delete_chain(tx, chain_id, cascade=cascade)
    except REFUSED as exc:
        return _refused(request, form, exc)
    return _back(request, form, "deleted", chain_id)


# ---------------------------------------------------------------- job type controls


def _type_name(form: FormData) -> str:
    try:
        return validate_type_name(form.get("type"))
    except InvalidArgumentError as exc:
        raise HTTPException(400, f"type: {exc}") from None


async def pause(request: Request) -> Response:
    """Pause a job type: no worker claims it until it is resumed (running jobs finish)."""
    form = await _action_form(request)
    type_name = _type_name(form)
    client = await client_of(request)
    await client.pause(type_name)
    return _back(request, form, "paused", type_name)


async def resume(request: Request) -> Response:
    """Resume a paused job type (idle workers are woken after the commit)."""
    form = await _action_form(request)
    type_name = _type_name(form)
    client = await client_of(request)
    await client.resume(type_name)
    return _back(request, form, "resumed", type_name)


# ---------------------------------------------------------------- login


async def login_form(request: Request, error: str | None = None, status_code: int = 200) -> Response:
    target = safe_next(request, request.query_params.get("next", ""))
    if request.scope["state"].get("jobchain_authenticated") and error is None:
        return RedirectResponse(target, status_code=303)
    return render(
        request, "login.html", {"page": "login", "next": target, "error": error}, status_code=status_code
    )


async def login(request: Request) -> Response:
    """Check the token or user name and password; on success start a fresh session."""
    form = await checked_form(request)
    guard = _guard(request)
    client = client_address(request.scope)
    if guard.failures.blocked(client):
        return await login_form(request, "Too many failed logins from this address: wait a minute.", 429)
    token = str(form.get("token") or "")
    username = str(form.get("username") or "")
    password = str(form.get("password") or "")
    valid = guard.check_token(token) if token else guard.check_password(username, password)
    if not valid:
        guard.failures.record(client)
        return await login_form(request, "Wrong credentials.", 401)
    # A new session id at login: a session planted before it is worth nothing after it.
    session = guard.new_session(authenticated=True)
    response = RedirectResponse(safe_next(request, form.get("next")), status_code=303)
    response.headers.append("Set-Cookie", cookie_header(guard, session, request.scope))
    return response


async def logout(request: Request) -> Response:
    """Revoke the session server-side (a copied cookie is refused too) and clear the cookie."""
    await checked_form(request)
    guard = _guard(request)
    session = _session(request)
    if session.authenticated and guard.revocations is not None:
        await guard.revocations.revoke(session)
    base = request.scope.get("root_path", "")
    response = RedirectResponse(f"{base}/login", status_code=303)
    response.headers.append(
        "Set-Cookie", cookie_header(guard, guard.new_session(authenticated=False), request.scope)
    )
    return response


__all__ = [
    "retry_all",
    "cancel",
    "checked_form",
    "delete",
    "login",
    "login_form",
    "logout",
    "pause",
    "resume",
    "retry",
    "safe_next",
]
