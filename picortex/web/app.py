"""The panel's ASGI app (starlette): server-rendered pages, the JSON API and /metrics.

Auth (SPEC 13): HTML pages without a session answer 303 to /login; /api/* and /metrics
without a session or bearer token answer 401. Forms carry the session's CSRF token; API
calls with a session cookie carry it in `X-CSRF-Token`, bearer calls need none. /metrics also
takes the read-only metrics token. Bodies are capped and sessionless requests limited in
`limits`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import anyio
import jinja2
import orjson
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import Scope

from picortex.cli.errors import error_record
from picortex.core.commands import ATTENTION_MODES, USER_MODE_DEFAULT
from picortex.core.money import is_amount, usd
from picortex.core.redact import redact_obj
from picortex.core.trust import TIER_LABELS
from picortex.errors import PanelInputError
from picortex.store import RESOLUTIONS
from picortex.web import charts
from picortex.web.auth import (
    LOGIN_COOKIE,
    SESSION_COOKIE,
    SESSION_SECONDS,
    USED_CODES_FILE,
    Session,
    Sessions,
    same_secret,
)
from picortex.web.limits import BodyTooLarge, RequestGuard, body_cap
from picortex.web.logtail import LogFilter
from picortex.web.metrics import Metrics
from picortex.web.panel import TEST_MAX_MESSAGES, Panel, parse_snowflake, string_ids

logger = logging.getLogger(__name__)

# A wrong token waits this long, one attempt at a time: a few guesses a second at most,
# against a 256-bit token.
WRONG_TOKEN_DELAY_SECONDS: Final = 1.0
LOG_DEFAULT_N: Final = 100
LOG_MAX_N: Final = 1000
ACTIVITY_EVENTS: Final = (
    "decision",
    "trigger",
    "command",
    "reply",
    "llm",
    "persona",
    "manual",
    "budget",
    "cortex.invocation_failed",
    "error",
    "supervisor",
    "gateway",
)
PACKAGE_DIR: Final = Path(__file__).parent
# The panel's forms have a handful of fields and no file uploads.
MAX_FORM_FIELDS: Final = 16
# Except the settings form, one field per key: ~30 keys and two prices per model.
SETTINGS_PATH: Final = "/settings"
MAX_SETTINGS_FIELDS: Final = 256

Handler = Callable[[Request], Awaitable[Response]]


class _Json(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, default=str)


def _error(status: int, sentence: str) -> Response:
    return _Json({"error": sentence}, status_code=status)


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("picortex.web", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["money"] = usd
    # A log field as shown: dollars for the `*_usd` ones.
    env.filters["field"] = lambda value, name: usd(value) if is_amount(name, value) else value
    env.filters["when"] = lambda ts: str(ts or "").replace("T", " ").replace("Z", "")[:19]
    return Jinja2Templates(env=env)


class PanelApp:
    """The routes, bound to one Panel and its sessions."""

    def __init__(
        self,
        panel: Panel,
        token: str,
        *,
        metrics_token: str | None = None,
        secure_cookies: bool = False,
        wrong_token_delay: float = WRONG_TOKEN_DELAY_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.panel = panel
        self.sessions = Sessions(token, used_path=panel.home / USED_CODES_FILE)
        self.metrics_token = metrics_token
        self.secure_cookies = secure_cookies
        self.metrics = Metrics(panel.action_log_path, panel.snapshot)
        self.templates = _templates()
        self.wrong_token_delay = wrong_token_delay
        self.clock = clock
        self._wrong_lock = anyio.Lock()
        guard = Middleware(RequestGuard, has_session=self._has_session, refuse=self._refusal)
        self.app = Starlette(
            routes=self._routes(),
            middleware=[guard],
            exception_handlers={BodyTooLarge: self._too_large},
        )

    # ----- auth --------------------------------------------------------------------------

    def _session(self, request: Request) -> Session | None:
        return self.sessions.get(request.cookies.get(SESSION_COOKIE), self.clock())

    def _bearer(self, request: Request) -> str | None:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        return value.strip() if scheme.lower() == "bearer" else None

    async def _refuse_slowly(self) -> None:
        # One wrong attempt at a time, each held for the delay: parallel guessing gains nothing.
        async with self._wrong_lock:
            await anyio.sleep(self.wrong_token_delay)

    def _has_session(self, scope: Scope) -> bool:
        return self._session(Request(scope)) is not None

    @staticmethod
    def _refusal(scope: Scope, status: int) -> Response:
        """The answer to a body past its cap (413) or too many sessionless requests (503)."""
        if status == 413:
            sentence = "The body is too large."
            headers = {"Connection": "close"}
        else:
            sentence = "The panel is busy: try again in a moment."
            headers = {"Retry-After": "1", "Connection": "close"}
        path = str(scope.get("path", ""))
        if path.startswith("/api/") or path == "/metrics":
            return _Json({"error": sentence}, status_code=status, headers=headers)
        if status == 413:
            sentence = "That form is too large."
        return HTMLResponse(sentence, status_code=status, headers=headers)

    async def _too_large(self, request: Request, exc: Exception) -> Response:
        return self._refusal(request.scope, 413)

    @staticmethod
    async def _form(request: Request) -> FormData:
        """The request's form, read once within the panel's limits (no files, few fields)."""
        path = request.url.path
        fields = MAX_SETTINGS_FIELDS if path == SETTINGS_PATH else MAX_FORM_FIELDS
        return await request.form(max_files=0, max_fields=fields, max_part_size=body_cap(path))

    def page(self, handler: Callable[[Request, Session], Awaitable[Response]]) -> Handler:
        """An HTML page: a session or a 303 to /login; POSTs must carry the CSRF token."""

        async def wrapped(request: Request) -> Response:
            session = self._session(request)
            if session is None:
                return RedirectResponse("/login", status_code=303)
            try:
                if request.method == "POST":
                    form = await self._form(request)
                    if form.get("csrf") != session.csrf:
                        return HTMLResponse(
                            "The form was stale or not ours (CSRF check failed): reload the page.",
                            status_code=403,
                        )
                await self.panel.settle()
                return await handler(request, session)
            finally:
                await request.close()

        return wrapped

    def api(self, handler: Handler, *, metrics: bool = False) -> Handler:
        """An API call: a bearer token, or a session (with X-CSRF-Token on changes).

        With `metrics`, the read-only metrics token is let in too.
        """

        async def wrapped(request: Request) -> Response:
            bearer = self._bearer(request)
            if bearer is not None and metrics and self._is_metrics_token(bearer):
                pass
            elif bearer is not None:
                if not self.sessions.check_token(bearer):
                    await self._refuse_slowly()
                    return _error(401, "The bearer token is not the panel's token.")
            else:
                session = self._session(request)
                if session is None:
                    return _error(401, "Log in or send Authorization: Bearer <token>.")
                if (
                    request.method not in ("GET", "HEAD")
                    and request.headers.get("x-csrf-token") != session.csrf
                ):
                    return _error(403, "A change with a session cookie needs X-CSRF-Token.")
            await self.panel.settle()
            try:
                return await handler(request)
            except PanelInputError as exc:
                return _error(400, str(exc))

        return wrapped

    def _is_metrics_token(self, given: str) -> bool:
        return self.metrics_token is not None and same_secret(given, self.metrics_token)

    # ----- rendering -----------------------------------------------------------------------

    def render(
        self, request: Request, session: Session | None, name: str, status: int = 200, **ctx: Any
    ) -> Response:
        flash = []
        if session is not None:
            flash, session.flash = session.flash, []
        context = {
            "session": session,
            "csrf": session.csrf if session is not None else "",
            "flash": flash,
            "path": request.url.path,
            **ctx,
        }
        response = self.templates.TemplateResponse(request, name, context, status_code=status)
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Content-Security-Policy"] = (
            "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
            "frame-ancestors 'none'; base-uri 'none'"
        )
        return response

    @staticmethod
    def _back(path: str) -> Response:
        return RedirectResponse(path, status_code=303)

    # ----- login ---------------------------------------------------------------------------

    async def login_page(self, request: Request) -> Response:
        code = request.query_params.get("once")
        if code is not None:
            if self.sessions.use_code(code, self.clock()):
                return self._logged_in(self.sessions.create(self.clock()))
            await self._refuse_slowly()
            return self._login_form(request, "That login link is used up or expired.", 401)
        if self._session(request) is not None:
            return self._back("/")
        return self._login_form(request, None, 200)

    def _login_form(self, request: Request, error: str | None, status: int) -> Response:
        nonce = request.cookies.get(LOGIN_COOKIE) or Sessions.new_nonce()
        response = self.render(
            request, None, "login.html", status=status, error=error, login_csrf=nonce
        )
        response.set_cookie(
            LOGIN_COOKIE,
            nonce,
            httponly=True,
            samesite="strict",
            path="/login",
            max_age=3600,
            secure=self.secure_cookies,
        )
        return response

    def _logged_in(self, session: Session) -> Response:
        response = self._back("/")
        response.set_cookie(
            SESSION_COOKIE,
            session.id,
            max_age=int(SESSION_SECONDS),
            httponly=True,
            samesite="strict",
            path="/",
            secure=self.secure_cookies,
        )
        response.delete_cookie(LOGIN_COOKIE, path="/login", secure=self.secure_cookies)
        return response

    async def login(self, request: Request) -> Response:
        try:
            form = await self._form(request)
        finally:
            await request.close()
        # The login form carries a CSRF nonce (double-submitted in a cookie); a script that
        # posts only the token is let in too, since the token itself is the secret.
        given_csrf = form.get("csrf")
        if given_csrf is not None and given_csrf != request.cookies.get(LOGIN_COOKIE):
            return self._login_form(request, "The form was stale: try again.", 403)
        token = form.get("token")
        if isinstance(token, str) and self.sessions.check_token(token):
            return self._logged_in(self.sessions.create(self.clock()))
        await self._refuse_slowly()
        return self._login_form(request, "That is not the panel's token.", 401)

    async def logout(self, request: Request, session: Session) -> Response:
        self.sessions.end(session.id)
        response = self._back("/login")
        response.delete_cookie(SESSION_COOKIE, path="/", secure=self.secure_cookies)
        return response

    # ----- pages ---------------------------------------------------------------------------

    async def overview(self, request: Request, session: Session) -> Response:
        snap = self.panel.snapshot()
        series = self.panel.spend()
        return self.render(
            request,
            session,
            "overview.html",
            snap=snap,
            chart=charts.spend_chart(series),
            legend=charts.legend(series),
            budget=self.panel.settings().budget,
        )

    async def chats_page(self, request: Request, session: Session) -> Response:
        return self.render(
            request, session, "chats.html", chats=self.panel.chats(), modes=ATTENTION_MODES
        )

    def _chat_id(self, request: Request) -> int:
        return parse_snowflake(request.path_params["chat_id"], "The chat id")

    async def chat_page(
        self, request: Request, session: Session, tested: list[Any] | None = None, n: int = 5
    ) -> Response:
        try:
            chat_id = self._chat_id(request)
            chat = self.panel.chat(chat_id)
            prompt = await self.panel.prompt(chat_id)
            versions = await self.panel.history(chat_id)
            own = await self.panel.chat_settings(chat_id)
            agent_versions = await self.panel.agent_history(chat_id)
        except PanelInputError as exc:
            return self.render(request, session, "missing.html", status=404, message=str(exc))
        return self.render(
            request,
            session,
            "chat.html",
            chat=chat,
            modes=ATTENTION_MODES,
            user_modes=self.panel.user_modes_json(chat_id),
            user_choices=(*ATTENTION_MODES, USER_MODE_DEFAULT),
            prompt=prompt,
            versions=versions,
            own=own,
            owner_prompt=self.panel.settings().agent.system_prompt,
            agent_versions=agent_versions,
            tested=tested,
            test_n=n,
            test_max=TEST_MAX_MESSAGES,
        )

    async def chat_attention(self, request: Request, session: Session) -> Response:
        form = await self._form(request)
        try:
            chat_id = self._chat_id(request)
            outcome = await self.panel.set_attention(chat_id, form.get("mode"))
            session.flash.append((outcome.ok, outcome.message))
        except PanelInputError as exc:
            session.flash.append((False, str(exc)))
            return self._back("/chats")
        back = form.get("back")
        return self._back("/chats" if back == "list" else f"/chats/{chat_id}")

    async def chat_user_attention(self, request: Request, session: Session) -> Response:
        form = await self._form(request)
        try:
            chat_id = self._chat_id(request)
            outcome = await self.panel.set_user_attention(
                chat_id, form.get("user_id"), form.get("mode")
            )
            session.flash.append((outcome.ok, outcome.message))
        except PanelInputError as exc:
            session.flash.append((False, str(exc)))
        return self._back(request.url.path.rsplit("/", 1)[0])

    async def chat_prompt(self, request: Request, session: Session) -> Response:
        form = await self._form(request)
        try:
            chat_id = self._chat_id(request)
            text = form.get("prompt")
            outcome = await self.panel.save_prompt(chat_id, text if isinstance(text, str) else "")
            session.flash.append((outcome.ok, outcome.message))
        except PanelInputError as exc:
            session.flash.append((False, str(exc)))
        return self._back(request.url.path.rsplit("/", 1)[0])

    async def chat_own(self, request: Request, session: Session) -> Response:
        """The chat's own agent prompt, or its discriminator model and threshold: each field
        the form sends, through the executor."""
        form = await self._form(request)
        try:
            chat_id = self._chat_id(request)
            for field in ("prompt", "model", "threshold"):
                text = form.get(field)
                if isinstance(text, str):
                    outcome = await self.panel.set_chat_setting(chat_id, field, text)
                    session.flash.append((outcome.ok, outcome.message))
        except PanelInputError as exc:
            session.flash.append((False, str(exc)))
        return self._back(request.url.path.rsplit("/", 1)[0])

    async def chat_test(self, request: Request, session: Session) -> Response:
        form = await self._form(request)
        n_text = str(form.get("n") or "5")
        try:
            chat_id = self._chat_id(request)
            n = int(n_text) if n_text.isdigit() else 0
            tested = await self.panel.test_discriminator(chat_id, n)
        except PanelInputError as exc:
            session.flash.append((False, str(exc)))
            return self._back(request.url.path.rsplit("/", 1)[0])
        return await self.chat_page(request, session, tested=tested, n=n)

    def _log_filter(self, params: Any) -> tuple[int, LogFilter]:
        n_text = (params.get("n") or "").strip()
        if n_text and not (n_text.isdigit() and 1 <= int(n_text) <= LOG_MAX_N):
            raise PanelInputError(f"n must be a whole number from 1 to {LOG_MAX_N}.")
        n = int(n_text) if n_text else LOG_DEFAULT_N
        events = frozenset(
            e.strip() for raw in params.getlist("event") for e in raw.split(",") if e.strip()
        )
        ids = {}
        for name in ("channel_id", "user_id", "message_id"):
            value = (params.get(name) or "").strip()
            if value:
                value = str(parse_snowflake(value, name))
            ids[name] = value
        return n, LogFilter(events, ids["channel_id"], ids["user_id"], ids["message_id"])

    async def activity(self, request: Request, session: Session) -> Response:
        params = request.query_params
        error = None
        try:
            n, where = self._log_filter(params)
        except PanelInputError as exc:
            error = str(exc)
            n, where = LOG_DEFAULT_N, LogFilter()
        result = self.panel.log(n, where)
        records = [string_ids(r) for r in reversed(result.records)]
        return self.render(
            request,
            session,
            "activity.html",
            records=records,
            texts=self.panel.message_texts(records),
            complete=result.complete,
            where=where,
            n=n,
            error=error,
            event_types=ACTIVITY_EVENTS,
        )

    async def trust_page(self, request: Request, session: Session) -> Response:
        return self.render(
            request,
            session,
            "trust.html",
            rows=self.panel.trust(),
            names=self.panel.names(),
            tiers=TIER_LABELS,
        )

    async def trust_add(self, request: Request, session: Session) -> Response:
        form = await self._form(request)
        try:
            outcome = await self.panel.add_trust(form.get("user_id"), form.get("tier"))
            session.flash.append((outcome.ok, outcome.message))
        except PanelInputError as exc:
            session.flash.append((False, str(exc)))
        return self._back("/trust")

    async def trust_remove(self, request: Request, session: Session) -> Response:
        try:
            outcome = await self.panel.remove_trust(request.path_params["user_id"])
            session.flash.append((outcome.ok, outcome.message))
        except PanelInputError as exc:
            session.flash.append((False, str(exc)))
        return self._back("/trust")

    async def trust_forget(self, request: Request, session: Session) -> Response:
        form = await request.form()
        try:
            outcome, _ = await self.panel.forget(form.get("user_id"))
            session.flash.append((outcome.ok, outcome.message))
        except PanelInputError as exc:
            session.flash.append((False, str(exc)))
        return self._back("/trust")

    async def errors_page(self, request: Request, session: Session) -> Response:
        unresolved = request.query_params.get("all") != "1"
        rows = [error_record(e) for e in self.panel.errors(unresolved)]
        return self.render(
            request,
            session,
            "errors.html",
            rows=rows,
            unresolved=unresolved,
            resolutions=RESOLUTIONS,
            paused=self.panel.paused(),
        )

    async def errors_resolve(self, request: Request, session: Session) -> Response:
        form = await self._form(request)
        try:
            outcome = self.panel.resolve_error(request.path_params["error_id"], form.get("as"))
            session.flash.append((outcome.ok, outcome.message))
        except PanelInputError as exc:
            session.flash.append((False, str(exc)))
        return self._back("/errors")

    async def personas_page(self, request: Request, session: Session) -> Response:
        return self.render(request, session, "personas.html", report=self.panel.personas())

    async def send_page(self, request: Request, session: Session) -> Response:
        return self.render(
            request,
            session,
            "send.html",
            chats=[c for c in self.panel.chats() if c.kind not in ("voice", "forum")],
            chosen=request.query_params.get("channel_id", ""),
        )

    async def send_post(self, request: Request, session: Session) -> Response:
        form = await self._form(request)
        channel = str(form.get("channel_id") or "")
        try:
            sent = await self.panel.send(channel, form.get("content"))
            session.flash.append((True, f"Sent as message {sent['message_id']}."))
        except PanelInputError as exc:
            session.flash.append((False, str(exc)))
        return self._back(f"/send?channel_id={channel}" if channel.isdigit() else "/send")

    async def settings_page(self, request: Request, session: Session) -> Response:
        return self.render(request, session, "settings.html", groups=self.panel.settings_groups())

    async def settings_save(self, request: Request, session: Session) -> Response:
        form = await self._form(request)
        submitted = {key: value for key, value in form.items() if isinstance(value, str)}
        outcome = await self.panel.save_settings(submitted)
        session.flash.append((outcome.ok, outcome.message))
        return self._back(SETTINGS_PATH)

    # ----- API -----------------------------------------------------------------------------

    @staticmethod
    async def _body(request: Request) -> dict[str, Any]:
        raw = await request.body()
        try:
            body = orjson.loads(raw or b"{}")
        except orjson.JSONDecodeError:
            raise PanelInputError("The body must be a JSON object.") from None
        if not isinstance(body, dict):
            raise PanelInputError("The body must be a JSON object.")
        return body

    async def api_status(self, request: Request) -> Response:
        return _Json(string_ids_deep(redact_obj(self.panel.snapshot())))

    async def api_chats(self, request: Request) -> Response:
        return _Json([c.as_json() for c in self.panel.chats()])

    async def api_attention(self, request: Request) -> Response:
        body = await self._body(request)
        chat_id = self._chat_id(request)
        outcome = await self.panel.set_attention(chat_id, body.get("mode"))
        if not outcome.ok:
            raise PanelInputError(outcome.message)
        return _Json(self.panel.chat(chat_id).as_json())

    async def api_user_modes(self, request: Request) -> Response:
        chat_id = self._chat_id(request)
        self.panel.chat(chat_id)
        return _Json(self.panel.user_modes_json(chat_id))

    async def api_user_attention(self, request: Request) -> Response:
        body = await self._body(request)
        chat_id = self._chat_id(request)
        uid = parse_snowflake(request.path_params["user_id"], "user_id")
        outcome = await self.panel.set_user_attention(chat_id, uid, body.get("mode"))
        if not outcome.ok:
            raise PanelInputError(outcome.message)
        mode = self.panel.user_modes(chat_id).get(uid, USER_MODE_DEFAULT)
        return _Json({"chat_id": str(chat_id), "user_id": str(uid), "mode": mode})

    async def api_access(self, request: Request) -> Response:
        if request.method == "POST":
            outcome = await self.panel.set_access(await self._body(request))
            if not outcome.ok:
                raise PanelInputError(outcome.message)
        return _Json(self.panel.access())

    async def api_chat_settings(self, request: Request) -> Response:
        """GET: the chat's own settings (null: the default applies). POST a JSON object with
        `prompt`, `model` and/or `threshold` (text; `reset`/`default` go back)."""
        chat_id = self._chat_id(request)
        if request.method == "POST":
            body = await self._body(request)
            given = [(f, body[f]) for f in ("prompt", "model", "threshold") if f in body]
            if not given:
                raise PanelInputError("Give a prompt, model or threshold.")
            for field, text in given:
                outcome = await self.panel.set_chat_setting(chat_id, field, text)
                if not outcome.ok:
                    raise PanelInputError(outcome.message)
        self.panel.chat(chat_id)
        own = await self.panel.chat_settings(chat_id)
        return _Json(
            {
                "chat_id": str(chat_id),
                "agent_prompt": own.prompt,
                "discriminator_model": own.model,
                "discriminator_threshold": own.threshold,
                "default_discriminator_model": own.default_model,
            }
        )

    async def api_log(self, request: Request) -> Response:
        n, where = self._log_filter(request.query_params)
        result = self.panel.log(n, where)
        return _Json([string_ids(r) for r in result.records])

    async def api_trust(self, request: Request) -> Response:
        if request.method == "POST":
            body = await self._body(request)
            outcome = await self.panel.add_trust(body.get("user_id"), body.get("tier", "user"))
            if not outcome.ok:
                raise PanelInputError(outcome.message)
            uid = str(parse_snowflake(body.get("user_id"), "user_id"))
            return _Json({"user_id": uid, "tier": str(body.get("tier", "user")).lower()})
        return _Json(
            [
                {
                    "user_id": uid,
                    "tier": "admin" if tier == "owner" else tier,
                    "owner": tier == "owner",
                }
                for uid, tier in self.panel.trust()
            ]
        )

    async def api_trust_delete(self, request: Request) -> Response:
        outcome = await self.panel.remove_trust(request.path_params["user_id"])
        if not outcome.ok:
            raise PanelInputError(outcome.message)
        return Response(status_code=204)

    async def api_forget(self, request: Request) -> Response:
        outcome, done = await self.panel.forget(request.path_params["user_id"])
        if done is None:
            raise PanelInputError(outcome.message)
        return _Json(
            {
                "user_id": str(done.user_id),
                "messages": done.messages,
                "observations": done.observations,
            }
        )

    async def api_errors(self, request: Request) -> Response:
        unresolved = request.query_params.get("unresolved", "") in ("1", "true", "yes")
        return _Json([string_ids_deep(error_record(e)) for e in self.panel.errors(unresolved)])

    async def api_paused(self, request: Request) -> Response:
        return _Json(self.panel.paused())

    async def api_resolve(self, request: Request) -> Response:
        body = await self._body(request)
        error_id = request.path_params["error_id"]
        self.panel.resolve_error(error_id, body.get("as"))
        row = self.panel.store.invocation_error(int(error_id))
        return _Json(string_ids_deep(error_record(row)) if row is not None else {})

    async def api_settings(self, request: Request) -> Response:
        return _Json([s.as_json() for g in self.panel.settings_groups() for s in g.settings])

    async def api_send(self, request: Request) -> Response:
        body = await self._body(request)
        return _Json(await self.panel.send(body.get("channel_id"), body.get("content")))

    async def metrics_endpoint(self, request: Request) -> Response:
        return Response(
            self.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    # ----- routing -------------------------------------------------------------------------

    def _routes(self) -> list[Route | Mount]:
        page, api = self.page, self.api
        return [
            Route("/login", self.login_page, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", page(self.logout), methods=["POST"]),
            Route("/", page(self.overview)),
            Route("/chats", page(self.chats_page)),
            Route("/chats/{chat_id}", page(self.chat_page)),
            Route("/chats/{chat_id}/attention", page(self.chat_attention), methods=["POST"]),
            Route("/chats/{chat_id}/prompt", page(self.chat_prompt), methods=["POST"]),
            Route("/chats/{chat_id}/users", page(self.chat_user_attention), methods=["POST"]),
            Route("/chats/{chat_id}/test", page(self.chat_test), methods=["POST"]),
            Route("/chats/{chat_id}/own", page(self.chat_own), methods=["POST"]),
            Route("/activity", page(self.activity)),
            Route("/trust", page(self.trust_page), methods=["GET"]),
            Route("/trust", page(self.trust_add), methods=["POST"]),
            Route("/trust/{user_id}/remove", page(self.trust_remove), methods=["POST"]),
            Route("/trust/forget", page(self.trust_forget), methods=["POST"]),
            Route("/errors", page(self.errors_page)),
            Route("/errors/{error_id}/resolve", page(self.errors_resolve), methods=["POST"]),
            Route("/personas", page(self.personas_page)),
            Route("/send", page(self.send_page), methods=["GET"]),
            Route("/send", page(self.send_post), methods=["POST"]),
            Route(SETTINGS_PATH, page(self.settings_page), methods=["GET"]),
            Route(SETTINGS_PATH, page(self.settings_save), methods=["POST"]),
            Route("/api/status", api(self.api_status)),
            Route("/api/chats", api(self.api_chats)),
            Route("/api/chats/{chat_id}/attention", api(self.api_attention), methods=["POST"]),
            Route("/api/chats/{chat_id}/users", api(self.api_user_modes)),
            Route(
                "/api/chats/{chat_id}/users/{user_id}/attention",
                api(self.api_user_attention),
                methods=["POST"],
            ),
            Route("/api/access", api(self.api_access), methods=["GET", "POST"]),
            Route(
                "/api/chats/{chat_id}/settings",
                api(self.api_chat_settings),
                methods=["GET", "POST"],
            ),
            Route("/api/log", api(self.api_log)),
            Route("/api/trust", api(self.api_trust), methods=["GET", "POST"]),
            Route("/api/trust/{user_id}", api(self.api_trust_delete), methods=["DELETE"]),
            Route("/api/forget/{user_id}", api(self.api_forget), methods=["POST"]),
            Route("/api/errors", api(self.api_errors)),
            Route("/api/errors/paused", api(self.api_paused)),
            Route("/api/errors/{error_id}/resolve", api(self.api_resolve), methods=["POST"]),
            Route("/api/send", api(self.api_send), methods=["POST"]),
            Route("/api/settings", api(self.api_settings)),
            Route("/metrics", api(self.metrics_endpoint, metrics=True)),
            Mount("/static", StaticFiles(directory=PACKAGE_DIR / "static"), name="static"),
        ]


def string_ids_deep(value: Any) -> Any:
    """`string_ids` applied to every object inside `value`."""
    if isinstance(value, dict):
        return {k: string_ids_deep(v) for k, v in string_ids(value).items()}
    if isinstance(value, list):
        return [string_ids_deep(v) for v in value]
    return value


def create_app(panel: Panel, token: str, **options: Any) -> Starlette:
    """The panel's ASGI app."""
    return PanelApp(panel, token, **options).app


__all__ = ["PanelApp", "create_app"]
