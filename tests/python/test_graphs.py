"""Real LangGraph graphs (the examples' builders) against the real server binary.

Each test asserts first on the side effect that must not happen (the executor's calls), then on
the code and records that name the reason.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from hitl_ledger import digest
from hitl_ledger.errors import Conflict
from hitl_ledger.langgraph import (
    Approval,
    derive_request_id,
    execute_approved,
    resume_command,
    run_config,
)
from langgraph.checkpoint.memory import InMemorySaver
from refund_graph import build_refund_graph
from wire_transfer_graph import INVOICE, build_wire_graph

REFUND = {"order_id": "O-19", "amount_cents": 2500}
ENVELOPE = ("v", "origin", "seq", "prev", "ts", "kind", "thread_id", "run_id", "checkpoint_ns",
            "checkpoint_id", "request_id", "thread_seq", "thread_prev", "actor", "body")


def new_thread(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def pause(graph, thread: str, state: dict, run_id: str | None = None) -> dict:
    """Invoke a fresh thread until it pauses; answer the ledger interrupt's value."""
    out = graph.invoke(state, run_config(thread, run_id=run_id), version="v2")
    assert len(out.interrupts) == 1, out
    value = out.interrupts[0].value
    value["_langgraph_interrupt_id"] = out.interrupts[0].id
    return value


def records(ledger, thread: str) -> list[dict]:
    return ledger.auditor.thread_records(thread)


def kinds(recs: list[dict]) -> list[str]:
    return [r["kind"] for r in recs]


def test_interrupt_is_appended_before_pausing_with_the_graph_ids(ledger, executor):
    graph = build_refund_graph(ledger.agent, executor)
    thread = new_thread("ids")
    run_id = str(uuid.uuid4())
    req = pause(graph, thread, REFUND, run_id=run_id)
    [rec] = records(ledger, thread)
    assert rec["kind"] == "interrupt" and rec["request_id"] == req["request_id"]
    # The record names LangGraph's own interrupt id, and the request id derives from it.
    assert rec["body"]["interrupt_id"] == req["_langgraph_interrupt_id"]
    assert rec["request_id"] == derive_request_id(thread, req["_langgraph_interrupt_id"])
    assert rec["run_id"] == run_id
    assert rec["checkpoint_ns"] == ""
    snapshot = graph.get_state(run_config(thread))
    history = list(graph.get_state_history(run_config(thread)))
    paused_at = [s for s in history if s.next == ("review",)][0]
    assert rec["checkpoint_id"] == paused_at.config["configurable"]["checkpoint_id"]
    assert snapshot.next == ("review",)
    # The client's JCS agrees with the server's on a real record: same leaf hash.
    assert digest.leaf_hash(digest.record_leaf(rec)) == req["leaf_hash"]
    # The action digest of an unredacted call is recomputable by anyone.
    assert rec["body"]["action_digest"] == digest.action_digest(
        {"tool": "refund", "args": REFUND})
    assert executor.calls == []


def test_approve_executes_once_with_the_idempotency_key(ledger, executor):
    graph = build_refund_graph(ledger.agent, executor)
    thread = new_thread("approve")
    req = pause(graph, thread, REFUND)
    result = ledger.reviewer.approve(req["request_id"], "customer verified")
    out = graph.invoke(resume_command(result), run_config(thread))
    assert executor.calls == [{
        "args": REFUND,
        "idempotency_key": digest.idempotency_key("hitl-ledger.test/python", req["request_id"]),
    }]
    assert out["outcome"]["executed"] and out["outcome"]["code"] is None
    recs = records(ledger, thread)
    # The node re-ran on resume: its second interrupt append was a duplicate, writing nothing.
    assert kinds(recs) == ["interrupt", "decision", "authorization", "follow_up"]
    assert recs[1]["actor"] == {"principal": "py-reviewer", "role": "reviewer"}
    assert recs[3]["body"]["operation_id"] == "op-1"
    assert recs[3]["body"]["follows"] == digest.leaf_hash(digest.record_leaf(recs[2]))


def test_expired_approval_never_reaches_the_executor(ledger, executor):
    # Policy: refund_fast approvals live 1 second.
    graph = build_refund_graph(ledger.agent, executor, tool="refund_fast")
    thread = new_thread("expired")
    req = pause(graph, thread, REFUND)
    result = ledger.reviewer.approve(req["request_id"], "ok")
    time.sleep(1.3)
    out = graph.invoke(resume_command(result), run_config(thread))
    assert executor.calls == []
    assert out["outcome"]["executed"] is False
    assert out["outcome"]["code"] == "approval_expired"
    auth = [r for r in records(ledger, thread) if r["kind"] == "authorization"]
    assert len(auth) == 1
    body = auth[0]["body"]
    assert (body["granted"], body["code"], body["idempotency_key"]) == (
        False, "approval_expired", None)
    assert body["evaluated_at"] >= body["expires_at"] == result.expires_at
    assert ledger.reviewer.get_request(req["request_id"]).state == "approved"


def test_changed_action_after_review_is_denied(ledger, executor):
    def agent_changes_its_mind(state):
        return {"amount_cents": state["amount_cents"] * 40}

    graph = build_refund_graph(ledger.agent, executor, between=agent_changes_its_mind)
    thread = new_thread("changed")
    req = pause(graph, thread, REFUND)
    result = ledger.reviewer.approve(req["request_id"])
    out = graph.invoke(resume_command(result), run_config(thread))
    assert executor.calls == []
    assert out["outcome"]["code"] == "approval_action_mismatch"
    [auth] = [r for r in records(ledger, thread) if r["kind"] == "authorization"]
    assert auth["body"]["granted"] is False
    assert auth["body"]["action_digest"] == digest.action_digest(
        {"tool": "refund", "args": {"order_id": "O-19", "amount_cents": 100000}})
    # The ticket was not consumed by the denial: the approved call still goes through.
    approved = Approval(request_id=req["request_id"], ticket_id=result.ticket_id,
                        action={"tool": "refund", "args": REFUND},
                        original_request_id=req["request_id"])
    assert execute_approved(ledger.agent, approved, executor).executed
    assert [c["args"] for c in executor.calls] == [REFUND]


def test_ticket_is_single_use(ledger, executor):
    graph = build_refund_graph(ledger.agent, executor)
    thread = new_thread("single")
    req = pause(graph, thread, REFUND)
    result = ledger.reviewer.approve(req["request_id"])
    out = graph.invoke(resume_command(result), run_config(thread))
    assert out["outcome"]["executed"] and len(executor.calls) == 1
    # A second executor (another process, another graph on another thread) with the same ticket.
    second = execute_approved(ledger.agent, out["approval"], executor)
    assert len(executor.calls) == 1
    assert (second.executed, second.code) == (False, "approval_already_used")
    # Replayed from the checkpoint where it paused, LangGraph runs the review as a new task: a
    # new interrupt, hence a new request. The used ticket, presented there, is denied too.
    history = list(graph.get_state_history(run_config(thread)))
    paused_at = [s for s in history if s.next == ("review",)][-1]
    replay = graph.invoke(None, run_config(
        thread, checkpoint_id=paused_at.config["configurable"]["checkpoint_id"]), version="v2")
    assert replay.interrupts and replay.interrupts[0].value["request_id"] != req["request_id"]
    again = graph.invoke(resume_command(result), run_config(thread))
    assert len(executor.calls) == 1
    # (The new request is open, so the ledger answers approval_pending before any ticket check.)
    assert again["outcome"]["code"] == "approval_pending"
    grants = [r for r in records(ledger, thread)
              if r["kind"] == "authorization" and r["body"]["granted"]]
    assert len(grants) == 1


def test_revoked_request_is_denied_as_revoked(ledger, executor):
    graph = build_refund_graph(ledger.agent, executor)
    thread = new_thread("revoked")
    req = pause(graph, thread, REFUND)
    result = ledger.reviewer.approve(req["request_id"])
    ledger.agent.revoke(req["request_id"], "customer withdrew the claim")
    out = graph.invoke(resume_command(result), run_config(thread))
    assert executor.calls == []
    assert out["outcome"]["code"] == "approval_revoked"
    assert ledger.reviewer.get_request(req["request_id"]).state == "revoked"
    assert kinds(records(ledger, thread)) == ["interrupt", "decision", "revocation",
                                              "authorization"]


def test_rejection_resumed_twice_and_replayed_leaves_one_rejection(ledger, executor):
    graph = build_refund_graph(ledger.agent, executor)
    thread = new_thread("reject")
    run_id = str(uuid.uuid4())
    req = pause(graph, thread, REFUND, run_id=run_id)
    rejected = ledger.reviewer.reject(req["request_id"], "order already refunded")
    # The console double-submits: the same rejection is found, not written again.
    again = ledger.reviewer.reject(req["request_id"], "order already refunded")
    assert again.duplicate and again.seq == rejected.seq and again.ticket_id == rejected.ticket_id
    with pytest.raises(Conflict):
        ledger.clients["reviewer2"].approve(req["request_id"])

    first = graph.invoke(resume_command(rejected), run_config(thread))
    assert first["outcome"]["code"] == "approval_rejected"
    # Resumed a second time: nothing is pending, nothing runs.
    graph.invoke(resume_command(rejected), run_config(thread))
    # Replayed from the checkpoint where it paused: LangGraph re-runs the review as a new task,
    # so it pauses on a new request (appended under the replay's run); the rejected ticket,
    # presented there, is refused (the new request is open: approval_pending).
    history = list(graph.get_state_history(run_config(thread)))
    paused_at = [s for s in history if s.next == ("review",)][-1]
    replay_run = str(uuid.uuid4())
    replay = graph.invoke(None, run_config(
        thread, run_id=replay_run,
        checkpoint_id=paused_at.config["configurable"]["checkpoint_id"]), version="v2")
    replay_request = replay.interrupts[0].value["request_id"]
    assert replay_request != req["request_id"]
    last = graph.invoke(resume_command(rejected), run_config(thread))
    assert last["outcome"]["code"] == "approval_pending"

    assert executor.calls == []
    recs = records(ledger, thread)
    rejections = [r for r in recs if r["kind"] == "rejection"]
    assert len(rejections) == 1
    [rej] = rejections
    for key in ENVELOPE:
        assert rej[key] is not None, key
    assert rej["run_id"] == run_id and rej["checkpoint_id"] and rej["request_id"]
    assert rej["body"]["rationale"] == "order already refunded"
    assert rej["body"]["ticket_id"] == rejected.ticket_id
    assert rej["actor"] == {"principal": "py-reviewer", "role": "reviewer"}
    interrupts = [r for r in recs if r["kind"] == "interrupt"]
    assert [r["request_id"] for r in interrupts] == [req["request_id"], replay_request]
    assert interrupts[1]["run_id"] == replay_run
    assert [r["body"]["code"] for r in recs if r["kind"] == "authorization"] == [
        "approval_rejected", "approval_pending"]
    assert not any(r["body"]["granted"] for r in recs if r["kind"] == "authorization")


def test_records_outlive_the_checkpoints(ledger, executor):
    saver = InMemorySaver()
    graph = build_refund_graph(ledger.agent, executor, checkpointer=saver)
    thread = new_thread("deleted")
    first_run, second_run = str(uuid.uuid4()), str(uuid.uuid4())
    req = pause(graph, thread, REFUND, run_id=first_run)
    result = ledger.reviewer.approve(req["request_id"])
    graph.invoke(resume_command(result), run_config(thread, run_id=second_run))
    checkpoint_ids = {s.config["configurable"]["checkpoint_id"]
                      for s in graph.get_state_history(run_config(thread))}
    before = records(ledger, thread)

    saver.delete_thread(thread)
    assert list(graph.get_state_history(run_config(thread))) == []

    after = records(ledger, thread)
    assert after == before and len(after) == 4
    for rec in after:
        assert rec["thread_id"] == thread
        assert rec["run_id"] in (first_run, second_run)
        assert rec["checkpoint_id"] in checkpoint_ids
    assert after[0]["run_id"] == first_run  # the interrupt, from the first run
    assert after[2]["run_id"] == second_run  # the authorization, from the resuming run
    bundle = ledger.auditor.export_thread(thread)
    assert bundle["thread_id"] == thread and len(bundle["records"]) == 4


def test_edited_call_is_never_executed_under_the_original_approval(ledger, executor):
    graph = build_refund_graph(ledger.agent, executor)
    thread = new_thread("edit")
    req = pause(graph, thread, REFUND)
    original = {"tool": "refund", "args": REFUND}
    edited = {"tool": "refund", "args": {"order_id": "O-19", "amount_cents": 2000}}
    result = ledger.reviewer.edit(req["request_id"], edited, "partial refund")
    assert result.new_request_id and result.new_request_id != req["request_id"]
    edit_ticket = result.record["body"]["ticket_id"]  # the edit decision's own ticket

    # The original approval (the edit's ticket on the original request) never authorizes:
    # neither the original call nor the edited one.
    for action, code in ((original, "approval_superseded"), (edited, "approval_action_mismatch")):
        out = execute_approved(ledger.agent, Approval(
            request_id=req["request_id"], ticket_id=edit_ticket, action=action,
            original_request_id=req["request_id"]), executor)
        assert (out.executed, out.code) == (False, code)
    # A resume that tampers with the edited call is caught by the digest of the new request.
    forged = execute_approved(ledger.agent, Approval(
        request_id=result.new_request_id, ticket_id=result.ticket_id,
        action={"tool": "refund", "args": {"order_id": "O-19", "amount_cents": 9999}},
        original_request_id=req["request_id"], edited=True), executor)
    assert (forged.executed, forged.code) == (False, "approval_action_mismatch")
    assert executor.calls == []

    # The graph resumed with the ledger's answer to the edit executes the edited call only.
    out = graph.invoke(resume_command(result), run_config(thread))
    assert [c["args"] for c in executor.calls] == [edited["args"]]
    assert out["outcome"]["request_id"] == result.new_request_id
    assert ledger.reviewer.get_request(req["request_id"]).state == "edited"
    new = ledger.reviewer.get_request(result.new_request_id)
    assert new.state == "approved"
    [new_interrupt] = new.of_kind("interrupt")
    assert new_interrupt["body"]["edit_of"] == req["request_id"]
    assert new_interrupt["body"]["allowed_decisions"] == ["approve"]
    assert new_interrupt["body"]["interrupt_id"] == req["interrupt_id"]


def test_fork_creates_its_own_records_and_leaves_the_original_path(ledger, executor):
    graph = build_refund_graph(ledger.agent, executor)
    thread = new_thread("fork")
    req = pause(graph, thread, REFUND)
    result = ledger.reviewer.approve(req["request_id"])
    graph.invoke(resume_command(result), run_config(thread))
    original = records(ledger, thread)
    assert kinds(original) == ["interrupt", "decision", "authorization", "follow_up"]

    # Fork at the checkpoint before the review, with another amount.
    history = list(graph.get_state_history(run_config(thread)))
    before_review = [s for s in history if s.next == ("review",)][0]
    fork_config = graph.update_state(before_review.config, {"amount_cents": 700})
    fork_run = str(uuid.uuid4())
    out = graph.invoke(None, run_config(
        thread, run_id=fork_run,
        checkpoint_id=fork_config["configurable"]["checkpoint_id"]), version="v2")
    fork_req = out.interrupts[0].value
    assert fork_req["request_id"] != req["request_id"]

    # The original ticket cannot be carried into the fork (its request is open: pending).
    fork_action = {"tool": "refund", "args": {"order_id": "O-19", "amount_cents": 700}}
    early = execute_approved(ledger.agent, Approval(
        request_id=fork_req["request_id"], ticket_id=result.ticket_id, action=fork_action,
        original_request_id=fork_req["request_id"]), executor)
    assert (early.executed, early.code) == (False, "approval_pending")
    assert len(executor.calls) == 1

    # Once the fork's request is approved, the original ticket is still another request's.
    fork_approval = ledger.reviewer.approve(fork_req["request_id"], "fork ok")
    stolen = execute_approved(ledger.agent, Approval(
        request_id=fork_req["request_id"], ticket_id=result.ticket_id, action=fork_action,
        original_request_id=fork_req["request_id"]), executor)
    assert (stolen.executed, stolen.code) == (False, "approval_request_mismatch")
    assert len(executor.calls) == 1

    after = records(ledger, thread)
    assert after[: len(original)] == original  # untouched, byte for byte
    new = after[len(original):]
    assert kinds(new) == ["interrupt", "authorization", "decision", "authorization"]
    assert all(r["run_id"] == fork_run for r in new[:3])
    assert new[0]["request_id"] == fork_req["request_id"]
    assert new[0]["body"]["args"]["amount_cents"] == 700
    assert new[0]["checkpoint_id"] == fork_config["configurable"]["checkpoint_id"]
    assert new[0]["checkpoint_id"] != original[0]["checkpoint_id"]
    assert ledger.reviewer.get_request(req["request_id"]).state == "approved"

    # The fork, resumed with its own ticket, refunds its own amount.
    out = graph.invoke(resume_command(fork_approval), run_config(thread, run_id=fork_run))
    assert out["outcome"]["executed"]
    assert [c["args"]["amount_cents"] for c in executor.calls] == [2500, 700]
    final = records(ledger, thread)
    assert final[: len(after)] == after
    assert kinds(final[len(after):]) == ["authorization", "follow_up"]
    assert final[len(after)]["body"]["granted"] is True


def test_redacted_argument_never_stored_in_clear(ledger):
    sent = []

    def bank(args, *, idempotency_key):
        sent.append(args)
        return {"operation_id": "wt-1"}

    graph = build_wire_graph(ledger.agent, bank)
    thread = new_thread("wire")
    account = INVOICE["account"]
    req = pause(graph, thread, dict(INVOICE))
    assert account not in json.dumps(req)  # masked in LangGraph's checkpoint too
    # Edit the amount (the console holds the clear call), then execute.
    edited = {"tool": "wire_transfer", "args": {**INVOICE, "amount": "24000.00"}}
    result = ledger.reviewer.edit(req["request_id"], edited, "first instalment")
    out = graph.invoke(resume_command(result), run_config(thread))
    assert out["outcome"]["executed"] and sent == [edited["args"]]

    recs = records(ledger, thread)
    assert kinds(recs) == ["interrupt", "decision", "interrupt", "decision", "authorization",
                           "follow_up"]
    bundle = ledger.auditor.export_thread(thread)
    stored = json.dumps(recs) + json.dumps(bundle)
    import base64

    for entry in bundle["records"]:
        stored += base64.b64decode(entry["leaf"]).decode("utf-8")
    for request_id in (req["request_id"], result.new_request_id):
        stored += json.dumps(ledger.reviewer.get_request(request_id).raw)
    stored += json.dumps(ledger.reviewer.pending())
    assert account not in stored
    assert account[-6:] not in stored  # not even a suffix
    for rec in recs:
        if rec["kind"] == "interrupt":
            assert rec["body"]["redacted"] == ["/account"]
            assert rec["body"]["args"]["account"].startswith("hmac-sha256:")
            assert rec["body"]["action_digest"].startswith("hmac-sha256:")
            assert rec["body"]["args"]["payee"] == INVOICE["payee"]


def test_second_interrupt_in_a_node_needs_its_index(ledger, executor):
    """The ledger must name the interrupt LangGraph raises; a wrong guess fails closed."""
    from typing import TypedDict

    from hitl_ledger.errors import InterruptIdMismatch
    from hitl_ledger.langgraph import request_approval
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt

    class S(TypedDict, total=False):
        note: str
        outcome: dict

    def build(index):
        def node(state):
            note = interrupt("why the refund?")  # a plain LangGraph interrupt first
            approval = request_approval(
                ledger.agent, {"tool": "refund", "args": {"order_id": "O-2", "note": note}},
                index=index)
            return {"outcome": execute_approved(ledger.agent, approval, executor).as_state()}

        g = StateGraph(S)
        g.add_node("node", node)
        g.add_edge(START, "node")
        g.add_edge("node", END)
        return g.compile(checkpointer=InMemorySaver())

    wrong, right = build(0), build(1)
    for graph, thread in ((wrong, new_thread("idx0")), (right, new_thread("idx1"))):
        graph.invoke({}, run_config(thread))
        if graph is wrong:
            with pytest.raises(InterruptIdMismatch):
                graph.invoke(Command(resume="damaged parcel"), run_config(thread))
            continue
        out = graph.invoke(Command(resume="damaged parcel"), run_config(thread), version="v2")
        intr = out.interrupts[0]
        [rec] = records(ledger, thread)
        assert rec["body"]["interrupt_id"] == intr.id == intr.value["interrupt_id"]
        result = ledger.reviewer.approve(intr.value["request_id"])
        done = graph.invoke(resume_command(result), run_config(thread))
        assert done["outcome"]["executed"]
    assert [c["args"]["note"] for c in executor.calls] == ["damaged parcel"]


def test_resume_with_browser_claims_is_refused(ledger, executor):
    from langgraph.types import Command

    from hitl_ledger.errors import InvalidResume

    graph = build_refund_graph(ledger.agent, executor)
    thread = new_thread("claims")
    req = pause(graph, thread, REFUND)
    ticket = ledger.reviewer.approve(req["request_id"]).ticket_id
    for claim in ({"ticket_id": ticket, "reviewer": "ceo"},
                  {"ticket_id": ticket, "args": {"order_id": "O-19", "amount_cents": 1}}):
        with pytest.raises(InvalidResume):
            graph.invoke(Command(resume=claim), run_config(thread))
    assert executor.calls == []
    assert kinds(records(ledger, thread)) == ["interrupt", "decision"]
