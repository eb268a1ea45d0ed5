"""Governance against the real server (spec sections 7.4-7.6 and 12), through the client and the
LangGraph helpers: the policy in force and its changes, two-person approval (a partial approval
never resumes a graph), approvers per tool, a paused tool (``ToolPaused``, the tool never
called, routed to a manual operator), break-glass and its post-event review."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any, TypedDict

import pytest
from conftest import ORIGIN, PRINCIPALS, TokenSpec
from hitl_ledger import LedgerClient, ToolPaused, digest, errors
from hitl_ledger.langgraph import (
    Approval,
    ResumeWorker,
    execute_approved,
    request_approval,
    resume_value,
    run_config,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

LEDGER_POLICY = {
    "default": {"review_window_seconds": 3600, "approval_ttl_seconds": 600},
    "tools": {
        # Four eyes, by two of the named reviewers or a member of the treasury group.
        "payout": {"approvers": ["py-reviewer", "py-reviewer-2", "group:treasury"],
                   "approvals_required": 2},
        # Paused from the start: interrupts and decisions go on, authorize denies.
        "locked_refund": {"mode": "paused"},
        "reactor_scram": {"break_glass": True},
    },
}

LEDGER_TOKENS = (
    TokenSpec("treasurer", "py-treasurer", "reviewer", groups=("treasury",)),
    TokenSpec("outsider", "py-outsider", "reviewer"),
    # The break-glass operator's principal also holds a reviewer token: it may not review its
    # own emergency grant.
    TokenSpec("bg_reviewer", PRINCIPALS["break_glass"], "reviewer"),
)

PAYOUT = {"tool": "payout", "args": {"payee": "ACME-7", "amount_cents": 125_000}}


# ------------------------------------------------------------------ helpers


class GovState(TypedDict, total=False):
    tool: str
    args: dict
    approval: dict
    outcome: dict


def build_graph(agent: LedgerClient, side_effect: Any):
    """review (the ledger interrupt, then pause) → execute (authorize, then the side effect)."""

    def review(state: GovState) -> dict:
        approval = request_approval(agent, {"tool": state["tool"], "args": state["args"]})
        return {"approval": approval.as_state()}

    def execute(state: GovState) -> dict:
        approval = Approval.from_state(state["approval"])
        if not approval.approved:
            return {"outcome": {"executed": False, "status": approval.outcome}}
        gate = execute_approved(agent, approval, side_effect)
        return {"outcome": {"executed": gate.executed, "code": gate.code,
                            "status": approval.outcome}}

    builder = StateGraph(GovState)
    builder.add_node("review", review)
    builder.add_node("execute", execute)
    builder.add_edge(START, "review")
    builder.add_edge("review", "execute")
    builder.add_edge("execute", END)
    return builder.compile(checkpointer=InMemorySaver())


class Counting:
    """The graph, counting the worker's ``invoke`` calls."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.invokes = 0

    def get_state(self, config):
        return self.graph.get_state(config)

    def invoke(self, value, config):
        self.invokes += 1
        return self.graph.invoke(value, config)


class Flow:
    """One paused thread of :func:`build_graph` and a resume worker positioned after every
    record the ledger held when it was made."""

    def __init__(self, ledger, executor, tmp_path, action: dict) -> None:
        self.ledger = ledger
        self.graph = Counting(build_graph(ledger.agent, executor))
        self.thread = f"gov-{uuid.uuid4().hex[:10]}"
        self.state_file = tmp_path / f"worker-{self.thread}.json"
        size = int(ledger.auditor.checkpoint().split("\n")[1])
        self.state_file.write_text(json.dumps({"format": "hitl-ledger/resume-worker-state/v1",
                                               "last_seq": size - 1, "origin": ORIGIN}))
        self.worker = ResumeWorker(ledger.agent, self.graph, state_file=self.state_file,
                                   pending_grace=0.0)
        self.graph.graph.invoke(dict(action), run_config(self.thread))
        (intr,) = self.graph.graph.get_state(run_config(self.thread)).interrupts
        self.request_id: str = intr.value["request_id"]

    def poll(self):
        return [o for o in self.worker.poll_once(0.5) if o.thread_id == self.thread]

    def paused_at(self) -> list[str]:
        state = self.graph.graph.get_state(run_config(self.thread))
        return [i.value["request_id"] for i in state.interrupts]

    def values(self) -> dict:
        return self.graph.graph.get_state(run_config(self.thread)).values

    def kinds(self) -> list[str]:
        return [r["kind"] for r in self.ledger.auditor.thread_records(self.thread)]


def flow_for(ledger, executor, tmp_path, action=PAYOUT) -> Flow:
    return Flow(ledger, executor, tmp_path, {"tool": action["tool"], "args": action["args"]})


def size(ledger) -> int:
    return int(ledger.auditor.checkpoint().split("\n")[1])


def put_tool(ledger, tool: str, entry: dict | None):
    """Record the policy in force with ``tool``'s entry replaced (``None``: removed)."""
    doc = copy.deepcopy(ledger.auditor.policy().policy)
    tools = doc.setdefault("tools", {})
    if entry is None:
        tools.pop(tool, None)
    else:
        tools[tool] = entry
    return ledger.admin.set_policy(doc)


def refusals(ledger, request_id: str) -> list[str]:
    return [r["body"]["error"] for r in ledger.auditor.get_request(request_id).of_kind("refusal")]


def open_request(agent: LedgerClient, action: dict) -> str:
    rid = f"gov-{uuid.uuid4().hex[:12]}"
    agent.append_interrupt(request_id=rid, thread_id=f"t-{rid}", interrupt_id="i",
                           action=action)
    return rid


# ------------------------------------------------------------------ the policy in force


def test_the_policy_in_force_is_a_record_and_its_history_says_who(ledger):
    history = ledger.auditor.policy_history()
    # init recorded its policy.json at seq 0 (as the system); the test's policy was recorded
    # with `hitl-ledger policy set` (as the local admin) before the server started.
    assert [h.seq for h in history[:2]] == [0, 1]
    assert history[0].actor == {"principal": "hitl-ledger", "role": "system"}
    assert history[1].actor["role"] == "admin"
    assert history[1].actor["principal"].startswith("local:")
    assert history[1].policy == LEDGER_POLICY
    for h in history:
        assert h.record["kind"] == "policy" and h.record["request_id"] is None
        assert h.record["thread_id"] == "hitl-ledger/policy"
        assert h.policy_digest == "sha256:" + digest.sha256_hex(digest.canonicalize(h.policy))
        assert digest.leaf_hash(digest.record_leaf(h.record)) == h.leaf_hash
    # Reviewers, auditors and admins read the policy in force (the last policy record); an
    # agent or break-glass token does not: the one document names every tenant's tools and
    # approvers.
    for role in ("agent", "break_glass"):
        with pytest.raises(errors.Forbidden):
            ledger.clients[role].policy()
    for role in ("reviewer", "auditor", "admin"):
        now = ledger.clients[role].policy()
        assert now.seq == history[-1].seq and now.leaf_hash == history[-1].leaf_hash
        assert now.policy == history[-1].policy
        assert now.record == history[-1].record
        assert now.policy_digest == history[-1].policy_digest


def test_set_policy_is_admin_only_validated_and_recorded(ledger):
    before = ledger.auditor.policy()
    doc = copy.deepcopy(before.policy)
    doc["tools"]["gov_note"] = {"approval_ttl_seconds": 120}
    written = ledger.admin.set_policy(doc)
    assert written.status == 201 and not written.duplicate
    assert written.record["kind"] == "policy"
    assert written.record["actor"] == {"principal": "py-admin", "role": "admin"}
    assert written.body["policy"] == doc
    assert written.body["policy_digest"] == "sha256:" + digest.sha256_hex(
        digest.canonicalize(doc))
    now = ledger.reviewer.policy()
    assert (now.seq, now.leaf_hash, now.policy) == (written.seq, written.leaf_hash, doc)
    assert ledger.auditor.policy_history()[-1].seq == written.seq
    # The document in force again: its record, nothing written.
    again = ledger.admin.set_policy(doc)
    assert again.duplicate and again.status == 200 and again.seq == written.seq
    # Another role: 403 forbidden, recorded as a refusal; the policy unchanged.
    n = size(ledger)
    for role in ("reviewer", "agent", "auditor", "break_glass"):
        with pytest.raises(errors.Forbidden) as info:
            ledger.clients[role].set_policy(LEDGER_POLICY)
        assert info.value.code == "forbidden" and info.value.status == 403
    refused = ledger.auditor.thread_records("hitl-ledger/refusals")[-4:]
    assert [(r["body"]["method"], r["body"]["path"], r["body"]["error"]) for r in refused] == [
        ("PUT", "/v1/policy", "forbidden")] * 4
    assert size(ledger) == n + 4
    # An invalid document: 400 invalid_policy, nothing written.
    n = size(ledger)
    for bad in (
        {"tools": {"payout": {"approvers": ["py-reviewer"], "approvals_required": 2}}},
        {"tools": {"payout": {"approvals_required": 0}}},
        {"default": {"mode": "sometimes"}},
        {"default": {"approval_ttl_seconds": 0}},
        {"tools": {"payout": {"approvers": []}}},
        {"tools": {"payout": {"approvers": ["py-reviewer", "py-reviewer"]}}},
        {"rules": []},
    ):
        with pytest.raises(errors.InvalidPolicy) as info:
            ledger.admin.set_policy(bad)
        assert info.value.code == "invalid_policy" and info.value.status == 400
    assert size(ledger) == n
    assert ledger.auditor.policy().seq == written.seq
    put_tool(ledger, "gov_note", None)


def test_policy_records_on_the_stream_reach_unscoped_tokens_only(ledger):
    first = list(ledger.auditor.events(idle_timeout=1.0))
    assert [(e.seq, e.kind, e.request_id) for e in first[:2]] == [
        (0, "policy", None), (1, "policy", None)]
    assert first[1].body["policy"] == LEDGER_POLICY
    assert not first[0].partial
    policy_seqs = {h.seq for h in ledger.auditor.policy_history()}
    assert policy_seqs <= {e.seq for e in first}
    agent_seen = list(ledger.agent.events(idle_timeout=1.0))
    assert all(e.kind != "policy" for e in agent_seen)
    assert policy_seqs.isdisjoint({e.seq for e in agent_seen})


# ------------------------------------------------------------------ two-person approval


def test_two_person_approval_resumes_only_on_the_last_approval(ledger, executor, tmp_path):
    flow = flow_for(ledger, executor, tmp_path)
    rid = flow.request_id
    first = ledger.reviewer.approve(rid, "payee verified")
    assert first.partial and first.status == 201
    assert (first.ticket_id, first.expires_at) == (None, None)
    assert (first.approvals, first.approvals_required) == (1, 2)
    assert first.body["ticket_id"] is None and first.body["approved_as"] == "py-reviewer"
    with pytest.raises(errors.InvalidResume, match="partial approval"):
        resume_value(first)
    # The worker sees the partial approval and does not resume: still paused, nothing ran.
    assert flow.poll() == []
    assert flow.graph.invokes == 0 and flow.paused_at() == [rid] and executor.calls == []
    state = ledger.reviewer.get_request(rid)
    assert state.state == "open"
    assert state.approvals == [{"principal": "py-reviewer", "seq": first.seq}]
    assert state.approvals_required == 2
    assert rid in [p["request_id"] for p in ledger.reviewer.pending()]
    # The same approval again is its duplicate; the same reviewer with other content is refused
    # (recorded), and so is a reviewer outside the approvers.
    again = ledger.reviewer.approve(rid, "payee verified")
    assert again.duplicate and again.partial and again.seq == first.seq
    with pytest.raises(errors.ApproverAlreadyApproved) as info:
        ledger.reviewer.approve(rid, "approving once more")
    assert info.value.status == 403 and isinstance(info.value, errors.Forbidden)
    with pytest.raises(errors.ApproverNotAllowed):
        ledger.clients["outsider"].approve(rid)
    assert refusals(ledger, rid) == ["approver_already_approved", "approver_not_allowed"]
    assert flow.poll() == [] and flow.paused_at() == [rid] and executor.calls == []
    # The second distinct approver's approval carries the ticket: the worker resumes, the gate
    # grants, the payout runs once.
    final = ledger.clients["reviewer2"].approve(rid)
    assert not final.partial and final.ticket_id and final.expires_at
    assert (final.approvals, final.approvals_required) == (2, 2)
    (outcome,) = flow.poll()
    assert (outcome.kind, outcome.request_id, outcome.ticket_id, outcome.seq) == (
        "approved", rid, final.ticket_id, final.seq)
    assert outcome.ok and flow.graph.invokes == 1
    assert executor.calls == [{"args": PAYOUT["args"],
                               "idempotency_key": digest.idempotency_key(ORIGIN, rid)}]
    assert flow.values()["outcome"] == {"executed": True, "code": None, "status": "approved"}
    assert [a["principal"] for a in ledger.reviewer.get_request(rid).approvals] == [
        "py-reviewer", "py-reviewer-2"]
    assert flow.kinds() == ["interrupt", "decision", "refusal", "refusal", "decision",
                            "authorization", "follow_up"]
    # On the stream the first decision is partial and the last is not.
    decisions = [e for e in ledger.agent.events(after=first.seq - 1, idle_timeout=0.5)
                 if e.request_id == rid and e.kind == "decision"]
    assert [e.partial for e in decisions] == [True, False]
    assert flow.poll() == [] and len(executor.calls) == 1


def test_group_approvers_and_the_requester_cannot_approve(ledger):
    rid = open_request(ledger.agent, PAYOUT)
    first = ledger.clients["treasurer"].approve(rid)
    assert first.partial and first.body["approved_as"] == "group:treasury"
    final = ledger.reviewer.approve(rid)
    assert final.ticket_id and final.body["approved_as"] == "py-reviewer"
    # The principal that opened a request never decides it (an admin may open and decide).
    mine = open_request(ledger.admin, PAYOUT)
    with pytest.raises(errors.ApproverIsRequester):
        ledger.admin.approve(mine)
    with pytest.raises(errors.ApproverIsRequester):
        ledger.admin.reject(mine, "my own request")
    assert refusals(ledger, mine) == ["approver_is_requester"] * 2
    assert ledger.reviewer.get_request(mine).state == "open"


def test_a_rejection_after_a_partial_approval_closes_the_request(ledger, executor, tmp_path):
    flow = flow_for(ledger, executor, tmp_path)
    rid = flow.request_id
    assert ledger.reviewer.approve(rid).partial
    assert flow.poll() == []
    # A reviewer who approved may still reject.
    rejection = ledger.reviewer.reject(rid, "payee flagged by compliance")
    (outcome,) = flow.poll()
    assert (outcome.kind, outcome.reason, outcome.ticket_id) == (
        "rejected", "payee flagged by compliance", rejection.ticket_id)
    assert flow.values()["outcome"] == {"executed": False, "status": "rejected"}
    assert executor.calls == []
    assert ledger.reviewer.get_request(rid).state == "rejected"
    with pytest.raises(errors.Conflict):
        ledger.clients["reviewer2"].approve(rid)


def test_an_edit_of_a_two_person_tool_waits_for_the_new_requests_last_approval(
        ledger, executor, tmp_path):
    flow = flow_for(ledger, executor, tmp_path)
    rid = flow.request_id
    edited = {"tool": "payout", "args": {"payee": "ACME-7", "amount_cents": 100_000}}
    edit = ledger.reviewer.edit(rid, edited, "cap the payout")
    assert edit.new_request_id and edit.partial and edit.ticket_id is None
    assert (edit.approvals, edit.approvals_required) == (1, 2)
    with pytest.raises(errors.InvalidResume):
        resume_value(edit)
    # The editor's approval counts: the worker waits, the editor cannot approve again.
    assert flow.poll() == [] and flow.paused_at() == [rid] and executor.calls == []
    with pytest.raises(errors.ApproverAlreadyApproved):
        ledger.reviewer.approve(edit.new_request_id, "and again")
    final = ledger.clients["reviewer2"].approve(edit.new_request_id)
    assert final.ticket_id and not final.partial
    (outcome,) = flow.poll()
    assert (outcome.kind, outcome.request_id, outcome.new_request_id, outcome.ticket_id) == (
        "edited", rid, edit.new_request_id, final.ticket_id)
    assert outcome.expires_at == final.expires_at and outcome.seq == edit.seq
    assert executor.calls == [{
        "args": edited["args"],
        "idempotency_key": digest.idempotency_key(ORIGIN, edit.new_request_id)}]
    assert flow.values()["outcome"]["status"] == "edited"
    # Its position passed the edit only once it was closed, and nothing resumes twice.
    assert flow.worker.last_seq >= final.seq
    assert flow.poll() == [] and len(executor.calls) == 1


# ------------------------------------------------------------------ a paused tool


def test_a_paused_tool_raises_tool_paused_and_never_runs_then_grants_once_unpaused(
        ledger, executor, tmp_path):
    action = {"tool": "vault_release", "args": {"vault": "V-3", "units": 4}}
    flow = flow_for(ledger, executor, tmp_path, action)
    rid = flow.request_id
    decision = ledger.reviewer.approve(rid, "release approved")
    assert decision.ticket_id
    paused = put_tool(ledger, "vault_release", {"mode": "paused"})
    assert paused.body["policy"]["tools"]["vault_release"] == {"mode": "paused"}
    # The worker resumes; the node's authorize is told tool_paused: the tool is not called,
    # the run ends with ToolPaused, and the worker does not resume it again.
    (outcome,) = flow.poll()
    assert outcome.kind == "approved" and outcome.ticket_id == decision.ticket_id
    err = outcome.error
    assert isinstance(err, ToolPaused) and isinstance(err, errors.AuthorizationDenied)
    assert (err.code, err.route, err.request_id, err.action) == (
        "tool_paused", "manual_operator", rid, action)
    auth = err.authorization
    assert auth.paused and not auth.granted and auth.code == "tool_paused"
    assert auth.route == "manual_operator" and auth.idempotency_key is None
    assert auth.record["kind"] == "authorization"
    assert auth.body["mode"] == "enforce" and auth.body["expires_at"] is None
    assert executor.calls == []
    assert flow.poll() == [] and flow.graph.invokes == 1 and executor.calls == []
    assert flow.kinds() == ["interrupt", "decision", "authorization"]  # asked once, no retry
    approval = Approval(request_id=rid, ticket_id=decision.ticket_id, action=action,
                        original_request_id=rid)
    # Raised whatever raise_on_deny says, and each ask is one recorded denial.
    with pytest.raises(ToolPaused):
        execute_approved(ledger.agent, approval, executor, raise_on_deny=False)
    assert executor.calls == []
    # Unpaused by another policy record: the ticket was never used and is still valid.
    put_tool(ledger, "vault_release", None)
    gate = execute_approved(ledger.agent, approval, executor)
    assert gate.executed and gate.granted and gate.code is None
    assert executor.calls == [{"args": action["args"],
                               "idempotency_key": digest.idempotency_key(ORIGIN, rid)}]
    assert flow.kinds() == ["interrupt", "decision", "authorization", "authorization",
                            "authorization", "follow_up"]
    # Used now: a later attempt is an ordinary denial, not a pause.
    again = execute_approved(ledger.agent, approval, executor)
    assert not again.executed and again.code == "approval_already_used"


def test_a_paused_tools_authorize_answer_and_decisions(ledger):
    action = {"tool": "locked_refund", "args": {"order_id": "O-3"}}
    rid = open_request(ledger.agent, action)
    # Interrupts and decisions go on while a tool is paused.
    decision = ledger.reviewer.approve(rid)
    assert decision.ticket_id
    auth = ledger.agent.authorize(rid, ticket_id=decision.ticket_id, action=action,
                                  attempt_id="a-1")
    assert (auth.granted, auth.code, auth.route, auth.paused) == (
        False, "tool_paused", "manual_operator", True)
    assert auth.raw["route"] == "manual_operator" and auth.would_deny is None
    # Also a request still awaiting its decision, and a rejected one, say tool_paused.
    pending = open_request(ledger.agent, action)
    early = ledger.agent.authorize(pending, ticket_id=decision.ticket_id, action=action)
    assert early.paused
    rejected = open_request(ledger.agent, action)
    rejection = ledger.reviewer.reject(rejected, "no")
    approval = Approval(request_id=rejected, ticket_id=rejection.ticket_id, action=action,
                        original_request_id=rejected, outcome="rejected", reason="no")
    calls: list = []
    # A rejected request is reported as rejected, never routed to a manual operator.
    gate = execute_approved(ledger.agent, approval, lambda a, idempotency_key: calls.append(a))
    assert not gate.executed and gate.code == "approval_rejected" and calls == []
    assert gate.authorization is not None and gate.authorization.paused


def test_the_ledger_gated_agent_does_not_run_a_paused_tool(ledger):
    from hitl_ledger.langchain_hitl import (
        LedgerHumanInTheLoopMiddleware,
        record_hitl_decision,
    )
    from hitl_ledger.langgraph import resume_command
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    calls: list = []

    class ScriptedModel(GenericFakeChatModel):
        def bind_tools(self, tools, **kwargs):
            return self

    @tool
    def locked_refund(order_id: str) -> str:
        """Refund an order (paused by the policy)."""
        calls.append(order_id)
        return "refunded"

    call = {"name": "locked_refund", "args": {"order_id": "O-11"}, "id": "call-9"}
    agent = create_agent(
        ScriptedModel(messages=iter([AIMessage(content="", tool_calls=[call]),
                                     AIMessage(content="done")])),
        tools=[locked_refund],
        middleware=[LedgerHumanInTheLoopMiddleware(ledger.agent,
                                                   interrupt_on={"locked_refund": True})],
        checkpointer=InMemorySaver(),
    )
    thread = f"gov-agent-{uuid.uuid4().hex[:10]}"
    out = agent.invoke({"messages": [{"role": "user", "content": "refund O-11"}]},
                       run_config(thread), version="v2")
    (intr,) = out.interrupts
    result = record_hitl_decision(ledger.reviewer, intr.value["request_id"], {"type": "approve"})
    with pytest.raises(ToolPaused) as info:
        agent.invoke(resume_command(result, interrupt_id=intr.id), run_config(thread),
                     version="v2")
    assert calls == []
    assert info.value.request_id == intr.value["request_id"]
    assert info.value.action == {"tool": "locked_refund", "args": {"order_id": "O-11"}}
    assert [r["kind"] for r in ledger.auditor.thread_records(thread)] == [
        "interrupt", "decision", "authorization"]


# ------------------------------------------------------------------ break-glass


def test_break_glass_grants_one_action_and_waits_for_its_review(ledger, executor, tmp_path):
    action = {"tool": "reactor_scram", "args": {"reactor": "R-2"}}
    flow = flow_for(ledger, executor, tmp_path, action)
    rid = flow.request_id
    reason = "core temperature alarm, no reviewer reachable"
    # Not a break_glass token: refused, recorded, nothing granted.
    for role in ("agent", "reviewer", "admin"):
        with pytest.raises(errors.Forbidden) as info:
            ledger.clients[role].break_glass(rid, action, reason)
        assert info.value.code == "forbidden"
    other = {"tool": "reactor_scram", "args": {"reactor": "R-9"}}
    with pytest.raises(errors.BreakGlassActionMismatch):
        ledger.break_glass.break_glass(rid, other, reason)
    with pytest.raises(errors.MissingField):  # no reason: refused, not recorded
        ledger.break_glass.request("POST", f"/v1/requests/{rid}/break-glass",
                                   {"action": action}, idempotent=True)
    assert refusals(ledger, rid) == ["forbidden"] * 3 + ["break_glass_action_mismatch"]
    # A tool whose policy does not allow it.
    no_bg = open_request(ledger.agent, PAYOUT)
    with pytest.raises(errors.BreakGlassNotAllowed):
        ledger.break_glass.break_glass(no_bg, PAYOUT, reason)
    assert refusals(ledger, no_bg) == ["break_glass_not_allowed"]
    assert flow.poll() == [] and executor.calls == []
    # The break-glass operator's grant: one decision marked break_glass, with a ticket.
    bg = ledger.break_glass.break_glass(rid, action, reason)
    assert bg.status == 201 and bg.break_glass and not bg.partial and bg.ticket_id
    assert bg.record["actor"] == {"principal": PRINCIPALS["break_glass"], "role": "break_glass"}
    assert bg.body["reason"] == reason and bg.body["rationale"] is None
    again = ledger.break_glass.break_glass(rid, action, reason)
    assert again.duplicate and again.ticket_id == bg.ticket_id and again.seq == bg.seq
    # The worker resumes with it and the gate grants, once.
    (outcome,) = flow.poll()
    assert (outcome.kind, outcome.ticket_id) == ("approved", bg.ticket_id) and outcome.ok
    assert executor.calls == [{"args": action["args"],
                               "idempotency_key": digest.idempotency_key(ORIGIN, rid)}]
    # The post-event review queue holds it until another reviewer reviews it.
    queue = {u.request_id: u for u in ledger.reviewer.break_glass_reviews()}
    use = queue[rid]
    assert (use.seq, use.leaf_hash, use.reason, use.actor) == (
        bg.seq, bg.leaf_hash, reason, bg.record["actor"])
    assert use.record == bg.record
    assert rid in {u.request_id for u in ledger.auditor.break_glass_reviews()}
    with pytest.raises(errors.Forbidden):
        ledger.agent.break_glass_reviews()
    with pytest.raises(errors.ReviewerIsBreakGlassUser):
        ledger.clients["bg_reviewer"].review(rid, "acknowledged", "it was me")
    with pytest.raises(errors.InvalidRequest):
        ledger.reviewer.review(rid, "fine", "not a verdict")
    with pytest.raises(errors.NoBreakGlass):
        ledger.reviewer.review(no_bg, "acknowledged", "nothing to review")
    review = ledger.reviewer.review(rid, "acknowledged", "alarm confirmed by the logs")
    assert review.status == 201 and review.record["kind"] == "review"
    assert review.body == {"reviews": bg.leaf_hash, "verdict": "acknowledged",
                           "rationale": "alarm confirmed by the logs"}
    assert rid not in {u.request_id for u in ledger.reviewer.break_glass_reviews()}
    assert ledger.reviewer.review(rid, "acknowledged", "alarm confirmed by the logs").duplicate
    with pytest.raises(errors.IdempotencyConflict):
        ledger.clients["reviewer2"].review(rid, "disputed", "should have waited")
    assert refusals(ledger, rid)[-1] == "reviewer_is_break_glass_user"
    # The review reaches every reader of the stream, and the worker passes over it.
    kinds = [e.kind for e in ledger.reviewer.events(after=bg.seq - 1, idle_timeout=0.5)
             if e.request_id == rid]
    assert "review" in kinds
    assert [e.kind for e in ledger.agent.events(after=bg.seq - 1, idle_timeout=0.5)
            if e.request_id == rid][-1] == "review"
    assert flow.poll() == [] and len(executor.calls) == 1
