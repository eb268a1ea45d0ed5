"""A small, dependency-free HTTP client for every route of the hitl-ledger v1 API (spec section 6).

Retries. A call is repeated after a connection failure or a 5xx answer (``storage_error``,
``internal_error``: the outcome of a write is unknown; ``overloaded``, ``unwritable``) only when
repeating it cannot do anything twice:

- ``GET`` routes;
- the idempotent appends (interrupt, decision, revoke, follow-up; spec section 4): the same body
  sent again returns the record already stored (``duplicate: true``) and writes nothing;
- ``authorize`` *with* an ``attempt_id``: an earlier grant for the same ticket, attempt and action
  is returned again with the same idempotency key.

``authorize`` without an ``attempt_id`` is never retried: a second evaluation would be a second
event in the ledger. ``set_policy`` (``PUT /v1/policy``) is never retried either: repeated after
another admin's change, it would record the older document again. Errors that the ledger
answered (4xx) are never retried.

Governance (spec sections 7.4-7.6 and 12): :meth:`LedgerClient.policy`,
:meth:`~LedgerClient.set_policy` and :meth:`~LedgerClient.policy_history` read and change the
policy in force (a ``policy`` record each); a decision on a tool that needs several approvals
answers a *partial* approval (:attr:`DecisionResult.partial`: no ticket, the counts) until the
last one; an ``authorize`` of a paused tool answers ``code="tool_paused"`` with
:attr:`Authorization.route` ``"manual_operator"``; :meth:`~LedgerClient.break_glass`,
:meth:`~LedgerClient.break_glass_reviews` and :meth:`~LedgerClient.review` are the emergency
path and its post-event review.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .digest import canonicalize, leaf_int, validate_action
from .events import Event, EventStream
from .errors import (
    HitlLedgerError,
    LedgerConnectionError,
    LedgerProtocolError,
    Overloaded,
    error_for,
)

__all__ = [
    "LedgerClient",
    "WriteResult",
    "DecisionResult",
    "Authorization",
    "RequestState",
    "PolicyState",
    "PolicyChange",
    "BreakGlassUse",
    "Event",
    "EventStream",
]


@dataclass(frozen=True)
class WriteResult:
    """The answer of an append: the record written or found, and whether it was already there."""

    record: dict[str, Any]
    leaf_hash: str
    seq: int
    duplicate: bool
    status: int
    raw: dict[str, Any] = field(repr=False)

    @property
    def request_id(self) -> str | None:
        return self.record.get("request_id")

    @property
    def body(self) -> dict[str, Any]:
        return self.record.get("body", {})


@dataclass(frozen=True)
class DecisionResult(WriteResult):
    """A decision's answer (also a break-glass decision's). For an edit, ``new_request_id``,
    ``ticket_id`` and ``expires_at`` are the new (edited) request's, ``record`` is the edit
    decision on the original, and ``edited_action`` is the action the reviewer sent (the ledger
    bound its digest).

    **Partial approvals** (spec section 7.5). On a tool whose policy needs
    ``approvals_required`` > 1 distinct approvals, every approval but the last is partial:
    :attr:`partial` is ``True``, ``ticket_id`` and ``expires_at`` are ``None``, ``approvals`` is
    the number of distinct approvals counted with this one and ``approvals_required`` how many
    the tool needs. A partial approval issues nothing: there is no ticket to resume a graph
    with or to authorize (:func:`hitl_ledger.langgraph.resume_value` refuses it), and the
    request stays open until the last approval, whose answer carries the ticket (and the
    counts). An edit of such a tool counts as the editor's approval of the edited call, so its
    answer may be partial too (``new_request_id`` set, ``ticket_id`` ``None``). The same
    reviewer's approval sent again answers the same partial approval (``duplicate``), even once
    others completed the request: read the request (:meth:`LedgerClient.get_request`) for its
    state. ``approvals`` and ``approvals_required`` are ``None`` on a tool that needs one
    approval.
    """

    ticket_id: str | None = None
    expires_at: str | None = None
    new_request_id: str | None = None
    edited_action: dict[str, Any] | None = None
    approvals: int | None = None
    approvals_required: int | None = None

    @property
    def decision(self) -> str:
        """``approve``, ``edit`` or ``reject`` (a rejection record's kind is ``rejection``)."""
        if self.record.get("kind") == "rejection":
            return "reject"
        return self.body.get("decision", "")

    @property
    def partial(self) -> bool:
        """An approval (or an edit's approval of the new request) that issued no ticket: more
        distinct approvals are needed (``approvals`` of ``approvals_required``)."""
        return self.ticket_id is None and self.decision in ("approve", "edit")

    @property
    def break_glass(self) -> bool:
        """A break-glass decision (spec section 7.6): ``record`` is marked ``break_glass``."""
        return self.body.get("break_glass") is True


@dataclass(frozen=True)
class Authorization(WriteResult):
    """An evaluated ``authorize``: a grant or a recorded denial (both answer 200)."""

    granted: bool = False
    code: str | None = None
    idempotency_key: str | None = None
    route: str | None = None

    @property
    def paused(self) -> bool:
        """The tool is paused in the policy in force (``code == "tool_paused"``): nothing may
        run it; hand the action to a manual operator (:attr:`route`) instead of retrying. The
        ticket was not used: it grants after the tool is unpaused, if still valid."""
        return self.code == "tool_paused"

    @property
    def would_deny(self) -> str | None:
        """In observe mode, the code a denial would have had (the call was granted anyway)."""
        return self.body.get("would_deny")

    @property
    def expires_at(self) -> str | None:
        return self.body.get("expires_at")


@dataclass(frozen=True)
class RequestState:
    """``GET /v1/requests/{id}``: the request's state and every record naming it (every page).

    ``approvals`` are the counted approvals, in order (``[{"principal", "seq"}]``: "1 of 2
    approvals, by whom"), ``approvals_required`` how many the request's tool needs under the
    policy in force (``None`` from a server that does not answer them).
    """

    request_id: str
    state: str
    records: list[dict[str, Any]]
    raw: dict[str, Any] = field(repr=False)
    approvals: list[dict[str, Any]] = field(default_factory=list)
    approvals_required: int | None = None

    def kinds(self) -> list[str]:
        return [r["kind"] for r in self.records]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["kind"] == kind]


@dataclass(frozen=True)
class PolicyState:
    """``GET /v1/policy``: the policy document in force and the ``policy`` record that put it
    in force (``record``, ``seq`` and ``leaf_hash`` are ``None`` while the log holds no policy
    record yet, which only a ledger created before policy records can show)."""

    policy: dict[str, Any]
    policy_digest: str
    record: dict[str, Any] | None
    seq: int | None
    leaf_hash: str | None
    raw: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class PolicyChange:
    """One entry of ``GET /v1/policy/history``: a ``policy`` record, who wrote it and when."""

    seq: int
    ts: str
    actor: dict[str, Any]
    policy_digest: str
    leaf_hash: str
    record: dict[str, Any]

    @property
    def policy(self) -> dict[str, Any]:
        """The document this record put in force."""
        return (self.record.get("body") or {}).get("policy", {})


@dataclass(frozen=True)
class BreakGlassUse:
    """One entry of ``GET /v1/reviews/break-glass``: a break-glass decision awaiting its
    post-event review. ``actor`` is the break-glass operator, ``reason`` the stated intent,
    ``record`` the ``decision`` (``break_glass: true``) and ``leaf_hash`` its id."""

    request_id: str
    seq: int
    ts: str
    actor: dict[str, Any]
    reason: str | None
    leaf_hash: str
    record: dict[str, Any]


def _seg(value: str) -> str:
    """One percent-encoded path segment (``/`` included, spec section 6)."""
    if not isinstance(value, str):
        raise TypeError(f"an identifier is a string, not {type(value).__name__}")
    return urllib.parse.quote(value, safe="")


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


class LedgerClient:
    """Client for one ledger with one bearer token (a token maps to one principal and role).

    ``base_url`` is like ``http://127.0.0.1:8080``. ``retries`` is how many times a call that is
    safe to repeat (see the module doc) is repeated after a connection failure or an
    ``overloaded`` answer, waiting ``backoff`` seconds, doubling, or the ``Retry-After``.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        timeout: float = 10.0,
        retries: int = 2,
        backoff: float = 0.2,
        max_retry_after: float = 5.0,
    ) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"base_url must be http(s)://host[:port], got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._scheme = parsed.scheme
        self._host = parsed.hostname
        self._port = parsed.port
        self._prefix = parsed.path.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_retry_after = max_retry_after

    def __repr__(self) -> str:
        return f"LedgerClient({self.base_url!r})"

    # ------------------------------------------------------------------ transport

    def _connection(self) -> http.client.HTTPConnection:
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        idempotent: bool | None = None,
        raw_body: bytes | None = None,
        content_type: str | None = "application/json",
        headers: dict[str, str] | None = None,
        expect_json: bool = True,
    ) -> tuple[int, Any]:
        """Send one request; answer ``(status, parsed JSON or text)`` or raise a typed error.

        ``idempotent`` defaults to ``True`` for ``GET`` and ``False`` otherwise; only idempotent
        calls are retried. ``raw_body`` sends bytes as they are (for tests of bad input).
        """
        if idempotent is None:
            idempotent = method == "GET"
        data: bytes | None
        if raw_body is not None:
            data = raw_body
        elif body is not None:
            # Canonical JSON: refuses locally what the ledger would refuse as not_canonicalizable.
            data = canonicalize(body)
        else:
            data = None
        hdrs = {"Accept": "application/json, text/plain"}
        if self.token is not None:
            hdrs["Authorization"] = f"Bearer {self.token}"
        if data is not None and content_type is not None:
            hdrs["Content-Type"] = content_type
        if headers:
            hdrs.update(headers)
        full_path = self._prefix + path
        url = self.base_url + path
        attempts = 1 + (self.retries if idempotent else 0)
        delay = self.backoff
        last: Exception | None = None
        for attempt in range(attempts):
            if attempt:
                time.sleep(delay)
                delay *= 2
            try:
                status, resp_headers, payload = self._send(method, full_path, data, hdrs)
            except (OSError, http.client.HTTPException) as e:
                last = e
                continue
            if status >= 500 and idempotent and attempt + 1 < attempts:
                retry_after = _retry_after(resp_headers)
                if retry_after is not None:
                    delay = min(retry_after, self.max_retry_after)
                last = None
                continue
            return self._answer(method, path, status, resp_headers, payload, expect_json)
        assert last is not None  # the last attempt either answered or failed to connect
        reason = _describe(last)
        note = (
            f" after {attempts} attempts"
            if attempts > 1
            else " (not retried: repeating this call is not idempotent)"
            if method != "GET"
            else ""
        )
        raise LedgerConnectionError(
            f"cannot reach hitl-ledger at {self.base_url} for {method} {path}: {reason}{note}",
            url=url,
            retried=attempts - 1,
        ) from last

    def _send(
        self, method: str, path: str, data: bytes | None, headers: dict[str, str]
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        conn = self._connection()
        try:
            conn.putrequest(method, path, skip_accept_encoding=True)
            for name, value in headers.items():
                conn.putheader(name, value)
            if data is not None:
                conn.putheader("Content-Length", str(len(data)))
            conn.endheaders()
            if data:
                try:
                    conn.send(data)
                except (BrokenPipeError, ConnectionResetError):
                    # The server may answer before reading the whole body (413 body_too_large)
                    # and close: its answer, when it arrived, is the one to report.
                    try:
                        resp = conn.getresponse()
                        return resp.status, resp.headers, resp.read()
                    except (OSError, http.client.HTTPException):
                        pass
                    raise
            resp = conn.getresponse()
            payload = resp.read()
            return resp.status, resp.headers, payload
        finally:
            conn.close()

    def _answer(
        self,
        method: str,
        path: str,
        status: int,
        headers: http.client.HTTPMessage,
        payload: bytes,
        expect_json: bool,
    ) -> tuple[int, Any]:
        ctype = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if 200 <= status < 300:
            if not expect_json:
                return status, payload.decode("utf-8")
            try:
                # Numbers beyond 2^53 as the doubles they are, however the answer spells them
                # (a record's JCS integer literal, or an exponent): the same values as events().
                return status, json.loads(payload, parse_int=leaf_int)
            except (ValueError, HitlLedgerError) as e:
                raise LedgerProtocolError(
                    f"{method} {path}: answer {status} is not JSON", status=status, body=payload
                ) from e
        parsed: Any = None
        if ctype == "application/json" or payload[:1] == b"{":
            try:
                parsed = json.loads(payload)
            except ValueError:
                parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
            raise error_for(
                status,
                parsed["error"],
                str(parsed.get("message", "")),
                body=parsed,
                retry_after=_retry_after(headers),
                method=method,
                path=path,
            )
        if status == 503:
            raise Overloaded(
                payload.decode("utf-8", "replace")[:200],
                status=503,
                retry_after=_retry_after(headers),
                method=method,
                path=path,
            )
        raise LedgerProtocolError(
            f"{method} {path}: answer {status} without an error code: "
            f"{payload[:200].decode('utf-8', 'replace')}",
            status=status,
            body=payload,
        )

    # ------------------------------------------------------------------ writes

    def append_interrupt(
        self,
        *,
        request_id: str,
        thread_id: str,
        interrupt_id: str,
        action: dict[str, Any],
        run_id: str | None = None,
        checkpoint_ns: str | None = None,
        checkpoint_id: str | None = None,
        redact: Sequence[str] | None = None,
        allowed_decisions: Sequence[str] | None = None,
        review_ttl_seconds: int | None = None,
    ) -> WriteResult:
        """``POST /v1/interrupts`` (agent). Idempotent: the same request again is a duplicate."""
        validate_action(action)
        body = _drop_none(
            {
                "request_id": request_id,
                "thread_id": thread_id,
                "run_id": run_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint_id,
                "interrupt_id": interrupt_id,
                "action": action,
                "redact": list(redact) if redact is not None else None,
                "allowed_decisions": list(allowed_decisions)
                if allowed_decisions is not None
                else None,
                "review_ttl_seconds": review_ttl_seconds,
            }
        )
        status, answer = self.request("POST", "/v1/interrupts", body, idempotent=True)
        return _write_result(status, answer)

    def decide(
        self,
        request_id: str,
        decision: str,
        *,
        rationale: str | None = None,
        edited_action: dict[str, Any] | None = None,
    ) -> DecisionResult:
        """``POST /v1/requests/{id}/decision`` (reviewer): ``approve``, ``edit`` or ``reject``.

        The reviewer is the token's principal; nothing in the body can claim another.
        """
        if edited_action is not None:
            validate_action(edited_action)
        body = _drop_none(
            {"decision": decision, "rationale": rationale, "edited_action": edited_action}
        )
        status, answer = self.request(
            "POST", f"/v1/requests/{_seg(request_id)}/decision", body, idempotent=True
        )
        return _decision_result(status, answer, edited_action if decision == "edit" else None)

    def approve(self, request_id: str, rationale: str | None = None) -> DecisionResult:
        """An approval; on a tool needing several approvals, possibly a partial one (see
        :class:`DecisionResult`). A governed tool's refusals raise
        :class:`~hitl_ledger.errors.ApproverIsRequester`,
        :class:`~hitl_ledger.errors.ApproverAlreadyApproved` or
        :class:`~hitl_ledger.errors.ApproverNotAllowed` (403, recorded as refusals)."""
        return self.decide(request_id, "approve", rationale=rationale)

    def reject(self, request_id: str, rationale: str) -> DecisionResult:
        return self.decide(request_id, "reject", rationale=rationale)

    def edit(
        self, request_id: str, edited_action: dict[str, Any], rationale: str | None = None
    ) -> DecisionResult:
        return self.decide(request_id, "edit", rationale=rationale, edited_action=edited_action)

    def authorize(
        self,
        request_id: str,
        *,
        ticket_id: str,
        action: dict[str, Any],
        attempt_id: str | None = None,
        run_id: str | None = None,
        checkpoint_id: str | None = None,
    ) -> Authorization:
        """``POST /v1/requests/{id}/authorize`` (agent): the tool-boundary check.

        A denial is not an exception: it answers ``granted=False`` with the ``code``. A paused
        tool is such a denial, ``code="tool_paused"`` (:attr:`Authorization.paused`), with
        :attr:`Authorization.route` ``"manual_operator"``: hand the action to a person, do not
        retry (the ticket is untouched). Retried after a connection failure only when
        ``attempt_id`` is given (spec section 4).
        """
        body = _drop_none(
            {
                "ticket_id": ticket_id,
                "action": action,
                "attempt_id": attempt_id,
                "run_id": run_id,
                "checkpoint_id": checkpoint_id,
            }
        )
        status, answer = self.request(
            "POST",
            f"/v1/requests/{_seg(request_id)}/authorize",
            body,
            idempotent=attempt_id is not None,
        )
        base = _write_result(status, answer)
        granted = answer.get("granted")
        if not isinstance(granted, bool):
            raise LedgerProtocolError(f"authorize answered without a boolean granted: {answer!r}")
        code = answer.get("code")
        if code == "tool_paused" and granted:
            raise LedgerProtocolError(
                f"authorize answered a grant with code tool_paused: {answer!r}"
            )
        return Authorization(
            record=base.record,
            leaf_hash=base.leaf_hash,
            seq=base.seq,
            duplicate=base.duplicate,
            status=base.status,
            raw=base.raw,
            granted=granted,
            code=code,
            idempotency_key=answer.get("idempotency_key"),
            route=answer.get("route"),
        )

    def revoke(self, request_id: str, reason: str) -> WriteResult:
        """``POST /v1/requests/{id}/revoke`` (agent)."""
        status, answer = self.request(
            "POST", f"/v1/requests/{_seg(request_id)}/revoke", {"reason": reason}, idempotent=True
        )
        return _write_result(status, answer)

    def follow_up(
        self,
        request_id: str,
        *,
        follow_up_id: str,
        follows: str,
        outcome: str,
        detail: str | dict[str, Any] | None = None,
        operation_id: str | None = None,
        run_id: str | None = None,
        checkpoint_id: str | None = None,
    ) -> WriteResult:
        """``POST /v1/requests/{id}/follow-ups`` (agent): what happened after a grant."""
        body = _drop_none(
            {
                "follow_up_id": follow_up_id,
                "follows": follows,
                "outcome": outcome,
                "detail": detail,
                "operation_id": operation_id,
                "run_id": run_id,
                "checkpoint_id": checkpoint_id,
            }
        )
        status, answer = self.request(
            "POST", f"/v1/requests/{_seg(request_id)}/follow-ups", body, idempotent=True
        )
        return _write_result(status, answer)

    # ------------------------------------------------------------------ governance

    def set_policy(self, document: dict[str, Any]) -> WriteResult:
        """``PUT /v1/policy`` (admin): record ``document`` as the policy in force (spec section
        12). The answer is its ``policy`` record (``status`` 201), or, for the document already
        in force, that record again (``duplicate``, 200).

        The document is sent as canonical JSON (a value the ledger could read two ways is
        refused locally, :class:`~hitl_ledger.errors.NotCanonicalizable`). A document that fails
        the contract's validation raises :class:`~hitl_ledger.errors.InvalidPolicy` (400,
        nothing written); any other token than an admin's,
        :class:`~hitl_ledger.errors.Forbidden` (403, recorded as a refusal).

        Never retried: a ``PUT`` repeated after another admin's change would record this
        document again over it. After a :class:`~hitl_ledger.errors.LedgerConnectionError`, read
        :meth:`policy` and send again if it is not in force.
        """
        if not isinstance(document, dict):
            raise TypeError(f"a policy document is a JSON object, not {type(document).__name__}")
        status, answer = self.request("PUT", "/v1/policy", document, idempotent=False)
        return _write_result(status, answer)

    def break_glass(self, request_id: str, action: dict[str, Any], reason: str) -> DecisionResult:
        """``POST /v1/requests/{id}/break-glass`` (a ``break_glass`` token): an emergency
        approval of exactly ``action`` (the request's action) of one open request, with the
        operator's ``reason`` (spec section 7.6).

        One ``decision`` marked ``break_glass: true`` with a single-use ticket
        (:attr:`DecisionResult.ticket_id`, checked by ``authorize`` like any approval; a paused
        tool still denies it). It enters the post-event review queue
        (:meth:`break_glass_reviews`). Refused and recorded: another role
        (:class:`~hitl_ledger.errors.Forbidden`), a tool that does not allow it
        (:class:`~hitl_ledger.errors.BreakGlassNotAllowed`), another action
        (:class:`~hitl_ledger.errors.BreakGlassActionMismatch`). The same call sent again
        answers the recorded decision (so it is retried like the other idempotent appends).
        """
        validate_action(action)
        if not isinstance(reason, str):
            raise TypeError(f"a break-glass reason is a string, not {type(reason).__name__}")
        status, answer = self.request(
            "POST",
            f"/v1/requests/{_seg(request_id)}/break-glass",
            {"action": action, "reason": reason},
            idempotent=True,
        )
        return _decision_result(status, answer, None)

    def review(self, request_id: str, verdict: str, rationale: str) -> WriteResult:
        """``POST /v1/requests/{id}/review`` (reviewer): the post-event review of the request's
        break-glass use, ``verdict`` ``"acknowledged"`` or ``"disputed"``, with a rationale
        (spec section 7.6). The answer's record is the ``review``. Refused: a review by the
        break-glass user (:class:`~hitl_ledger.errors.ReviewerIsBreakGlassUser`, recorded), of
        a request without a break-glass use (:class:`~hitl_ledger.errors.NoBreakGlass`), a
        second review with other content (:class:`~hitl_ledger.errors.IdempotencyConflict`).
        """
        if not isinstance(verdict, str) or not isinstance(rationale, str):
            raise TypeError("a review's verdict and rationale are strings")
        status, answer = self.request(
            "POST",
            f"/v1/requests/{_seg(request_id)}/review",
            {"verdict": verdict, "rationale": rationale},
            idempotent=True,
        )
        return _write_result(status, answer)

    # ------------------------------------------------------------------ reads

    def request_page(
        self, request_id: str, *, after: int | None = None, limit: int | None = None
    ) -> dict[str, Any]:
        """One page of ``GET /v1/requests/{id}?after=&limit=`` (reviewer, auditor), as answered:
        ``{"request_id", "state", "records", "next_after"?}``; ``after`` is a record ``seq``."""
        query = urllib.parse.urlencode(_drop_none({"after": after, "limit": limit}))
        path = f"/v1/requests/{_seg(request_id)}" + (f"?{query}" if query else "")
        _, answer = self.request("GET", path)
        if not isinstance(answer, dict) or not isinstance(answer.get("records"), list):
            raise LedgerProtocolError(f"GET {path} answered no records: {answer!r}")
        return answer

    def get_request(self, request_id: str) -> RequestState:
        """``GET /v1/requests/{id}`` (reviewer, auditor): the request's state and every record
        naming it, in ``seq`` order.

        The ledger pages the records (a page ends after 10,000 records or 16 MiB): this follows
        ``next_after`` until a page comes without it, so ``records`` is always complete. The
        ``state`` is the last page's (the latest read). A server that does not page answers
        everything at once, which this reads as one page.
        """
        records: list[dict[str, Any]] = []
        after: int | None = None
        while True:
            page = self.request_page(request_id, after=after)
            records.extend(page["records"])
            nxt = page.get("next_after")
            if nxt is None:
                break
            if type(nxt) is not int or nxt < 0 or (after is not None and nxt <= after) \
                    or not page["records"]:
                # A cursor that does not move would loop for ever.
                raise LedgerProtocolError(
                    f"GET /v1/requests/{request_id}: next_after {nxt!r} does not move past "
                    f"{after!r}"
                )
            after = nxt
        approvals = page.get("approvals")
        required = page.get("approvals_required")
        return RequestState(
            request_id=page["request_id"],
            state=page["state"],
            records=records,
            raw={**{k: v for k, v in page.items() if k != "next_after"}, "records": records},
            approvals=list(approvals) if isinstance(approvals, list) else [],
            approvals_required=required if type(required) is int else None,
        )

    def pending(self) -> list[dict[str, Any]]:
        """``GET /v1/pending`` (reviewer, auditor): what needs an answer now."""
        _, answer = self.request("GET", "/v1/pending")
        return answer["pending"]

    def policy(self) -> PolicyState:
        """``GET /v1/policy`` (every role): the policy in force and the record that put it in
        force."""
        _, answer = self.request("GET", "/v1/policy")
        if not isinstance(answer, dict) or not isinstance(answer.get("policy"), dict):
            raise LedgerProtocolError(f"GET /v1/policy answered no policy: {answer!r}")
        try:
            return PolicyState(
                policy=answer["policy"],
                policy_digest=answer["policy_digest"],
                record=answer["record"],
                seq=answer["seq"],
                leaf_hash=answer["leaf_hash"],
                raw=answer,
            )
        except KeyError as e:
            raise LedgerProtocolError(f"GET /v1/policy answered without {e}: {answer!r}") from e

    def policy_history(self) -> list[PolicyChange]:
        """``GET /v1/policy/history`` (reviewer, auditor): every policy record, oldest first,
        with who recorded it."""
        _, answer = self.request("GET", "/v1/policy/history")
        items = answer.get("policies") if isinstance(answer, dict) else None
        if not isinstance(items, list):
            raise LedgerProtocolError(f"GET /v1/policy/history answered no policies: {answer!r}")
        try:
            return [
                PolicyChange(
                    seq=p["seq"],
                    ts=p["ts"],
                    actor=p["actor"],
                    policy_digest=p["policy_digest"],
                    leaf_hash=p["leaf_hash"],
                    record=p["record"],
                )
                for p in items
            ]
        except (KeyError, TypeError) as e:
            raise LedgerProtocolError(
                f"GET /v1/policy/history: an entry lacks {e}: {answer!r}"
            ) from e

    def break_glass_reviews(self) -> list[BreakGlassUse]:
        """``GET /v1/reviews/break-glass`` (reviewer, auditor): the break-glass uses awaiting
        their post-event review, oldest first (of the tenants the token reaches)."""
        _, answer = self.request("GET", "/v1/reviews/break-glass")
        items = answer.get("break_glass") if isinstance(answer, dict) else None
        if not isinstance(items, list):
            raise LedgerProtocolError(
                f"GET /v1/reviews/break-glass answered no break_glass list: {answer!r}"
            )
        try:
            return [
                BreakGlassUse(
                    request_id=u["request_id"],
                    seq=u["seq"],
                    ts=u["ts"],
                    actor=u["actor"],
                    reason=u["reason"],
                    leaf_hash=u["leaf_hash"],
                    record=u["record"],
                )
                for u in items
            ]
        except (KeyError, TypeError) as e:
            raise LedgerProtocolError(
                f"GET /v1/reviews/break-glass: an entry lacks {e}: {answer!r}"
            ) from e

    def thread_records_page(
        self, thread_id: str, *, after: int | None = None, limit: int | None = None
    ) -> dict[str, Any]:
        """One page of ``GET /v1/threads/{id}/records`` (auditor), as answered."""
        query = urllib.parse.urlencode(_drop_none({"after": after, "limit": limit}))
        path = f"/v1/threads/{_seg(thread_id)}/records" + (f"?{query}" if query else "")
        _, answer = self.request("GET", path)
        return answer

    def iter_thread_records(
        self, thread_id: str, *, after: int | None = None, limit: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every record of a thread, in thread order, following ``next_after``."""
        while True:
            page = self.thread_records_page(thread_id, after=after, limit=limit)
            yield from page["records"]
            nxt = page.get("next_after")
            if nxt is None or not page["records"]:
                return
            after = nxt

    def thread_records(self, thread_id: str) -> list[dict[str, Any]]:
        return list(self.iter_thread_records(thread_id))

    def report(
        self,
        *,
        since: str | None = None,
        until: str | None = None,
        window: str | None = None,
        by: str | None = None,
        thread: str | None = None,
        alpha: float | None = None,
    ) -> dict[str, Any]:
        """``GET /v1/report`` (auditor, admin): the oversight report of the records (spec
        section 13), as answered (``schemas/report.schema.json``). ``since`` and ``until`` are
        RFC 3339 instants or durations back from now (``"7d"``, ``"12h"``); ``window`` a
        duration (default ``"1d"``); ``by`` ``"tool"`` (default), ``"reviewer"`` or ``"agent"``;
        ``thread`` restricts it to one thread; ``alpha`` is the shift tests' significance
        (default 0.01). Bad parameters raise the server's 400 error."""
        query = urllib.parse.urlencode(
            _drop_none(
                {
                    "since": since,
                    "until": until,
                    "window": window,
                    "by": by,
                    "thread": thread,
                    "alpha": None if alpha is None else repr(float(alpha)),
                }
            )
        )
        _, answer = self.request("GET", "/v1/report" + (f"?{query}" if query else ""))
        if not isinstance(answer, dict) or not isinstance(answer.get("groups"), list):
            raise LedgerProtocolError(f"GET /v1/report answered no report: {answer!r}")
        return answer

    def export_thread(self, thread_id: str) -> dict[str, Any]:
        """``GET /v1/threads/{id}/export`` (auditor): the thread's bundle (spec section 7)."""
        _, answer = self.request("GET", f"/v1/threads/{_seg(thread_id)}/export")
        return answer

    def checkpoint(self) -> str:
        """``GET /v1/checkpoint``: the latest signed checkpoint note."""
        _, text = self.request("GET", "/v1/checkpoint", expect_json=False)
        return text

    def inclusion_proof(self, seq: int, size: int | None = None) -> dict[str, Any]:
        query = urllib.parse.urlencode(_drop_none({"seq": seq, "size": size}))
        _, answer = self.request("GET", f"/v1/proofs/inclusion?{query}")
        return answer

    def consistency_proof(self, first: int, second: int) -> dict[str, Any]:
        query = urllib.parse.urlencode({"from": first, "to": second})
        _, answer = self.request("GET", f"/v1/proofs/consistency?{query}")
        return answer

    def events(
        self,
        after: int | None = None,
        *,
        idle_timeout: float | None = None,
        read_timeout: float = 45.0,
        backoff: float | None = None,
        max_backoff: float = 30.0,
        max_reconnects: int | None = None,
    ) -> EventStream:
        """``GET /v1/events`` (agent, reviewer, auditor): an iterator over :class:`Event`.

        Every committed record the token may see with ``seq > after`` (``after=None``: from seq
        0), then live records as they commit, in ``seq`` order. A reviewer or auditor sees every
        record (a token scoped to tenants: those tenants' records); an agent token sees the
        records of its tenant's requests (for an edit's new request, the tenant of the
        original). For a live-only start, pass the largest seq you hold, or ``checkpoint size -
        1``. Records are read losslessly: a large number in a record (JCS writes ``1e20`` as
        ``100000000000000000000``) arrives as the double it is (a ``float``), as in every other
        answer of this client.

        The iterator checks each event (its id strictly increases and equals the record's
        ``seq``; ``leaf_hash`` is the record's) and raises
        :class:`~hitl_ledger.errors.EventStreamError` otherwise. After a dropped connection, a
        silence longer than ``read_timeout`` (the server sends a heartbeat every 15 s), a
        connection error or a 5xx answer, it reconnects with ``Last-Event-ID`` (and ``?after``) =
        the last event it received (those received and not yet yielded are still yielded, once),
        waiting the server's ``retry:`` (else ``backoff``, default the client's)
        doubled per consecutive failure, or ``Retry-After``, at most ``max_backoff`` seconds; so
        each event is yielded exactly once, in order, also across a server restart.
        ``max_reconnects`` (default: unbounded) is how many failed attempts in a row it makes
        before raising :class:`~hitl_ledger.errors.LedgerConnectionError`. A 4xx answer raises
        the typed error (``Unauthenticated``, ``Forbidden``, ``InvalidRequest``, …).

        ``idle_timeout``: end the iteration once no event has arrived for that many seconds
        (for "process what is there now"; heartbeats do not count). Without it the iterator
        follows the stream until :meth:`EventStream.close` (callable from another thread).
        """
        return EventStream(
            self,
            after,
            idle_timeout=idle_timeout,
            read_timeout=read_timeout,
            backoff=backoff,
            max_backoff=max_backoff,
            max_reconnects=max_reconnects,
        )

    def healthz(self) -> bool:
        """``GET /healthz``: ``True`` when the ledger answers 2xx."""
        self.request("GET", "/healthz", expect_json=False)
        return True

    def metrics(self) -> str:
        """``GET /metrics`` (admin): Prometheus text."""
        _, text = self.request("GET", "/metrics", expect_json=False)
        return text


def _write_result(status: int, answer: Any) -> WriteResult:
    if not isinstance(answer, dict) or not isinstance(answer.get("record"), dict):
        raise LedgerProtocolError(f"answer {status} carries no record: {answer!r}", status=status)
    try:
        return WriteResult(
            record=answer["record"],
            leaf_hash=answer["leaf_hash"],
            seq=answer["seq"],
            duplicate=bool(answer["duplicate"]),
            status=status,
            raw=answer,
        )
    except KeyError as e:
        raise LedgerProtocolError(f"answer {status} lacks {e}: {answer!r}", status=status) from e


def _count(answer: dict[str, Any], name: str, status: int) -> int | None:
    value = answer.get(name)
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise LedgerProtocolError(
            f"answer {status}: {name} is not a positive integer: {answer!r}", status=status
        )
    return value


def _decision_result(
    status: int, answer: Any, edited_action: dict[str, Any] | None
) -> DecisionResult:
    """A decision's (or a break-glass decision's) answer, its counts checked: an approval
    without a ticket must be a partial one, never read as a usable (absent) ticket."""
    base = _write_result(status, answer)
    ticket_id = answer.get("ticket_id")
    if ticket_id is not None and (not isinstance(ticket_id, str) or not ticket_id):
        raise LedgerProtocolError(f"answer {status}: ticket_id is not a string: {answer!r}",
                                  status=status)
    approvals = _count(answer, "approvals", status)
    required = _count(answer, "approvals_required", status)
    if (approvals is None) != (required is None):
        raise LedgerProtocolError(
            f"answer {status}: approvals and approvals_required come together: {answer!r}",
            status=status,
        )
    result = DecisionResult(
        record=base.record,
        leaf_hash=base.leaf_hash,
        seq=base.seq,
        duplicate=base.duplicate,
        status=base.status,
        raw=base.raw,
        ticket_id=ticket_id,
        expires_at=answer.get("expires_at"),
        new_request_id=answer.get("new_request_id"),
        edited_action=edited_action,
        approvals=approvals,
        approvals_required=required,
    )
    if result.partial and (
        approvals is None or required is None or approvals >= required
        or result.expires_at is not None
    ):
        raise LedgerProtocolError(
            f"answer {status}: an approval without a ticket that is not a partial approval "
            f"(approvals < approvals_required, no expiry): {answer!r}",
            status=status,
        )
    return result


def _retry_after(headers: http.client.HTTPMessage | None) -> float | None:
    if headers is None:
        return None
    value = headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _describe(e: BaseException) -> str:
    if isinstance(e, ConnectionRefusedError):
        return "connection refused (is the server running?)"
    if isinstance(e, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(e, socket.gaierror):
        return f"host not found ({e})"
    if isinstance(e, ConnectionResetError):
        return "connection reset"
    if isinstance(e, http.client.RemoteDisconnected):
        return "the server closed the connection without answering"
    return f"{type(e).__name__}: {e}"

