"""langchain v1 ``HumanInTheLoopMiddleware`` decisions recorded as ledger decisions, and a real
``create_agent`` agent gated by the ledger (scripted chat model, real server)."""

from __future__ import annotations

import uuid

import pytest
from hitl_ledger import digest
from hitl_ledger.errors import UnsupportedDecision
from hitl_ledger.langchain_hitl import (
    LedgerHumanInTheLoopMiddleware,
    actions_from_hitl_request,
    current_idempotency_key,
    ledger_allowed_decisions,
    record_hitl_decision,
    record_hitl_response,
    to_ledger_decision,
)
from hitl_ledger.langgraph import resume_command, run_config

# ------------------------------------------------------------------ the mapping (no server)


def test_mapping_of_documented_decisions():
    assert to_ledger_decision({"type": "approve"}) == {"decision": "approve"}
    assert to_ledger_decision(
        {"type": "edit", "edited_action": {"name": "refund", "args": {"amount_cents": 1}}}
    ) == {"decision": "edit", "edited_action": {"tool": "refund", "args": {"amount_cents": 1}}}
    assert to_ledger_decision({"type": "reject", "message": "no"}) == {
        "decision": "reject", "rationale": "no"}
    assert to_ledger_decision({"type": "reject"}, default_reject_rationale="declined") == {
        "decision": "reject", "rationale": "declined"}


@pytest.mark.parametrize("decision", [
    {"type": "respond", "message": "the answer is 42"},
    {"type": "reject"},
    {"type": "reject", "message": "   "},
    {"type": "approve", "reviewer": "alice"},
    {"type": "approve", "approved": True},
    {"type": "edit", "edited_action": {"tool": "refund", "args": {}}},
    {"type": "edit", "edited_action": {"name": "refund", "args": []}},
    {"type": "edit"},
    {"type": "maybe"},
    "approve",
])
def test_mapping_refuses(decision):
    with pytest.raises(UnsupportedDecision):
        to_ledger_decision(decision)


def test_types_match_the_installed_middleware():
    """The mapping follows the decision types langchain actually defines."""
    from typing import get_args

    from langchain.agents.middleware import human_in_the_loop as hitl

    assert set(get_args(hitl.DecisionType)) == {"approve", "edit", "reject", "respond"}
    assert set(hitl.EditDecision.__annotations__) == {"type", "edited_action"}
    assert set(hitl.Action.__annotations__) == {"name", "args"}
    assert set(hitl.RejectDecision.__annotations__) == {"type", "message"}
    assert set(hitl.ApproveDecision.__annotations__) == {"type"}


def test_batched_helpers():
    request = {"action_requests": [{"name": "refund", "args": {"a": 1}, "description": "d"}],
               "review_configs": [{"action_name": "refund", "allowed_decisions": ["approve"]}]}
    assert actions_from_hitl_request(request) == [{"tool": "refund", "args": {"a": 1}}]
    assert ledger_allowed_decisions(["respond", "reject", "approve"]) == ["approve", "reject"]
    with pytest.raises(UnsupportedDecision):
        ledger_allowed_decisions(["respond"])


# ------------------------------------------------------------------ against the server


def test_console_records_hitl_decisions(ledger):
    rids = []
    for _ in range(3):
        rid = f"hitl-{uuid.uuid4().hex[:10]}"
        ledger.agent.append_interrupt(
            request_id=rid, thread_id=f"t-{rid}", interrupt_id="i", run_id="run-1",
            action={"tool": "refund", "args": {"order_id": "O-1", "amount_cents": 10}})
        rids.append(rid)
    approve, edit, reject = record_hitl_response(ledger.reviewer, rids, {"decisions": [
        {"type": "approve"},
        {"type": "edit", "edited_action": {"name": "refund",
                                           "args": {"order_id": "O-1", "amount_cents": 5}}},
        {"type": "reject", "message": "duplicate claim"},
    ]})
    assert approve.record["kind"] == "decision" and approve.body["decision"] == "approve"
    assert edit.body["decision"] == "edit" and edit.new_request_id
    assert edit.body["edited_digest"] == digest.action_digest(
        {"tool": "refund", "args": {"order_id": "O-1", "amount_cents": 5}})
    assert reject.record["kind"] == "rejection"
    assert reject.body["rationale"] == "duplicate claim"
    for res in (approve, edit, reject):
        assert res.record["actor"] == {"principal": "py-reviewer", "role": "reviewer"}
    # Sent again, the same decisions are duplicates; a mismatched batch records nothing.
    assert record_hitl_decision(ledger.reviewer, rids[0], {"type": "approve"}).duplicate
    with pytest.raises(UnsupportedDecision):
        record_hitl_response(ledger.reviewer, rids, {"decisions": [{"type": "approve"}]})


def _agent(ledger, calls, tool_calls):
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver

    class ScriptedModel(GenericFakeChatModel):
        def bind_tools(self, tools, **kwargs):
            return self

    @tool
    def refund(order_id: str, amount_cents: int) -> str:
        """Refund an order."""
        calls.append({"order_id": order_id, "amount_cents": amount_cents,
                      "key": current_idempotency_key()})
        return f"refunded {amount_cents}"

    script = iter([AIMessage(content="", tool_calls=tool_calls), AIMessage(content="done")])
    return create_agent(
        ScriptedModel(messages=script),
        tools=[refund],
        middleware=[LedgerHumanInTheLoopMiddleware(ledger.agent, interrupt_on={"refund": True})],
        checkpointer=InMemorySaver(),
    )


CALL = {"name": "refund", "args": {"order_id": "O-7", "amount_cents": 900}, "id": "call-1"}


def _pause(agent, thread):
    out = agent.invoke({"messages": [{"role": "user", "content": "refund O-7"}]},
                       run_config(thread), version="v2")
    assert len(out.interrupts) == 1
    return out.interrupts[0]


@pytest.mark.parametrize("decision,executed,content", [
    ({"type": "approve"}, [900], "refunded 900"),
    ({"type": "edit", "edited_action": {"name": "refund",
                                        "args": {"order_id": "O-7", "amount_cents": 400}}},
     [400], "refunded 400"),
    ({"type": "reject", "message": "fraud suspected"}, [], "approval_rejected"),
])
def test_agent_gated_by_the_ledger(ledger, decision, executed, content):
    calls: list = []
    agent = _agent(ledger, calls, [CALL])
    thread = f"agent-{uuid.uuid4().hex[:10]}"
    intr = _pause(agent, thread)
    value = intr.value
    assert value["tool"] == "refund" and value["tool_call_id"] == "call-1"
    assert calls == []
    result = record_hitl_decision(ledger.reviewer, value["request_id"], decision)
    out = agent.invoke(resume_command(result, interrupt_id=intr.id), run_config(thread),
                       version="v2")
    assert [c["amount_cents"] for c in calls] == executed
    tool_messages = [m for m in out.value["messages"] if m.type == "tool"]
    assert len(tool_messages) == 1 and content in tool_messages[0].content
    records = ledger.auditor.thread_records(thread)
    if executed:
        granted_rid = result.new_request_id or value["request_id"]
        assert calls[0]["key"] == digest.idempotency_key("hitl-ledger.test/python", granted_rid)
        assert [r["kind"] for r in records][-2:] == ["authorization", "follow_up"]
    else:
        assert [r["kind"] for r in records] == ["interrupt", "rejection", "authorization"]
        assert records[-1]["body"]["granted"] is False


def test_agent_with_two_gated_calls(ledger):
    calls: list = []
    second = {"name": "refund", "args": {"order_id": "O-8", "amount_cents": 50}, "id": "call-2"}
    agent = _agent(ledger, calls, [CALL, second])
    thread = f"agent2-{uuid.uuid4().hex[:10]}"
    out = agent.invoke({"messages": [{"role": "user", "content": "two refunds"}]},
                       run_config(thread), version="v2")
    assert len(out.interrupts) == 2
    answers = {}
    for intr in out.interrupts:
        if intr.value["args"]["order_id"] == "O-7":
            res = record_hitl_decision(ledger.reviewer, intr.value["request_id"],
                                       {"type": "approve"})
        else:
            res = record_hitl_decision(ledger.reviewer, intr.value["request_id"],
                                       {"type": "reject", "message": "no"})
        answers[intr.id] = resume_command(res).resume
    from langgraph.types import Command

    agent.invoke(Command(resume=answers), run_config(thread), version="v2")
    assert [c["order_id"] for c in calls] == ["O-7"]
    interrupts = [r for r in ledger.auditor.thread_records(thread) if r["kind"] == "interrupt"]
    assert sorted(r["body"]["interrupt_id"] for r in interrupts) == sorted(
        i.id for i in out.interrupts)
