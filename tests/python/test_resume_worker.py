"""The resume worker against the real server: it follows the decision stream with the agent's
token and resumes each paused thread with the ledger's answer, exactly once, also across a
restart of the worker and a crash between a resume and saving its position."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from typing import Any, TypedDict

import pytest
from conftest import ORIGIN, restart_server
from hitl_ledger import Event, EventStreamError, LedgerClient, digest, errors
from hitl_ledger.langgraph import (
    Approval,
    ResumeOutcome,
    ResumeWorker,
    execute_approved,
    request_approval,
    run_config,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from ledger_support import REPO, ledger_bin
from refund_with_worker import build_graph, pending_request

ORDER = {"order_id": "O-19", "amount_cents": 2500}


class Graph:
    """A graph wrapper that counts what the worker asks of it."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.invokes = 0
        self.get_states = 0

    def get_state(self, config):
        self.get_states += 1
        return self.graph.get_state(config)

    def invoke(self, value, config):
        self.invokes += 1
        return self.graph.invoke(value, config)


@pytest.fixture
def setup(ledger, executor, tmp_path):
    """The example graph with a recording refund, paused on a fresh thread."""

    class Setup:
        def __init__(self) -> None:
            self.graph = Graph(build_graph(ledger.agent, executor))
            self.state_file = tmp_path / "worker.json"
            self.thread = f"worker-{uuid.uuid4().hex[:10]}"
            # The worker starts after what the module's earlier tests wrote (as one that has
            # processed them would).
            position(self.state_file, ledger)

        def worker(self, client: LedgerClient | None = None, **kw) -> ResumeWorker:
            kw.setdefault("pending_grace", 0.0)  # other tests' threads: never ours
            return ResumeWorker(client or ledger.agent, self.graph, state_file=self.state_file,
                                **kw)

        def pause(self, **state) -> str:
            self.graph.graph.invoke({**ORDER, **state}, run_config(self.thread))
            return pending_request(self.graph.graph, self.thread)["request_id"]

        def values(self) -> dict:
            return self.graph.graph.get_state(run_config(self.thread)).values

        def ours(self, outcomes: list[ResumeOutcome]) -> list[ResumeOutcome]:
            return [o for o in outcomes if o.thread_id == self.thread]

    return Setup()


def position(state_file, ledger) -> None:
    """Write the state of a worker that has processed every record the ledger holds."""
    size = int(ledger.auditor.checkpoint().split("\n")[1])
    state_file.write_text(json.dumps({"format": "hitl-ledger/resume-worker-state/v1",
                                      "last_seq": size - 1 if size else None,
                                      "origin": ORIGIN}))


def kinds(ledger, thread: str) -> list[str]:
    return [r["kind"] for r in ledger.auditor.thread_records(thread)]


def test_approve_resumes_once_and_the_refund_runs_once_with_the_grants_key(ledger, setup,
                                                                           executor):
    rid = setup.pause()
    assert executor.calls == []
    decision = ledger.reviewer.approve(rid, "customer verified")
    worker = setup.worker()
    (outcome,) = worker.poll_once()
    assert (outcome.request_id, outcome.thread_id, outcome.kind) == (rid, setup.thread, "approved")
    assert outcome.ticket_id == decision.ticket_id and outcome.expires_at == decision.expires_at
    assert outcome.seq == decision.seq and outcome.ok
    assert worker.last_seq is not None and worker.last_seq >= decision.seq
    key = digest.idempotency_key(ORIGIN, rid)
    assert executor.calls == [{"args": ORDER, "idempotency_key": key}]
    final = setup.values()
    assert final["approval"]["ticket_id"] == decision.ticket_id
    assert final["approval"]["expires_at"] == decision.expires_at
    assert final["outcome"]["executed"] and final["outcome"]["idempotency_key"] == key
    assert kinds(ledger, setup.thread) == ["interrupt", "decision", "authorization", "follow_up"]
    # Nothing more: the same worker, and a new one on the same state file, do not resume again.
    assert setup.ours(worker.poll_once(0.3)) == []
    assert setup.ours(setup.worker().poll_once(0.3)) == []
    assert setup.graph.invokes == 1 and len(executor.calls) == 1


def test_reject_is_an_explicit_rejection_and_the_refund_never_runs(ledger, setup, executor):
    rid = setup.pause()
    decision = ledger.reviewer.reject(rid, "order already refunded")
    (outcome,) = setup.ours(setup.worker().poll_once())
    assert outcome.kind == "rejected" and outcome.reason == "order already refunded"
    assert outcome.ticket_id == decision.ticket_id
    approval = Approval.from_state(setup.values()["approval"])
    assert (approval.outcome, approval.approved, approval.reason) == (
        "rejected", False, "order already refunded")
    assert setup.values()["outcome"] == {"executed": False, "status": "rejected",
                                         "reason": "order already refunded"}
    assert executor.calls == []
    assert kinds(ledger, setup.thread) == ["interrupt", "rejection"]


def test_edit_runs_the_edited_call_and_never_the_original(ledger, setup, executor):
    rid = setup.pause()
    edited = {"tool": "refund", "args": {"order_id": "O-19", "amount_cents": 2000}}
    decision = ledger.reviewer.edit(rid, edited, "partial refund only")
    (outcome,) = setup.ours(setup.worker().poll_once())
    assert outcome.kind == "edited" and outcome.request_id == rid
    assert outcome.new_request_id == decision.new_request_id
    assert outcome.ticket_id == decision.ticket_id
    key = digest.idempotency_key(ORIGIN, decision.new_request_id)
    assert executor.calls == [{"args": edited["args"], "idempotency_key": key}]
    approval = Approval.from_state(setup.values()["approval"])
    assert approval.edited and approval.request_id == decision.new_request_id
    assert approval.original_request_id == rid
    # The original's request holds no authorization: only the edited call was presented.
    assert [r["kind"] for r in ledger.auditor.thread_records(setup.thread)
            if r["request_id"] == rid] == ["interrupt", "decision"]


def test_timeout_is_an_explicit_timeout(ledger, setup, executor):
    rid = setup.pause(review_ttl_seconds=1)
    worker = setup.worker()
    outcomes: list[ResumeOutcome] = []
    deadline = time.monotonic() + 6
    while not outcomes and time.monotonic() < deadline:
        outcomes = setup.ours(worker.poll_once(0.5))
    (outcome,) = outcomes
    assert outcome.kind == "timed_out" and outcome.request_id == rid and outcome.expires_at
    approval = Approval.from_state(setup.values()["approval"])
    assert approval.outcome == "timed_out" and not approval.approved
    assert outcome.expires_at in approval.reason
    assert executor.calls == []
    assert kinds(ledger, setup.thread) == ["interrupt", "timeout"]


def test_revocation_of_an_open_request_is_reported(ledger, setup, executor):
    rid = setup.pause()
    ledger.agent.revoke(rid, "the customer cancelled")
    (outcome,) = setup.ours(setup.worker().poll_once())
    assert (outcome.kind, outcome.reason) == ("revoked", "the customer cancelled")
    assert setup.values()["outcome"]["status"] == "revoked"
    assert executor.calls == []


def test_another_agents_worker_never_sees_nor_resumes_our_request(ledger, setup, executor):
    rid = setup.pause()
    ledger.reviewer.approve(rid)
    agent2 = ledger.clients["agent2"]
    own = f"own-{uuid.uuid4().hex[:10]}"
    agent2.append_interrupt(request_id=own, thread_id=own, interrupt_id="i", action=WIRE)
    ledger.reviewer.approve(own)
    seen: list[int] = []
    other = setup.worker(ledger.clients["agent2"])
    original = other._process
    other._process = lambda ev: (seen.append(ev.seq), original(ev))[1]
    assert other.poll_once(0.5) == []
    theirs = {r["seq"] for r in ledger.auditor.thread_records(setup.thread)}
    assert seen and not theirs & set(seen)  # it read its own records, none of ours
    assert setup.graph.invokes == 0 and executor.calls == []
    assert pending_request(setup.graph.graph, setup.thread)["request_id"] == rid


def test_a_record_holding_large_numbers_does_not_stall_the_worker(ledger, setup, executor):
    """Issue 19, defect 1: a follow-up whose detail the ledger stores as 100000000000000000000
    made the worker's stream raise at that seq for good; the approval after it must arrive."""
    from test_events import BIG_STORED, append_big_follow_up

    rid = setup.pause()
    (intr,) = ledger.auditor.get_request(rid).of_kind("interrupt")
    big = append_big_follow_up(ledger.agent, rid, digest.leaf_hash(digest.record_leaf(intr)))
    decision = ledger.reviewer.approve(rid)
    worker = setup.worker()
    (outcome,) = setup.ours(worker.poll_once())
    assert (outcome.kind, outcome.ticket_id, outcome.seq) == ("approved", decision.ticket_id,
                                                              decision.seq)
    assert worker.last_seq >= decision.seq > big["seq"]
    assert executor.calls == [{"args": ORDER,
                               "idempotency_key": digest.idempotency_key(ORIGIN, rid)}]
    assert kinds(ledger, setup.thread) == ["interrupt", "follow_up", "decision", "authorization",
                                           "follow_up"]
    assert ledger.auditor.get_request(rid).of_kind("follow_up")[0]["body"]["detail"] == BIG_STORED


def test_a_restarted_worker_continues_after_its_saved_seq(ledger, setup, executor):
    rid = setup.pause()
    decision = ledger.reviewer.approve(rid)
    first = setup.worker()
    assert [o.request_id for o in setup.ours(first.poll_once())] == [rid]
    saved = json.loads(setup.state_file.read_text())
    assert saved["last_seq"] == first.last_seq >= decision.seq and saved["origin"] == ORIGIN
    assert [p.name for p in setup.state_file.parent.iterdir()] == ["worker.json"]  # no temp
    # A new worker (a restart) reads the file and asks the stream for what follows only: the
    # decision already applied is not even looked at again.
    restarted = setup.worker()
    assert restarted.last_seq == first.last_seq
    before = setup.graph.get_states
    opened: list = []
    real_events = ledger.agent.events

    class Recording:
        def events(self, **kw):
            opened.append(kw)
            return real_events(**kw)

    restarted.client = Recording()
    assert setup.ours(restarted.poll_once(0.3)) == []
    assert opened[0]["after"] == first.last_seq
    assert setup.graph.get_states == before
    assert setup.graph.invokes == 1 and len(executor.calls) == 1


class Crash(BaseException):
    """The worker's process dying right after a resume, before it saved its position."""


def test_crash_between_resume_and_save_does_not_resume_twice(ledger, setup, executor):
    rid = setup.pause()
    decision = ledger.reviewer.approve(rid)
    crashing = setup.worker()

    def die(*_a):
        raise Crash

    crashing._write_state = die
    with pytest.raises(Crash):
        crashing.poll_once()
    assert setup.graph.invokes == 1 and len(executor.calls) == 1
    assert json.loads(setup.state_file.read_text())["last_seq"] < decision.seq  # never saved
    # The restarted worker re-reads the approval; the thread is no longer paused at it.
    assert setup.ours(setup.worker().poll_once(0.3)) == []
    assert setup.graph.invokes == 1 and len(executor.calls) == 1
    assert kinds(ledger, setup.thread).count("authorization") == 1


def test_a_decision_that_overtakes_the_checkpoint_is_applied_once_it_lands(ledger, executor,
                                                                          tmp_path):
    # The ledger's interrupt is appended before LangGraph writes its checkpoint: a decision
    # can arrive while the thread does not show the pause yet.
    gate = threading.Event()

    class SlowSaver(InMemorySaver):
        def put_writes(self, config, writes, task_id, task_path=""):
            if any(channel == "__interrupt__" for channel, _ in writes):
                gate.wait(10)
            return super().put_writes(config, writes, task_id, task_path)

    graph = build_graph(ledger.agent, executor, checkpointer=SlowSaver())
    thread = f"overtake-{uuid.uuid4().hex[:10]}"
    outcomes: list[ResumeOutcome] = []
    got = threading.Event()

    def on_outcome(o: ResumeOutcome) -> None:
        if o.thread_id == thread:
            outcomes.append(o)
            got.set()

    position(tmp_path / "w.json", ledger)
    worker = ResumeWorker(ledger.agent, graph, state_file=tmp_path / "w.json",
                          on_outcome=on_outcome, pending_grace=8.0, recheck_interval=0.1)
    worker.start()
    runner = threading.Thread(target=graph.invoke, args=(ORDER, run_config(thread)))
    try:
        runner.start()
        deadline = time.monotonic() + 10
        while not ledger.auditor.thread_records(thread) and time.monotonic() < deadline:
            time.sleep(0.02)
        (intr,) = ledger.auditor.thread_records(thread)
        ledger.reviewer.approve(intr["request_id"])
        time.sleep(0.6)  # the worker has the decision; the thread is not paused yet
        assert not got.is_set() and intr["request_id"] in worker.waiting
        gate.set()  # the checkpoint lands
        runner.join(10)
        assert got.wait(8), worker.error
    finally:
        gate.set()
        worker.stop()
    assert [o.kind for o in outcomes] == ["approved"] and len(executor.calls) == 1
    assert worker.waiting == [] and worker.error is None


# ------------------------------------------------------------------ redacted edits

WIRE = {"tool": "wire_transfer", "args": {"account": "DE89370400440532013000",
                                          "amount": "30000.00", "currency": "USD"}}


class OneNodeState(TypedDict, total=False):
    tool: str
    args: dict
    approval: dict
    outcome: dict


def one_node_graph(agent: LedgerClient, side_effect, checkpointer=None):
    """The one-node pattern: ask, then authorize and execute, in the same node."""

    def step(state: OneNodeState) -> dict:
        approval = request_approval(agent, {"tool": state["tool"], "args": state["args"]},
                                    allowed_decisions=["approve", "edit", "reject"])
        gate = execute_approved(agent, approval, side_effect)
        return {"approval": approval.as_state(),
                "outcome": {"executed": gate.executed, "code": gate.code}}

    builder = StateGraph(OneNodeState)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=checkpointer or InMemorySaver())


@pytest.mark.parametrize("account, executes", [
    (WIRE["args"]["account"], True),  # the reviewer kept the account: rebuilt, granted
    ("GB33BUKB20201555555555", False),  # changed a value the host holds: refused by the gate
])
def test_redacted_edit_is_rebuilt_from_the_hosts_own_values(ledger, executor, tmp_path,
                                                            account, executes):
    position(tmp_path / "w.json", ledger)
    graph = one_node_graph(ledger.agent, executor)
    thread = f"wire-{uuid.uuid4().hex[:10]}"
    graph.invoke(WIRE, run_config(thread))
    rid = pending_request(graph, thread)["request_id"]
    edited = {"tool": "wire_transfer", "args": {**WIRE["args"], "account": account,
                                                "amount": "24000.00"}}
    decision = ledger.reviewer.edit(rid, edited, "first instalment only")
    worker = ResumeWorker(ledger.agent, graph, state_file=tmp_path / "w.json", pending_grace=0)
    (outcome,) = [o for o in worker.poll_once() if o.thread_id == thread]
    assert outcome.kind == "edited" and outcome.new_request_id == decision.new_request_id
    stored = next(r for r in ledger.auditor.thread_records(thread)
                  if r["request_id"] == decision.new_request_id and r["kind"] == "interrupt")
    assert stored["body"]["args"]["account"].startswith("hmac-sha256:")  # never in clear
    final = graph.get_state(run_config(thread)).values["outcome"]
    if executes:
        assert final == {"executed": True, "code": None}
        assert executor.calls == [{
            "args": {**WIRE["args"], "amount": "24000.00"},
            "idempotency_key": digest.idempotency_key(ORIGIN, decision.new_request_id)}]
    else:
        assert final == {"executed": False, "code": "approval_action_mismatch"}
        assert executor.calls == []


# ------------------------------------------------------------------ the example


def test_the_example_runs_every_scenario():
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "refund_with_worker.py"), "--spawn",
         str(ledger_bin())], capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    sections = {s.split("\n", 1)[0].strip(): s for s in done.stdout.split("\n== ")[1:]}
    assert set(sections) == {"approve", "reject", "edit", "timeout"}, done.stdout
    assert "worker resumed with approved" in sections["approve"]
    assert "executed=True status=approved" in sections["approve"]
    assert "executed=False status=rejected reason='order already refunded'" in sections["reject"]
    assert "refunded 2000 cents" in sections["edit"] and "2500" not in sections["edit"].split(
        "\n", 2)[2]
    assert "executed=False status=timed_out" in sections["timeout"]
    assert done.stdout.count("REFUND EXECUTED") == 2


# ------------------------------------------------------------------ failures inside the resume


def test_a_resume_that_raises_is_reported_and_never_repeated(ledger, setup, executor):
    def broken(args, *, idempotency_key):
        executor.calls.append({"args": args, "idempotency_key": idempotency_key})
        raise RuntimeError("payment system down")

    # One node asks and executes: the failed task stays at its interrupt, with its error.
    setup.graph.graph = one_node_graph(ledger.agent, broken)
    setup.graph.graph.invoke({"tool": "refund", "args": ORDER}, run_config(setup.thread))
    rid = pending_request(setup.graph.graph, setup.thread)["request_id"]
    ledger.reviewer.approve(rid)
    before = json.loads(setup.state_file.read_text())
    (outcome,) = setup.ours(setup.worker().poll_once())
    assert not outcome.ok and isinstance(outcome.error, RuntimeError)
    # A worker that re-reads the decision (its state file from before) finds the failed task
    # and leaves it to the host: the side effect is not called again.
    setup.state_file.write_text(json.dumps(before))
    assert setup.ours(setup.worker().poll_once(0.3)) == []
    assert len(executor.calls) == 1 and setup.graph.invokes == 1


def test_a_crash_inside_the_resume_retries_with_the_same_grant(ledger, setup, executor):
    # The process dies after the ledger's grant, before the refund: the checkpoint is not
    # written and the thread is still paused. The restarted worker resumes again under the same
    # run (derived from the decision), so authorize answers the same grant and the refund runs,
    # with the grant's idempotency key, instead of being refused as approval_already_used.
    crashes = [Crash()]

    def refund(args, *, idempotency_key):
        if crashes:
            raise crashes.pop()
        return executor(args, idempotency_key=idempotency_key)

    setup.graph.graph = one_node_graph(ledger.agent, refund)
    setup.graph.graph.invoke({"tool": "refund", "args": ORDER}, run_config(setup.thread))
    rid = pending_request(setup.graph.graph, setup.thread)["request_id"]
    ledger.reviewer.approve(rid)
    with pytest.raises(Crash):
        setup.worker().poll_once()
    assert pending_request(setup.graph.graph, setup.thread)["request_id"] == rid
    (outcome,) = setup.ours(setup.worker().poll_once())
    assert outcome.ok and outcome.kind == "approved"
    assert executor.calls == [{"args": ORDER, "idempotency_key": digest.idempotency_key(ORIGIN,
                                                                                       rid)}]
    auths = [r for r in ledger.auditor.thread_records(setup.thread)
             if r["kind"] == "authorization"]
    assert [(a["body"]["granted"], a["run_id"].startswith("resume-")) for a in auths] == [
        (True, True)]  # the retry was answered the same grant: nothing new written


def test_state_file_is_checked(ledger, setup):
    setup.state_file.write_text("{not json")
    with pytest.raises(errors.HitlLedgerError, match="not one it wrote"):
        setup.worker()
    setup.state_file.write_text(json.dumps({"format": "hitl-ledger/resume-worker-state/v1",
                                            "last_seq": 0, "origin": "another.test/ledger"}))
    rid = setup.pause()
    ledger.reviewer.approve(rid)
    with pytest.raises(errors.HitlLedgerError, match="one state file per ledger"):
        setup.worker().poll_once()
    assert setup.graph.invokes == 0


# ------------------------------------------------------------------ a scripted stream


class ScriptedClient:
    """Stands in for the ledger client: ``events()`` yields the given records."""

    def __init__(self, records: list[dict]) -> None:
        self.records = records

    def events(self, after=None, **_kw):
        class Stream(list):
            def close(self) -> None:
                pass

        return Stream(Event(seq=r["seq"], leaf_hash="0" * 64, record=r) for r in self.records
                      if after is None or r["seq"] > after)


def rec(seq: int, kind: str, request_id: str, **body) -> dict:
    return {"v": 1, "origin": ORIGIN, "seq": seq, "kind": kind, "thread_id": "t",
            "request_id": request_id, "body": body}


class PausedGraph:
    """A graph paused at request ``r``; records the resume values it is given."""

    def __init__(self) -> None:
        self.resumed: list = []

    def get_state(self, config):
        from types import SimpleNamespace

        if self.resumed:
            return SimpleNamespace(tasks=())
        intr = SimpleNamespace(id="i-r", value={"type": "hitl_ledger_approval",
                                                "request_id": "r"})
        return SimpleNamespace(tasks=(SimpleNamespace(interrupts=(intr,), error=None),))

    def invoke(self, command, config):
        self.resumed.append((command.resume, config))
        return {}


EDIT_ARGS = {"account": "hmac-sha256:" + "a" * 64, "amount": "1.00"}


def edit_records(*, new_seq: int = 6, approve_seq: int = 7, digest_: str = "hmac-sha256:d"):
    return [
        rec(5, "decision", "r", decision="edit", superseded_by="n", edited_digest="hmac-sha256:d",
            ticket_id="t-edit", expires_at=None, rationale=None),
        rec(new_seq, "interrupt", "n", edit_of="r", tool="wire_transfer", args=EDIT_ARGS,
            redacted=["/account"], action_digest=digest_),
        rec(approve_seq, "decision", "n", decision="approve", ticket_id="t-new",
            expires_at="2026-12-01T15:00:00.000000Z", superseded_by=None, edited_digest=None),
    ]


def test_an_edit_resumes_with_the_records_values_only(tmp_path):
    graph = PausedGraph()
    worker = ResumeWorker(ScriptedClient(edit_records()), graph, state_file=tmp_path / "s")
    (outcome,) = worker.poll_once()
    assert (outcome.kind, outcome.seq, outcome.new_request_id, outcome.ticket_id) == (
        "edited", 5, "n", "t-new")
    ((resume, config),) = graph.resumed
    assert resume == {"i-r": {
        "outcome": "edited", "ticket_id": "t-new", "request_id": "n",
        "edited_action": {"tool": "wire_transfer", "args": EDIT_ARGS},
        "redacted": ["/account"], "expires_at": "2026-12-01T15:00:00.000000Z"}}
    assert config["configurable"]["thread_id"] == "t"
    assert worker.last_seq == 7


@pytest.mark.parametrize("broken, message", [
    (dict(new_seq=8, approve_seq=9), "is not followed by"),  # a record missing in between
    (dict(digest_="hmac-sha256:other"), "binds hmac-sha256:d"),  # not the call edited
])
def test_a_broken_edit_is_an_error_never_a_resume(tmp_path, broken, message):
    graph = PausedGraph()
    worker = ResumeWorker(ScriptedClient(edit_records(**broken)), graph,
                          state_file=tmp_path / "s")
    with pytest.raises(EventStreamError, match=message):
        worker.poll_once()
    assert graph.resumed == [] and worker.last_seq is None


def test_a_running_worker_follows_the_ledger_across_a_server_restart(make_ledger, executor,
                                                                     tmp_path):
    server = make_ledger()
    graph = build_graph(server.agent, executor)
    thread = f"restart-{uuid.uuid4().hex[:10]}"
    outcomes: list[ResumeOutcome] = []
    got = threading.Event()
    worker = ResumeWorker(server.client("agent", backoff=0.05), graph,
                          state_file=tmp_path / "w.json",
                          on_outcome=lambda o: (outcomes.append(o), got.set()))
    worker.start()
    try:
        graph.invoke(ORDER, run_config(thread))
        rid = pending_request(graph, thread)["request_id"]
        restart_server(server)
        server.reviewer.approve(rid)
        assert got.wait(10), worker.error
        time.sleep(0.3)  # nothing more arrives
    finally:
        worker.stop()
    assert [(o.request_id, o.kind) for o in outcomes] == [(rid, "approved")]
    assert len(executor.calls) == 1 and worker.error is None


# ------------------------------------------------------------------ partial approvals, scripted


def partial(seq: int, request_id: str, n: int = 1, of: int = 2) -> dict:
    """A partial approval (spec section 7.5): ``ticket_id`` null, with the counts."""
    return rec(seq, "decision", request_id, decision="approve", ticket_id=None, expires_at=None,
               superseded_by=None, edited_digest=None, rationale=None, approvals=n,
               approvals_required=of)


def final(seq: int, request_id: str, ticket: str = "t-final") -> dict:
    return rec(seq, "decision", request_id, decision="approve", ticket_id=ticket,
               expires_at="2026-12-01T15:00:00.000000Z", superseded_by=None,
               edited_digest=None, rationale=None, approvals=2, approvals_required=2)


def policy_record(seq: int) -> dict:
    r = rec(seq, "policy", None, policy={"default": {}}, policy_digest="sha256:" + "0" * 64)
    r["thread_id"] = "hitl-ledger/policy"
    return r


def test_a_partial_approval_never_resumes_and_the_last_one_does(tmp_path):
    graph = PausedGraph()
    records = [policy_record(0), rec(1, "interrupt", "r", tool="payout", args={}),
               partial(2, "r")]
    client = ScriptedClient(records)
    worker = ResumeWorker(client, graph, state_file=tmp_path / "s")
    assert worker.poll_once(0.1) == [] and graph.resumed == []
    assert worker.last_seq == 2  # nothing waits: the partial approval closes nothing
    client.records += [rec(3, "review", "r", reviews="0" * 64, verdict="acknowledged",
                           rationale="x"), final(4, "r")]
    (outcome,) = worker.poll_once(0.1)
    assert (outcome.kind, outcome.seq, outcome.ticket_id) == ("approved", 4, "t-final")
    ((resume, _),) = graph.resumed
    assert resume == {"i-r": {"outcome": "approved", "ticket_id": "t-final",
                              "expires_at": "2026-12-01T15:00:00.000000Z"}}


def test_an_edit_needing_more_approvals_resumes_on_the_new_requests_last_one(tmp_path):
    graph = PausedGraph()
    records = edit_records()
    records[2] = partial(7, "n")  # the editor's approval of the edited call is partial
    client = ScriptedClient(records)
    worker = ResumeWorker(client, graph, state_file=tmp_path / "s")
    assert worker.poll_once(0.1) == [] and graph.resumed == []
    assert worker.last_seq == 4  # the saved position does not pass the open edit (seq 5)
    client.records += [policy_record(8), rec(9, "refusal", "n", method="POST", path="/",
                                             error="approver_already_approved"),
                       partial(10, "n", 1, 3), final(11, "n", "t-new")]
    (outcome,) = worker.poll_once(0.1)
    assert (outcome.kind, outcome.seq, outcome.new_request_id, outcome.ticket_id) == (
        "edited", 5, "n", "t-new")
    ((resume, _),) = graph.resumed
    assert resume["i-r"]["ticket_id"] == "t-new" and resume["i-r"]["request_id"] == "n"
    assert worker.last_seq == 11
    # A worker restarted from a state file before the edit re-reads it, whole.
    again = PausedGraph()
    assert [o.ticket_id for o in ResumeWorker(client, again, state_file=tmp_path / "s2")
            .poll_once(0.1)] == ["t-new"]


@pytest.mark.parametrize("closing, kind, resume", [
    (rec(8, "timeout", "n", expires_at="2026-12-01T16:00:00.000000Z"), "timed_out",
     {"outcome": "timed_out", "expires_at": "2026-12-01T16:00:00.000000Z"}),
    (rec(8, "revocation", "n", reason="customer cancelled"), "revoked",
     {"outcome": "revoked", "reason": "customer cancelled"}),
    # The new request allows only approve (spec section 7.3); were a rejection recorded, it
    # would still close the pause, never leave it waiting.
    (rec(8, "rejection", "n", ticket_id="t-rej", rationale="no"), "rejected",
     {"outcome": "rejected", "ticket_id": "t-rej", "rationale": "no"}),
])
def test_an_edit_waiting_for_approvals_closes_on_its_timeout_or_revocation(tmp_path, closing,
                                                                           kind, resume):
    graph = PausedGraph()
    records = edit_records()
    records[2] = partial(7, "n")
    worker = ResumeWorker(ScriptedClient([*records, closing]), graph,
                          state_file=tmp_path / "s")
    (outcome,) = worker.poll_once(0.1)
    assert (outcome.kind, outcome.request_id, outcome.new_request_id) == (kind, "r", "n")
    assert graph.resumed[0][0] == {"i-r": resume}
    assert worker.last_seq == 8
