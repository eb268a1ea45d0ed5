"""A refund agent whose paused runs are resumed by hitl-ledger's ResumeWorker.

The graph: ``review`` (append the interrupt to the ledger, pause) → ``execute`` (authorize
immediately before the refund, refund only on a grant; a rejection, a timeout or a revocation
ends the run with that explicit outcome) → END.

Nobody calls ``graph.invoke(Command(resume=...))`` by hand here: a
:class:`~hitl_ledger.langgraph.ResumeWorker` follows the ledger's decision stream with the
agent's token and resumes each paused thread with the ledger's answer, exactly once, whatever
the reviewer used to decide (the reviewer's console, the CLI, this script's reviewer client).
It keeps its position in a state file, so a restarted worker neither misses nor repeats a
decision.

Run it against a throw-away server started from the binary::

    python examples/refund_with_worker.py --spawn ~/.cache/hitl-ledger/target/debug/hitl-ledger

or against a server of your own (see README.md)::

    python examples/refund_with_worker.py --url http://127.0.0.1:8080 \\
        --agent-token "$AGENT" --reviewer-token "$REVIEWER"

Scenarios (``--scenario``, default all): approve, reject, edit, timeout.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, TypedDict

from hitl_ledger import LedgerClient
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from refund_graph import RefundService, spawn_local_ledger  # noqa: E402


class RefundState(TypedDict, total=False):
    order_id: str
    amount_cents: int
    review_ttl_seconds: int
    approval: dict
    outcome: dict


def refund_action(state: RefundState) -> dict[str, Any]:
    """The call the agent wants to make, built from the graph's state."""
    return {
        "tool": "refund",
        "args": {"order_id": state["order_id"], "amount_cents": state["amount_cents"]},
    }


def build_graph(agent: LedgerClient, refund: Callable[..., Any], *, checkpointer: Any = None):
    """Compile the graph. ``refund(args, idempotency_key=...)`` is the side effect; it runs
    only on the ledger's grant, with the grant's idempotency key."""

    def review(state: RefundState) -> dict:
        approval = request_approval(
            agent,
            refund_action(state),
            allowed_decisions=["approve", "edit", "reject"],
            review_ttl_seconds=state.get("review_ttl_seconds"),
            description=f"Refund {state['amount_cents']} cents on {state['order_id']}",
        )
        update: dict[str, Any] = {"approval": approval.as_state()}
        if approval.edited:  # the reviewer's call replaces the agent's
            update["order_id"] = approval.action["args"]["order_id"]
            update["amount_cents"] = approval.action["args"]["amount_cents"]
        return update

    def execute(state: RefundState) -> dict:
        approval = Approval.from_state(state["approval"])
        if not approval.approved:
            # The explicit outcome: rejected (with the reviewer's rationale), timed_out or
            # revoked. The refund is never called.
            return {"outcome": {"executed": False, "status": approval.outcome,
                                "reason": approval.reason}}
        gate = execute_approved(agent, approval, refund, action=refund_action(state))
        return {"outcome": {"executed": gate.executed, "status": approval.outcome,
                            "code": gate.code, "idempotency_key": gate.idempotency_key,
                            "result": gate.result}}

    builder = StateGraph(RefundState)
    builder.add_node("review", review)
    builder.add_node("execute", execute)
    builder.add_edge(START, "review")
    builder.add_edge("review", "execute")
    builder.add_edge("execute", END)
    return builder.compile(checkpointer=checkpointer or InMemorySaver())


def pending_request(graph: Any, thread_id: str) -> dict:
    """The ledger interrupt the thread is paused on (what a console reads from the graph)."""
    interrupts = graph.get_state(run_config(thread_id)).interrupts
    if not interrupts:
        raise RuntimeError(f"thread {thread_id} is not paused")
    return interrupts[0].value


# ------------------------------------------------------------------------------ demonstration


def scenario(name: str, agent: LedgerClient, reviewer: LedgerClient, state_file: str) -> None:
    print(f"\n== {name}")
    refunds = RefundService()
    graph = build_graph(agent, refunds)
    outcomes: list[ResumeOutcome] = []
    resumed = threading.Event()

    def on_outcome(outcome: ResumeOutcome) -> None:
        outcomes.append(outcome)
        resumed.set()

    worker = ResumeWorker(agent, graph, state_file=state_file, on_outcome=on_outcome)
    thread = f"refund-worker-{name}-{uuid.uuid4().hex[:8]}"
    state: RefundState = {"order_id": "O-19", "amount_cents": 2500}
    if name == "timeout":
        state["review_ttl_seconds"] = 1
    worker.start()
    try:
        graph.invoke(state, run_config(thread))
        req = pending_request(graph, thread)
        print(f"    paused on request {req['request_id']} ({req['tool']} {req['args']})")
        if name == "approve":
            reviewer.approve(req["request_id"], "customer verified")
        elif name == "reject":
            reviewer.reject(req["request_id"], "order already refunded")
        elif name == "edit":
            reviewer.edit(req["request_id"],
                          {"tool": "refund", "args": {"order_id": "O-19", "amount_cents": 2000}},
                          "partial refund only")
        elif name == "timeout":
            print("    nobody answers; the review window passes")
        else:
            raise SystemExit(f"unknown scenario {name}")
        if not resumed.wait(15):
            raise SystemExit(f"the worker did not resume the thread: {worker.error!r}")
    finally:
        worker.stop()
    (outcome,) = outcomes
    final = graph.get_state(run_config(thread)).values["outcome"]
    print(f"    worker resumed with {outcome.kind} (seq {outcome.seq}, ticket {outcome.ticket_id})")
    print(f"    outcome: executed={final['executed']} status={final['status']} "
          f"reason={final.get('reason')!r} refunds={len(refunds.done)}")
    for done in refunds.done.values():
        print(f"    refunded {done['amount_cents']} cents on {done['order_id']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default=os.environ.get("HITL_LEDGER_URL"))
    p.add_argument("--agent-token", default=os.environ.get("HITL_LEDGER_AGENT_TOKEN"))
    p.add_argument("--reviewer-token", default=os.environ.get("HITL_LEDGER_REVIEWER_TOKEN"))
    p.add_argument("--spawn", metavar="BINARY", help="start a throw-away server from BINARY")
    p.add_argument("--state-file", help="the worker's state file (default: a temporary one)")
    scenarios = ("approve", "reject", "edit", "timeout")
    p.add_argument("--scenario", choices=[*scenarios, "all"], default="all")
    args = p.parse_args(argv)
    stop = None
    if args.spawn:
        conf, stop = spawn_local_ledger(args.spawn, {"tools": {}})
        args.url, args.agent_token, args.reviewer_token = (
            conf["url"], conf["agent"], conf["reviewer"])
    if not (args.url and args.agent_token and args.reviewer_token):
        p.error("give --spawn BINARY, or --url, --agent-token and --reviewer-token")
    agent = LedgerClient(args.url, args.agent_token)
    reviewer = LedgerClient(args.url, args.reviewer_token)
    try:
        with tempfile.TemporaryDirectory(prefix="hitl-ledger-worker-") as tmp:
            state_file = args.state_file or str(Path(tmp) / "resume-worker.json")
            for name in scenarios if args.scenario == "all" else [args.scenario]:
                started = time.monotonic()
                scenario(name, agent, reviewer, state_file)
                print(f"    ({time.monotonic() - started:.1f}s)")
    finally:
        if stop:
            stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
