"""LangGraph helpers: make the safe human-in-the-loop pattern the easy one.

The pattern, inside one node (LangGraph re-runs an interrupted node from its start on resume)::

    def refund(state):
        action = {"tool": "refund", "args": {"order_id": state["order_id"], "amount_cents": 2500}}
        approval = request_approval(agent, action)          # ledger interrupt, then interrupt()
        outcome = execute_approved(agent, approval, do_refund)  # authorize, then the side effect
        return {"outcome": outcome.as_state()}

- :func:`request_approval` appends the ``interrupt`` record *before* pausing. Its request id is
  derived from the ``thread_id`` and the id LangGraph gives the interrupt (or supplied by the
  host), so the re-run on resume appends the same request again, which the ledger answers as a
  duplicate and writes nothing.
- The reviewer decides with their own token (the console, the CLI). The host learns of it from
  the ledger, not from the reviewer's browser: a :class:`ResumeWorker` follows the decision
  stream and resumes the paused thread with the ledger's answer (or the host resumes by hand with
  :func:`resume_command` of the ledger's decision answer). Nothing in the resume value is
  trusted: a grant needs the ledger's ``authorize``.
- :func:`execute_approved` calls ``authorize`` immediately before the side effect and calls the
  side effect only on a grant, with the grant's idempotency key. A denial, an unreachable
  ledger or any error means the side effect is not called.

Governance (spec sections 7.4 and 7.5):

- A tool that needs several distinct approvals gets *partial* approvals (``decision`` records
  with ``ticket_id: null``) before its last one. A partial approval resumes nothing: the
  :class:`ResumeWorker` keeps the thread paused until the last approval, which carries the
  ticket (a rejection, the review deadline or a revocation still closes the request), and
  :func:`resume_value` refuses a partial approval's answer.
- A paused tool: ``authorize`` answers ``tool_paused`` with ``"route": "manual_operator"``, and
  :func:`execute_approved` raises :class:`~hitl_ledger.errors.ToolPaused` (an
  :class:`~hitl_ledger.errors.AuthorizationDenied`) without calling the side effect or retrying:
  the host hands the action to a manual operator. Resumed by the worker, the graph's run ends
  with that error in :attr:`ResumeOutcome.error` and is not resumed again. The ticket is
  untouched: once a later policy unpauses the tool, the same approval grants if still valid.

Records carry the graph's ``thread_id``, ``run_id``, ``checkpoint_ns`` and ``checkpoint_id``:
pass a fresh ``run_id`` per invocation in ``config["configurable"]`` (see :func:`run_config`).

The resume worker (a stable API; the reviewer's console tests drive it)::

    worker = ResumeWorker(agent_client, graph, state_file="resume-worker.json",
                          config_for=None,        # thread_id -> LangGraph config
                          on_outcome=None,        # called with each ResumeOutcome
                          pending_grace=10.0, recheck_interval=0.5)
    worker.start(); ...; worker.stop()            # a background thread
    worker.run(stop_event)                        # or in the caller's thread
    outcomes = worker.poll_once(timeout=1.0)      # or: what the stream holds now

Each :class:`ResumeOutcome` has ``request_id``, ``thread_id``, ``kind`` (``approved``,
``edited``, ``rejected``, ``timed_out``, ``revoked``), ``seq``, ``interrupt_id``,
``ticket_id``, ``new_request_id``, ``expires_at``, ``reason``, ``result`` (what
``graph.invoke`` returned) and ``error``. The node sees the same answer as an
:class:`Approval` (``outcome``, ``approved``, ``reason``). :class:`ResumeWorker` says what
"exactly once" means and what it rests on.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .client import Authorization, DecisionResult, Event, EventStream, LedgerClient
from .digest import canonicalize, sha256_hex, validate_action
from .errors import (
    AuthorizationDenied,
    EventStreamError,
    HitlLedgerError,
    InterruptIdMismatch,
    InvalidResume,
    LedgerConnectionError,
    ToolPaused,
)

__all__ = [
    "GraphContext",
    "Approval",
    "GateOutcome",
    "current_context",
    "run_config",
    "derive_request_id",
    "request_approval",
    "resume_value",
    "resume_command",
    "parse_resume",
    "execute_approved",
    "ResumeWorker",
    "ResumeOutcome",
    "APPROVAL_INTERRUPT_TYPE",
    "OUTCOMES",
    "CLOSED_CODES",
]

#: ``value["type"]`` of the interrupts :func:`request_approval` raises.
APPROVAL_INTERRUPT_TYPE = "hitl_ledger_approval"

log = logging.getLogger("hitl_ledger.langgraph")


# ---------------------------------------------------------------------------- graph context


@dataclass(frozen=True)
class GraphContext:
    """Where in a LangGraph run the current node executes, as the ledger records it.

    ``checkpoint_ns`` is the namespace of the graph that runs the node (``""`` at the root) and
    ``checkpoint_id`` that graph's checkpoint the node's task was created from: the checkpoint
    at the point of interruption. ``task_ns`` is the task's own namespace (LangGraph derives
    interrupt ids from it).
    """

    thread_id: str
    run_id: str | None
    checkpoint_ns: str
    checkpoint_id: str | None
    task_ns: str


def current_context(config: Mapping[str, Any] | None = None) -> GraphContext:
    """The :class:`GraphContext` of the running node (``config`` defaults to LangGraph's)."""
    if config is None:
        from langgraph.config import get_config

        config = get_config()
    conf = config.get("configurable") or {}
    thread_id = conf.get("thread_id")
    if thread_id is None or str(thread_id) == "":
        raise HitlLedgerError(
            "no thread_id in the LangGraph config: the ledger records every request in a thread"
        )
    task_ns = str(conf.get("checkpoint_ns") or "")
    graph_ns = task_ns.rsplit("|", 1)[0] if "|" in task_ns else ""
    checkpoint_map = conf.get("checkpoint_map") or {}
    checkpoint_id = checkpoint_map.get(graph_ns) or conf.get("checkpoint_id")
    run_id = conf.get("run_id") or (config.get("metadata") or {}).get("run_id")
    return GraphContext(
        thread_id=str(thread_id),
        run_id=str(run_id) if run_id else None,
        checkpoint_ns=graph_ns,
        checkpoint_id=str(checkpoint_id) if checkpoint_id else None,
        task_ns=task_ns,
    )


def run_config(
    thread_id: str,
    *,
    run_id: str | None = None,
    checkpoint_id: str | None = None,
    **configurable: Any,
) -> dict[str, Any]:
    """A LangGraph config for one invocation: the thread, a fresh ``run_id`` (unless given) and,
    to resume from or fork at an earlier checkpoint, its ``checkpoint_id``."""
    conf: dict[str, Any] = {"thread_id": thread_id, "run_id": run_id or str(uuid.uuid4())}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    conf.update(configurable)
    return {"configurable": conf}


def _interrupt_id(task_ns: str, index: int) -> str:
    """The id LangGraph gives the ``index``-th interrupt of the task with namespace ``task_ns``."""
    try:  # the exact function LangGraph uses, when this version has it
        from langgraph.types import _interrupt_id as lg_interrupt_id  # type: ignore[attr-defined]

        return lg_interrupt_id(task_ns, index)
    except ImportError:  # pragma: no cover - older LangGraph: the bare namespace hash
        from xxhash import xxh3_128_hexdigest

        return xxh3_128_hexdigest((f"{task_ns}|{index}" if index else task_ns).encode())


def derive_request_id(thread_id: str, interrupt_id: str) -> str:
    """The request id of a LangGraph interrupt: stable across re-runs of the node, distinct
    across threads and across forks (a fork's task, hence its interrupt id, is new)."""
    digest = sha256_hex(canonicalize({"interrupt_id": interrupt_id, "thread_id": thread_id}))
    return f"lg-{digest[:40]}"


# ---------------------------------------------------------------------------- approval


#: The outcomes a node can be resumed with (:attr:`Approval.outcome`).
OUTCOMES = ("approved", "edited", "rejected", "timed_out", "revoked")

#: The :attr:`GateOutcome.code` :func:`execute_approved` answers for a request that was closed
#: without an approval. ``approval_rejected`` and ``approval_revoked`` are the ledger's denial
#: codes; ``approval_timed_out`` is this client's (no ticket exists to authorize).
CLOSED_CODES = {
    "rejected": "approval_rejected",
    "timed_out": "approval_timed_out",
    "revoked": "approval_revoked",
}


@dataclass(frozen=True)
class Approval:
    """What a node holds after resume: the ledger's answer to its request.

    ``outcome`` is one of :data:`OUTCOMES`:

    - ``approved``: ``ticket_id`` is the approval's ticket; ``action`` the call that was asked.
    - ``edited``: the reviewer's edited call, bound to the edit's new request: ``request_id`` is
      the new request, ``ticket_id`` its approval's ticket, ``action`` the edited call
      (``original_request_id`` the request the node opened).
    - ``rejected``: ``ticket_id`` is the rejection's ticket, ``reason`` the reviewer's rationale.
    - ``timed_out``: nobody answered in the review window; ``reason`` names the deadline.
    - ``revoked``: the agent side revoked the open request; ``reason`` is the revocation's.

    ``expires_at``: for an approval or an edit, when the ticket stops authorizing (when the
    resume value carried it, as :class:`ResumeWorker`'s do); for ``timed_out``, the review
    deadline that passed.

    Not a grant, whatever the outcome: only :func:`execute_approved` (the ledger's
    ``authorize``) decides, and it never calls the side effect unless :attr:`approved`.
    """

    request_id: str
    ticket_id: str | None
    action: dict[str, Any]
    original_request_id: str
    edited: bool = False
    outcome: str = "approved"
    reason: str | None = None
    expires_at: str | None = None

    @property
    def approved(self) -> bool:
        """``True`` for an approval or an edit (then ``authorize`` still decides)."""
        return self.outcome in ("approved", "edited")

    def as_state(self) -> dict[str, Any]:
        """A plain dict for graph state (checkpointers serialize it as JSON)."""
        return asdict(self)

    @classmethod
    def from_state(cls, value: Mapping[str, Any] | Approval) -> Approval:
        if isinstance(value, Approval):
            return value
        return cls(**dict(value))


def _pointer_tokens(pointer: str) -> list[str]:
    if pointer and not pointer.startswith("/"):
        raise ValueError(f"not a JSON Pointer: {pointer!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]


_MISSING = object()


def _pointer_get(doc: Any, pointer: str) -> Any:
    """The value at ``pointer`` in ``doc`` (RFC 6901), or ``_MISSING``."""
    node = doc
    for tok in _pointer_tokens(pointer):
        if isinstance(node, dict) and tok in node:
            node = node[tok]
        elif isinstance(node, list) and tok.isdigit() and (tok == "0" or tok[0] != "0") \
                and int(tok) < len(node):
            node = node[int(tok)]
        else:
            return _MISSING
    return node


def _pointer_set(doc: Any, pointer: str, value: Any) -> None:
    """Replace the (existing) value at ``pointer`` in ``doc``."""
    tokens = _pointer_tokens(pointer)
    parent = _pointer_get(doc, "".join("/" + t.replace("~", "~0").replace("/", "~1")
                                       for t in tokens[:-1]))
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    else:
        parent[int(last)] = value


def _mask(args: dict[str, Any], pointers: Sequence[str]) -> dict[str, Any]:
    """A copy of ``args`` with the values at ``pointers`` replaced, for the interrupt value."""
    out = copy.deepcopy(args)
    for pointer in pointers:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
        node: Any = out
        for i, tok in enumerate(tokens):
            last = i == len(tokens) - 1
            if isinstance(node, dict) and tok in node:
                if last:
                    node[tok] = "[redacted]"
                else:
                    node = node[tok]
            elif isinstance(node, list) and tok.isdigit() and int(tok) < len(node):
                if last:
                    node[int(tok)] = "[redacted]"
                else:
                    node = node[int(tok)]
            else:
                break
    return out


def request_approval(
    client: LedgerClient,
    action: dict[str, Any],
    *,
    request_id: str | None = None,
    redact: Sequence[str] | None = None,
    allowed_decisions: Sequence[str] | None = None,
    review_ttl_seconds: int | None = None,
    description: str | None = None,
    extra_value: Mapping[str, Any] | None = None,
    index: int = 0,
    config: Mapping[str, Any] | None = None,
) -> Approval:
    """Append the interrupt to the ledger, then pause the graph; on resume, return the ticket.

    Call it inside a LangGraph node, before any side effect. It is safe to run again and again:
    the node's re-run on resume appends the same request (a ledger duplicate) and then receives
    the resume value instead of pausing.

    ``request_id`` defaults to :func:`derive_request_id` of the thread and the interrupt id.
    ``index`` is the position of this interrupt among the ``interrupt()`` calls of the node (0
    for the first; one gated action per node is the simple, recommended shape). ``redact``
    names JSON Pointers into ``args`` that the ledger stores only as keyed digests; they are
    also masked in the interrupt value LangGraph stores in its checkpoints.

    Returns the ledger's answer as an :class:`Approval`: check :attr:`Approval.approved` (or
    :attr:`Approval.outcome`: ``approved``, ``edited``, ``rejected``, ``timed_out``,
    ``revoked``, with the rationale or reason in :attr:`Approval.reason`); only
    :func:`execute_approved` turns an approval into a grant.

    Raises :class:`~hitl_ledger.errors.InvalidResume` when resumed with anything but the
    ledger's answer (see :func:`parse_resume`), and
    :class:`~hitl_ledger.errors.LedgerConnectionError` when the ledger cannot be reached (the
    graph then stops before pausing, and nothing is approved).
    """
    from langgraph.errors import GraphInterrupt
    from langgraph.types import interrupt

    validate_action(action)
    ctx = current_context(config)
    interrupt_id = _interrupt_id(ctx.task_ns, index)
    rid = request_id or derive_request_id(ctx.thread_id, interrupt_id)
    appended = client.append_interrupt(
        request_id=rid,
        thread_id=ctx.thread_id,
        run_id=ctx.run_id,
        checkpoint_ns=ctx.checkpoint_ns,
        checkpoint_id=ctx.checkpoint_id,
        interrupt_id=interrupt_id,
        action=action,
        redact=redact,
        allowed_decisions=allowed_decisions,
        review_ttl_seconds=review_ttl_seconds,
    )
    body = appended.body
    value: dict[str, Any] = {
        "type": APPROVAL_INTERRUPT_TYPE,
        "request_id": rid,
        "interrupt_id": interrupt_id,
        "tool": action["tool"],
        # Redacted values stay out of LangGraph's checkpoints too: the console shows the ledger's.
        "args": _mask(action["args"], list(body.get("redacted") or redact or [])),
        "allowed_decisions": body.get("allowed_decisions"),
        "expires_at": body.get("expires_at"),
        "action_digest": body.get("action_digest"),
        "seq": appended.seq,
        "leaf_hash": appended.leaf_hash,
    }
    if description is not None:
        value["description"] = description
    for key, item in (extra_value or {}).items():
        value.setdefault(key, item)  # display data only; never overrides the ledger's fields
    try:
        resumed = interrupt(value)
    except GraphInterrupt as gi:
        raised = [i.id for i in (gi.args[0] if gi.args else ())]
        if raised and raised[0] != interrupt_id:
            raise InterruptIdMismatch(
                f"LangGraph raised interrupt {raised[0]} but the ledger holds {interrupt_id} "
                f"(request {rid}): pass index= for the position of this interrupt in the node, "
                "or a request_id"
            ) from gi
        raise
    return parse_resume(resumed, request_id=rid, action=action)


def resume_value(ticket: str | DecisionResult) -> dict[str, Any]:
    """The resume value for an interrupt of :func:`request_approval`.

    Give the ticket id of an approval, or the ledger's
    :class:`~hitl_ledger.client.DecisionResult` of the decision: for an edit, that carries the
    new request id, its ticket and the edited action, all as the ledger answered the reviewer's
    edit; for a rejection, the explicit outcome ``rejected`` with the rejection's ticket and the
    rationale. Never build it from what a browser claims (reviewer, approval flag, action
    details). (:class:`ResumeWorker` builds the same values from the decision stream, and also
    ``timed_out`` and ``revoked``.) A partial approval's answer (:attr:`DecisionResult.partial`:
    a tool that needs more distinct approvals) raises :class:`InvalidResume`: it issues no
    ticket, and the graph waits for the last approval.
    """
    if isinstance(ticket, DecisionResult):
        if ticket.partial:
            raise InvalidResume(
                f"the decision answer is a partial approval ({ticket.approvals} of "
                f"{ticket.approvals_required} approvals): it issues no ticket; resume with the "
                "last approval's answer"
            )
        if ticket.ticket_id is None:
            raise InvalidResume("the decision answer carries no ticket_id")
        if ticket.decision == "reject":
            return {
                "outcome": "rejected",
                "ticket_id": ticket.ticket_id,
                "rationale": ticket.body.get("rationale"),
            }
        if ticket.new_request_id is not None:
            if ticket.edited_action is None:
                raise InvalidResume("an edit's resume needs the edited action it was posted with")
            return {
                "ticket_id": ticket.ticket_id,
                "request_id": ticket.new_request_id,
                "edited_action": ticket.edited_action,
            }
        return {"ticket_id": ticket.ticket_id}
    if not isinstance(ticket, str) or not ticket:
        raise InvalidResume("resume with a ticket id (a string) or the ledger's decision answer")
    return {"ticket_id": ticket}


def resume_command(ticket: str | DecisionResult, *, interrupt_id: str | None = None) -> Any:
    """``Command(resume=...)`` carrying only :func:`resume_value`; with ``interrupt_id``, keyed
    to that interrupt (when several are pending)."""
    from langgraph.types import Command

    value = resume_value(ticket)
    return Command(resume={interrupt_id: value} if interrupt_id else value)


#: The keys of each resume form, by outcome (``None``: the ticket-only and edit forms without an
#: ``outcome`` key, which :func:`resume_value` writes for approvals and edits).
_FORMS: dict[str | None, tuple[frozenset[str], frozenset[str]]] = {
    # outcome: (required keys, optional keys)
    None: (frozenset({"ticket_id"}),
           frozenset({"request_id", "edited_action", "redacted", "expires_at"})),
    "approved": (frozenset({"outcome", "ticket_id"}), frozenset({"expires_at"})),
    "edited": (frozenset({"outcome", "ticket_id", "request_id", "edited_action"}),
               frozenset({"redacted", "expires_at"})),
    "rejected": (frozenset({"outcome", "ticket_id", "rationale"}), frozenset()),
    "timed_out": (frozenset({"outcome", "expires_at"}), frozenset()),
    "revoked": (frozenset({"outcome", "reason"}), frozenset()),
}


def parse_resume(value: Any, *, request_id: str, action: dict[str, Any]) -> Approval:
    """Check a resume value and turn it into an :class:`Approval` for ``request_id``.

    ``action`` is the clear call the node asked about. Accepted forms:

    - a bare ticket id string, ``{"ticket_id"}`` or ``{"outcome": "approved", "ticket_id"}``;
      an approval or an edit may carry the ticket's ``expires_at`` (kept in
      :attr:`Approval.expires_at`, for display: the ledger checks expiry itself);
    - an edit: ``{"ticket_id", "request_id", "edited_action"}`` (``"outcome": "edited"``
      optional) and, when the stored edited call is redacted, ``"redacted"``: the JSON Pointers
      at which ``edited_action["args"]`` holds the ledger's ``hmac-sha256:…`` placeholders. Each
      placeholder is replaced by the value at the same pointer in ``action`` (the host's own
      clear value; the ledger never had it in clear). If the reviewer changed a redacted value,
      the rebuilt call is not the one approved and the gate refuses it
      (``approval_action_mismatch``); a pointer that does not resolve in ``action`` keeps the
      placeholder, which the gate refuses the same way;
    - ``{"outcome": "rejected", "ticket_id", "rationale"}``, ``{"outcome": "timed_out",
      "expires_at"}``, ``{"outcome": "revoked", "reason"}``: the request was closed without an
      approval; the :class:`Approval` says so and :func:`execute_approved` will not execute.

    A partial approval (spec section 7.5) has no ticket, so it has no resume form: a graph is
    resumed on the last approval only.

    Nothing here is trusted: a grant needs the ledger's ``authorize``, which checks the
    presented call's digest against what the reviewer approved. Anything else is refused.
    """
    if isinstance(value, str):
        value = {"ticket_id": value}
    if not isinstance(value, Mapping):
        raise InvalidResume(f"resume value is not a ticket: {type(value).__name__}")
    outcome = value.get("outcome")
    if outcome is not None and (not isinstance(outcome, str) or outcome not in _FORMS):
        raise InvalidResume(f"resume value has an unknown outcome: {outcome!r}")
    required, optional = _FORMS[outcome]
    extra = set(value) - required - optional
    if extra:
        raise InvalidResume(
            f"resume value has fields the ledger does not take from a resume: {sorted(extra)}"
        )
    missing = required - set(value)
    if missing:
        raise InvalidResume(f"resume value lacks {sorted(missing)}")
    ticket_id = value.get("ticket_id")
    if "ticket_id" in required and (not isinstance(ticket_id, str) or not ticket_id):
        raise InvalidResume("resume value lacks a ticket_id")
    expires_at = value.get("expires_at")
    if expires_at is not None and not isinstance(expires_at, str):
        raise InvalidResume("resume value's expires_at is not a string")

    def closed(reason_key: str, reason: Any) -> Approval:
        if reason is not None and not isinstance(reason, str):
            raise InvalidResume(f"resume value's {reason_key} is not a string")
        return Approval(
            request_id=request_id,
            ticket_id=ticket_id if isinstance(ticket_id, str) else None,
            action=copy.deepcopy(action),
            original_request_id=request_id,
            outcome=str(outcome),
            reason=reason,
            expires_at=expires_at,
        )

    new_rid = value.get("request_id")
    edited = value.get("edited_action")
    if (new_rid is None) != (edited is None):
        raise InvalidResume("an edit's resume carries both request_id and edited_action")
    if new_rid is None and "redacted" in value:
        raise InvalidResume("only an edit's resume names redacted pointers")
    rebuilt = None
    if new_rid is not None:
        rebuilt = _rebuild_edited(value, new_rid, edited, request_id=request_id, action=action)

    if outcome == "rejected":
        return closed("rationale", value["rationale"])
    if outcome == "timed_out":
        return closed("expires_at", f"the review deadline {expires_at} passed"
                      if expires_at else "the review deadline passed")
    if outcome == "revoked":
        return closed("reason", value["reason"])

    if rebuilt is None:
        return Approval(
            request_id=request_id,
            ticket_id=ticket_id,
            action=copy.deepcopy(action),
            original_request_id=request_id,
            expires_at=expires_at,
        )
    return Approval(
        request_id=new_rid,
        ticket_id=ticket_id,
        action=rebuilt,
        original_request_id=request_id,
        edited=True,
        outcome="edited",
        expires_at=expires_at,
    )


def _rebuild_edited(
    value: Mapping[str, Any],
    new_rid: Any,
    edited: Any,
    *,
    request_id: str,
    action: dict[str, Any],
) -> dict[str, Any]:
    """An edit resume's call as it will execute: the edited call with the node's own clear
    values put back at its ``redacted`` pointers (see :func:`parse_resume`)."""
    if not isinstance(new_rid, str) or not new_rid or new_rid == request_id:
        raise InvalidResume("an edit's request_id is the new request the ledger created")
    try:
        validate_action(edited)
    except ValueError as e:
        raise InvalidResume(f"edited_action: {e}") from e
    rebuilt = copy.deepcopy(edited)
    redacted = value.get("redacted") or []
    if not isinstance(redacted, list) or not all(isinstance(p, str) and p for p in redacted):
        raise InvalidResume("an edit's redacted pointers are a list of JSON Pointers")
    for pointer in redacted:
        try:
            placeholder = _pointer_get(rebuilt["args"], pointer)
        except ValueError as e:
            raise InvalidResume(f"redacted: {e}") from e
        if not (isinstance(placeholder, str) and placeholder.startswith("hmac-sha256:")):
            raise InvalidResume(
                f"the edited call holds no redacted placeholder at {pointer}"
            )
        clear = _pointer_get(action["args"], pointer)
        if clear is _MISSING:
            # No clear value of ours to put back: the placeholder stays, and the gate refuses
            # the call (approval_action_mismatch) instead of executing a guess.
            log.warning("hitl-ledger: the edited call of %s redacts %s, which the original "
                        "call does not hold; it cannot be authorized", new_rid, pointer)
            continue
        _pointer_set(rebuilt["args"], pointer, copy.deepcopy(clear))
    return rebuilt


# ---------------------------------------------------------------------------- execution


@dataclass(frozen=True)
class GateOutcome:
    """What :func:`execute_approved` did: whether the side effect ran, and the ledger's answer."""

    executed: bool
    granted: bool
    code: str | None
    request_id: str
    idempotency_key: str | None
    attempt_id: str | None
    result: Any = None
    would_deny: str | None = None
    authorization_seq: int | None = None
    follow_up_seq: int | None = None
    authorization: Authorization | None = field(default=None, repr=False, compare=False)

    def as_state(self) -> dict[str, Any]:
        """A JSON-friendly dict for graph state (``result`` as given)."""
        d = asdict(self)
        d.pop("authorization", None)
        return d


def _attempt_id(request_id: str, ticket_id: str, config: Mapping[str, Any] | None) -> str:
    """Stable for a re-run of the same task in the same run (a retried node asks again and is
    told the same grant, with the same idempotency key), new for any other task or run (a fork,
    a replay or a later run cannot reuse a used ticket)."""
    try:
        ctx = current_context(config)
    except (HitlLedgerError, RuntimeError):  # outside a graph: a fresh attempt
        return f"attempt-{uuid.uuid4()}"
    basis = {
        "request_id": request_id,
        "run_id": ctx.run_id,
        "task_ns": ctx.task_ns,
        "thread_id": ctx.thread_id,
        "ticket_id": ticket_id,
    }
    return "lg-attempt-" + sha256_hex(canonicalize(basis))[:40]


def execute_approved(
    client: LedgerClient,
    approval: Approval | Mapping[str, Any],
    side_effect: Callable[..., Any],
    *,
    action: dict[str, Any] | None = None,
    attempt_id: str | None = None,
    record_outcome: bool = True,
    raise_on_deny: bool = False,
    config: Mapping[str, Any] | None = None,
) -> GateOutcome:
    """Authorize, then call ``side_effect(args, idempotency_key=KEY)`` only on a grant.

    ``action`` is what will actually execute (default: the approval's action). It is serialized
    once: the ledger checks exactly those bytes, and the side effect receives a fresh copy of
    them, so nothing can change between the check and the call. On a denial the side effect is
    not called and the outcome carries the code (or :class:`AuthorizationDenied` is raised with
    ``raise_on_deny``). A connection error propagates: nothing executes.

    With ``record_outcome`` a ``follow_up`` records ``succeeded`` (with the result's
    ``operation_id`` when it is a mapping that has one) or ``failed`` after the call.

    A request closed without an approval (:attr:`Approval.outcome` ``rejected``, ``timed_out``
    or ``revoked``) never reaches the side effect: the outcome's code is
    :data:`CLOSED_CODES` of it. A rejection still asks ``authorize`` with its ticket, so the
    ledger records the host's attempt and answers the denial (its code is reported, e.g.
    ``approval_rejected``); a timeout or a revocation has no ticket to present.

    **A paused tool** (spec section 7.4: the ledger answers ``code: "tool_paused"``, ``"route":
    "manual_operator"``) raises :class:`~hitl_ledger.errors.ToolPaused` (a subclass of
    :class:`~hitl_ledger.errors.AuthorizationDenied`), whatever ``raise_on_deny`` says: the side
    effect is not called, nothing is retried, and the host hands the action (the exception's
    ``action`` and ``request_id``, the recorded ``authorization``) to a manual operator. The
    ticket is not used: once a later policy unpauses the tool, the same approval grants if it
    is still valid. (A rejected request of a paused tool is reported as rejected, never as
    paused: there is nothing to hand on.)

    An approval without a ticket (a partial approval has none) raises
    :class:`~hitl_ledger.errors.InvalidResume` before anything is asked.
    """
    approval = Approval.from_state(approval)
    if not approval.approved:
        return _closed_outcome(client, approval, raise_on_deny=raise_on_deny,
                               attempt_id=attempt_id, config=config)
    if not isinstance(approval.ticket_id, str) or not approval.ticket_id:
        raise InvalidResume(
            f"the approval of {approval.request_id} carries no ticket (a partial approval "
            "issues none): nothing to authorize"
        )
    to_run = approval.action if action is None else action
    validate_action(to_run)
    frozen = canonicalize(to_run)  # the exact bytes authorized and executed
    attempt = attempt_id or _attempt_id(approval.request_id, approval.ticket_id, config)
    try:
        ctx: GraphContext | None = current_context(config)
    except (HitlLedgerError, RuntimeError):  # outside a graph
        ctx = None
    auth = client.authorize(
        approval.request_id,
        ticket_id=approval.ticket_id,
        action=json.loads(frozen),
        attempt_id=attempt,
        run_id=ctx.run_id if ctx else None,
        checkpoint_id=ctx.checkpoint_id if ctx else None,
    )
    base = dict(
        request_id=approval.request_id,
        attempt_id=attempt,
        granted=auth.granted,
        code=auth.code,
        idempotency_key=auth.idempotency_key,
        would_deny=auth.would_deny,
        authorization_seq=auth.seq,
        authorization=auth,
    )
    if auth.paused:
        # Not an ordinary denial: the action goes to a manual operator, and is not retried.
        raise ToolPaused(auth, request_id=approval.request_id, action=json.loads(frozen),
                         route=auth.route or "manual_operator")
    if not auth.granted or not auth.idempotency_key:
        if raise_on_deny:
            raise AuthorizationDenied(auth.code or "denied", auth)
        return GateOutcome(executed=False, **base)
    args = json.loads(frozen)["args"]
    try:
        result = side_effect(args, idempotency_key=auth.idempotency_key)
    except BaseException as e:
        if record_outcome:
            _follow_up(client, approval.request_id, attempt, auth, ctx, "failed",
                       {"error": type(e).__name__}, None, quiet=True)
        raise
    follow_up_seq = None
    if record_outcome:
        operation_id = result.get("operation_id") if isinstance(result, Mapping) else None
        follow_up_seq = _follow_up(
            client, approval.request_id, attempt, auth, ctx, "succeeded", None,
            operation_id if isinstance(operation_id, str) and operation_id else None, quiet=True,
        )
    return GateOutcome(executed=True, result=result, follow_up_seq=follow_up_seq, **base)


def _closed_outcome(
    client: LedgerClient,
    approval: Approval,
    *,
    raise_on_deny: bool,
    attempt_id: str | None,
    config: Mapping[str, Any] | None,
) -> GateOutcome:
    """:func:`execute_approved` of a request closed without an approval: never executes."""
    code = CLOSED_CODES.get(approval.outcome)
    if code is None:
        raise InvalidResume(f"unknown approval outcome {approval.outcome!r}")
    auth: Authorization | None = None
    attempt: str | None = None
    if approval.outcome == "rejected" and approval.ticket_id:
        attempt = attempt_id or _attempt_id(approval.request_id, approval.ticket_id, config)
        try:
            ctx: GraphContext | None = current_context(config)
        except (HitlLedgerError, RuntimeError):
            ctx = None
        auth = client.authorize(
            approval.request_id,
            ticket_id=approval.ticket_id,
            action=json.loads(canonicalize(approval.action)),
            attempt_id=attempt,
            run_id=ctx.run_id if ctx else None,
            checkpoint_id=ctx.checkpoint_id if ctx else None,
        )
        if not auth.paused:
            # The ledger's word (approval_rejected, or what it found). A paused tool is
            # checked first, so then it cannot say "rejected": the request's outcome stands.
            code = auth.code or code
    if raise_on_deny:
        raise AuthorizationDenied(code, auth)
    return GateOutcome(
        executed=False,
        granted=bool(auth.granted) if auth else False,
        code=code,
        request_id=approval.request_id,
        idempotency_key=None,
        attempt_id=attempt,
        would_deny=auth.would_deny if auth else None,
        authorization_seq=auth.seq if auth else None,
        authorization=auth,
    )


def _follow_up(
    client: LedgerClient,
    request_id: str,
    attempt_id: str,
    auth: Authorization,
    ctx: GraphContext | None,
    outcome: str,
    detail: Any,
    operation_id: str | None,
    *,
    quiet: bool,
) -> int | None:
    """Record what happened after a grant. The side effect already ran, so a failure to record
    it must not make the host run it again: it is reported, not raised, when ``quiet``."""
    try:
        res = client.follow_up(
            request_id,
            follow_up_id=f"{attempt_id}/{outcome}",
            follows=auth.leaf_hash,
            outcome=outcome,
            detail=detail,
            operation_id=operation_id,
            run_id=ctx.run_id if ctx else None,
            checkpoint_id=ctx.checkpoint_id if ctx else None,
        )
        return res.seq
    except HitlLedgerError as e:
        if not quiet:
            raise
        import warnings

        warnings.warn(f"hitl-ledger: could not record the follow-up of {request_id}: {e}",
                      stacklevel=3)
        return None


# ---------------------------------------------------------------------------- resume worker


@dataclass(frozen=True)
class ResumeOutcome:
    """What :class:`ResumeWorker` did with one closed request: it resumed the thread.

    - ``request_id``: the request the graph paused on (for an edit, the original request);
      ``interrupt_id``: LangGraph's id of the interrupt resumed.
    - ``kind``: ``approved``, ``edited``, ``rejected``, ``timed_out`` or ``revoked``.
    - ``seq``: the seq of the record that closed the request (for an edit, the edit decision;
      the edit's new interrupt and approval follow it, and, where the edited call needed more
      approvals, whatever closed the new request is later still).
    - ``ticket_id``: the approval's ticket (for an edit, the new request's; after a two-person
      approval, the last approval's), the rejection's ticket, or ``None``; ``new_request_id``:
      an edit's new request; ``expires_at``: when the
      approval stops being valid, or the review deadline that passed; ``reason``: the
      rejection's rationale or the revocation's reason.
    - ``result``: what ``graph.invoke`` returned, or ``None`` when it raised ``error``.
    """

    request_id: str
    thread_id: str
    kind: str
    seq: int
    interrupt_id: str
    ticket_id: str | None = None
    new_request_id: str | None = None
    expires_at: str | None = None
    reason: str | None = None
    result: Any = field(default=None, repr=False)
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        """The graph ran to its next stop without raising."""
        return self.error is None


@dataclass
class _PendingEdit:
    """An edit decision whose new interrupt and approval (same atomic write) are still to come."""

    original: str
    thread_id: str
    seq: int
    edited_digest: str | None
    interrupt: dict[str, Any] | None = None


@dataclass(frozen=True)
class _Closing:
    request_id: str
    thread_id: str
    kind: str
    seq: int
    resume: dict[str, Any]
    ticket_id: str | None = None
    new_request_id: str | None = None
    expires_at: str | None = None
    reason: str | None = None


_STATE_FORMAT = "hitl-ledger/resume-worker-state/v1"

_FAILED = object()  # a task that failed after an earlier resume


def _default_config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


@dataclass
class _Parked:
    """A closing whose thread was not paused at its request when it arrived."""

    closing: _Closing
    deadline: float


class ResumeWorker:
    """Resume LangGraph threads paused by :func:`request_approval` from the ledger's decision
    stream, exactly once per decision, with the ledger's answer only.

    ``ResumeWorker(client, graph, *, state_file, config_for=None, on_outcome=None,
    pending_grace=10.0, recheck_interval=0.5)``; drive it with :meth:`start` / :meth:`stop` (a
    background thread), :meth:`run` (the caller's thread, until an event is set) or
    :meth:`poll_once` (what the stream holds now). Each resume is reported as a
    :class:`ResumeOutcome` (answered by :meth:`poll_once`, passed to ``on_outcome``).

    It follows ``client.events(after=<last seq>)`` (give it the host's ``agent`` token: the
    stream then carries only the requests that principal opened) and, for each record that closes
    a request — an approval, an edit (the edit decision, the new request's interrupt and its
    approval, one atomic write), a rejection, a timeout, a revocation of an open request —
    resumes the thread named by the record with ``Command(resume={interrupt_id: value})``,
    ``value`` being what :func:`parse_resume` takes, built from that record only:

    - approval: ``{"outcome": "approved", "ticket_id", "expires_at"}``;
    - edit: ``{"outcome": "edited", "ticket_id", "expires_at", "request_id", "edited_action",
      "redacted"}``:
      the new request, its ticket and the edited call as the ledger stored it. Redacted values
      are stored as ``hmac-sha256:…`` placeholders; :func:`parse_resume` puts the node's own
      clear values back at those pointers, and the gate's digest check refuses the call if the
      rebuilt one is not exactly what the reviewer approved;
    - rejection: ``{"outcome": "rejected", "ticket_id", "rationale"}``;
    - timeout: ``{"outcome": "timed_out", "expires_at"}``;
    - revocation: ``{"outcome": "revoked", "reason"}``.

    Nothing in it is trusted and nothing comes from anywhere else: a grant still needs the
    ledger's ``authorize``.

    Two-person approval (spec section 7.5): on a tool that needs ``approvals_required`` > 1
    distinct approvals, every approval but the last is a *partial* approval (a ``decision``
    with ``ticket_id: null``). It does not close the request and the worker does not resume on
    it: the thread stays paused until the last approval, which carries the ticket (or until a
    rejection, the review deadline or a revocation closes the request). An edit of such a tool
    counts as the editor's approval of the edited call: when the edited call needs more, the
    worker waits for the new request's last approval and then resumes with the edit (its
    ``ticket_id`` and ``expires_at`` are that approval's); the new request's timeout or
    revocation resumes with ``timed_out`` or ``revoked``. The saved position does not pass
    such an edit until it is closed. Records of other kinds (``policy``, ``review``,
    ``refusal``, …) are read and passed over.

    The guarantee — each decision resumes its thread at most once, and exactly once unless the
    worker crashes in the middle of that resume:

    - Before resuming, it reads ``graph.get_state(config)`` and resumes only when the thread is
      paused at this request's interrupt (an interrupt of :func:`request_approval` whose
      ``request_id`` is the record's) and that task has not failed. A thread already resumed (by
      this worker before a crash, or by a console) is not paused there any more and is left
      alone.
    - A thread that is not paused there yet (the ledger's interrupt is appended before LangGraph
      writes its checkpoint, so a quick decision can overtake it) is checked again every
      ``recheck_interval`` seconds for ``pending_grace`` seconds, then given up and logged: that
      is also what happens to requests of the same principal that this graph did not open.
    - It saves its position in ``state_file`` after each resume, only once the resume returned,
      atomically (a temporary file, ``fsync``, ``rename``, ``fsync`` of the folder). The saved
      seq never passes a closing still waiting (above) or an edit whose three records have not
      all arrived. A restarted worker continues after it; a crash between a resume and the save
      re-reads that record, and the check above finds the thread no longer paused there.
    - A crash *during* ``graph.invoke`` (the node re-ran, its checkpoint not yet written) leaves
      the thread paused, so the restarted worker resumes it again. The resume's ``run_id`` is
      derived from the decision (unless ``config_for`` sets one), so :func:`execute_approved`
      presents the same attempt and the ledger answers the same grant with the same idempotency
      key: the side effect may be called a second time, always with that key, which is what the
      target system deduplicates on. Any other attempt on a used ticket is denied.
    - The stream yields every record once, in order, across reconnects and server restarts (see
      :meth:`~hitl_ledger.LedgerClient.events`).

    The graph needs a checkpointer that the worker's process shares with the process that ran
    the graph (a durable one, e.g. LangGraph's SQLite or Postgres saver, for the restart
    guarantee to hold across processes). When ``graph.invoke`` raises, the outcome carries the
    error and the worker moves on (it never resumes a decision twice); the thread keeps its
    LangGraph state for the host to deal with. ``config_for(thread_id)`` gives the LangGraph
    config of a thread (default ``{"configurable": {"thread_id": thread_id}}``); ``on_outcome``
    is called with each :class:`ResumeOutcome` after the state is saved (an exception it raises
    is logged). Use one state file per worker and per ledger (the file records the ledger's
    origin and refuses another).
    """

    def __init__(
        self,
        client: LedgerClient,
        graph: Any,
        *,
        state_file: str | os.PathLike[str],
        config_for: Callable[[str], dict[str, Any]] | None = None,
        on_outcome: Callable[[ResumeOutcome], None] | None = None,
        pending_grace: float = 10.0,
        recheck_interval: float = 0.5,
    ) -> None:
        if pending_grace < 0 or recheck_interval <= 0:
            raise ValueError("pending_grace is >= 0 and recheck_interval > 0 seconds")
        self.client = client
        self.graph = graph
        self.state_file = os.fspath(state_file)
        self.config_for = config_for or _default_config
        self.on_outcome = on_outcome
        self.pending_grace = pending_grace
        self.recheck_interval = recheck_interval
        #: The error that ended the background thread of :meth:`start`, if one did.
        self.error: BaseException | None = None
        self._saved_seq, self._origin = self._load_state()
        self._safe_seq = self._saved_seq  # everything up to it is handled
        self._position: int | None = None  # the last event processed by this worker object
        self._edits: dict[str, _PendingEdit] = {}  # by the edit's new request id
        # Edits whose new request waits for more approvals (spec section 7.5), by its id.
        self._edit_waits: dict[str, _PendingEdit] = {}
        self._parked: dict[str, _Parked] = {}  # by the request the thread paused on
        self._last_recheck = 0.0
        self._collect: list[ResumeOutcome] | None = None  # poll_once's answer, while it runs
        self._busy = threading.Lock()
        self._stream_lock = threading.Lock()
        self._stream: EventStream | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"ResumeWorker({self.client!r}, last_seq={self._saved_seq})"

    @property
    def last_seq(self) -> int | None:
        """The last seq saved in ``state_file`` (``None``: nothing processed yet)."""
        return self._saved_seq

    @property
    def waiting(self) -> list[str]:
        """The requests whose closing arrived while their thread was not paused at them, still
        checked again (see the class doc)."""
        return list(self._parked)

    # ------------------------------------------------------------------ public loop API

    def start(self) -> None:
        """Follow the stream in a background thread until :meth:`stop`. An error that ends the
        thread is kept in :attr:`error` (and logged)."""
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError("the resume worker is already started")
        self._stop = threading.Event()
        self.error = None
        self._thread = threading.Thread(target=self._background, name="hitl-ledger-resume",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the background thread: the stream is closed, the resume in progress (if any)
        finishes, the state is saved. Raises ``TimeoutError`` if it has not ended in
        ``timeout`` seconds."""
        self._stop.set()
        self._close_stream()
        thread = self._thread
        if thread is None:
            return
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError(f"the resume worker did not stop within {timeout}s")
        self._thread = None

    def run(self, stop_event: threading.Event) -> None:
        """Follow the stream in the caller's thread until ``stop_event`` is set.

        Raises what ends it otherwise: :class:`~hitl_ledger.errors.EventStreamError`, a typed
        4xx error (``Unauthenticated``, ``Forbidden``), an error of ``graph.get_state``. A lost
        connection is not an error: the stream reconnects after the last event.
        """
        with self._exclusive():
            done = threading.Event()
            watcher = threading.Thread(target=self._watch, args=(stop_event, done),
                                       name="hitl-ledger-resume-stop", daemon=True)
            watcher.start()
            try:
                while not stop_event.is_set():
                    # While closings wait for their thread, the stream ends after each quiet
                    # recheck_interval so they are checked again; it then continues after
                    # the last event processed (no gap, no repeat).
                    ticking = bool(self._parked)
                    stream = self._open(self.client.events(
                        after=self._start_after(),
                        idle_timeout=self.recheck_interval if ticking else None,
                    ))
                    try:
                        for event in stream:
                            self._process(event)
                            if stop_event.is_set() or (self._parked and not ticking):
                                break
                    except LedgerConnectionError:
                        if not ticking:
                            raise
                        # The ledger cannot be reached for now: check again, then retry.
                        stop_event.wait(self.recheck_interval)
                    finally:
                        self._close_stream()
                    self._recheck(force=True)
                    self._save_progress()
            finally:
                done.set()
                watcher.join()

    def poll_once(self, timeout: float = 1.0) -> list[ResumeOutcome]:
        """Process what the stream has now: every event until none has arrived for ``timeout``
        seconds, then check the waiting closings once more; answer the outcomes of the
        resumes, in order. Raises :class:`~hitl_ledger.errors.LedgerConnectionError` if the
        ledger cannot be reached within ``timeout``."""
        with self._exclusive():
            outcomes: list[ResumeOutcome] = []
            self._collect = outcomes
            try:
                stream = self._open(self.client.events(after=self._start_after(),
                                                       idle_timeout=timeout))
                try:
                    for event in stream:
                        self._process(event)
                finally:
                    self._close_stream()
                self._recheck(force=True)
                self._save_progress()
            finally:
                self._collect = None
            return outcomes

    # ------------------------------------------------------------------ loop internals

    def _background(self) -> None:
        try:
            self.run(self._stop)
        except BaseException as e:  # noqa: BLE001 - reported on the worker, the thread ends
            self.error = e
            log.exception("hitl-ledger resume worker stopped on an error")

    def _watch(self, stop_event: threading.Event, done: threading.Event) -> None:
        # Until run() returns: once stop_event is set, close whatever stream is open (run may
        # open one more after checking the event, so this keeps closing until it is done).
        while not done.is_set():
            if stop_event.wait(0.05):
                self._close_stream()
                done.wait(0.05)

    def _exclusive(self) -> Any:
        worker = self

        class _Guard:
            def __enter__(self) -> None:
                if not worker._busy.acquire(blocking=False):
                    raise RuntimeError("the resume worker is already running")

            def __exit__(self, exc_type: object, *exc: object) -> None:
                try:
                    if exc_type is not None:
                        # Something broke mid-stream: forget what is in memory and start again
                        # from the saved-safe position, which re-reads it all.
                        worker._position = None
                        worker._edits.clear()
                        worker._edit_waits.clear()
                        worker._parked.clear()
                finally:
                    worker._busy.release()

        return _Guard()

    def _start_after(self) -> int | None:
        return self._position if self._position is not None else self._safe_seq

    def _open(self, stream: EventStream) -> EventStream:
        with self._stream_lock:
            self._stream = stream
        return stream

    def _close_stream(self) -> None:
        with self._stream_lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    def _process(self, event: Event) -> None:
        origin = event.record.get("origin")
        if self._origin is None:
            self._origin = origin
        elif origin != self._origin:
            raise HitlLedgerError(
                f"{self.state_file} holds positions in the ledger {self._origin!r}, but this "
                f"stream is the ledger {origin!r}: use one state file per ledger"
            )
        closing = self._closing(event)
        self._position = event.seq
        if closing is not None and not self._attempt(closing):
            if closing.request_id not in self._parked:
                self._parked[closing.request_id] = _Parked(
                    closing, time.monotonic() + self.pending_grace)
            log.debug("hitl-ledger resume worker: %s of %s (seq %s) waits for thread %s",
                      closing.kind, closing.request_id, closing.seq, closing.thread_id)
        self._recheck()
        self._advance()
        if closing is not None:
            self._save_progress()

    def _advance(self) -> None:
        """Move the safe seq: every record up to it is handled."""
        if self._position is None:
            return
        held = [p.seq for p in self._edits.values()]
        held += [p.seq for p in self._edit_waits.values()]
        held += [p.closing.seq for p in self._parked.values()]
        safe = min(held) - 1 if held else self._position
        if safe >= 0 and (self._safe_seq is None or safe > self._safe_seq):
            self._safe_seq = safe

    def _recheck(self, *, force: bool = False) -> None:
        """Check the waiting closings again (at most every ``recheck_interval`` unless
        ``force``); resume those whose thread is now paused, give up those past the grace."""
        if not self._parked:
            return
        now = time.monotonic()
        if not force and now - self._last_recheck < self.recheck_interval:
            return
        self._last_recheck = now
        for rid, parked in list(self._parked.items()):
            if self._attempt(parked.closing):
                self._parked.pop(rid, None)
            elif now >= parked.deadline:
                self._parked.pop(rid, None)
                c = parked.closing
                log.info(
                    "hitl-ledger resume worker: %s of request %s (seq %s) not applied: thread "
                    "%s is not paused at it (a request this graph did not open, or one already "
                    "resumed)", c.kind, c.request_id, c.seq, c.thread_id,
                )
        self._advance()
        self._save_progress()

    def _attempt(self, closing: _Closing) -> bool:
        """Resume if the thread is paused at the request; answer whether the closing is done
        with (resumed, or never to be: its task failed)."""
        config = self._config(closing)
        found = self._paused_at(config, closing.request_id)
        if found is None:
            return False
        if found is _FAILED:
            return True
        outcome = self._resume(closing, config, found)
        self._advance_past(closing)
        self._save_progress()
        if self._collect is not None:
            self._collect.append(outcome)
        if self.on_outcome is not None:
            try:
                self.on_outcome(outcome)
            except Exception:  # noqa: BLE001 - the host's callback must not stop the worker
                log.exception("hitl-ledger resume worker: on_outcome raised")
        return True

    def _advance_past(self, closing: _Closing) -> None:
        # The resumed closing no longer holds the safe seq back (it may be parked, and an
        # edit's pending entry is already gone).
        self._parked.pop(closing.request_id, None)
        self._advance()

    def _config(self, closing: _Closing) -> dict[str, Any]:
        config = copy.deepcopy(self.config_for(closing.thread_id))
        conf = config.setdefault("configurable", {})
        conf.setdefault("thread_id", closing.thread_id)
        if not conf.get("run_id"):
            # Stable per decision: a resume repeated after a crash in the middle of the first
            # presents the same attempt to authorize, and is told the same grant.
            basis = {"origin": self._origin, "request_id": closing.request_id,
                     "seq": closing.seq}
            conf["run_id"] = "resume-" + sha256_hex(canonicalize(basis))[:32]
        return config

    def _closing(self, event: Event) -> _Closing | None:
        """The closing of a request that ``event`` completes, if any."""
        kind, body, rid, thread = event.kind, event.body, event.request_id, event.thread_id
        decision = body.get("decision") if kind == "decision" else None
        # A partial approval (spec section 7.5: ticket_id null) counts and issues nothing: the
        # request stays open, and only its last approval, which carries the ticket, closes it.
        partial = event.partial
        for new_rid, pending in list(self._edits.items()):
            # The ledger writes an edit as three consecutive records (the edit decision, the new
            # request's interrupt, its approval) in one atomic write, all of them visible to
            # whoever sees the first: anything else is a broken stream, never silently waited on.
            step = event.seq - pending.seq
            if step == 1 and kind == "interrupt" and rid == new_rid \
                    and body.get("edit_of") == pending.original:
                pending.interrupt = event.record
                return None
            if step == 2 and pending.interrupt is not None and decision == "approve" \
                    and rid == new_rid:
                del self._edits[new_rid]
                if partial:
                    # The edited tool needs more approvals: the edit waits for the new
                    # request's last approval (or its rejection, timeout or revocation).
                    self._edit_waits[new_rid] = pending
                    return None
                return self._edit_closing(pending, new_rid, event)
            raise EventStreamError(
                f"the edit of {pending.original} (seq {pending.seq}) is not followed by the "
                f"new request {new_rid}'s interrupt and approval (seq {event.seq} is a "
                f"{kind or 'record'} of {rid!r})",
                event_id=str(event.seq), after=pending.seq,
            )
        if rid is None or thread is None:
            return None
        waiting = self._edit_waits.get(rid)
        if waiting is not None:
            return self._edit_wait_closing(waiting, rid, event)
        if decision == "edit":
            new = body.get("superseded_by")
            if not isinstance(new, str) or not new:
                raise EventStreamError(f"the edit decision at seq {event.seq} names no new "
                                       "request", event_id=str(event.seq), after=None)
            self._edits[new] = _PendingEdit(
                original=rid, thread_id=thread, seq=event.seq,
                edited_digest=body.get("edited_digest"),
            )
            return None
        if kind == "interrupt":
            return None
        if decision == "approve":
            if partial:
                return None
            return _Closing(
                request_id=rid, thread_id=thread, kind="approved", seq=event.seq,
                resume={"outcome": "approved", "ticket_id": body.get("ticket_id"),
                        "expires_at": body.get("expires_at")},
                ticket_id=body.get("ticket_id"), expires_at=body.get("expires_at"),
            )
        if kind == "rejection":
            return _Closing(
                request_id=rid, thread_id=thread, kind="rejected", seq=event.seq,
                resume={"outcome": "rejected", "ticket_id": body.get("ticket_id"),
                        "rationale": body.get("rationale")},
                ticket_id=body.get("ticket_id"), reason=body.get("rationale"),
            )
        if kind == "timeout":
            return _Closing(
                request_id=rid, thread_id=thread, kind="timed_out", seq=event.seq,
                resume={"outcome": "timed_out", "expires_at": body.get("expires_at")},
                expires_at=body.get("expires_at"),
            )
        if kind == "revocation":
            return _Closing(
                request_id=rid, thread_id=thread, kind="revoked", seq=event.seq,
                resume={"outcome": "revoked", "reason": body.get("reason")},
                reason=body.get("reason"),
            )
        return None

    def _edit_closing(self, pending: _PendingEdit, new_rid: str, approval: Event) -> _Closing:
        intr = pending.interrupt or {}
        ibody = intr.get("body") or {}
        digest = ibody.get("action_digest")
        if pending.edited_digest is not None and digest != pending.edited_digest:
            raise EventStreamError(
                f"the edit of {pending.original} binds {pending.edited_digest}, but its new "
                f"request {new_rid} holds {digest}",
                event_id=str(intr.get("seq")), after=pending.seq,
            )
        ticket = approval.body.get("ticket_id")
        resume: dict[str, Any] = {
            "outcome": "edited",
            "ticket_id": ticket,
            "request_id": new_rid,
            "edited_action": {"tool": ibody.get("tool"), "args": ibody.get("args")},
            "expires_at": approval.body.get("expires_at"),
        }
        if ibody.get("redacted"):
            resume["redacted"] = list(ibody["redacted"])
        return _Closing(
            request_id=pending.original, thread_id=pending.thread_id, kind="edited",
            seq=pending.seq, resume=resume, ticket_id=ticket, new_request_id=new_rid,
            expires_at=approval.body.get("expires_at"), reason=None,
        )

    def _edit_wait_closing(self, pending: _PendingEdit, new_rid: str,
                           event: Event) -> _Closing | None:
        """What a record of an edit's new request that waits for more approvals does: its last
        approval (or a break-glass approval) closes the edit (the graph resumes with the edited
        call and that ticket); its timeout or revocation closes the original's pause with that
        outcome; a partial approval and any other record change nothing. (The new request
        allows only ``approve``, spec section 7.3; a rejection of it, were one recorded, closes
        the pause as rejected, and the gate denies its ticket on the original.)"""
        kind, body = event.kind, event.body
        if kind == "decision" and body.get("decision") == "approve":
            if event.partial:
                return None
            del self._edit_waits[new_rid]
            return self._edit_closing(pending, new_rid, event)
        if kind not in ("rejection", "timeout", "revocation"):
            return None
        del self._edit_waits[new_rid]
        common = dict(request_id=pending.original, thread_id=pending.thread_id,
                      seq=pending.seq, new_request_id=new_rid)
        if kind == "rejection":
            return _Closing(kind="rejected",
                            resume={"outcome": "rejected", "ticket_id": body.get("ticket_id"),
                                    "rationale": body.get("rationale")},
                            ticket_id=body.get("ticket_id"), reason=body.get("rationale"),
                            **common)
        if kind == "timeout":
            return _Closing(kind="timed_out",
                            resume={"outcome": "timed_out", "expires_at": body.get("expires_at")},
                            expires_at=body.get("expires_at"), **common)
        return _Closing(kind="revoked", resume={"outcome": "revoked", "reason": body.get("reason")},
                        reason=body.get("reason"), **common)

    def _paused_at(self, config: dict[str, Any], request_id: str) -> Any:
        """LangGraph's pending interrupt of ``request_id`` in the thread, ``_FAILED`` when its
        task failed after an earlier resume, or ``None``."""
        snapshot = self.graph.get_state(config)
        for task in getattr(snapshot, "tasks", ()) or ():
            for intr in getattr(task, "interrupts", ()) or ():
                value = getattr(intr, "value", None)
                if (
                    isinstance(value, Mapping)
                    and value.get("type") == APPROVAL_INTERRUPT_TYPE
                    and value.get("request_id") == request_id
                ):
                    if getattr(task, "error", None) is not None:
                        log.warning(
                            "hitl-ledger resume worker: request %s in thread %s failed after "
                            "an earlier resume (%s); not resumed again",
                            request_id, config.get("configurable", {}).get("thread_id"),
                            task.error,
                        )
                        return _FAILED
                    return intr
        return None

    def _resume(self, closing: _Closing, config: dict[str, Any], intr: Any) -> ResumeOutcome:
        from langgraph.types import Command

        result: Any = None
        error: BaseException | None = None
        try:
            result = self.graph.invoke(Command(resume={intr.id: closing.resume}), config)
        except Exception as e:  # noqa: BLE001 - reported in the outcome, never resumed twice
            error = e
            log.warning(
                "hitl-ledger resume worker: resuming thread %s with the %s of %s raised %s",
                closing.thread_id, closing.kind, closing.request_id, type(e).__name__,
                exc_info=True,
            )
        return ResumeOutcome(
            request_id=closing.request_id, thread_id=closing.thread_id, kind=closing.kind,
            seq=closing.seq, interrupt_id=intr.id, ticket_id=closing.ticket_id,
            new_request_id=closing.new_request_id, expires_at=closing.expires_at,
            reason=closing.reason, result=result, error=error,
        )

    # ------------------------------------------------------------------ state file

    def _load_state(self) -> tuple[int | None, str | None]:
        try:
            with open(self.state_file, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None, None
        try:
            state = json.loads(raw)
            if state.get("format") != _STATE_FORMAT:
                raise ValueError(f"format {state.get('format')!r}")
            seq, origin = state["last_seq"], state.get("origin")
            if seq is not None and (type(seq) is not int or seq < 0):
                raise ValueError(f"last_seq {seq!r}")
            if origin is not None and not isinstance(origin, str):
                raise ValueError(f"origin {origin!r}")
        except (ValueError, KeyError, AttributeError) as e:
            raise HitlLedgerError(
                f"the resume worker's state file {self.state_file} is not one it wrote: {e}"
            ) from e
        return seq, origin

    def _save_progress(self) -> None:
        seq = self._safe_seq
        if seq is None or (self._saved_seq is not None and seq <= self._saved_seq):
            return
        self._write_state(seq)
        self._saved_seq = seq

    def _write_state(self, seq: int) -> None:
        """Replace the state file atomically and durably (temp file, fsync, rename, fsync dir)."""
        path = os.path.abspath(self.state_file)
        folder = os.path.dirname(path)
        data = json.dumps(
            {"format": _STATE_FORMAT, "last_seq": seq, "origin": self._origin},
            sort_keys=True,
        ).encode() + b"\n"
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                                   dir=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        try:
            dir_fd = os.open(folder, os.O_RDONLY)
        except OSError:  # pragma: no cover - a platform without directory handles
            return
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
