"""A wire-transfer agent as a LangGraph graph, gated by hitl-ledger, with a redacted account.

The destination account never reaches the ledger in clear: the request names ``/account`` in
``redact`` (and the server's policy may add it for the tool too), so the interrupt stores a keyed
digest of it, and the approval binds the whole call with a keyed digest. The interrupt value that
LangGraph checkpoints masks it too. The gate still checks the clear call presented at execution.

Run it like the refund example (see README.md)::

    python examples/wire_transfer_graph.py --spawn ~/.cache/hitl-ledger/target/debug/hitl-ledger

Scenarios (``--scenario``, default all): approve, reject, edit, timeout, stale.
"""

from __future__ import annotations

import json
import sys
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from refund_graph import main as _main  # noqa: E402  (shared command line and server spawning)

REDACT = ["/account"]


class WireState(TypedDict, total=False):
    payee: str
    amount: str
    currency: str
    invoice: str
    account: str
    review_ttl_seconds: int
    approval: dict
    outcome: dict


ARG_FIELDS = ("payee", "amount", "currency", "invoice", "account")


def wire_action(state: WireState) -> dict[str, Any]:
    return {"tool": "wire_transfer", "args": {k: state[k] for k in ARG_FIELDS}}


def build_wire_graph(agent: LedgerClient, wire: Callable[..., Any], *, checkpointer: Any = None):
    """Compile the graph. ``wire(args, idempotency_key=...)`` is the side effect."""

    def review(state: WireState) -> dict:
        approval = request_approval(
            agent,
            wire_action(state),
            redact=REDACT,
            allowed_decisions=["approve", "edit", "reject"],
            review_ttl_seconds=state.get("review_ttl_seconds"),
            description=f"Wire {state['amount']} {state['currency']} to {state['payee']}",
        )
        update: dict[str, Any] = {"approval": approval.as_state()}
        if approval.edited:
            update.update({k: approval.action["args"][k] for k in ARG_FIELDS})
        return update

    def execute(state: WireState) -> dict:
        outcome = execute_approved(
            agent, Approval.from_state(state["approval"]), wire, action=wire_action(state)
        )
        return {"outcome": outcome.as_state()}

    builder = StateGraph(WireState)
    builder.add_node("review", review)
    builder.add_node("execute", execute)
    builder.add_edge(START, "review")
    builder.add_edge("review", "execute")
    builder.add_edge("execute", END)
    return builder.compile(checkpointer=checkpointer or InMemorySaver())


class Bank:
    """Stands in for the bank: deduplicates on the idempotency key."""

    def __init__(self) -> None:
        self.sent: dict[str, dict] = {}

    def __call__(self, args: dict, *, idempotency_key: str) -> dict:
        if idempotency_key not in self.sent:
            self.sent[idempotency_key] = {"operation_id": f"wt-{len(self.sent) + 1}"}
            print(f"    WIRE SENT: {args['amount']} {args['currency']} to {args['payee']}")
        return self.sent[idempotency_key]


INVOICE: WireState = {
    "payee": "Acme Logistics",
    "amount": "48000.00",
    "currency": "USD",
    "invoice": "INV-8472",
    "account": "DE89370400440532013000",
}


def scenario(name: str, agent, reviewer, auditor, *, stale_wait: float) -> None:
    print(f"\n== {name}")
    bank = Bank()
    graph = build_wire_graph(agent, bank)
    thread = f"wire-{name}-{uuid.uuid4().hex[:8]}"
    state: WireState = dict(INVOICE)
    if name == "timeout":
        state["review_ttl_seconds"] = 1
    graph.invoke(state, run_config(thread))
    req = graph.get_state(run_config(thread)).interrupts[0].value
    print(f"    paused on request {req['request_id']}: {req['args']}")

    if name == "approve":
        result = reviewer.approve(req["request_id"], "invoice matches PO-118")
    elif name == "reject":
        result = reviewer.reject(req["request_id"], "payee bank details changed by e-mail")
    elif name == "edit":
        # The console edits the call with the host's clear values (the ledger only has digests).
        current = graph.get_state(run_config(thread)).values
        edited = wire_action({**current, "amount": "24000.00"})
        result = reviewer.edit(req["request_id"], edited, "first instalment only")
    elif name == "timeout":
        time.sleep(2.2)
        try:
            reviewer.reject(req["request_id"], "too late")
        except Conflict as e:
            print(f"    late decision refused: {e.code}")
        _show(auditor, thread)
        return
    elif name == "stale":
        result = reviewer.approve(req["request_id"])
        time.sleep(stale_wait)
    else:
        raise SystemExit(f"unknown scenario {name}")

    out = graph.invoke(resume_command(result), run_config(thread))
    print(f"    executed={out['outcome']['executed']} code={out['outcome']['code']}")
    _show(auditor, thread)


def _show(auditor: LedgerClient | None, thread: str) -> None:
    if auditor is None:
        return
    records = auditor.thread_records(thread)
    for r in records:
        body = r["body"]
        shown = body.get("code") or body.get("decision") or body.get("rationale") or ""
        if r["kind"] == "interrupt":
            shown = f"account={body['args']['account'][:28]}… amount={body['args']['amount']}"
        print(f"    #{r['thread_seq']} {r['kind']:<13} {r['actor']['principal']:<16} {shown}")
    clear = INVOICE["account"]
    leaked = any(clear in json.dumps(r) for r in records)
    print(f"    account in clear anywhere in the ledger's records: {leaked}")


if __name__ == "__main__":
    sys.exit(
        _main(
            default_policy={
                "tools": {"wire_transfer": {"approval_ttl_seconds": 3, "redact": ["/account"]}}
            },
            run_scenario=scenario,
        )
    )
