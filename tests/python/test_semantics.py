"""The client on the contract's approval semantics (spec sections 3, 4 and 6), without a graph."""

from __future__ import annotations

import time
import uuid

from hitl_ledger import digest

ORIGIN = "hitl-ledger.test/python"
REFUND = {"tool": "refund", "args": {"order_id": "O-3", "amount_cents": 300}}


def open_request(ledger, action=REFUND, **kw) -> str:
    rid = f"sem-{uuid.uuid4().hex[:12]}"
    res = ledger.agent.append_interrupt(
        request_id=rid, thread_id=f"t-{rid}", interrupt_id="i", run_id="run-a",
        checkpoint_id="cp-1", action=action, **kw)
    assert (res.status, res.duplicate) == (201, False)
    again = ledger.agent.append_interrupt(
        request_id=rid, thread_id=f"t-{rid}", interrupt_id="i", run_id="run-b",
        checkpoint_id="cp-1", action=action, **kw)
    assert (again.status, again.duplicate, again.seq, again.leaf_hash) == (
        200, True, res.seq, res.leaf_hash)
    assert again.record["run_id"] == "run-a"  # the stored record, not a new one
    return rid


def test_authorize_answers_200_for_grant_and_denial_and_retries_safely(ledger):
    rid = open_request(ledger)
    pending = ledger.agent.authorize(rid, ticket_id="01a22e83-a6b0-7681-a0b7-b52c93a79820",
                                     action=REFUND)
    assert (pending.status, pending.granted, pending.code) == (200, False, "approval_pending")
    ticket = ledger.reviewer.approve(rid).ticket_id
    grant = ledger.agent.authorize(rid, ticket_id=ticket, action=REFUND, attempt_id="att-1")
    assert (grant.status, grant.granted, grant.code) == (200, True, None)
    assert grant.idempotency_key == digest.idempotency_key(ORIGIN, rid)
    # The executor that crashed before learning of the grant asks again with its attempt id.
    replay = ledger.agent.authorize(rid, ticket_id=ticket, action=REFUND, attempt_id="att-1")
    assert (replay.duplicate, replay.seq, replay.idempotency_key) == (
        True, grant.seq, grant.idempotency_key)
    other = ledger.agent.authorize(rid, ticket_id=ticket, action=REFUND, attempt_id="att-2")
    assert (other.granted, other.code) == (False, "approval_already_used")
    state = ledger.reviewer.get_request(rid)
    assert state.state == "approved"
    assert state.kinds() == ["interrupt", "authorization", "decision", "authorization",
                             "authorization"]


def test_edit_sent_again_returns_the_same_new_request(ledger):
    rid = open_request(ledger)
    edited = {"tool": "refund", "args": {"order_id": "O-3", "amount_cents": 100}}
    first = ledger.reviewer.edit(rid, edited, "less")
    again = ledger.reviewer.edit(rid, edited, "less")
    assert again.duplicate
    assert (again.new_request_id, again.ticket_id, again.seq) == (
        first.new_request_id, first.ticket_id, first.seq)
    new = ledger.reviewer.get_request(first.new_request_id)
    assert new.state == "approved"
    [intr] = new.of_kind("interrupt")
    assert intr["body"]["action_digest"] == digest.action_digest(edited)
    assert first.body["edited_digest"] == intr["body"]["action_digest"]
    assert first.body["superseded_by"] == first.new_request_id
    assert intr["run_id"] == "run-a" and intr["checkpoint_id"] == "cp-1"


def test_pending_and_states(ledger):
    a, b = open_request(ledger), open_request(ledger)
    pending = [p for p in ledger.reviewer.pending() if p["request_id"] in (a, b)]
    assert [p["request_id"] for p in pending] == [a, b]
    assert pending[0]["tool"] == "refund" and pending[0]["seq"] < pending[1]["seq"]
    assert ledger.auditor.pending() == ledger.reviewer.pending()
    ledger.reviewer.reject(a, "no")
    ledger.agent.revoke(b, "not needed")
    assert ledger.reviewer.get_request(a).state == "rejected"
    assert ledger.reviewer.get_request(b).state == "revoked"
    assert not [p for p in ledger.reviewer.pending() if p["request_id"] in (a, b)]


def test_review_deadline_writes_a_timeout(ledger):
    rid = open_request(ledger, review_ttl_seconds=1)
    time.sleep(2.2)  # the server sweeps at least once a second
    state = ledger.reviewer.get_request(rid)
    assert state.state == "timed_out"
    [timeout] = state.of_kind("timeout")
    assert timeout["actor"] == {"principal": "hitl-ledger", "role": "system"}
    assert timeout["body"]["expires_at"] == state.of_kind("interrupt")[0]["body"]["expires_at"]


def test_observe_mode_grants_without_consuming(ledger):
    email = {"tool": "send_email", "args": {"to": "a@example.com", "body": "hi"}}
    rid = open_request(ledger, action=email)
    ticket = ledger.reviewer.approve(rid).ticket_id
    changed = {"tool": "send_email", "args": {"to": "b@example.com", "body": "hi"}}
    observed = ledger.agent.authorize(rid, ticket_id=ticket, action=changed)
    assert (observed.granted, observed.code, observed.would_deny) == (
        True, None, "approval_action_mismatch")
    assert observed.record["body"]["mode"] == "observe" and observed.idempotency_key
    real = ledger.agent.authorize(rid, ticket_id=ticket, action=email)
    assert (real.granted, real.would_deny) == (True, None)


def test_thread_paging_and_proofs(ledger):
    rid = open_request(ledger)
    ledger.reviewer.approve(rid)
    thread = f"t-{rid}"
    records = ledger.auditor.thread_records(thread)
    page = ledger.auditor.thread_records_page(thread, limit=1)
    assert page["records"] == records[:1]
    assert list(ledger.auditor.iter_thread_records(thread, limit=1)) == records
    proof = ledger.auditor.inclusion_proof(records[-1]["seq"])
    assert proof["leaf_hash"] == digest.leaf_hash(digest.record_leaf(records[-1]))
    note = ledger.auditor.checkpoint()
    assert note.startswith(ORIGIN + "\n")
    size = int(note.split("\n")[1])
    cons = ledger.auditor.consistency_proof(1, size)
    assert (cons["from"], cons["to"]) == (1, size)
