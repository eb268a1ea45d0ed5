"""The oversight report through the Python client (issue 21; spec section 13): the counts of a
small history, the thread restriction, the roles, and bad parameters answered with their
stable codes."""

from __future__ import annotations

import uuid

import pytest
from hitl_ledger import errors

ACTION = {"tool": "py_report_refund", "args": {"order_id": "O-1", "amount_cents": 100}}


def opened(agent, thread):
    rid = f"rep-{uuid.uuid4().hex[:10]}"
    agent.append_interrupt(request_id=rid, thread_id=thread, interrupt_id=f"i-{rid}",
                           action=ACTION)
    return rid


def test_report_counts_the_records(ledger):
    thread = f"t-rep-{uuid.uuid4().hex[:8]}"
    approved = opened(ledger.agent, thread)
    rejected = opened(ledger.agent, thread)
    opened(ledger.agent, thread)
    ledger.reviewer.decide(approved, "approve")
    ledger.reviewer.decide(rejected, "reject", rationale="not this one")

    report = ledger.auditor.report(window="1h", by="tool", thread=thread)
    assert report["thread"] == thread
    assert report["by"] == "tool"
    assert report["window_seconds"] == 3600
    assert report["checkpoint"]["size"] == int(ledger.auditor.checkpoint().split("\n")[1])
    [group] = [g for g in report["groups"] if g["key"] == ACTION["tool"]]
    totals = group["totals"]
    assert (totals["opened"], totals["approved"], totals["rejected"], totals["pending"]) == (
        3, 1, 1, 1)
    assert totals["approval_rate"] == 0.5
    assert totals["rejection_reasons"] == {"unspecified": 1}
    assert "not this one" not in str(report)
    by_reviewer = ledger.admin.report(by="reviewer", thread=thread, alpha=0.05)
    assert by_reviewer["alpha"] == 0.05
    keys = {g["key"] for g in by_reviewer["groups"]}
    assert None in keys, "the pending request is nobody's decision"


def test_report_roles_and_bad_parameters(ledger):
    for role in ("reviewer", "agent"):
        with pytest.raises(errors.ApiError) as e:
            ledger.client(role).report()
        assert e.value.status == 403 and e.value.code == "forbidden"
    for kw, code in (
        ({"by": "tenant"}, "invalid_report_group"),
        ({"window": "a week"}, "invalid_duration"),
        ({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
         "invalid_report_range"),
        ({"alpha": 1.5}, "invalid_request"),
    ):
        with pytest.raises(errors.ApiError) as e:
            ledger.auditor.report(**kw)
        assert e.value.status == 400 and e.value.code == code, kw
