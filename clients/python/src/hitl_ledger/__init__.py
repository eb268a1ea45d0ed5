"""Python client of hitl-ledger, the tamper-evident ledger of human-in-the-loop approvals.

- :class:`LedgerClient`: every route of the v1 HTTP API, with typed errors (:mod:`.errors`);
  :meth:`LedgerClient.events` follows the decision stream as :class:`Event` objects; the
  governance routes (policy in force and its history, break-glass, post-event reviews).
- :mod:`hitl_ledger.digest`: RFC 8785 canonical JSON, the action digest, the idempotency key.
- :mod:`hitl_ledger.langgraph`: append before pausing, resume with a ticket, execute on a grant
  (a paused tool raises :class:`ToolPaused`: route the action to a manual operator), and
  :class:`~hitl_ledger.langgraph.ResumeWorker`, which resumes paused graphs from the stream (on
  the final approval only, never on a partial one).
- :mod:`hitl_ledger.langchain_hitl`: langchain ``HumanInTheLoopMiddleware`` decisions as ledger
  decisions, and a ledger-gated middleware for agents.
"""

from . import errors
from .client import (
    Authorization,
    BreakGlassUse,
    DecisionResult,
    Event,
    EventStream,
    LedgerClient,
    PolicyChange,
    PolicyState,
    RequestState,
    WriteResult,
)
from .digest import (
    ACTION_SCHEMA,
    action_digest,
    canonicalize,
    canonicalize_record,
    canonicalize_text,
    idempotency_key,
    leaf_hash,
    loads_record,
    loads_strict,
)
from .errors import (
    DENIAL_CODES,
    ERROR_CLASSES,
    ApiError,
    AuthorizationDenied,
    EventStreamError,
    HitlLedgerError,
    InterruptIdMismatch,
    InvalidResume,
    LedgerConnectionError,
    LedgerProtocolError,
    NotCanonicalizable,
    ToolPaused,
    UnsupportedDecision,
    error_for,
)

__version__ = "0.1.0"

__all__ = [
    "errors",
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
    "ACTION_SCHEMA",
    "action_digest",
    "canonicalize",
    "canonicalize_record",
    "canonicalize_text",
    "idempotency_key",
    "leaf_hash",
    "loads_record",
    "loads_strict",
    "ERROR_CLASSES",
    "DENIAL_CODES",
    "error_for",
    "HitlLedgerError",
    "LedgerConnectionError",
    "LedgerProtocolError",
    "EventStreamError",
    "ApiError",
    "AuthorizationDenied",
    "ToolPaused",
    "InvalidResume",
    "InterruptIdMismatch",
    "UnsupportedDecision",
    "NotCanonicalizable",
]
