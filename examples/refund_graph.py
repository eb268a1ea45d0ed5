"""A refund agent as a LangGraph graph, gated by hitl-ledger.

The graph: ``review`` (append the interrupt to the ledger, pause, resume with a ticket) →
``execute`` (authorize immediately before the refund; refund only on a grant) → END.

Run it against a local server (see README.md), either one you started::

    python examples/refund_graph.py --url http://127.0.0.1:8080 \\
        --agent-token "$AGENT" --reviewer-token "$REVIEWER" --auditor-token "$AUDITOR"

or let the script start a throw-away one from the binary (with a 3-second approval lifetime for
``refund``, so the stale scenario is quick)::

    python examples/refund_graph.py --spawn ~/.cache/hitl-ledger/target/debug/hitl-ledger

Scenarios (``--scenario``, default all): approve, reject, edit, timeout, stale.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, TypedDict

from hitl_ledger import LedgerClient
from hitl_ledger.errors import Conflict
from hitl_ledger.langgraph import (
    Approval,
    execute_approved,
    request_approval,
    resume_command,
    run_config,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph


class RefundState(TypedDict, total=False):
    order_id: str
    amount_cents: int
    reason: str
    review_ttl_seconds: int
    approval: dict
    outcome: dict


def refund_action(state: RefundState, tool: str = "refund") -> dict[str, Any]:
    """The call the agent wants to make, built from the graph's state."""
    return {
        "tool": tool,
        "args": {"order_id": state["order_id"], "amount_cents": state["amount_cents"]},
    }


def build_refund_graph(
    agent: LedgerClient,
    refund: Callable[..., Any],
    *,
    checkpointer: Any = None,
    tool: str = "refund",
    between: Callable[[RefundState], dict] | None = None,
):
    """Compile the graph. ``refund(args, idempotency_key=...)`` is the side effect.

    ``between`` (for demonstrations and tests) is a node run after the review and before the
    execution: an agent step that changes the state after a human approved it.
    """

    def review(state: RefundState) -> dict:
        approval = request_approval(
            agent,
            refund_action(state, tool),
            allowed_decisions=["approve", "edit", "reject"],
            review_ttl_seconds=state.get("review_ttl_seconds"),
            description=f"Refund {state['amount_cents']} cents on {state['order_id']}",
        )
        update: dict[str, Any] = {"approval": approval.as_state()}
        if approval.edited:  # the reviewer's call replaces the agent's
            update["amount_cents"] = approval.action["args"]["amount_cents"]
            update["order_id"] = approval.action["args"]["order_id"]
        return update

    def execute(state: RefundState) -> dict:
        approval = Approval.from_state(state["approval"])
        # What is about to execute is what the state says now: the gate checks it against what
        # the reviewer approved.
        outcome = execute_approved(agent, approval, refund, action=refund_action(state, tool))
        return {"outcome": outcome.as_state()}

    builder = StateGraph(RefundState)
    builder.add_node("review", review)
    builder.add_node("execute", execute)
    builder.add_edge(START, "review")
    if between is not None:
        builder.add_node("between", between)
        builder.add_edge("review", "between")
        builder.add_edge("between", "execute")
    else:
        builder.add_edge("review", "execute")
    builder.add_edge("execute", END)
    return builder.compile(checkpointer=checkpointer or InMemorySaver())


# ------------------------------------------------------------------------------ demonstration


class RefundService:
    """Stands in for the payment system: deduplicates on the idempotency key."""

    def __init__(self) -> None:
        self.done: dict[str, dict] = {}

    def __call__(self, args: dict, *, idempotency_key: str) -> dict:
        if idempotency_key not in self.done:
            self.done[idempotency_key] = {"operation_id": f"rf-{len(self.done) + 1}", **args}
            print(f"    REFUND EXECUTED: {args} (key {idempotency_key[:12]}…)")
        return self.done[idempotency_key]


def pending_request(graph, config) -> dict:
    """The ledger interrupt the graph is paused on (what a console reads from the graph)."""
    interrupts = graph.get_state(config).interrupts
    assert interrupts, "the graph is not paused"
    return interrupts[0].value


def show_records(auditor: LedgerClient | None, thread_id: str) -> None:
    if auditor is None:
        return
    for r in auditor.thread_records(thread_id):
        body = r["body"]
        extra = body.get("code") or body.get("decision") or body.get("rationale") or ""
        print(f"    #{r['thread_seq']} {r['kind']:<13} {r['actor']['principal']:<14} {extra}")


def scenario(name: str, agent, reviewer, auditor, *, stale_wait: float) -> None:
    print(f"\n== {name}")
    refunds = RefundService()
    graph = build_refund_graph(agent, refunds)
    thread = f"refund-{name}-{uuid.uuid4().hex[:8]}"
    state: RefundState = {"order_id": "O-19", "amount_cents": 2500}
    if name == "timeout":
        state["review_ttl_seconds"] = 1
    graph.invoke(state, run_config(thread))
    req = pending_request(graph, run_config(thread))
    print(f"    paused on request {req['request_id']} ({req['tool']} {req['args']})")

    if name == "approve":
        result = reviewer.approve(req["request_id"], "customer verified")
    elif name == "reject":
        result = reviewer.reject(req["request_id"], "order already refunded")
    elif name == "edit":
        edited = {"tool": "refund", "args": {"order_id": "O-19", "amount_cents": 2000}}
        result = reviewer.edit(req["request_id"], edited, "partial refund only")
    elif name == "timeout":
        time.sleep(2.2)  # the review window passes; the ledger sweeps a `timeout`
        try:
            reviewer.approve(req["request_id"])
        except Conflict as e:
            print(f"    late approval refused: {e.code}")
        show_records(auditor, thread)
        return
    elif name == "stale":
        result = reviewer.approve(req["request_id"], "ok")
        print(f"    approved until {result.expires_at}; the host resumes {stale_wait:.1f}s later")
        time.sleep(stale_wait)
    else:
        raise SystemExit(f"unknown scenario {name}")

    out = graph.invoke(resume_command(result), run_config(thread))
    outcome = out["outcome"]
    print(f"    executed={outcome['executed']} code={outcome['code']} refunds={len(refunds.done)}")
    show_records(auditor, thread)


def spawn_local_ledger(binary: str, policy: dict) -> tuple[dict[str, str], Callable[[], None]]:
    """Start a throw-away server from ``binary``: answers its URL and tokens, and a stop."""
    data = Path(tempfile.mkdtemp(prefix="hitl-ledger-example-"))

    def run(*args: str) -> str:
        return subprocess.run([binary, "--data", str(data / "d"), *args], check=True,
                              capture_output=True, text=True).stdout

    run("init", "--origin", "example.local/ledger")
    # The policy is the log's: init recorded the default one, `policy set` records this one.
    (data / "d" / "example-policy.json").write_text(json.dumps(policy))
    run("policy", "set", str(data / "d" / "example-policy.json"))
    tokens = {
        role: json.loads(run("token", "add", "--principal", f"example-{role}", "--role", role,
                             "--format", "json"))["token"]
        for role in ("agent", "reviewer", "auditor")
    }
    log = open(data / "server.log", "wb")  # noqa: SIM115 - the server's, closed on stop
    proc = subprocess.Popen([binary, "--data", str(data / "d"), "serve", "--listen",
                             "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=log, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"the server did not start: {line!r}")

    def stop() -> None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        log.close()
        shutil.rmtree(data, ignore_errors=True)

    return {"url": "http://" + line.split("listening on ", 1)[1].strip(), **tokens}, stop


def main(argv: list[str] | None = None, default_policy: dict | None = None,
         run_scenario=scenario, scenarios=("approve", "reject", "edit", "timeout", "stale")) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default=os.environ.get("HITL_LEDGER_URL"))
    p.add_argument("--agent-token", default=os.environ.get("HITL_LEDGER_AGENT_TOKEN"))
    p.add_argument("--reviewer-token", default=os.environ.get("HITL_LEDGER_REVIEWER_TOKEN"))
    p.add_argument("--auditor-token", default=os.environ.get("HITL_LEDGER_AUDITOR_TOKEN"))
    p.add_argument("--spawn", metavar="BINARY", help="start a throw-away server from BINARY")
    p.add_argument("--scenario", choices=[*scenarios, "all"], default="all")
    p.add_argument("--stale-wait", type=float, default=None,
                   help="seconds the host waits before resuming in the stale scenario "
                   "(default: 3.5 with --spawn; set it past the tool's approval_ttl_seconds)")
    args = p.parse_args(argv)
    stop = None
    if args.spawn:
        conf, stop = spawn_local_ledger(args.spawn, default_policy or {
            "tools": {"refund": {"approval_ttl_seconds": 3}}})
        args.url, args.agent_token = conf["url"], conf["agent"]
        args.reviewer_token, args.auditor_token = conf["reviewer"], conf["auditor"]
        if args.stale_wait is None:
            args.stale_wait = 3.5
    if not (args.url and args.agent_token and args.reviewer_token):
        p.error("give --spawn BINARY, or --url, --agent-token and --reviewer-token")
    agent = LedgerClient(args.url, args.agent_token)
    reviewer = LedgerClient(args.url, args.reviewer_token)
    auditor = LedgerClient(args.url, args.auditor_token) if args.auditor_token else None
    try:
        for name in scenarios if args.scenario == "all" else [args.scenario]:
            if name == "stale" and args.stale_wait is None:
                print("\n== stale: skipped; give --stale-wait past the tool's approval lifetime")
                continue
            run_scenario(name, agent, reviewer, auditor, stale_wait=args.stale_wait)
    finally:
        if stop:
            stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
