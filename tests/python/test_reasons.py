"""Structured reasons against the real server (spec section 12, ``reason_codes``): the client's
``reject(..., reason_code=)`` and ``revoke(..., reason_code=)`` record the code; a code outside
the tool's list, or malformed, raises ``UnknownReasonCode`` and writes nothing; a call without
one records a body as before."""

from __future__ import annotations

import uuid

import pytest
from hitl_ledger import errors

#: The default list for every tool but ``wire_transfer``, which has its own.
LEDGER_POLICY = {
    "default": {"review_window_seconds": 3600, "approval_ttl_seconds": 600},
    "tools": {"wire_transfer": {"reason_codes": ["wrong_iban", "other"]}},
}


def open_request(ledger, tool: str = "refund") -> str:
    rid = f"r-{uuid.uuid4().hex[:12]}"
    ledger.agent.append_interrupt(
        request_id=rid, thread_id=f"t-{rid}", interrupt_id="i",
        action={"tool": tool, "args": {"order_id": "O-1", "amount_cents": 5}})
    return rid


def test_a_rejection_records_its_reason_code(ledger):
    rid = open_request(ledger)
    res = ledger.reviewer.reject(rid, "the amount is wrong", reason_code="wrong_amount")
    assert res.record["kind"] == "rejection"
    assert res.record["body"]["reason_code"] == "wrong_amount"
    assert res.record["body"]["rationale"] == "the amount is wrong"
    again = ledger.reviewer.reject(rid, "the amount is wrong", reason_code="wrong_amount")
    assert again.duplicate and again.seq == res.seq
    # The same rejection with another code is another append.
    with pytest.raises(errors.IdempotencyConflict):
        ledger.reviewer.reject(rid, "the amount is wrong", reason_code="duplicate")
    with pytest.raises(errors.IdempotencyConflict):
        ledger.reviewer.reject(rid, "the amount is wrong")


def test_a_revocation_records_its_reason_code(ledger):
    rid = open_request(ledger)
    res = ledger.agent.revoke(rid, "the customer withdrew", reason_code="duplicate")
    assert res.record["kind"] == "revocation"
    assert res.record["body"] == {"reason": "the customer withdrew", "reason_code": "duplicate"}


def test_without_a_code_the_bodies_are_as_before(ledger):
    rid = open_request(ledger)
    res = ledger.reviewer.reject(rid, "no")
    assert "reason_code" not in res.record["body"]
    rid = open_request(ledger)
    res = ledger.agent.revoke(rid, "stop")
    assert res.record["body"] == {"reason": "stop"}


@pytest.mark.parametrize("code", ["wrong_iban", "Wrong_Amount", "no such code", "", "x" * 65])
def test_an_unknown_or_malformed_code_writes_nothing(ledger, code):
    rid = open_request(ledger)
    with pytest.raises(errors.UnknownReasonCode) as info:
        ledger.reviewer.reject(rid, "no", reason_code=code)
    assert info.value.status == 400 and info.value.code == "unknown_reason_code"
    with pytest.raises(errors.UnknownReasonCode):
        ledger.agent.revoke(rid, "stop", reason_code=code)
    assert ledger.reviewer.get_request(rid).kinds() == ["interrupt"]


def test_a_tools_own_list_replaces_the_default(ledger):
    rid = open_request(ledger, "wire_transfer")
    with pytest.raises(errors.UnknownReasonCode) as info:
        ledger.reviewer.reject(rid, "no", reason_code="wrong_amount")
    assert "wrong_iban" in info.value.message
    assert ledger.reviewer.get_request(rid).kinds() == ["interrupt"]
    res = ledger.reviewer.reject(rid, "the IBAN is wrong", reason_code="wrong_iban")
    assert res.record["body"]["reason_code"] == "wrong_iban"
