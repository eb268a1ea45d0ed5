"""Two tenants on one ledger, through the Python client (issue 19, defect 6; the tenant rules of
docs/protocol.md): agents of tenant A and of tenant B, a reviewer scoped to A, and the unscoped
reviewer and auditor of conftest. Nothing of one tenant reaches the other: B's stream never
carries A's records, B's writes on A's request answer as if it did not exist and write nothing,
and A's stream and ResumeWorker go on as if B were not there.

(These need the server with tenants: the tokens are made with ``token add --tenant``.)
"""

from __future__ import annotations

import json
import uuid

import pytest
from conftest import ORIGIN, TokenSpec
from hitl_ledger import LedgerClient, digest, errors
from hitl_ledger.langgraph import ResumeWorker, run_config
from refund_with_worker import build_graph, pending_request

TENANT_A = "tenant-a"
TENANT_B = "tenant-b"

TOKENS = (
    TokenSpec("a1", "py-a1", "agent", (TENANT_A,)),
    TokenSpec("a2", "py-a2", "agent", (TENANT_A,)),
    TokenSpec("b1", "py-b1", "agent", (TENANT_B,)),
    TokenSpec("reviewer_a", "py-reviewer-a", "reviewer", (TENANT_A,)),
)

ACTION = {"tool": "refund", "args": {"order_id": "O-7", "amount_cents": 300}}
ORDER = {"order_id": "O-19", "amount_cents": 2500}


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    from conftest import start_server

    server = start_server(tmp_path_factory.mktemp("tenants"), extra_tokens=TOKENS)
    yield server
    server.stop()


def size(c: LedgerClient) -> int:
    return int(c.checkpoint().split("\n")[1])


def open_request(agent: LedgerClient, prefix: str) -> tuple[str, str, str]:
    """A new request of ``agent``: (request id, thread id, the interrupt's leaf hash)."""
    rid = f"{prefix}-{uuid.uuid4().hex[:10]}"
    thread = f"t-{rid}"
    w = agent.append_interrupt(request_id=rid, thread_id=thread, interrupt_id=f"i-{rid}",
                               action=ACTION)
    return rid, thread, w.leaf_hash


def seen(c: LedgerClient, after: int) -> list:
    return list(c.events(after=after if after >= 0 else None, idle_timeout=1.0))


def test_the_actor_records_an_agents_tenant(two):
    rid, _, _ = open_request(two.clients["a1"], "actor")
    (intr,) = two.auditor.get_request(rid).of_kind("interrupt")
    assert intr["actor"] == {"principal": "py-a1", "role": "agent", "tenant": TENANT_A}
    # A token without a tenant of its own is its principal's tenant: no member is written.
    rid0, _, _ = open_request(two.agent, "default")
    (intr0,) = two.auditor.get_request(rid0).of_kind("interrupt")
    assert intr0["actor"] == {"principal": "py-agent", "role": "agent"}


def test_another_tenants_agent_can_neither_see_nor_touch_a_request(two):
    a1, a2, b1 = two.clients["a1"], two.clients["a2"], two.clients["b1"]
    start = size(two.auditor) - 1
    rid, thread, intr_hash = open_request(a1, "a")
    rid_b, thread_b, _ = open_request(b1, "b")
    approval = two.reviewer.approve(rid, "ok")
    before = two.auditor.get_request(rid).records
    # B's writes on A's request: "no such request", nothing written.
    with pytest.raises(errors.RequestNotFound):
        b1.revoke(rid, "cancelled by someone else")
    with pytest.raises(errors.RequestNotFound):
        b1.follow_up(rid, follow_up_id="f-b", follows=intr_hash, outcome="noted",
                     detail={"n": 1})
    with pytest.raises(errors.RequestNotFound):
        b1.authorize(rid, ticket_id=approval.ticket_id, action=ACTION, attempt_id="b-attempt")
    # An interrupt of B reusing A's request id or thread id: refused, nothing written.
    with pytest.raises(errors.IdentifierInUse):
        b1.append_interrupt(request_id=rid, thread_id=f"t-other-{rid}", interrupt_id="i",
                            action=ACTION)
    with pytest.raises(errors.IdentifierInUse):
        b1.append_interrupt(request_id=f"other-{rid}", thread_id=thread, interrupt_id="i",
                            action=ACTION)
    # A refused DELETE of B names nothing of A's.
    with pytest.raises(errors.AppendOnly):
        b1.request("DELETE", f"/v1/requests/{rid}")
    assert two.auditor.get_request(rid).records == before
    assert [r["kind"] for r in two.auditor.thread_records(thread)] == ["interrupt", "decision"]
    # A's authorization still works: nothing of B's got in the way.
    grant = a1.authorize(rid, ticket_id=approval.ticket_id, action=ACTION, attempt_id="a-1")
    assert grant.granted and grant.code is None
    # The streams: A's agents see A's request and none of B's, B sees its own and none of A's.
    s_a1, s_a2, s_b1 = seen(a1, start), seen(a2, start), seen(b1, start)
    assert {e.request_id for e in s_a1} == {rid}
    assert [e.kind for e in s_a1] == ["interrupt", "decision", "authorization"]
    assert [e.seq for e in s_a2] == [e.seq for e in s_a1]  # one tenant, one view
    assert {e.request_id for e in s_b1} == {rid_b}
    assert not {e.thread_id for e in s_b1} & {thread}
    assert all(e.record["actor"]["principal"] != "py-b1" for e in s_a1)
    for e in s_b1:  # not a byte of A's request in anything B read
        assert rid not in json.dumps(e.record) and thread not in json.dumps(e.record)
    # The unscoped reviewer sees both tenants.
    s_rev = {e.request_id for e in seen(two.reviewer, start)}
    assert {rid, rid_b} <= s_rev


def test_a_tenants_stream_and_worker_are_unaffected_by_the_other_tenant(two, tmp_path,
                                                                        executor):
    a1, b1 = two.clients["a1"], two.clients["b1"]
    graph = build_graph(a1, executor)
    thread = f"worker-{uuid.uuid4().hex[:10]}"
    state_file = tmp_path / "worker.json"
    n = size(two.auditor)
    state_file.write_text(json.dumps({"format": "hitl-ledger/resume-worker-state/v1",
                                      "last_seq": n - 1 if n else None, "origin": ORIGIN}))
    graph.invoke(dict(ORDER), run_config(thread))
    rid = pending_request(graph, thread)["request_id"]
    (intr,) = two.auditor.get_request(rid).of_kind("interrupt")
    intr_hash = digest.leaf_hash(digest.record_leaf(intr))
    # B tries to stall or spoil A's request before and after the decision.
    with pytest.raises(errors.RequestNotFound):
        b1.request("POST", f"/v1/requests/{rid}/follow-ups", idempotent=True, raw_body=(
            b'{"follow_up_id":"f","follows":"%s","outcome":"x","detail":{"n":1e20}}'
            % intr_hash.encode()))
    decision = two.clients["reviewer_a"].approve(rid, "ok")
    with pytest.raises(errors.RequestNotFound):
        b1.revoke(rid, "not yours")
    worker = ResumeWorker(a1, graph, state_file=state_file, pending_grace=0.0)
    outcomes = [o for o in worker.poll_once() if o.thread_id == thread]
    assert [(o.kind, o.ticket_id) for o in outcomes] == [("approved", decision.ticket_id)]
    assert executor.calls == [{"args": ORDER,
                               "idempotency_key": digest.idempotency_key(ORIGIN, rid)}]
    assert [r["kind"] for r in two.auditor.thread_records(thread)] == [
        "interrupt", "decision", "authorization", "follow_up"]
    # B's own worker, from the same position, sees nothing of it.
    b_seen: list[int] = []
    other = ResumeWorker(b1, graph, state_file=tmp_path / "b.json", pending_grace=0.0)
    original = other._process
    other._process = lambda ev: (b_seen.append(ev.seq), original(ev))[1]
    other.poll_once(0.5)
    assert not {r["seq"] for r in two.auditor.thread_records(thread)} & set(b_seen)


def test_a_reviewer_scoped_to_a_tenant_sees_only_that_tenant(two):
    reviewer_a = two.clients["reviewer_a"]
    start = size(two.auditor) - 1
    rid_a, _, _ = open_request(two.clients["a1"], "scoped-a")
    rid_b, thread_b, _ = open_request(two.clients["b1"], "scoped-b")
    pending = {p["request_id"] for p in reviewer_a.pending()}
    assert rid_a in pending and rid_b not in pending
    assert {rid_a, rid_b} <= {p["request_id"] for p in two.reviewer.pending()}
    assert reviewer_a.get_request(rid_a).state == "open"
    with pytest.raises(errors.RequestNotFound):
        reviewer_a.get_request(rid_b)
    with pytest.raises(errors.RequestNotFound):
        reviewer_a.approve(rid_b)
    assert two.reviewer.get_request(rid_b).state == "open"  # nothing written
    assert {e.request_id for e in seen(reviewer_a, start)} == {rid_a}
    # The other tenant's request is still decided by a reviewer who reaches it.
    two.reviewer.reject(rid_b, "not this one")
    assert rid_b not in {e.request_id for e in seen(reviewer_a, start)}
