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
- The console posts the reviewer's decision with the reviewer's own token and resumes the graph
  with :func:`resume_command`: only the ticket id (for an edit, the ledger's answer to the edit).
  Nothing in the resume value is trusted: a grant needs the ledger's ``authorize``.
- :func:`execute_approved` calls ``authorize`` immediately before the side effect and calls the
  side effect only on a grant, with the grant's idempotency key. A denial, an unreachable
  ledger or any error means the side effect is not called.

Records carry the graph's ``thread_id``, ``run_id``, ``checkpoint_ns`` and ``checkpoint_id``:
pass a fresh ``run_id`` per invocation in ``config["configurable"]`` (see :func:`run_config`).
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .client import Authorization, DecisionResult, LedgerClient
from .digest import canonicalize, sha256_hex, validate_action
from .errors import (
    AuthorizationDenied,
    HitlLedgerError,
    InterruptIdMismatch,
    InvalidResume,
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
    "APPROVAL_INTERRUPT_TYPE",
]

#: ``value["type"]`` of the interrupts :func:`request_approval` raises.
APPROVAL_INTERRUPT_TYPE = "hitl_ledger_approval"

_RESUME_KEYS = frozenset({"ticket_id", "request_id", "edited_action"})


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


@dataclass(frozen=True)
class Approval:
    """What a node holds after resume: the request, the ticket, and the action to execute under
    it (the original, or the reviewer's edited call bound to the edit's new request).

    Not a grant: only :func:`execute_approved` (the ledger's ``authorize``) decides.
    """

    request_id: str
    ticket_id: str
    action: dict[str, Any]
    original_request_id: str
    edited: bool = False

    def as_state(self) -> dict[str, Any]:
        """A plain dict for graph state (checkpointers serialize it as JSON)."""
        return asdict(self)

    @classmethod
    def from_state(cls, value: Mapping[str, Any] | Approval) -> Approval:
        if isinstance(value, Approval):
            return value
        return cls(**dict(value))


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

    Raises :class:`~hitl_ledger.errors.InvalidResume` when resumed with anything but a ticket
    (see :func:`resume_value`), and :class:`~hitl_ledger.errors.LedgerConnectionError` when the
    ledger cannot be reached (the graph then stops before pausing, and nothing is approved).
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

    Give the ticket id of the decision (approve or reject), or the ledger's
    :class:`~hitl_ledger.client.DecisionResult` of it: for an edit, that carries the new request
    id, its ticket and the edited action, all as the ledger answered the reviewer's edit. Never
    build it from what a browser claims (reviewer, approval flag, action details).
    """
    if isinstance(ticket, DecisionResult):
        if ticket.ticket_id is None:
            raise InvalidResume("the decision answer carries no ticket_id")
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


def parse_resume(value: Any, *, request_id: str, action: dict[str, Any]) -> Approval:
    """Check a resume value and turn it into an :class:`Approval` for ``request_id``.

    Accepts a bare ticket id string or ``{"ticket_id"}``; for an edit, also ``request_id`` and
    ``edited_action`` (the gate checks the edited action's digest against what the reviewer
    approved, so these need not be trusted). Anything else is refused.
    """
    if isinstance(value, str):
        value = {"ticket_id": value}
    if not isinstance(value, Mapping):
        raise InvalidResume(f"resume value is not a ticket: {type(value).__name__}")
    extra = set(value) - _RESUME_KEYS
    if extra:
        raise InvalidResume(
            f"resume value has fields the ledger does not take from a resume: {sorted(extra)}"
        )
    ticket_id = value.get("ticket_id")
    if not isinstance(ticket_id, str) or not ticket_id:
        raise InvalidResume("resume value lacks a ticket_id")
    new_rid = value.get("request_id")
    edited = value.get("edited_action")
    if (new_rid is None) != (edited is None):
        raise InvalidResume("an edit's resume carries both request_id and edited_action")
    if new_rid is None:
        return Approval(
            request_id=request_id,
            ticket_id=ticket_id,
            action=copy.deepcopy(action),
            original_request_id=request_id,
        )
    if not isinstance(new_rid, str) or not new_rid or new_rid == request_id:
        raise InvalidResume("an edit's request_id is the new request the ledger created")
    try:
        validate_action(edited)
    except ValueError as e:
        raise InvalidResume(f"edited_action: {e}") from e
    return Approval(
        request_id=new_rid,
        ticket_id=ticket_id,
        action=copy.deepcopy(edited),
        original_request_id=request_id,
        edited=True,
    )


# ---------------------------------------------------------------------------- execution


@dataclass(frozen=True)
class GateOutcome:
    """What :func:`execute_approved` did: whether the side effect ran, and the ledger's answer."""

    executed: bool
    granted: bool
    code: str | None
    request_id: str
    idempotency_key: str | None
    attempt_id: str
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
    """
    approval = Approval.from_state(approval)
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
