"""Typed errors of the hitl-ledger client.

Every error answer of the ledger (``{"error": CODE, "message": TEXT}``, spec section 6) is raised
as the subclass of :class:`ApiError` registered for its stable ``code``; :data:`ERROR_CLASSES`
maps each code of the contract to its class. A code this client does not know yet still raises
the class of its HTTP status (or :class:`ApiError` itself), with ``code`` set, so callers can
always branch on ``err.code``.

Failures that never produced an answer (refused connection, timeout, reset) raise
:class:`LedgerConnectionError`, which is also a builtin :class:`ConnectionError`.
"""

from __future__ import annotations

from typing import Any


class HitlLedgerError(Exception):
    """Base class of every error this package raises."""


class LedgerConnectionError(HitlLedgerError, ConnectionError):
    """The ledger could not be reached, or the connection broke before an answer arrived.

    ``retried`` tells how many times the call was retried before giving up (0 for a call that is
    not safe to repeat, such as an ``authorize`` without an ``attempt_id``).
    """

    def __init__(self, message: str, *, url: str, retried: int = 0) -> None:
        super().__init__(message)
        self.url = url
        self.retried = retried


class LedgerProtocolError(HitlLedgerError):
    """The ledger answered something that is not the contract's JSON (a proxy page, say)."""

    def __init__(self, message: str, *, status: int | None = None, body: bytes = b"") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class EventStreamError(LedgerProtocolError):
    """The decision stream broke its promise: an event id that does not strictly increase, that
    differs from the record's ``seq``, a ``leaf_hash`` that is not the record's, data that is
    not the contract's JSON. Raised instead of skipping or repeating an event; the stream is
    closed. ``event_id`` is the offending id as sent (or ``None``), ``after`` the seq of the
    previous event (or the position the stream was asked from)."""

    def __init__(self, message: str, *, event_id: str | None, after: int | None) -> None:
        super().__init__(message)
        self.event_id = event_id
        self.after = after


class ApiError(HitlLedgerError):
    """An error answer of the ledger: ``status``, the stable ``code`` and the ``message``."""

    status: int | None = None
    code: str = "error"

    def __init__(
        self,
        message: str = "",
        *,
        code: str | None = None,
        status: int | None = None,
        body: Any = None,
        retry_after: float | None = None,
        method: str | None = None,
        path: str | None = None,
    ) -> None:
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.message = message
        self.body = body
        self.retry_after = retry_after
        self.method = method
        self.path = path
        where = f" ({method} {path})" if method and path else ""
        super().__init__(f"{self.status} {self.code}: {message}{where}")


# 400
class BadRequest(ApiError):
    status = 400
    code = "bad_request"


class InvalidJson(BadRequest):
    code = "invalid_json"


class UnknownField(BadRequest):
    code = "unknown_field"


class MissingField(BadRequest):
    code = "missing_field"


class InvalidRequest(BadRequest):
    code = "invalid_request"


class InvalidIdentifier(BadRequest):
    code = "invalid_identifier"


class InvalidAction(BadRequest):
    code = "invalid_action"


class NotCanonicalizable(BadRequest, ValueError):
    """JSON that RFC 8785 cannot canonicalize, from the ledger or found locally before sending."""

    code = "not_canonicalizable"


class InvalidRedaction(BadRequest):
    code = "invalid_redaction"


class DecisionNotAllowed(BadRequest):
    code = "decision_not_allowed"


class ReviewTtlTooLong(BadRequest):
    code = "review_ttl_too_long"


class InvalidTicketId(BadRequest):
    code = "invalid_ticket_id"


class UnknownFollows(BadRequest):
    code = "unknown_follows"


class UnknownReasonCode(BadRequest):
    """A rejection's or revocation's ``reason_code`` is malformed or not among the tool's
    ``reason_codes`` in the policy in force (spec section 12); nothing was written."""

    code = "unknown_reason_code"


class InvalidPolicy(BadRequest):
    """A policy document that fails the contract's validation (spec section 12): an unknown
    field, a zero duration or ``approvals_required``, an unknown mode, an ``approvals_required``
    above the number of ``approvers``, …; nothing was written."""

    code = "invalid_policy"


# 401 / 403
class Unauthenticated(ApiError):
    status = 401
    code = "unauthenticated"


class Forbidden(ApiError):
    status = 403
    code = "forbidden"


class GovernedDecisionRefused(Forbidden):
    """Base of the refusals of a decision on a governed tool (spec section 7.5): the ledger
    answered 403 and recorded a ``refusal`` in the request; nothing was decided."""

    code = "forbidden"


class ApproverIsRequester(GovernedDecisionRefused):
    """The reviewer's principal opened the request: another reviewer decides it."""

    code = "approver_is_requester"


class ApproverAlreadyApproved(GovernedDecisionRefused):
    """The reviewer's approval of the request is already counted (with other content): a
    second approval by the same reviewer does not count twice."""

    code = "approver_already_approved"


class ApproverNotAllowed(GovernedDecisionRefused):
    """The tool names ``approvers`` and none of them admits the reviewer."""

    code = "approver_not_allowed"


class BreakGlassNotAllowed(Forbidden):
    """The tool's policy in force does not allow break-glass (spec section 7.6); recorded as a
    refusal, nothing granted."""

    code = "break_glass_not_allowed"


class ReviewerIsBreakGlassUser(Forbidden):
    """A post-event review by the principal who used break-glass: another reviewer reviews it
    (spec section 7.6); recorded as a refusal."""

    code = "reviewer_is_break_glass_user"


# 404
class NotFound(ApiError):
    status = 404
    code = "not_found"


class RequestNotFound(NotFound):
    code = "request_not_found"


class ThreadNotFound(NotFound):
    code = "thread_not_found"


# 405
class MethodNotAllowed(ApiError):
    status = 405
    code = "method_not_allowed"


class AppendOnly(MethodNotAllowed):
    code = "append_only"


# 409
class ConflictError(ApiError):
    """Base of the 409 answers."""

    status = 409
    code = "conflict"


class Conflict(ConflictError):
    """The request is already closed by another decision, a timeout, or cannot be revoked."""

    code = "conflict"


class IdempotencyConflict(ConflictError):
    """The same append key was used before with different content; nothing was written."""

    code = "idempotency_conflict"


class IdentifierInUse(ConflictError):
    """An interrupt named a request id or thread id that another tenant's request or thread
    already uses; nothing was written (the answer says no more about it)."""

    code = "identifier_in_use"


class BreakGlassActionMismatch(ConflictError):
    """A break-glass ``action`` whose digest is not the request's ``action_digest``: the
    emergency grant is for exactly the action under review (spec section 7.6); recorded as a
    refusal, nothing granted."""

    code = "break_glass_action_mismatch"


class NoBreakGlass(ConflictError):
    """A post-event review of a request that has no break-glass use (spec section 7.6)."""

    code = "no_break_glass"


# 413 / 415
class PayloadTooLarge(ApiError):
    status = 413
    code = "payload_too_large"


class BodyTooLarge(PayloadTooLarge):
    code = "body_too_large"


class RecordTooLarge(PayloadTooLarge):
    code = "record_too_large"


class UnsupportedMediaType(ApiError):
    status = 415
    code = "unsupported_media_type"


# 500: the outcome of a write is unknown (it may have become durable); retry the same body,
# or authorize with the same attempt_id.
class ServerError(ApiError):
    """A 5xx answer: for a write, the outcome is unknown (it may have become durable)."""

    status = 500


class StorageError(ServerError):
    code = "storage_error"


class InternalError(ServerError):
    code = "internal_error"


# 503
class Unavailable(ServerError):
    """The ledger accepts no write now (503)."""

    status = 503


class Overloaded(Unavailable):
    """The ledger's write queue is full, or too many request bytes are in flight;
    ``retry_after`` holds its ``Retry-After`` in seconds."""

    code = "overloaded"


class Unwritable(Unavailable):
    """A write or sync failed on the server: it accepts no write until it is restarted (reads
    go on). Another server of the same ledger may accept the retry."""

    code = "unwritable"


#: Every error code of the contract (spec section 6) and the class raised for it.
ERROR_CLASSES: dict[str, type[ApiError]] = {
    cls.code: cls
    for cls in (
        InvalidJson,
        UnknownField,
        MissingField,
        InvalidRequest,
        InvalidIdentifier,
        InvalidAction,
        NotCanonicalizable,
        InvalidRedaction,
        DecisionNotAllowed,
        ReviewTtlTooLong,
        InvalidTicketId,
        UnknownFollows,
        UnknownReasonCode,
        InvalidPolicy,
        Unauthenticated,
        Forbidden,
        ApproverIsRequester,
        ApproverAlreadyApproved,
        ApproverNotAllowed,
        BreakGlassNotAllowed,
        ReviewerIsBreakGlassUser,
        NotFound,
        RequestNotFound,
        ThreadNotFound,
        AppendOnly,
        MethodNotAllowed,
        Conflict,
        IdempotencyConflict,
        IdentifierInUse,
        BreakGlassActionMismatch,
        NoBreakGlass,
        BodyTooLarge,
        RecordTooLarge,
        UnsupportedMediaType,
        StorageError,
        InternalError,
        Overloaded,
        Unwritable,
    )
}

_STATUS_CLASSES: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: ConflictError,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    500: ServerError,
    503: Unavailable,
}


def error_for(
    status: int,
    code: str | None,
    message: str,
    *,
    body: Any = None,
    retry_after: float | None = None,
    method: str | None = None,
    path: str | None = None,
) -> ApiError:
    """The typed error for an error answer: by code, else by status, else :class:`ApiError`."""
    cls = ERROR_CLASSES.get(code or "") or _STATUS_CLASSES.get(status, ApiError)
    return cls(
        message,
        code=code or cls.code,
        status=status,
        body=body,
        retry_after=retry_after,
        method=method,
        path=path,
    )


#: The denial codes of an evaluated authorization (spec section 7.4), in the order they are
#: checked: ``tool_paused`` (the tool is paused in the policy in force: hand the action to a
#: manual operator) before every other.
DENIAL_CODES: tuple[str, ...] = (
    "tool_paused",
    "approval_pending",
    "approval_not_found",
    "approval_request_mismatch",
    "approval_action_mismatch",
    "approval_rejected",
    "approval_superseded",
    "approval_revoked",
    "approval_already_used",
    "approval_expired",
)


class AuthorizationDenied(HitlLedgerError):
    """An evaluated ``authorize`` said no; the side effect was not called.

    A denial is a recorded outcome (the ledger answered 200 and wrote an ``authorization``
    record), so this carries the ``code`` and the authorization answer as evidence.
    """

    def __init__(self, code: str, authorization: Any = None, message: str | None = None) -> None:
        super().__init__(message or f"authorization denied: {code}")
        self.code = code
        self.authorization = authorization


class ToolPaused(AuthorizationDenied):
    """The tool is paused in the policy in force (spec sections 7.4 and 12): ``authorize``
    answered ``granted: false``, ``code: "tool_paused"``, ``"route": "manual_operator"``.

    Not a refusal of the action: the ledger tells the host to hand it to a person (a manual
    operator) instead of running it, and not to retry (every ``authorize`` of the tool is
    denied the same way until a later policy record unpauses it). The side effect was not
    called and the ticket was not used: after the tool is unpaused, the same ticket grants if
    it is still valid. ``authorization`` is the ledger's answer (its ``record`` is the recorded
    ``authorization``, the evidence), ``route`` the answer's ``route`` (``"manual_operator"``),
    ``request_id`` the request and ``action`` the call that was presented, for the operator.

    :func:`hitl_ledger.langgraph.execute_approved` raises it whatever ``raise_on_deny`` says,
    so that a paused action is never mistaken for an ordinary denial and silently dropped.
    """

    def __init__(
        self,
        authorization: Any = None,
        *,
        request_id: str | None = None,
        action: Any = None,
        route: str | None = "manual_operator",
    ) -> None:
        where = f" (request {request_id})" if request_id else ""
        super().__init__(
            "tool_paused",
            authorization,
            f"authorization denied: tool_paused{where}: the tool is paused by the policy in "
            f"force; route the action to a manual operator ({route}), do not retry",
        )
        self.request_id = request_id
        self.action = action
        self.route = route


class InvalidResume(HitlLedgerError, ValueError):
    """A LangGraph resume value that is not a ledger ticket (or an edit's ledger answer)."""


class InterruptIdMismatch(HitlLedgerError):
    """LangGraph raised an interrupt whose id differs from the one appended to the ledger."""


class UnsupportedDecision(HitlLedgerError, ValueError):
    """A human-in-the-loop decision that has no ledger counterpart (e.g. ``respond``)."""


__all__ = [
    name
    for name, value in list(globals().items())
    if isinstance(value, type) and issubclass(value, BaseException) and not name.startswith("_")
] + ["ERROR_CLASSES", "DENIAL_CODES", "error_for"]
