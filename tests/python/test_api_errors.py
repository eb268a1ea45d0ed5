"""Bad input against the real server: every error code of the contract arrives as its typed error,
non-idempotent calls are not repeated, and a ledger that is down stops execution."""

from __future__ import annotations

import threading
import uuid

import pytest
from hitl_ledger import LedgerClient, errors
from hitl_ledger.langgraph import resume_command, run_config
from refund_graph import build_refund_graph

ACTION = {"tool": "refund", "args": {"order_id": "O-1", "amount_cents": 5}}
SOME_TICKET = "01a22e83-a6b0-7681-a0b7-b52c93a79820"


def uid(prefix: str = "r") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def interrupt_body(**kw):
    body = {"request_id": uid(), "thread_id": uid("t"), "interrupt_id": "i", "action": ACTION}
    body.update(kw)
    return body


def open_request(ledger, **kw) -> str:
    body = interrupt_body(**kw)
    ledger.agent.append_interrupt(**body)
    return body["request_id"]


def expect(cls, code, fn):
    with pytest.raises(cls) as info:
        fn()
    assert type(info.value) is cls
    assert info.value.code == code
    assert info.value.status == errors.ERROR_CLASSES[code].status
    assert info.value.message
    return info.value


def post_interrupt(ledger, body=None, **kw):
    return lambda: ledger.agent.request("POST", "/v1/interrupts", body, idempotent=True, **kw)


def test_400_codes(ledger):
    a, r = ledger.agent, ledger.reviewer
    expect(errors.InvalidJson, "invalid_json", post_interrupt(ledger, raw_body=b"{"))
    expect(errors.UnknownField, "unknown_field",
           post_interrupt(ledger, interrupt_body(reviewer="py-reviewer")))
    body = interrupt_body()
    del body["thread_id"]
    expect(errors.MissingField, "missing_field", post_interrupt(ledger, body))
    expect(errors.InvalidRequest, "invalid_request",
           post_interrupt(ledger, interrupt_body(review_ttl_seconds=0)))
    expect(errors.InvalidIdentifier, "invalid_identifier",
           post_interrupt(ledger, interrupt_body(thread_id="a\u0001b")))
    expect(errors.InvalidIdentifier, "invalid_identifier",
           post_interrupt(ledger, interrupt_body(request_id="hitl-ledger/mine")))
    expect(errors.InvalidAction, "invalid_action",
           post_interrupt(ledger, interrupt_body(action={"tool": "refund", "args": []})))
    raw = (b'{"request_id":"r-big","thread_id":"t","interrupt_id":"i",'
           b'"action":{"tool":"refund","args":{"n":9007199254740993}}}')
    expect(errors.NotCanonicalizable, "not_canonicalizable", post_interrupt(ledger, raw_body=raw))
    raw = (b'{"request_id":"r-dup","thread_id":"t","interrupt_id":"i",'
           b'"action":{"tool":"refund","args":{"n":1,"n":2}}}')
    expect(errors.NotCanonicalizable, "not_canonicalizable", post_interrupt(ledger, raw_body=raw))
    expect(errors.InvalidRedaction, "invalid_redaction",
           post_interrupt(ledger, interrupt_body(redact=["/missing"])))
    expect(errors.ReviewTtlTooLong, "review_ttl_too_long",
           post_interrupt(ledger, interrupt_body(review_ttl_seconds=3601)))
    rid = open_request(ledger, allowed_decisions=["approve"])
    expect(errors.DecisionNotAllowed, "decision_not_allowed", lambda: r.reject(rid, "no"))
    expect(errors.MissingField, "missing_field", lambda: r.decide(rid, "reject"))
    expect(errors.InvalidTicketId, "invalid_ticket_id",
           lambda: a.authorize(rid, ticket_id="not-a-ticket", action=ACTION))
    expect(errors.UnknownFollows, "unknown_follows",
           lambda: a.follow_up(rid, follow_up_id="f", follows="00" * 32, outcome="done"))
    # None of these wrote anything for the request.
    assert ledger.reviewer.get_request(rid).kinds() == ["interrupt"]
    coded = open_request(ledger)
    expect(errors.UnknownReasonCode, "unknown_reason_code",
           lambda: r.reject(coded, "no", reason_code="not_in_the_list"))
    expect(errors.UnknownReasonCode, "unknown_reason_code",
           lambda: a.revoke(coded, "stop", reason_code="Not-A-Code"))
    assert ledger.reviewer.get_request(coded).kinds() == ["interrupt"]


def test_the_client_refuses_what_the_ledger_would_before_sending(ledger):
    body = interrupt_body(action={"tool": "refund", "args": {"n": 2**53}})
    with pytest.raises(errors.NotCanonicalizable):
        ledger.agent.append_interrupt(**body)
    with pytest.raises(errors.NotCanonicalizable):
        ledger.agent.request("POST", "/v1/interrupts", interrupt_body(
            action={"tool": "refund", "args": {"x": float("nan")}}))


def test_401_403_404_405(ledger):
    nobody = LedgerClient(ledger.url, "hlt_not-a-token")
    anonymous = LedgerClient(ledger.url, None)
    expect(errors.Unauthenticated, "unauthenticated", nobody.pending)
    expect(errors.Unauthenticated, "unauthenticated", lambda: anonymous.get_request("x"))
    assert anonymous.healthz()
    expect(errors.Forbidden, "forbidden", ledger.agent.pending)  # agents cannot read
    rid = open_request(ledger)
    expect(errors.Forbidden, "forbidden", lambda: ledger.agent.approve(rid))  # nor approve
    expect(errors.Forbidden, "forbidden", lambda: ledger.reviewer.revoke(rid, "x"))
    expect(errors.Forbidden, "forbidden", ledger.agent.metrics)
    expect(errors.NotFound, "not_found", lambda: ledger.auditor.request("GET", "/v1/nope"))
    expect(errors.RequestNotFound, "request_not_found",
           lambda: ledger.reviewer.get_request(uid()))
    expect(errors.RequestNotFound, "request_not_found",
           lambda: ledger.agent.authorize(uid(), ticket_id=SOME_TICKET, action=ACTION))
    expect(errors.ThreadNotFound, "thread_not_found",
           lambda: ledger.auditor.export_thread(uid("t")))
    assert ledger.auditor.thread_records(uid("t")) == []
    err = expect(errors.AppendOnly, "append_only",
                 lambda: ledger.agent.request("DELETE", f"/v1/requests/{rid}"))
    assert isinstance(err, errors.MethodNotAllowed)
    expect(errors.MethodNotAllowed, "method_not_allowed",
           lambda: ledger.agent.request("GET", "/v1/interrupts"))
    # The authenticated DELETE was recorded as a refusal in the request's thread.
    refusals = ledger.reviewer.get_request(rid).of_kind("refusal")
    assert [(x["body"]["method"], x["body"]["error"]) for x in refusals] == [
        ("DELETE", "append_only")]
    assert "hitl_ledger_" in ledger.admin.metrics()


def test_409_codes(ledger):
    rid = open_request(ledger)
    first = ledger.reviewer.approve(rid, "looks right")
    again = ledger.reviewer.approve(rid, "looks right")
    assert again.duplicate and again.seq == first.seq and again.ticket_id == first.ticket_id
    expect(errors.IdempotencyConflict, "idempotency_conflict",
           lambda: ledger.reviewer.approve(rid, "another rationale"))
    expect(errors.Conflict, "conflict", lambda: ledger.reviewer.reject(rid, "changed my mind"))
    ledger.agent.revoke(rid, "withdrawn")
    expect(errors.IdempotencyConflict, "idempotency_conflict",
           lambda: ledger.agent.revoke(rid, "another reason"))
    rejected = open_request(ledger)
    ledger.reviewer.reject(rejected, "no")
    expect(errors.Conflict, "conflict", lambda: ledger.agent.revoke(rejected, "too late"))
    assert ledger.reviewer.get_request(rid).kinds() == ["interrupt", "decision", "revocation"]


def test_413_415(ledger):
    expect(errors.BodyTooLarge, "body_too_large",
           post_interrupt(ledger, raw_body=b'{"a":"' + b"x" * (1 << 20) + b'"}'))
    # A body under 1 MiB whose record would exceed the 1 MiB leaf limit.
    blob = "x" * ((1 << 20) - 400)
    expect(errors.RecordTooLarge, "record_too_large", post_interrupt(
        ledger, interrupt_body(action={"tool": "refund", "args": {"blob": blob}})))
    expect(errors.UnsupportedMediaType, "unsupported_media_type",
           post_interrupt(ledger, interrupt_body(), content_type="text/plain"))


def test_503_overloaded_retried_only_when_idempotent(make_ledger):
    # A queue of one: while one batch commits and one append waits, the next is refused. The
    # appends of a burst leave together (a barrier), so several meet one commit; a burst that
    # happened to be served one by one (the commit is fast) is sent again, at most ten times.
    server = make_ledger(extra_args=("--queue-capacity", "1"))

    def burst(retries: int, n: int = 24) -> list:
        out: list = []
        start = threading.Barrier(n)

        def go() -> None:
            c = LedgerClient(server.url, server.tokens["agent"], retries=retries)
            start.wait(timeout=30)
            try:
                c.append_interrupt(**interrupt_body())
                out.append("ok")
            except errors.Overloaded as e:
                out.append(e)

        threads = [threading.Thread(target=go) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        return out

    refused: list = []
    for _ in range(10):
        refused = [x for x in burst(retries=0) if x != "ok"]
        if refused:
            break
    assert refused, "a queue of 1 under bursts of 24 should refuse some appends"
    assert all(type(e) is errors.Overloaded and e.code == "overloaded" and e.status == 503
               and e.retry_after is not None for e in refused)
    # Idempotent appends are retried after Retry-After and all land.
    assert burst(retries=8, n=6) == ["ok"] * 6


def test_ledger_down_before_execution_executes_nothing(make_ledger, executor):
    server = make_ledger()

    def ledger_goes_down(state):
        server.stop()
        return {}

    graph = build_refund_graph(server.agent, executor, between=ledger_goes_down)
    thread = uid("down")
    graph.invoke({"order_id": "O-1", "amount_cents": 5}, run_config(thread))
    rid = graph.get_state(run_config(thread)).interrupts[0].value["request_id"]
    result = server.reviewer.approve(rid)
    with pytest.raises(errors.LedgerConnectionError) as info:
        graph.invoke(resume_command(result), run_config(thread))
    assert executor.calls == []
    assert "connection refused" in str(info.value)
    # The graph stopped before the execution step: nothing records a success.
    assert graph.get_state(run_config(thread)).next == ("execute",)


def test_ledger_down_before_pausing_never_pauses(make_ledger, executor):
    server = make_ledger()
    agent = server.agent
    server.stop()
    graph = build_refund_graph(agent, executor)
    with pytest.raises(errors.LedgerConnectionError):
        graph.invoke({"order_id": "O-1", "amount_cents": 5}, run_config(uid("down")))
    assert executor.calls == []
