"""Fast client tests against a scripted HTTP server on 127.0.0.1 (no ledger binary needed):
the typed error of every code, what is and is not retried, and an unreachable ledger."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hitl_ledger import LedgerClient, errors
from hitl_ledger.langgraph import Approval, execute_approved

# Every code of spec section 6 with its status.
CODES = {
    "invalid_json": 400, "unknown_field": 400, "missing_field": 400, "invalid_request": 400,
    "invalid_identifier": 400, "invalid_action": 400, "not_canonicalizable": 400,
    "invalid_redaction": 400, "decision_not_allowed": 400, "review_ttl_too_long": 400,
    "invalid_ticket_id": 400, "unknown_follows": 400, "unauthenticated": 401, "forbidden": 403,
    "not_found": 404, "request_not_found": 404, "thread_not_found": 404, "append_only": 405,
    "method_not_allowed": 405, "conflict": 409, "idempotency_conflict": 409,
    "identifier_in_use": 409,
    # Governance (spec sections 7.5, 7.6, 12).
    "invalid_policy": 400, "approver_is_requester": 403, "approver_already_approved": 403,
    "approver_not_allowed": 403, "break_glass_not_allowed": 403,
    "reviewer_is_break_glass_user": 403, "break_glass_action_mismatch": 409,
    "no_break_glass": 409,
    # Structured reasons (spec section 12, reason_codes).
    "unknown_reason_code": 400,
    "body_too_large": 413, "record_too_large": 413, "unsupported_media_type": 415,
    "overloaded": 503, "unwritable": 503, "storage_error": 500, "internal_error": 500,
}

RECORD_ANSWER = {
    "record": {"kind": "authorization", "request_id": "r", "body": {"would_deny": None}},
    "leaf_hash": "00" * 32, "seq": 3, "duplicate": False,
    "granted": True, "code": None, "idempotency_key": "ab" * 32,
}


class Script:
    """What the fake server answers: a list of (status, json, headers), or a callable."""

    def __init__(self) -> None:
        self.answers: list = []
        self.requests: list[tuple[str, str, bytes, dict]] = []


@pytest.fixture
def fake():
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):  # quiet
            pass

        def _handle(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            script.requests.append((self.command, self.path, body, dict(self.headers)))
            answer = script.answers.pop(0) if script.answers else (200, {"ok": True}, {})
            if answer == "drop":
                self.close_connection = True
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            status, payload, headers = answer
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", headers.pop("Content-Type", "application/json"))
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _handle

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    script.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield script
    server.shutdown()
    server.server_close()


def client(url, **kw):
    kw.setdefault("backoff", 0.01)
    return LedgerClient(url, "tok", **kw)


@pytest.mark.parametrize("code,status", sorted(CODES.items()))
def test_every_error_code_raises_its_type(fake, code, status):
    fake.answers.append((status, {"error": code, "message": f"m-{code}"}, {}))
    with pytest.raises(errors.ApiError) as info:
        client(fake.url, retries=0).request("POST", "/v1/interrupts", {"x": 1})
    err = info.value
    assert type(err) is errors.ERROR_CLASSES[code]
    assert (err.code, err.status, err.message) == (code, status, f"m-{code}")
    assert isinstance(err, errors.HitlLedgerError)


def test_error_table_covers_the_contract():
    assert set(errors.ERROR_CLASSES) == set(CODES)
    for code, cls in errors.ERROR_CLASSES.items():
        assert cls.code == code and cls.status == CODES[code]


def test_unknown_code_falls_back_to_status_class(fake):
    fake.answers.append((409, {"error": "brand_new_code", "message": "x"}, {}))
    with pytest.raises(errors.ConflictError) as info:
        client(fake.url).request("GET", "/v1/pending")
    assert info.value.code == "brand_new_code"


def test_non_json_error_is_a_protocol_error(fake):
    fake.answers.append((502, b"<html>bad gateway</html>", {"Content-Type": "text/html"}))
    with pytest.raises(errors.LedgerProtocolError):
        client(fake.url, retries=0).request("GET", "/v1/pending")


def test_authorize_without_attempt_id_is_never_retried(fake):
    fake.answers += [(503, {"error": "overloaded", "message": "busy"}, {"Retry-After": "0"})] * 3
    with pytest.raises(errors.Overloaded):
        client(fake.url, retries=3).authorize(
            "r", ticket_id="t", action={"tool": "t", "args": {}})
    assert len(fake.requests) == 1


def test_authorize_without_attempt_id_after_a_dropped_connection_is_not_retried(fake):
    fake.answers += ["drop", (200, RECORD_ANSWER, {})]
    with pytest.raises(errors.LedgerConnectionError) as info:
        client(fake.url, retries=3).authorize(
            "r", ticket_id="t", action={"tool": "t", "args": {}})
    assert len(fake.requests) == 1
    assert info.value.retried == 0
    assert "not retried" in str(info.value)


def test_authorize_with_attempt_id_is_retried(fake):
    fake.answers += [(503, {"error": "overloaded", "message": "busy"}, {"Retry-After": "0"}),
                     (200, RECORD_ANSWER, {})]
    auth = client(fake.url, retries=2).authorize(
        "r", ticket_id="t", action={"tool": "t", "args": {}}, attempt_id="a1")
    assert auth.granted and len(fake.requests) == 2
    assert json.loads(fake.requests[0][2]) == json.loads(fake.requests[1][2])


@pytest.mark.parametrize("failure", [
    (500, {"error": "storage_error", "message": "sync failed"}, {}),
    (503, {"error": "unwritable", "message": "restart needed"}, {}),
    "drop",
])
def test_execute_approved_retries_a_failed_authorize_with_the_same_attempt(fake, failure):
    """A 5xx or a dropped connection leaves the grant's outcome unknown: the executor asks
    again with the same attempt id, gets the same grant and key back (the ledger returns it as
    a duplicate), and acts once, instead of being told approval_already_used."""
    fake.answers += [failure, (200, dict(RECORD_ANSWER, duplicate=True), {}),
                     (201, {"record": {}, "leaf_hash": "1" * 64, "seq": 4, "duplicate": False}, {})]
    calls = []
    action = {"tool": "refund", "args": {"order_id": "O-1"}}
    approval = Approval(request_id="r", ticket_id="t", action=action, original_request_id="r")
    out = execute_approved(client(fake.url, retries=2), approval,
                           lambda args, idempotency_key: calls.append(idempotency_key))
    assert out.executed and calls == ["ab" * 32]
    first, second = (json.loads(r[2]) for r in fake.requests[:2])
    assert fake.requests[0][1] == fake.requests[1][1] == "/v1/requests/r/authorize"
    assert first["attempt_id"] and first == second


def test_idempotent_append_is_retried_with_the_same_body(fake):
    answer = {"record": {"kind": "revocation"}, "leaf_hash": "00" * 32, "seq": 1,
              "duplicate": True}
    fake.answers += ["drop", (200, answer, {})]
    res = client(fake.url, retries=2).revoke("r/1", "stop")
    assert res.duplicate and len(fake.requests) == 2
    assert fake.requests[0][1] == "/v1/requests/r%2F1/revoke"
    assert fake.requests[0][2] == fake.requests[1][2] == b'{"reason":"stop"}'


def test_reject_and_revoke_send_reason_code_only_when_given(fake):
    rejection = {"record": {"kind": "rejection", "body": {}}, "leaf_hash": "00" * 32, "seq": 1,
                 "duplicate": False, "ticket_id": "t", "expires_at": None}
    revocation = {"record": {"kind": "revocation"}, "leaf_hash": "00" * 32, "seq": 2,
                  "duplicate": False}
    fake.answers += [(201, rejection, {}), (201, rejection, {}), (201, revocation, {}),
                     (201, revocation, {})]
    c = client(fake.url)
    c.reject("r", "no", reason_code="wrong_amount")
    c.reject("r", "no")
    c.revoke("r", "stop", reason_code="duplicate")
    c.revoke("r", "stop")
    bodies = [r[2] for r in fake.requests]
    assert bodies == [
        b'{"decision":"reject","rationale":"no","reason_code":"wrong_amount"}',
        b'{"decision":"reject","rationale":"no"}',
        b'{"reason":"stop","reason_code":"duplicate"}',
        b'{"reason":"stop"}',
    ]


def test_client_errors_are_not_retried(fake):
    fake.answers += [(409, {"error": "conflict", "message": "closed"}, {})] * 3
    with pytest.raises(errors.Conflict):
        client(fake.url, retries=3).approve("r")
    assert len(fake.requests) == 1


def test_body_is_canonical_and_bearer_sent(fake):
    fake.answers.append((201, {"record": {}, "leaf_hash": "0" * 64, "seq": 0,
                               "duplicate": False}, {}))
    client(fake.url).append_interrupt(
        request_id="r", thread_id="t", interrupt_id="i",
        action={"tool": "x", "args": {"b": 1, "a": 2}})
    method, path, body, headers = fake.requests[0]
    assert (method, path) == ("POST", "/v1/interrupts")
    assert body == (b'{"action":{"args":{"a":2,"b":1},"tool":"x"},"interrupt_id":"i",'
                    b'"request_id":"r","thread_id":"t"}')
    assert headers["Authorization"] == "Bearer tok"
    assert headers["Content-Type"] == "application/json"


def test_not_canonicalizable_is_refused_before_sending(fake):
    with pytest.raises(errors.NotCanonicalizable):
        client(fake.url).append_interrupt(
            request_id="r", thread_id="t", interrupt_id="i",
            action={"tool": "x", "args": {"n": 2**53}})
    assert fake.requests == []


def _dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_server_down_is_a_clear_connection_error():
    c = LedgerClient(f"http://127.0.0.1:{_dead_port()}", "tok", retries=1, backoff=0.01)
    with pytest.raises(errors.LedgerConnectionError) as info:
        c.pending()
    assert isinstance(info.value, ConnectionError)
    assert "connection refused" in str(info.value)
    assert info.value.retried == 1


def test_server_down_means_the_wrapper_does_not_execute():
    c = LedgerClient(f"http://127.0.0.1:{_dead_port()}", "tok", retries=1, backoff=0.01)
    calls = []
    approval = Approval(request_id="r", ticket_id="t", action={"tool": "refund", "args": {}},
                        original_request_id="r")
    with pytest.raises(errors.LedgerConnectionError):
        execute_approved(c, approval, lambda args, idempotency_key: calls.append(args))
    assert calls == []


def test_denial_does_not_execute(fake):
    denied = dict(RECORD_ANSWER, granted=False, code="approval_expired", idempotency_key=None)
    fake.answers.append((200, denied, {}))
    calls = []
    approval = Approval(request_id="r", ticket_id="t", action={"tool": "refund", "args": {}},
                        original_request_id="r")
    out = execute_approved(client(fake.url), approval,
                           lambda args, idempotency_key: calls.append(args))
    assert calls == [] and not out.executed and out.code == "approval_expired"
    fake.answers.append((200, denied, {}))
    with pytest.raises(errors.AuthorizationDenied) as info:
        execute_approved(client(fake.url), approval,
                         lambda args, idempotency_key: calls.append(args), raise_on_deny=True)
    assert info.value.code == "approval_expired" and calls == []


def test_grant_passes_the_key_and_the_authorized_args(fake):
    fake.answers += [(200, RECORD_ANSWER, {}),
                     (201, {"record": {}, "leaf_hash": "1" * 64, "seq": 4, "duplicate": False},
                      {})]
    calls = []
    action = {"tool": "refund", "args": {"order_id": "O-1", "amount_cents": 5}}
    approval = Approval(request_id="r", ticket_id="t", action=action, original_request_id="r")

    def side_effect(args, *, idempotency_key):
        calls.append((args, idempotency_key))
        return {"operation_id": "op-7"}

    out = execute_approved(client(fake.url), approval, side_effect)
    assert out.executed and calls == [(action["args"], "ab" * 32)]
    follow = json.loads(fake.requests[1][2])
    assert fake.requests[1][1] == "/v1/requests/r/follow-ups"
    assert follow["outcome"] == "succeeded" and follow["operation_id"] == "op-7"
    assert follow["follows"] == "00" * 32


# ------------------------------------------------------------------ resume values


def test_resume_value_carries_only_the_ticket():
    from hitl_ledger.client import DecisionResult
    from hitl_ledger.langgraph import resume_value

    assert resume_value("01a22e83-a6b0-7681-a0b7-b52c93a79820") == {
        "ticket_id": "01a22e83-a6b0-7681-a0b7-b52c93a79820"}
    approve = DecisionResult(record={"kind": "decision", "body": {"decision": "approve"}},
                             leaf_hash="0" * 64, seq=1, duplicate=False, status=201, raw={},
                             ticket_id="tk")
    assert resume_value(approve) == {"ticket_id": "tk"}
    edit = DecisionResult(record={"kind": "decision", "body": {"decision": "edit"}},
                          leaf_hash="0" * 64, seq=1, duplicate=False, status=201, raw={},
                          ticket_id="tk2", new_request_id="new", edited_action=ACTION)
    assert resume_value(edit) == {"ticket_id": "tk2", "request_id": "new",
                                  "edited_action": ACTION}


ACTION = {"tool": "refund", "args": {"order_id": "O-1"}}


@pytest.mark.parametrize("value", [
    {"ticket_id": "tk", "reviewer": "alice"},
    {"ticket_id": "tk", "approved": True},
    {"ticket_id": "tk", "args": {"order_id": "O-2"}},
    {"ticket_id": "tk", "action": ACTION},
    {"approved": True},
    {"ticket_id": ""},
    {"ticket_id": "tk", "request_id": "new"},                 # an edit without its action
    {"ticket_id": "tk", "edited_action": ACTION},             # an edit without its request
    {"ticket_id": "tk", "request_id": "orig", "edited_action": ACTION},  # not a new request
    {"ticket_id": "tk", "request_id": "new", "edited_action": {"tool": "x", "args": []}},
    True,
    None,
    ["tk"],
])
def test_parse_resume_refuses_anything_but_a_ticket(value):
    from hitl_ledger.langgraph import parse_resume

    with pytest.raises(errors.InvalidResume):
        parse_resume(value, request_id="orig", action=ACTION)


def test_parse_resume_edit_binds_the_new_request():
    from hitl_ledger.langgraph import parse_resume

    edited = {"tool": "refund", "args": {"order_id": "O-1", "amount_cents": 1}}
    approval = parse_resume({"ticket_id": "tk", "request_id": "new", "edited_action": edited},
                            request_id="orig", action=ACTION)
    assert (approval.request_id, approval.original_request_id, approval.edited) == (
        "new", "orig", True)
    assert approval.action == edited
    plain = parse_resume("tk", request_id="orig", action=ACTION)
    assert (plain.request_id, plain.ticket_id, plain.action, plain.edited) == (
        "orig", "tk", ACTION, False)


# ------------------------------------------------------------------ paged request reads

def rec(seq: int, kind: str = "follow_up") -> dict:
    return {"seq": seq, "kind": kind, "request_id": "r-1", "body": {}}


def page(records, state="open", next_after=None) -> tuple:
    answer = {"request_id": "r-1", "state": state, "records": records}
    if next_after is not None:
        answer["next_after"] = next_after
    return (200, answer, {})


def test_get_request_follows_next_after_until_absent(fake):
    fake.answers += [
        page([rec(3, "interrupt"), rec(5)], next_after=5),
        page([rec(9), rec(12)], next_after=12),
        page([rec(20, "decision")], state="approved"),
    ]
    st = client(fake.url).get_request("r-1")
    assert [r["seq"] for r in st.records] == [3, 5, 9, 12, 20]
    assert st.state == "approved" and st.kinds()[0] == "interrupt"
    assert "next_after" not in st.raw and st.raw["records"] == st.records
    assert [p for _, p, _, _ in fake.requests] == [
        "/v1/requests/r-1", "/v1/requests/r-1?after=5", "/v1/requests/r-1?after=12"]


def test_get_request_without_paging_is_one_read(fake):
    fake.answers.append(page([rec(3, "interrupt"), rec(4, "decision")], state="approved"))
    st = client(fake.url).get_request("r/1")
    assert [r["seq"] for r in st.records] == [3, 4] and st.state == "approved"
    assert [p for _, p, _, _ in fake.requests] == ["/v1/requests/r%2F1"]


@pytest.mark.parametrize("pages", [
    [page([rec(3)], next_after=3), page([rec(4)], next_after=3)],  # does not move
    [page([rec(3)], next_after=3), page([], next_after=9)],  # an empty page with a cursor
    [page([rec(3)], next_after="3")],  # not an integer
])
def test_get_request_refuses_a_cursor_that_does_not_move(fake, pages):
    fake.answers += pages
    with pytest.raises(errors.LedgerProtocolError, match="does not move"):
        client(fake.url).get_request("r-1")


# ------------------------------------------------------------------ governance


def test_governed_refusals_are_forbidden_and_conflicts_by_class():
    for code in ("approver_is_requester", "approver_already_approved", "approver_not_allowed"):
        cls = errors.ERROR_CLASSES[code]
        assert issubclass(cls, errors.GovernedDecisionRefused)
        assert issubclass(cls, errors.Forbidden)
    for code in ("break_glass_not_allowed", "reviewer_is_break_glass_user"):
        assert issubclass(errors.ERROR_CLASSES[code], errors.Forbidden)
    for code in ("break_glass_action_mismatch", "no_break_glass"):
        assert issubclass(errors.ERROR_CLASSES[code], errors.ConflictError)
    assert issubclass(errors.InvalidPolicy, errors.BadRequest)
    assert errors.DENIAL_CODES[0] == "tool_paused"


def test_set_policy_is_a_canonical_put_and_never_retried(fake):
    doc = {"tools": {"payout": {"approvals_required": 2}}, "default": {"mode": "enforce"}}
    fake.answers.append((201, {"record": {"kind": "policy", "body": {"policy": doc}},
                               "leaf_hash": "2" * 64, "seq": 9, "duplicate": False}, {}))
    written = client(fake.url).set_policy(doc)
    assert (written.seq, written.status, written.duplicate) == (9, 201, False)
    method, path, body, headers = fake.requests[0]
    assert (method, path) == ("PUT", "/v1/policy")
    assert body == b'{"default":{"mode":"enforce"},"tools":{"payout":{"approvals_required":2}}}'
    assert headers["Content-Type"] == "application/json"
    assert headers["Authorization"] == "Bearer tok"
    # A 503 or a dropped connection: the outcome is unknown, and a PUT is not repeated.
    fake.answers.append((503, {"error": "overloaded", "message": "busy"}, {"Retry-After": "0"}))
    with pytest.raises(errors.Overloaded):
        client(fake.url, retries=3).set_policy(doc)
    fake.answers.append("drop")
    with pytest.raises(errors.LedgerConnectionError) as info:
        client(fake.url, retries=3).set_policy(doc)
    assert info.value.retried == 0
    assert [r[0] for r in fake.requests] == ["PUT"] * 3
    fake.answers.append((400, {"error": "invalid_policy", "message": "approvals_required 0"},
                         {}))
    with pytest.raises(errors.InvalidPolicy):
        client(fake.url).set_policy({"default": {"approvals_required": 0}})
    with pytest.raises(TypeError):
        client(fake.url).set_policy([doc])  # type: ignore[arg-type]
    with pytest.raises(errors.NotCanonicalizable):  # refused before sending
        client(fake.url).set_policy({"default": {"approval_ttl_seconds": 2**53}})
    assert len(fake.requests) == 4


def _decision_answer(**extra):
    return {"record": {"kind": "decision", "request_id": "r",
                       "body": {"decision": "approve", "ticket_id": extra.get("ticket_id")}},
            "leaf_hash": "3" * 64, "seq": 5, "duplicate": False, **extra}


def test_a_partial_approval_is_never_a_ticket(fake):
    from hitl_ledger.langgraph import resume_value

    fake.answers.append((201, _decision_answer(ticket_id=None, expires_at=None, approvals=1,
                                               approvals_required=2), {}))
    partial = client(fake.url).approve("r")
    assert partial.partial and partial.ticket_id is None
    assert (partial.approvals, partial.approvals_required) == (1, 2)
    with pytest.raises(errors.InvalidResume, match="1 of 2"):
        resume_value(partial)
    fake.answers.append((201, _decision_answer(ticket_id="01a22e83-a6b0-7681-a0b7-b52c93a79820",
                                               expires_at="2026-11-30T20:10:00.000000Z",
                                               approvals=2, approvals_required=2), {}))
    final = client(fake.url).approve("r")
    assert not final.partial and resume_value(final) == {
        "ticket_id": "01a22e83-a6b0-7681-a0b7-b52c93a79820"}
    # An approval without a ticket must be a partial approval with its counts.
    for bad in (
        _decision_answer(ticket_id=None, expires_at=None),
        _decision_answer(ticket_id=None, expires_at=None, approvals=2, approvals_required=2),
        _decision_answer(ticket_id=None, expires_at="2026-11-30T20:10:00.000000Z",
                         approvals=1, approvals_required=2),
        _decision_answer(ticket_id=None, expires_at=None, approvals=1),
        _decision_answer(ticket_id=None, expires_at=None, approvals=0, approvals_required=2),
        _decision_answer(ticket_id=None, expires_at=None, approvals=True,
                         approvals_required=2),
        _decision_answer(ticket_id=7),
    ):
        fake.answers.append((201, bad, {}))
        with pytest.raises(errors.LedgerProtocolError):
            client(fake.url).approve("r")


def test_an_approval_without_a_ticket_is_never_authorized(fake):
    calls = []
    approval = Approval(request_id="r", ticket_id=None, action={"tool": "refund", "args": {}},
                        original_request_id="r")
    with pytest.raises(errors.InvalidResume, match="no ticket"):
        execute_approved(client(fake.url), approval,
                         lambda args, idempotency_key: calls.append(args))
    assert calls == [] and fake.requests == []


PAUSED = dict(RECORD_ANSWER, granted=False, code="tool_paused", idempotency_key=None,
              route="manual_operator")


@pytest.mark.parametrize("raise_on_deny", [False, True])
def test_a_paused_tool_raises_tool_paused_without_executing_or_retrying(fake, raise_on_deny):
    fake.answers += [(200, PAUSED, {})] * 3
    calls = []
    action = {"tool": "refund", "args": {"order_id": "O-1"}}
    approval = Approval(request_id="r", ticket_id="t", action=action, original_request_id="r")
    with pytest.raises(errors.ToolPaused) as info:
        execute_approved(client(fake.url, retries=3), approval,
                         lambda args, idempotency_key: calls.append(args),
                         raise_on_deny=raise_on_deny)
    err = info.value
    assert isinstance(err, errors.AuthorizationDenied)
    assert (err.code, err.route, err.request_id, err.action) == (
        "tool_paused", "manual_operator", "r", action)
    assert err.authorization.paused and err.authorization.route == "manual_operator"
    assert "manual operator" in str(err)
    assert calls == [] and len(fake.requests) == 1  # asked once: no busy retry


def test_tool_paused_with_a_grant_is_a_protocol_error(fake):
    fake.answers.append((200, dict(PAUSED, granted=True), {}))
    with pytest.raises(errors.LedgerProtocolError):
        client(fake.url).authorize("r", ticket_id="t", action={"tool": "x", "args": {}})


def test_governance_reads_are_typed(fake):
    record = {"kind": "policy", "seq": 0, "request_id": None, "body": {"policy": {}}}
    fake.answers += [
        (200, {"policy": {}, "policy_digest": "sha256:" + "4" * 64, "record": record, "seq": 0,
               "leaf_hash": "5" * 64}, {}),
        (200, {"policies": [{"seq": 0, "ts": "2026-11-30T20:00:00.000000Z",
                             "actor": {"principal": "hitl-ledger", "role": "system"},
                             "policy_digest": "sha256:" + "4" * 64, "leaf_hash": "5" * 64,
                             "record": record}]}, {}),
        (200, {"break_glass": [{"request_id": "r", "seq": 7, "ts": "2026-11-30T20:00:00.000000Z",
                                "actor": {"principal": "bg", "role": "break_glass"},
                                "reason": "fire", "leaf_hash": "6" * 64,
                                "record": {"kind": "decision"}}]}, {}),
        (200, {"policies": [{"seq": 0}]}, {}),
        (200, {"pending": []}, {}),
    ]
    c = client(fake.url)
    now = c.policy()
    assert (now.seq, now.leaf_hash, now.record) == (0, "5" * 64, record)
    (change,) = c.policy_history()
    assert change.actor["role"] == "system" and change.policy == {}
    (use,) = c.break_glass_reviews()
    assert (use.request_id, use.reason, use.seq) == ("r", "fire", 7)
    with pytest.raises(errors.LedgerProtocolError):
        c.policy_history()
    with pytest.raises(errors.LedgerProtocolError):
        c.break_glass_reviews()
    assert [r[:2] for r in fake.requests] == [
        ("GET", "/v1/policy"), ("GET", "/v1/policy/history"), ("GET", "/v1/reviews/break-glass"),
        ("GET", "/v1/policy/history"), ("GET", "/v1/reviews/break-glass")]


def test_break_glass_and_review_bodies(fake):
    action = {"tool": "scram", "args": {"r": 2}}
    fake.answers += [
        (201, {"record": {"kind": "decision", "body": {"decision": "approve",
                                                       "break_glass": True,
                                                       "ticket_id": "tk"}},
               "leaf_hash": "7" * 64, "seq": 8, "duplicate": False, "ticket_id": "tk",
               "expires_at": "2026-11-30T20:10:00.000000Z"}, {}),
        (201, {"record": {"kind": "review", "body": {}}, "leaf_hash": "8" * 64, "seq": 9,
               "duplicate": False}, {}),
    ]
    c = client(fake.url)
    bg = c.break_glass("r/1", action, "fire")
    assert bg.break_glass and bg.ticket_id == "tk" and not bg.partial
    assert c.review("r/1", "acknowledged", "ok").record["kind"] == "review"
    (m1, p1, b1, _), (m2, p2, b2, _) = fake.requests
    assert (m1, p1, b1) == ("POST", "/v1/requests/r%2F1/break-glass",
                            b'{"action":{"args":{"r":2},"tool":"scram"},"reason":"fire"}')
    assert (m2, p2, b2) == ("POST", "/v1/requests/r%2F1/review",
                            b'{"rationale":"ok","verdict":"acknowledged"}')
    with pytest.raises(ValueError):
        c.break_glass("r", {"tool": "scram"}, "fire")
    assert len(fake.requests) == 2
