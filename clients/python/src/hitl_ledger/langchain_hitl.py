"""Integration with langchain v1's ``HumanInTheLoopMiddleware`` decision format.

Reviewers' consoles built for ``HumanInTheLoopMiddleware`` speak its decision dicts::

    {"type": "approve"}
    {"type": "edit", "edited_action": {"name": TOOL, "args": {...}}}
    {"type": "reject", "message": "why"}          # message optional in langchain
    {"type": "respond", "message": "..."}          # no ledger counterpart: refused

Console side: :func:`record_hitl_decision` posts such a decision to the ledger with the
*reviewer's* token (the ledger records the token's principal, never a claim of the payload) and
answers the ledger's :class:`~hitl_ledger.client.DecisionResult`; resume the agent with
:func:`hitl_ledger.langgraph.resume_command` of that result (only the ticket, or the ledger's
answer to an edit). :func:`record_hitl_response` does the same for a batched ``HITLResponse``.

Agent side: :class:`LedgerHumanInTheLoopMiddleware` gates tool calls like the middleware's
``per_call`` mode, with the ledger in the loop: before pausing it appends the interrupt, on
resume it takes only a ticket, and it calls ``authorize`` immediately before the tool runs; the
tool runs only on a grant (it can read the grant's idempotency key with
:func:`current_idempotency_key`). A denial becomes an error ``ToolMessage`` naming the code. A
paused tool (the ledger's ``tool_paused``, route ``manual_operator``) is not a denial to show
the model: :class:`~hitl_ledger.errors.ToolPaused` propagates out of the agent's run (the tool
is not run, nothing is retried), for the host to hand the action to a manual operator.

On a tool that needs several distinct approvals (spec section 7.5), a reviewer's approval may
be partial (:attr:`~hitl_ledger.client.DecisionResult.partial`: no ticket yet): there is then
nothing to resume with, and ``resume_command`` of it raises
:class:`~hitl_ledger.errors.InvalidResume`; resume with the last approval's answer.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .client import DecisionResult, LedgerClient
from .errors import UnsupportedDecision

__all__ = [
    "to_ledger_decision",
    "record_hitl_decision",
    "record_hitl_response",
    "actions_from_hitl_request",
    "ledger_allowed_decisions",
    "current_idempotency_key",
    "LedgerHumanInTheLoopMiddleware",  # noqa: F822 - built on first access (__getattr__)
]

_LEDGER_DECISIONS = ("approve", "edit", "reject")


def to_ledger_decision(
    decision: Mapping[str, Any], *, default_reject_rationale: str | None = None
) -> dict[str, Any]:
    """Map one ``HumanInTheLoopMiddleware`` decision dict to a ledger decision body.

    - ``approve`` → ``{"decision": "approve"}``
    - ``edit`` with ``edited_action: {"name", "args"}`` → ``{"decision": "edit",
      "edited_action": {"tool": name, "args": args}}``
    - ``reject`` with ``message`` → ``{"decision": "reject", "rationale": message}``; the ledger
      requires a non-blank rationale, so a reject without one takes
      ``default_reject_rationale`` or is refused.
    - ``respond`` (and anything else) raises :class:`UnsupportedDecision`: the ledger has no
      decision "a human answered for the tool".

    Fields the decision type does not define are refused rather than dropped, so a console
    cannot smuggle a reviewer name or an approval flag past this mapping.
    """
    if not isinstance(decision, Mapping):
        raise UnsupportedDecision(f"a decision is a dict, not {type(decision).__name__}")
    kind = decision.get("type")
    allowed_keys = {"approve": {"type"}, "edit": {"type", "edited_action"},
                    "reject": {"type", "message"}}.get(kind)  # type: ignore[arg-type]
    if allowed_keys is None:
        raise UnsupportedDecision(
            f"decision type {kind!r} has no ledger counterpart (use approve, edit or reject)"
        )
    extra = set(decision) - allowed_keys
    if extra:
        raise UnsupportedDecision(f"{kind} decision has unexpected fields: {sorted(extra)}")
    if kind == "approve":
        return {"decision": "approve"}
    if kind == "edit":
        edited = decision.get("edited_action")
        if (
            not isinstance(edited, Mapping)
            or set(edited) != {"name", "args"}
            or not isinstance(edited.get("name"), str)
            or not isinstance(edited.get("args"), Mapping)
        ):
            raise UnsupportedDecision('an edit carries edited_action: {"name": TOOL, "args": {}}')
        return {
            "decision": "edit",
            "edited_action": {"tool": edited["name"], "args": dict(edited["args"])},
        }
    message = decision.get("message")
    rationale = message if isinstance(message, str) and message.strip() else None
    if rationale is None:
        rationale = default_reject_rationale
    if rationale is None or not rationale.strip():
        raise UnsupportedDecision(
            "the ledger records a rejection only with a rationale: send a message"
        )
    return {"decision": "reject", "rationale": rationale}


def record_hitl_decision(
    reviewer: LedgerClient,
    request_id: str,
    decision: Mapping[str, Any],
    *,
    rationale: str | None = None,
    default_reject_rationale: str | None = None,
) -> DecisionResult:
    """Post a ``HumanInTheLoopMiddleware`` decision as the ledger decision of ``request_id``.

    ``reviewer`` must hold the reviewer's own token. ``rationale`` is added to an approve or an
    edit (langchain's decisions carry none). Answers the ledger's result: resume with
    ``resume_command(result)`` unless ``result.partial`` (an approval that more reviewers must
    join before a ticket is issued: wait for the last one).
    """
    body = to_ledger_decision(decision, default_reject_rationale=default_reject_rationale)
    if body["decision"] != "reject" and rationale is not None:
        body["rationale"] = rationale
    return reviewer.decide(
        request_id,
        body["decision"],
        rationale=body.get("rationale"),
        edited_action=body.get("edited_action"),
    )


def record_hitl_response(
    reviewer: LedgerClient,
    request_ids: Sequence[str],
    response: Mapping[str, Any],
    *,
    default_reject_rationale: str | None = None,
) -> list[DecisionResult]:
    """Post a batched ``HITLResponse`` (``{"decisions": [...]}``), matched to ``request_ids``
    by position as the middleware matches decisions to action requests.

    Every decision is mapped first, so an unsupported one records nothing at all.
    """
    decisions = response.get("decisions") if isinstance(response, Mapping) else None
    if not isinstance(decisions, list) or len(decisions) != len(request_ids):
        raise UnsupportedDecision(
            f"expected {len(request_ids)} decisions, got "
            f"{len(decisions) if isinstance(decisions, list) else decisions!r}"
        )
    bodies = [to_ledger_decision(d, default_reject_rationale=default_reject_rationale)
              for d in decisions]
    return [
        reviewer.decide(rid, b["decision"], rationale=b.get("rationale"),
                        edited_action=b.get("edited_action"))
        for rid, b in zip(request_ids, bodies, strict=True)
    ]


def actions_from_hitl_request(hitl_request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ledger actions of a ``HITLRequest``'s ``action_requests`` (``name`` → ``tool``)."""
    return [
        {"tool": a["name"], "args": dict(a["args"])}
        for a in hitl_request.get("action_requests", [])
    ]


def ledger_allowed_decisions(allowed: Sequence[str]) -> list[str]:
    """The middleware's ``allowed_decisions`` that the ledger knows (``respond`` dropped)."""
    out = sorted({d for d in allowed if d in _LEDGER_DECISIONS})
    if not out:
        raise UnsupportedDecision(f"none of {list(allowed)} is a ledger decision")
    return out


_IDEMPOTENCY_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "hitl_ledger_idempotency_key", default=None
)


def current_idempotency_key() -> str | None:
    """Inside a tool run by :class:`LedgerHumanInTheLoopMiddleware`: the grant's key."""
    return _IDEMPOTENCY_KEY.get()


def _build_middleware_class() -> type:
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.messages import ToolMessage

    from .langgraph import execute_approved, request_approval

    class LedgerHumanInTheLoopMiddleware(AgentMiddleware):  # type: ignore[misc]
        """Gate tool calls with a ledger-backed human review (see the module doc).

        ``interrupt_on`` maps tool names to ``True`` (approve, edit, reject) or a dict with
        ``allowed_decisions`` and optionally ``redact`` (JSON Pointers into the args) and
        ``review_ttl_seconds``. Tools not named run without review.

        When the ledger answers that the tool is paused, the tool is not called and
        :class:`~hitl_ledger.errors.ToolPaused` (with the ``request_id``, the ``action`` and
        the recorded ``authorization``) propagates out of the agent's run: route the action
        to a manual operator. Any other denial is returned to the model as an error
        ``ToolMessage``.
        """

        def __init__(
            self,
            client: LedgerClient,
            interrupt_on: Mapping[str, bool | Mapping[str, Any]],
            *,
            description_prefix: str = "Tool execution requires approval",
        ) -> None:
            super().__init__()
            self.client = client
            self.description_prefix = description_prefix
            self.interrupt_on: dict[str, dict[str, Any]] = {}
            for name, cfg in interrupt_on.items():
                if cfg is True:
                    self.interrupt_on[name] = {"allowed_decisions": list(_LEDGER_DECISIONS)}
                elif isinstance(cfg, Mapping):
                    if not cfg.get("allowed_decisions"):
                        raise ValueError(f"{name}: allowed_decisions must be a non-empty list")
                    self.interrupt_on[name] = dict(cfg)

        def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            call = request.tool_call
            cfg = self.interrupt_on.get(call["name"])
            if cfg is None:
                return handler(request)
            action = {"tool": call["name"], "args": dict(call["args"])}
            approval = request_approval(
                self.client,
                action,
                redact=cfg.get("redact"),
                allowed_decisions=ledger_allowed_decisions(cfg["allowed_decisions"]),
                review_ttl_seconds=cfg.get("review_ttl_seconds"),
                description=f"{self.description_prefix}\n\nTool: {call['name']}",
                extra_value={"tool_call_id": call.get("id")},
            )
            if approval.action["tool"] != call["name"]:
                return ToolMessage(
                    content=f"Not executed: the reviewer's edit names another tool "
                    f"({approval.action['tool']!r}).",
                    name=call["name"],
                    tool_call_id=call["id"],
                    status="error",
                )

            def run(args: dict[str, Any], *, idempotency_key: str) -> Any:
                token = _IDEMPOTENCY_KEY.set(idempotency_key)
                try:
                    return handler(request.override(tool_call={**call, "args": args}))
                finally:
                    _IDEMPOTENCY_KEY.reset(token)

            outcome = execute_approved(self.client, approval, run, record_outcome=True)
            if not outcome.executed:
                return ToolMessage(
                    content=f"Not executed: the approval ledger denied this call "
                    f"({outcome.code}).",
                    name=call["name"],
                    tool_call_id=call["id"],
                    status="error",
                )
            return outcome.result

    LedgerHumanInTheLoopMiddleware.__module__ = __name__
    LedgerHumanInTheLoopMiddleware.__qualname__ = "LedgerHumanInTheLoopMiddleware"
    return LedgerHumanInTheLoopMiddleware


def __getattr__(name: str) -> Any:
    if name == "LedgerHumanInTheLoopMiddleware":
        cls = _build_middleware_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)
