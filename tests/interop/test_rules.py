"""Tests of the approval-rule replay of the independent bundle verifier (`rule_violation`).

After every structural check of a bundle passed, verify_bundle.py replays the approval
rules (docs/protocol.md: approval semantics, idempotent appends, export bundle) over the
bundle's records and reports `rule_violation` at the first record whose outcome they
forbid. Each test below builds a thread with the synthetic generator of
test_verify_bundle_vectors.py (so every bundle is freshly chained, proven and signed, and
passes every structural check), writes one forbidden record into an otherwise valid
history, and checks the problem code, the seq of exactly that record and the rule named
in the message. Every bundle is also checked with the Rust `hitl-ledger verify-export`,
which must agree on the exit status, the problem code and its seq. Rule numbers are those
of the rule list in docs/protocol.md:

  1 second interrupt; 2 no interrupt before; 3a second closing record; 3b closing at or
  after the review deadline; 3 ticket id issued twice; 4a/4b/4c timeouts; 5a/5c
  revocations; 6a-6e real grants; 7 follow-ups; and the governance rules (issue 20): 6f a
  grant of a paused tool; 8 an invalid policy record; 9 an interrupt naming a policy record
  not in force; 10a-10d approvers and two-person approval; 11a-11b break-glass; 12a-12d its
  review. The governed histories carry policy records, so their bundles have a `policy`
  member; the tests at the end strip and break it (checks 11 and 12 of section 6.2) and
  check the envelopes of the new kinds and members.

Run: python3 -m pytest tests/interop (needs `cryptography`, `rfc8785`, `pytest`).
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import test_verify_bundle_vectors as gen  # noqa: E402  (the synthetic bundle generator)
import verify_bundle as vb  # noqa: E402

THREAD = "thread-rules"
OTHER = "thread-other"
BASE = datetime(2026, 11, 30, 20, 0, 0)


def T(seconds: int, micros: int = 0) -> str:
    """The instant `seconds` (+ `micros`) after 2026-11-30T20:00:00Z, as a record timestamp."""
    return (BASE + timedelta(seconds=seconds, microseconds=micros)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def ticket(n: int) -> str:
    return "0192f3c0-1111-7000-8000-%012x" % n


def refund(cents: int) -> dict:
    return {"tool": "refund", "args": {"amount_cents": cents, "currency": "EUR"}}


def email(to: str) -> dict:
    return {"tool": "send_email", "args": {"to": to, "subject": "hello"}}


ACTIONS = {
    "r1": refund(500), "r2": refund(99999), "r3": refund(700), "r4": refund(650),
    "r5": email("a@example.com"), "r6": refund(42), "r7": refund(43), "r8": refund(44),
    "r9": refund(45), "r10": refund(46),
}
DIGEST = {r: gen.action_digest(a) for r, a in ACTIONS.items()}
OTHER_DIGEST = gen.action_digest(refund(1))


# ---------------------------------------------------------------------------
# Record bodies (docs/protocol.md, records: bodies)


def interrupt(rid, deadline, edit_of=None, allowed=("approve", "edit", "reject")):
    a = ACTIONS[rid]
    return {"interrupt_id": "int-" + rid, "tool": a["tool"], "args": a["args"], "redacted": [],
            "action_digest": DIGEST[rid], "action_schema": "hitl-ledger/action/v1",
            "allowed_decisions": sorted(allowed), "expires_at": deadline, "edit_of": edit_of}


def approve(tk, expires_at):
    return {"decision": "approve", "rationale": None, "ticket_id": tk, "expires_at": expires_at,
            "edited_digest": None, "superseded_by": None}


def edit(tk, new_rid):
    return {"decision": "edit", "rationale": "smaller amount", "ticket_id": tk, "expires_at": None,
            "edited_digest": DIGEST[new_rid], "superseded_by": new_rid}


def reject(tk):
    return {"rationale": "amount too large", "ticket_id": tk}


def authorization(tk, digest, ts, expires_at, granted=True, code=None, mode="enforce", would_deny=None):
    return {"ticket_id": tk, "attempt_id": None, "action_digest": digest, "granted": granted, "code": code,
            "evaluated_at": ts, "expires_at": expires_at, "idempotency_key": "ab" * 32 if granted else None,
            "mode": mode, "would_deny": would_deny}


def follow_up(follows):
    # `follows` is the name of an earlier record (resolved to its leaf hash when built) or a hex string
    return {"follow_up_id": "fu-1", "follows": follows, "outcome": "done", "detail": None, "operation_id": None}


def timeout(expires_at):
    return {"expires_at": expires_at}


def revocation():
    return {"reason": "no longer needed"}


def refusal():
    return {"method": "PUT", "path": "/v1/requests/x/decision", "error": "append_only"}


ROLES = {"decision": "reviewer", "rejection": "reviewer", "timeout": "system", "review": "reviewer",
         "policy": "admin"}


# ---------------------------------------------------------------------------
# Histories and bundles


def ref(name: str) -> str:
    """A body value naming an earlier record of the history: its leaf hash when built."""
    return "ref:" + name


class History:
    """One thread's records as (name, kind, request_id, ts, body, actor), in order; `policy`
    records go to the thread hitl-ledger/policy (request_id null), which the bundle carries
    as its `policy` member. A record's actor is `user-1` in its kind's usual role (the
    ledger for a timeout, an admin for a policy) unless given."""

    def __init__(self):
        self.specs: list[tuple] = []

    def add(self, name, kind, rid, ts, body, actor: dict | None = None) -> "History":
        assert name not in self.names()
        self.specs.append((name, kind, rid, ts, body, actor))
        return self

    def names(self) -> list[str]:
        return [s[0] for s in self.specs]

    def with_record(self, name, kind, rid, ts, body, after: str | None = None, actor: dict | None = None) -> "History":
        """A copy with one more record, after record `after` (default: at the end)."""
        h = History()
        h.specs = copy.deepcopy(self.specs)
        assert name not in h.names()
        pos = len(h.specs) if after is None else h.names().index(after) + 1
        h.specs.insert(pos, (name, kind, rid, ts, copy.deepcopy(body), actor))
        return h

    def without(self, name: str) -> "History":
        h = History()
        h.specs = [copy.deepcopy(x) for x in self.specs if x[0] != name]
        assert len(h.specs) == len(self.specs) - 1
        return h

    def build_log(self) -> tuple[gen.Log, dict[str, int]]:
        """The log holding the history, and each record's seq. A record of another thread
        precedes each record, so seq and thread_seq differ."""
        log = gen.Log()
        seqs: dict[str, int] = {}
        for name, kind, rid, ts, body, actor in self.specs:
            log.append(OTHER, kind="refusal")
            body = copy.deepcopy(body)
            if kind == "follow_up" and body.get("follows") in seqs:
                body["follows"] = gen.lh(log.leaves[seqs[body["follows"]]]).hex()
            for k, v in body.items():
                if isinstance(v, str) and v.startswith("ref:"):
                    body[k] = gen.lh(log.leaves[seqs[v[4:]]]).hex()
            default_actor = {"principal": "hitl-ledger" if kind == "timeout" else "user-1",
                             "role": ROLES.get(kind, "agent")}

            def tweak(rec, rid=rid, ts=ts, body=body, actor=actor or default_actor):
                rec.update(request_id=rid, ts=ts, body=body, actor=actor)

            seqs[name] = log.append(vb.POLICY_THREAD if kind == "policy" else THREAD, kind, tweak=tweak)
        return log, seqs

    def build(self) -> tuple[dict, dict[str, int]]:
        """The thread's bundle (every record chained, proven, signed) and each record's seq."""
        log, seqs = self.build_log()
        return log.bundle(THREAD), seqs


D = T(3600)  # the review deadline of most requests


def good_history() -> History:
    """A well-formed history: every outcome the rules allow, and none they forbid."""
    h = History()
    # interrupt -> approve -> real grant -> follow-up
    h.add("i1", "interrupt", "r1", T(1), interrupt("r1", D))
    h.add("a1", "decision", "r1", T(2), approve(ticket(1), T(602)))
    h.add("g1", "authorization", "r1", T(3), authorization(ticket(1), DIGEST["r1"], T(3), T(602)))
    h.add("f1", "follow_up", "r1", T(4), follow_up("g1"))
    # a rejection, and a denied authorization with its ticket
    h.add("i2", "interrupt", "r2", T(5), interrupt("r2", D))
    h.add("x2", "rejection", "r2", T(6), reject(ticket(2)))
    h.add("n2", "authorization", "r2", T(7),
          authorization(ticket(2), DIGEST["r2"], T(7), None, granted=False, code="approval_rejected"))
    # an edit, its new request's interrupt and approval (one atomic write), a grant of the new ticket
    h.add("i3", "interrupt", "r3", T(8), interrupt("r3", D))
    h.add("e3", "decision", "r3", T(9), edit(ticket(3), "r4"))
    h.add("i4", "interrupt", "r4", T(9), interrupt("r4", T(3609), edit_of="r3", allowed=("approve",)))
    h.add("a4", "decision", "r4", T(9), approve(ticket(4), T(309)))
    h.add("g4", "authorization", "r4", T(10), authorization(ticket(4), DIGEST["r4"], T(10), T(309)))
    h.add("n3", "authorization", "r3", T(11),
          authorization(ticket(3), DIGEST["r3"], T(11), None, granted=False, code="approval_superseded"))
    # observe mode: a would-deny grant (another action) does not consume; the passing one is real
    h.add("i5", "interrupt", "r5", T(12), interrupt("r5", D))
    h.add("a5", "decision", "r5", T(13), approve(ticket(5), T(613)))
    h.add("o5", "authorization", "r5", T(14),
          authorization(ticket(5), gen.action_digest(email("b@example.com")), T(14), T(613), mode="observe",
                        would_deny="approval_action_mismatch"))
    h.add("g5", "authorization", "r5", T(15), authorization(ticket(5), DIGEST["r5"], T(15), T(613), mode="observe"))
    # a denial of an approved request (another action)
    h.add("i6", "interrupt", "r6", T(16), interrupt("r6", D))
    h.add("a6", "decision", "r6", T(17), approve(ticket(6), T(617)))
    h.add("n6", "authorization", "r6", T(18),
          authorization(ticket(6), OTHER_DIGEST, T(18), T(617), granted=False, code="approval_action_mismatch"))
    # a timeout exactly at the deadline
    h.add("i7", "interrupt", "r7", T(19), interrupt("r7", T(20)))
    h.add("t7", "timeout", "r7", T(20), timeout(T(20)))
    # revocation after an approval, then a denial; revocation of a used approval
    h.add("i8", "interrupt", "r8", T(21), interrupt("r8", D))
    h.add("a8", "decision", "r8", T(22), approve(ticket(8), T(622)))
    h.add("v8", "revocation", "r8", T(23), revocation())
    h.add("n8", "authorization", "r8", T(24),
          authorization(ticket(8), DIGEST["r8"], T(24), T(622), granted=False, code="approval_revoked"))
    h.add("v1", "revocation", "r1", T(25), revocation())
    h.add("f8", "follow_up", "r8", T(26), follow_up("v8"))
    # revocation of an open request before its deadline
    h.add("i9", "interrupt", "r9", T(27), interrupt("r9", D))
    h.add("v9", "revocation", "r9", T(28), revocation())
    # refusals: one naming no request, one naming a request
    h.add("rf0", "refusal", None, T(29), refusal())
    h.add("rf1", "refusal", "r1", T(30), refusal())
    return h


GOOD = good_history()
LATER = T(40)  # a ts after the whole good history, before every approval's expires_at


BIN = Path(
    __import__("os").environ.get("HITL_LEDGER_BIN")
    or Path.home() / ".cache" / "hitl-ledger" / "target" / "debug" / "hitl-ledger"
)


def rust_verdict(bundle: dict) -> tuple[int, dict]:
    """`hitl-ledger verify-export --format json` on the bundle: (exit status, report)."""
    assert BIN.is_file(), f"the hitl-ledger binary is missing at {BIN}: build it (scripts/test.sh does)"
    import tempfile

    with tempfile.NamedTemporaryFile("wb", suffix=".json") as f:
        f.write(json.dumps(bundle).encode())
        f.flush()
        p = subprocess.run(
            [str(BIN), "verify-export", f.name, "--key", gen.KEY, "--format", "json"],
            capture_output=True,
            timeout=60,
        )
    return p.returncode, json.loads(p.stdout)


def agree(bundle: dict) -> dict:
    """The Python verdict on a bundle, after checking that Rust agrees with it (exit status,
    problem code and seq)."""
    r = gen.run(bundle)
    status, rust = rust_verdict(bundle)
    assert status == vb.exit_status(r), (status, rust, r)
    py_problem = r["problem"] and (r["problem"]["code"], r["problem"]["seq"])
    rust_problem = rust["problem"] and (rust["problem"]["code"], rust["problem"]["seq"])
    assert py_problem == rust_problem, (rust, r)
    return r


def verify(h: History) -> tuple[dict, dict[str, int]]:
    """The Python verdict on the history's bundle, after checking that Rust agrees with it."""
    bundle, seqs = h.build()
    r = gen.run(bundle)
    status, rust = rust_verdict(bundle)
    assert status == vb.exit_status(r), (status, rust, r)
    py_problem = r["problem"] and (r["problem"]["code"], r["problem"]["seq"])
    rust_problem = rust["problem"] and (rust["problem"]["code"], rust["problem"]["seq"])
    assert py_problem == rust_problem, (rust, r)
    return r, seqs


def assert_violation(h: History, name: str, rule: str, phrase: str):
    """The bundle fails with rule_violation at record `name`, and the message names the rule."""
    r, seqs = verify(h)
    assert r["ok"] is False, r
    assert r["problem"]["code"] == "rule_violation", r
    assert r["problem"]["seq"] == seqs[name], (r, seqs[name])
    msg = r["problem"]["message"]
    assert msg.startswith("rule %s: " % rule) and phrase in msg, msg
    assert vb.exit_status(r) == 1


def test_well_formed_history_passes():
    r, seqs = verify(GOOD)
    assert r["problem"] is None and r["ok"] is True, r
    assert r["records"] == len(GOOD.specs) and r["decisions"] == 6 and r["rejections"] == 1
    assert r["first_ts"] == T(1) and r["last_ts"] == T(30)
    assert list(seqs.values()) == [2 * i + 1 for i in range(len(GOOD.specs))]


def test_every_prefix_of_the_well_formed_history_passes():
    for n in range(1, len(GOOD.specs) + 1):
        h = History()
        h.specs = GOOD.specs[:n]
        assert verify(h)[0]["ok"], n


# ---------------------------------------------------------------------------
# 1. a second interrupt


def test_rule_1_second_interrupt_of_a_request():
    assert_violation(GOOD.with_record("bad", "interrupt", "r1", LATER, interrupt("r1", D)),
                     "bad", "1", "a second interrupt of request")


def test_rule_1_second_interrupt_right_after_the_first():
    h = GOOD.with_record("bad", "interrupt", "r1", T(1), interrupt("r1", D), after="i1")
    assert_violation(h, "bad", "1", "a second interrupt of request")


# ---------------------------------------------------------------------------
# 2. a record of a request with no interrupt before it

NO_INTERRUPT_BODIES = {
    "decision": approve(ticket(90), T(900)),
    "rejection": reject(ticket(90)),
    "authorization": authorization(ticket(1), DIGEST["r1"], LATER, T(602), granted=False, code="approval_not_found"),
    "timeout": timeout(D),
    "revocation": revocation(),
    "follow_up": follow_up("g1"),
    "refusal": refusal(),
}


@pytest.mark.parametrize("kind", sorted(NO_INTERRUPT_BODIES))
def test_rule_2_record_of_a_request_without_interrupt(kind):
    h = GOOD.with_record("bad", kind, "r-unknown", LATER, NO_INTERRUPT_BODIES[kind])
    assert_violation(h, "bad", "2", "which has no interrupt before it")


def test_rule_2_decision_before_its_interrupt():
    h = GOOD.with_record("bad", "decision", "r10", LATER, approve(ticket(10), T(640)))
    h = h.with_record("i10", "interrupt", "r10", LATER, interrupt("r10", D))
    assert_violation(h, "bad", "2", "which has no interrupt before it")


# ---------------------------------------------------------------------------
# 3. decisions and rejections

SECOND_CLOSING = {
    "approve after an approval": ("decision", "r6", approve(ticket(90), T(900))),
    "rejection after an approval": ("rejection", "r6", reject(ticket(90))),
    "approve after a rejection": ("decision", "r2", approve(ticket(90), T(900))),
    "rejection after an edit": ("rejection", "r3", reject(ticket(90))),
    "approve after a revocation of the open request": ("decision", "r9", approve(ticket(90), T(900))),
    "approve after a timeout": ("decision", "r7", approve(ticket(90), T(900))),
}


@pytest.mark.parametrize("case", sorted(SECOND_CLOSING))
def test_rule_3a_second_closing_record(case):
    kind, rid, body = SECOND_CLOSING[case]
    assert_violation(GOOD.with_record("bad", kind, rid, LATER, body), "bad", "3a", "a second closing record")


def test_rule_3a_second_approval_in_the_edit_write():
    # the edit's new request approved twice in the same atomic write
    h = GOOD.with_record("bad", "decision", "r4", T(9), approve(ticket(90), T(309)), after="a4")
    assert_violation(h, "bad", "3a", "a second closing record")


def _open_r10(deadline=T(50)) -> History:
    return GOOD.with_record("i10", "interrupt", "r10", LATER, interrupt("r10", deadline))


def test_rule_3b_approval_at_the_review_deadline():
    h = _open_r10().with_record("bad", "decision", "r10", T(50), approve(ticket(10), T(650)))
    assert_violation(h, "bad", "3b", "a closing record at or after the review deadline")


def test_rule_3b_rejection_after_the_review_deadline():
    h = _open_r10().with_record("bad", "rejection", "r10", T(50, 1), reject(ticket(10)))
    assert_violation(h, "bad", "3b", "a closing record at or after the review deadline")


def test_rule_3b_edit_after_the_review_deadline():
    h = _open_r10().with_record("bad", "decision", "r10", T(3000), edit(ticket(10), "r4"))
    assert_violation(h, "bad", "3b", "a closing record at or after the review deadline")


def test_rule_3b_approval_one_microsecond_before_the_deadline_passes():
    h = _open_r10().with_record("ok", "decision", "r10", T(49, 999999), approve(ticket(10), T(650)))
    assert verify(h)[0]["ok"]


def test_rule_3_ticket_id_issued_twice_by_two_approvals():
    h = _open_r10().with_record("bad", "decision", "r10", LATER, approve(ticket(6), T(640)))
    assert_violation(h, "bad", "3", "a ticket id issued twice")


def test_rule_3_ticket_id_issued_twice_by_a_rejection():
    h = _open_r10().with_record("bad", "rejection", "r10", LATER, reject(ticket(1)))
    assert_violation(h, "bad", "3", "a ticket id issued twice")


# ---------------------------------------------------------------------------
# 4. timeouts


def test_rule_4a_timeout_of_an_approved_request():
    h = GOOD.with_record("bad", "timeout", "r6", D, timeout(D))
    assert_violation(h, "bad", "4a", "a second closing record")


def test_rule_4a_second_timeout():
    h = GOOD.with_record("bad", "timeout", "r7", LATER, timeout(T(20)))
    assert_violation(h, "bad", "4a", "a second closing record")


def test_rule_4b_timeout_before_the_review_deadline():
    h = _open_r10().with_record("bad", "timeout", "r10", T(49, 999999), timeout(T(50)))
    assert_violation(h, "bad", "4b", "a timeout before the review deadline")


def test_rule_4c_timeout_naming_another_deadline():
    h = _open_r10().with_record("bad", "timeout", "r10", T(51), timeout(T(50, 1)))
    assert_violation(h, "bad", "4c", "a timeout naming another deadline")


def test_rule_4c_timeout_naming_an_earlier_deadline():
    h = _open_r10().with_record("bad", "timeout", "r10", T(50), timeout(T(49)))
    assert_violation(h, "bad", "4c", "a timeout naming another deadline")


def test_rule_4_timeout_after_the_deadline_passes():
    h = _open_r10().with_record("ok", "timeout", "r10", T(55), timeout(T(50)))
    assert verify(h)[0]["ok"]


# ---------------------------------------------------------------------------
# 5. revocations


def test_rule_5a_revocation_of_an_overdue_request():
    h = _open_r10().with_record("bad", "revocation", "r10", T(50), revocation())
    assert_violation(h, "bad", "5a", "a revocation of an overdue request")


REVOKE_CLOSED = {
    "rejected": "r2",
    "edited": "r3",
    "timed out": "r7",
    "already revoked": "r8",  # approved, then revoked
}


@pytest.mark.parametrize("state", sorted(REVOKE_CLOSED))
def test_rule_5c_revocation_of_a_closed_request(state):
    h = GOOD.with_record("bad", "revocation", REVOKE_CLOSED[state], LATER, revocation())
    assert_violation(h, "bad", "5c", "a revocation of a request that is %s" % state)


def test_rule_5c_second_revocation_of_a_request_revoked_while_open():
    h = GOOD.with_record("bad", "revocation", "r9", LATER, revocation())
    assert_violation(h, "bad", "5c", "a revocation of a request that is already revoked")


# ---------------------------------------------------------------------------
# 6. real grants

NOT_AN_APPROVAL_TICKET = {
    "unknown ticket": ("r6", ticket(99), DIGEST["r6"]),
    "rejection's ticket": ("r2", ticket(2), DIGEST["r2"]),
    "edit's ticket": ("r3", ticket(3), DIGEST["r3"]),
    "approval of another request": ("r6", ticket(4), DIGEST["r6"]),
}


@pytest.mark.parametrize("case", sorted(NOT_AN_APPROVAL_TICKET))
def test_rule_6a_grant_with_a_ticket_not_issued_by_an_approval_of_its_request(case):
    rid, tk, digest = NOT_AN_APPROVAL_TICKET[case]
    h = GOOD.with_record("bad", "authorization", rid, LATER, authorization(tk, digest, LATER, T(600)))
    assert_violation(h, "bad", "6a", "ticket not issued by an approval of its request")


def test_rule_6a_grant_with_a_ticket_issued_later():
    h = _open_r10().with_record("bad", "authorization", "r10", LATER,
                                authorization(ticket(10), DIGEST["r10"], LATER, T(640)))
    h = h.with_record("a10", "decision", "r10", LATER, approve(ticket(10), T(640)))
    assert_violation(h, "bad", "6a", "ticket not issued by an approval of its request")


def test_rule_6b_grant_whose_digest_is_not_the_approved_one():
    h = GOOD.with_record("bad", "authorization", "r6", LATER, authorization(ticket(6), OTHER_DIGEST, LATER, T(617)))
    assert_violation(h, "bad", "6b", "digest is not the approved one")


def test_rule_6b_grant_in_the_edited_request_with_the_original_digest():
    h = GOOD.with_record("bad", "authorization", "r4", T(11), authorization(ticket(4), DIGEST["r3"], T(11), T(309)),
                         after="g4")
    assert_violation(h, "bad", "6b", "digest is not the approved one")


def test_rule_6c_grant_at_the_approvals_expires_at():
    h = GOOD.with_record("bad", "authorization", "r6", T(617), authorization(ticket(6), DIGEST["r6"], T(617), T(617)))
    assert_violation(h, "bad", "6c", "grant at or after the approval's expires_at")


def test_rule_6c_grant_after_the_approvals_expires_at():
    h = GOOD.with_record("bad", "authorization", "r6", T(3000), authorization(ticket(6), DIGEST["r6"], T(3000), T(617)))
    assert_violation(h, "bad", "6c", "grant at or after the approval's expires_at")


def test_rule_6c_grant_one_microsecond_before_expires_at_passes():
    h = GOOD.with_record("ok", "authorization", "r6", T(616, 999999),
                         authorization(ticket(6), DIGEST["r6"], T(616, 999999), T(617)))
    assert verify(h)[0]["ok"]


def test_rule_6d_grant_after_a_revocation():
    h = GOOD.with_record("bad", "authorization", "r8", LATER, authorization(ticket(8), DIGEST["r8"], LATER, T(622)))
    assert_violation(h, "bad", "6d", "grant after a revocation")


def test_rule_6e_second_real_grant_of_one_ticket():
    h = GOOD.with_record("bad", "authorization", "r5", LATER,
                         authorization(ticket(5), DIGEST["r5"], LATER, T(613), mode="observe"))
    assert_violation(h, "bad", "6e", "a second real grant of one ticket")


def test_rule_6e_second_real_grant_right_after_the_first():
    h = GOOD.with_record("bad", "authorization", "r4", T(10), authorization(ticket(4), DIGEST["r4"], T(10), T(309)),
                         after="g4")
    assert_violation(h, "bad", "6e", "a second real grant of one ticket")


def test_rule_6_checks_in_order_first_failure_names_the_rule():
    # another digest, at expires_at, after a revocation, ticket already used: 6b is checked first
    h = GOOD.with_record("bad", "authorization", "r1", T(602), authorization(ticket(1), OTHER_DIGEST, T(602), T(602)))
    assert_violation(h, "bad", "6b", "digest is not the approved one")
    # at expires_at, after a revocation, already used: 6c
    h = GOOD.with_record("bad", "authorization", "r1", T(602), authorization(ticket(1), DIGEST["r1"], T(602), T(602)))
    assert_violation(h, "bad", "6c", "grant at or after the approval's expires_at")
    # after a revocation and already used: 6d
    h = GOOD.with_record("bad", "authorization", "r1", LATER, authorization(ticket(1), DIGEST["r1"], LATER, T(602)))
    assert_violation(h, "bad", "6d", "grant after a revocation")


def test_rule_6_denials_and_observe_would_deny_grants_are_never_violations():
    h = GOOD
    for i, (rid, tk, digest) in enumerate([("r6", ticket(99), OTHER_DIGEST), ("r2", ticket(2), DIGEST["r2"]),
                                           ("r1", ticket(1), DIGEST["r1"]), ("r8", ticket(8), DIGEST["r8"])]):
        h = h.with_record("deny%d" % i, "authorization", rid, T(3000),
                          authorization(tk, digest, T(3000), None, granted=False, code="approval_expired"))
        h = h.with_record("observe%d" % i, "authorization", rid, T(3000),
                          authorization(tk, digest, T(3000), None, mode="observe", would_deny="approval_expired"))
    assert verify(h)[0]["ok"]


# ---------------------------------------------------------------------------
# 7. follow-ups


def test_rule_7_follow_up_that_follows_a_record_of_another_request():
    h = GOOD.with_record("bad", "follow_up", "r6", LATER, follow_up("g1"))
    assert_violation(h, "bad", "7", "a follow-up that follows a record of another request")


def test_rule_7_follow_up_that_follows_an_unknown_record():
    h = GOOD.with_record("bad", "follow_up", "r6", LATER, follow_up("cd" * 32))
    assert_violation(h, "bad", "7", "a follow-up that follows a record of another request")


def test_rule_7_follow_up_that_follows_a_refusal_naming_no_request():
    h = GOOD.with_record("bad", "follow_up", "r1", LATER, follow_up("rf0"))
    assert_violation(h, "bad", "7", "a follow-up that follows a record of another request")


def test_rule_7_follow_up_of_an_earlier_record_of_its_request_passes():
    h = GOOD.with_record("ok", "follow_up", "r2", LATER, follow_up("i2"))
    assert verify(h)[0]["ok"]


# ---------------------------------------------------------------------------
# Which violation, and precedence


def test_two_violations_report_the_earlier_one():
    first = ("early", "authorization", "r4", T(10), authorization(ticket(4), DIGEST["r4"], T(10), T(309)))
    second = ("late", "interrupt", "r1", LATER, interrupt("r1", D))
    h = GOOD.with_record(*first, after="g4").with_record(*second)
    assert_violation(h, "early", "6e", "a second real grant of one ticket")
    # the same two rules the other way round
    h = GOOD.with_record("early", "interrupt", "r1", T(9), interrupt("r1", D), after="i3")
    h = h.with_record("late", "authorization", "r5", LATER,
                      authorization(ticket(5), DIGEST["r5"], LATER, T(613), mode="observe"))
    assert_violation(h, "early", "1", "a second interrupt of request")


def _with_early_violation() -> History:
    return GOOD.with_record("bad", "follow_up", "r6", T(18), follow_up("g1"), after="n6")


def test_structural_problem_in_a_later_record_takes_precedence_over_a_rule_violation():
    bundle, seqs = _with_early_violation().build()
    assert gen.run(bundle)["problem"]["code"] == "rule_violation"
    last = bundle["records"][-1]
    raw = base64.b64decode(last["leaf"]).replace(b"append_only", b"append_onlx")
    gen.set_leaf(last, raw)
    r = gen.run(bundle)
    assert (r["problem"]["code"], r["problem"]["seq"]) == ("inclusion_proof", last["seq"]), r
    assert last["seq"] > seqs["bad"]


def test_thread_head_mismatch_takes_precedence_over_a_rule_violation():
    bundle, _ = _with_early_violation().build()
    del bundle["records"][-1]
    r = gen.run(bundle)
    assert (r["problem"]["code"], r["problem"]["seq"]) == ("thread_head_mismatch", None), r


def test_structural_problem_in_the_violating_record_takes_precedence():
    bundle, seqs = _with_early_violation().build()
    entry = next(e for e in bundle["records"] if e["seq"] == seqs["bad"])
    entry["inclusion_proof"] = entry["inclusion_proof"][:-1]
    r = gen.run(bundle)
    assert (r["problem"]["code"], r["problem"]["seq"]) == ("inclusion_proof", seqs["bad"]), r


def test_rule_violation_on_the_command_line(tmp_path):
    bundle, seqs = _with_early_violation().build()
    f = tmp_path / "bundle.json"
    f.write_text(json.dumps(bundle), "utf-8")
    p = subprocess.run([sys.executable, str(HERE / "verify_bundle.py"), str(f), "--key", gen.KEY, "--json"],
                       capture_output=True, timeout=60)
    assert p.returncode == 1, p
    out = json.loads(p.stdout)
    assert out["ok"] is False and set(out["problem"]) == {"code", "message", "seq"}
    assert (out["problem"]["code"], out["problem"]["seq"]) == ("rule_violation", seqs["bad"])
    p = subprocess.run([sys.executable, str(HERE / "verify_bundle.py"), str(f), "--key", gen.KEY],
                       capture_output=True, timeout=60)
    assert p.returncode == 1 and b"FAILED rule_violation at seq %d: rule 7: " % seqs["bad"] in p.stderr, p


def test_malformed_bodies_are_envelope_problems_before_any_replay():
    """A body lacking its kind's fields, or holding one of the wrong type, is refused with the
    envelope (`envelope`, a structural check) by both verifiers, so the replay only ever reads
    well-typed bodies."""
    cases = [
        GOOD.with_record("bad", "decision", "r1", LATER, {}),
        GOOD.with_record("bad", "revocation", "r1", LATER, {}),
        GOOD.with_record("bad", "timeout", "r1", LATER, {"expires_at": "tomorrow"}),
        GOOD.with_record("bad", "follow_up", "r1", LATER, {}),
        GOOD.with_record("bad", "authorization", "r6", LATER, {"granted": True}),
        GOOD.with_record("bad", "interrupt", "r10", LATER, {"expires_at": "tomorrow"}),
    ]
    grant = authorization(ticket(10), DIGEST["r10"], LATER, None)
    del grant["would_deny"]
    cases.append(_open_r10().with_record("bad", "authorization", "r10", LATER, grant))
    for h in cases:
        r, seqs = verify(h)
        assert r["problem"]["code"] == "envelope", r
        assert r["problem"]["seq"] == seqs["bad"], (r, seqs)
        assert vb.exit_status(r) == 1


# ---------------------------------------------------------------------------
# Governance (docs/protocol.md section 6.3, rules 6f and 8-12; section 12 for the policy)
#
# Each history begins with a policy record (as every ledger of this version does: `init`
# writes it at seq 0), its interrupts name the policy record in force, and the bundle carries
# the policy records as its `policy` member.

def wire(cents: int) -> dict:
    return {"tool": "wire_transfer", "args": {"account": "DE02120300000000202051", "amount_cents": cents}}


ACTIONS.update({
    "g1": refund(1000), "g2": wire(5000), "g3": wire(6000), "g4": wire(7000), "g5": refund(2000),
    "g6": refund(1500), "g7": refund(3000), "g8": refund(3100), "g9": wire(8000),
})
DIGEST.update({r: gen.action_digest(a) for r, a in ACTIONS.items()})

P0 = {
    "default": {"review_window_seconds": 3600, "approval_ttl_seconds": 600, "mode": "enforce", "redact": []},
    "tools": {
        "refund": {"approvals_required": 2, "approvers": ["alice", "bob", "group:treasury"]},
        "wire_transfer": {"approval_ttl_seconds": 300, "redact": ["/account"], "break_glass": True},
        "send_email": {"mode": "observe"},
    },
}
P1 = copy.deepcopy(P0)
P1["tools"]["wire_transfer"]["mode"] = "paused"


def policy(doc: dict) -> dict:
    return {"policy": copy.deepcopy(doc), "policy_digest": vb.policy_digest(doc)}


def actor(principal: str, role: str = "reviewer") -> dict:
    return {"principal": principal, "role": role}


AGENT = actor("agent-1", "agent")
ALICE, BOB, CAROL, DAVE = actor("alice"), actor("bob"), actor("carol"), actor("dave")
BG = actor("bg-1", "break_glass")
ADMIN = actor("local:admin", "admin")


def g_interrupt(rid, pol="p0", deadline=D, edit_of=None, allowed=("approve", "edit", "reject")):
    b = interrupt(rid, deadline, edit_of=edit_of, allowed=allowed)
    if pol is not None:
        b["policy"] = ref(pol)
    return b


def g_approve(tk=None, expires_at=None, counts=None, approved_as=None):
    """An approval as the gate writes it: a partial one without a ticket (and expiry)."""
    b = approve(tk, expires_at if tk is not None else None)
    if counts is not None:
        b["approvals"], b["approvals_required"] = counts
    if approved_as is not None:
        b["approved_as"] = approved_as
    return b


def g_break_glass(tk, expires_at):
    return dict(approve(tk, expires_at), break_glass=True, reason="payments outage")


def review(reviews, verdict="acknowledged"):
    return {"reviews": reviews, "verdict": verdict, "rationale": "the outage was real"}


def governed_refusal(rid, error):
    return {"method": "POST", "path": "/v1/requests/%s/decision" % rid, "error": error}


def paused_denial(tk, digest, ts):
    return authorization(tk, digest, ts, None, granted=False, code="tool_paused")


def gov_history() -> History:
    """Every governed outcome the rules allow: two-person approval by principals and a group,
    a refused second approval, break-glass and its review, a pause, a tool_paused denial, an
    unpause and the grant after it, an edit counting as its editor's approval."""
    h = History()
    h.add("p0", "policy", None, T(100), policy(P0), ADMIN)
    # two-person approval of a refund: alice, then carol through group treasury
    h.add("gi1", "interrupt", "g1", T(101), g_interrupt("g1"), AGENT)
    h.add("ga1", "decision", "g1", T(102), g_approve(counts=(1, 2), approved_as="alice"), ALICE)
    h.add("grf1", "refusal", "g1", T(103), governed_refusal("g1", "approver_already_approved"), ALICE)
    h.add("grq1", "refusal", "g1", T(103), governed_refusal("g1", "approver_is_requester"), actor("agent-1"))
    h.add("gb1", "decision", "g1", T(104), g_approve(ticket(101), T(704), (2, 2), "group:treasury"), CAROL)
    h.add("gg1", "authorization", "g1", T(105), authorization(ticket(101), DIGEST["g1"], T(105), T(704)), AGENT)
    # break-glass of a wire transfer, its review, its grant
    h.add("gi2", "interrupt", "g2", T(106), g_interrupt("g2"), AGENT)
    h.add("gbg2", "decision", "g2", T(107), g_break_glass(ticket(102), T(407)), BG)
    h.add("grv2", "review", "g2", T(108), review(ref("gbg2")), ALICE)
    h.add("gg2", "authorization", "g2", T(109), authorization(ticket(102), DIGEST["g2"], T(109), T(407)), AGENT)
    # an approval, a pause, its denial, an interrupt and decision while paused, the unpause
    h.add("gi3", "interrupt", "g3", T(110), g_interrupt("g3"), AGENT)
    h.add("ga3", "decision", "g3", T(111), g_approve(ticket(103), T(411)), BOB)
    h.add("p1", "policy", None, T(112), policy(P1), ADMIN)
    h.add("gd3", "authorization", "g3", T(113), paused_denial(ticket(103), DIGEST["g3"], T(113)), AGENT)
    h.add("gi4", "interrupt", "g4", T(114), g_interrupt("g4", pol="p1"), AGENT)
    h.add("ga4", "decision", "g4", T(115), g_approve(ticket(104), T(415)), BOB)
    h.add("p2", "policy", None, T(116), policy(P0), ADMIN)
    h.add("gg3", "authorization", "g3", T(117), authorization(ticket(103), DIGEST["g3"], T(117), T(411)), AGENT)
    # an edit: the editor's approval of the new request counts 1 of 2, bob's is the second
    h.add("gi5", "interrupt", "g5", T(118), g_interrupt("g5", pol="p2"), AGENT)
    h.add("ge5", "decision", "g5", T(119), dict(edit(ticket(105), "g6"), approved_as="alice"), ALICE)
    h.add("gi6", "interrupt", "g6", T(119), g_interrupt("g6", pol="p2", edit_of="g5", allowed=("approve",)), ALICE)
    h.add("ga6", "decision", "g6", T(119), g_approve(counts=(1, 2), approved_as="alice"), ALICE)
    h.add("gb6", "decision", "g6", T(120), g_approve(ticket(106), T(720), (2, 2), "bob"), BOB)
    # an interrupt without the policy member is judged as before; a rejection is not rule 10's
    h.add("gi7", "interrupt", "g7", T(121), g_interrupt("g7", pol=None), AGENT)
    h.add("gx7", "rejection", "g7", T(122), reject(ticket(107)), actor("agent-1"))
    return h


GOV = gov_history()
GLATER = T(200)  # after the whole governed history, before every approval's expires_at


def test_governed_history_passes():
    r, seqs = verify(GOV)
    assert r["ok"] is True and r["problem"] is None, r
    bundle, _ = GOV.build()
    assert [e["seq"] for e in bundle["policy"]["records"]] == [seqs["p0"], seqs["p1"], seqs["p2"]]
    assert r["records"] == len(GOV.specs) - 3  # the policy records are not the thread's


def test_every_prefix_of_the_governed_history_passes():
    for n in range(1, len(GOV.specs) + 1):
        h = History()
        h.specs = GOV.specs[:n]
        assert verify(h)[0]["ok"], GOV.specs[n - 1][0]


def gov_violation(h: History, name: str, rule: str):
    """Both verifiers report rule_violation at record `name`; Python's message names `rule`."""
    r, seqs = verify(h)
    assert (r["problem"] or {}).get("code") == "rule_violation", r
    assert r["problem"]["seq"] == seqs[name], (r, seqs[name])
    assert r["problem"]["message"].startswith("rule %s: " % rule), r["problem"]["message"]


# 6f: a grant of a paused tool, real or observe (g3 was approved before the pause; g4 while paused)

def test_rule_6f_real_grant_of_a_paused_tool():
    h = GOV.with_record("bad", "authorization", "g3", T(113),
                        authorization(ticket(103), DIGEST["g3"], T(113), T(411)), after="gd3", actor=AGENT)
    gov_violation(h, "bad", "6f")


def test_rule_6f_observe_grant_of_a_paused_tool():
    h = GOV.with_record("bad", "authorization", "g4", T(115),
                        authorization(ticket(104), OTHER_DIGEST, T(115), T(415), mode="observe",
                                      would_deny="approval_action_mismatch"), after="ga4", actor=AGENT)
    gov_violation(h, "bad", "6f")


def test_rule_6f_grant_while_paused_is_checked_before_6a():
    h = GOV.with_record("bad", "authorization", "g4", T(115),
                        authorization(ticket(999), OTHER_DIGEST, T(115), None), after="ga4", actor=AGENT)
    gov_violation(h, "bad", "6f")


def test_rule_6f_a_ticket_approved_while_paused_grants_after_the_unpause():
    h = GOV.with_record("ok", "authorization", "g4", T(117),
                        authorization(ticket(104), DIGEST["g4"], T(117), T(415)), after="gg3", actor=AGENT)
    assert verify(h)[0]["ok"]


def test_rule_6f_denials_of_a_paused_tool_are_no_violation():
    h = GOV.with_record("ok", "authorization", "g4", T(115),
                        paused_denial(ticket(104), DIGEST["g4"], T(115)), after="ga4", actor=AGENT)
    assert verify(h)[0]["ok"]


# 8: invalid policy records (and they are not in force)

INVALID_POLICIES = {
    "not a policy: unknown field": {"defaults": {}},
    "unknown tool field": {"tools": {"refund": {"approver": ["alice"]}}},
    "unknown mode": {"default": {"mode": "pause"}},
    "zero duration": {"default": {"review_window_seconds": 0}},
    "negative duration": {"tools": {"refund": {"approval_ttl_seconds": -5}}},
    "fractional duration": {"default": {"approval_ttl_seconds": 1.5}},
    "duration beyond 2^53": {"default": {"approval_ttl_seconds": 1e19}},
    "duration as a string": {"default": {"approval_ttl_seconds": "600"}},
    "zero approvals_required": {"tools": {"refund": {"approvals_required": 0}}},
    "more approvals than approvers": {"tools": {"refund": {"approvers": ["alice", "bob"], "approvals_required": 3}}},
    "more approvals than inherited approvers": {"default": {"approvers": ["alice"]},
                                                 "tools": {"refund": {"approvals_required": 2}}},
    "default needs more approvals than its approvers": {"default": {"approvers": ["alice"], "approvals_required": 2}},
    "empty approvers": {"tools": {"refund": {"approvers": []}}},
    "duplicated approver": {"tools": {"refund": {"approvers": ["alice", "alice"]}}},
    "empty group name": {"tools": {"refund": {"approvers": ["group:"]}}},
    "empty principal": {"tools": {"refund": {"approvers": [""]}}},
    "approver with a control character": {"tools": {"refund": {"approvers": ["al\u0007ice"]}}},
    "approvers not a list": {"tools": {"refund": {"approvers": "alice"}}},
    "break_glass not a boolean": {"tools": {"refund": {"break_glass": "yes"}}},
    "pointer without slash": {"default": {"redact": ["account"]}},
    "empty pointer": {"tools": {"refund": {"redact": [""]}}},
    "bad pointer escape": {"tools": {"refund": {"redact": ["/a~2"]}}},
    "redact not a list": {"default": {"redact": "/account"}},
    "tool name not an id": {"tools": {"": {}}},
    "tool entry not an object": {"tools": {"refund": []}},
    "default null": {"default": None},
    "tools null": {"tools": None},
    "tool entry null": {"tools": {"refund": None}},
}


@pytest.mark.parametrize("case", sorted(INVALID_POLICIES))
def test_rule_8_invalid_policy_document(case):
    h = GOV.with_record("bad", "policy", None, GLATER, policy(INVALID_POLICIES[case]), actor=ADMIN)
    gov_violation(h, "bad", "8")


def test_rule_8_policy_digest_not_its_documents():
    for digest in ("sha256:" + "00" * 32, vb.policy_digest(P1), "sha256:" + vb.policy_digest(P0)[7:].upper(),
                   vb.policy_digest(P0)[7:]):
        h = GOV.with_record("bad", "policy", None, GLATER, {"policy": P0, "policy_digest": digest}, actor=ADMIN)
        gov_violation(h, "bad", "8")


VALID_POLICY_EDGES = {
    "empty document": {},
    "empty default and tools": {"default": {}, "tools": {}},
    "group makes any count reachable": {"tools": {"refund": {"approvers": ["group:x"], "approvals_required": 5}}},
    "tool approvers override the default's": {"default": {"approvers": ["alice"]},
                                              "tools": {"refund": {"approvers": ["alice", "bob"], "approvals_required": 2}}},
    "largest safe duration": {"default": {"review_window_seconds": 9007199254740991}},
    "pointer '/' and duplicates": {"default": {"redact": ["/", "/a", "/a", "/~0~1"]}},
    "paused default": {"default": {"mode": "paused", "break_glass": False}},
    "group entry of 262 bytes": {"tools": {"refund": {"approvers": ["group:" + "g" * 256]}}},
}


@pytest.mark.parametrize("case", sorted(VALID_POLICY_EDGES))
def test_rule_8_valid_policy_documents(case):
    h = GOV.with_record("ok", "policy", None, GLATER, policy(VALID_POLICY_EDGES[case]), actor=ADMIN)
    assert verify(h)[0]["ok"], case


def test_rule_8_an_invalid_policy_record_is_not_in_force():
    # a forged record pausing refund with a wrong digest, then a grant of a refund: rule 8 at
    # the policy record; without it, the grant would be 6f (the paused policy in force)
    doc = copy.deepcopy(P0)
    doc["tools"]["refund"]["mode"] = "paused"
    bad = {"policy": doc, "policy_digest": "sha256:" + "00" * 32}
    grant = ("gg8", "authorization", "g1", T(105), authorization(ticket(101), DIGEST["g1"], T(105), T(704)))
    h = GOV.without("gg1").with_record("bad", "policy", None, T(104), bad, after="gb1", actor=ADMIN)
    h = h.with_record(*grant, after="bad", actor=AGENT)
    gov_violation(h, "bad", "8")
    # interrupts naming it: rule 9 (not in force), reported after rule 8 is fixed
    ok_doc = GOV.without("gg1").with_record("good", "policy", None, T(104), policy(doc), after="gb1", actor=ADMIN)
    gov_violation(ok_doc.with_record(*grant, after="good", actor=AGENT), "gg8", "6f")


def test_rule_8_before_any_policy_record_the_empty_document_is_in_force():
    # an old history with no policy record: refund needs one approval, nothing is paused
    assert verify(GOOD)[0]["ok"]
    # and a partial approval there is rule 10d
    h = _open_r10().with_record("bad", "decision", "r10", LATER, g_approve(counts=(1, 2)))
    gov_violation(h, "bad", "10d")


# 9: an interrupt naming a policy record that is not in force

def test_rule_9_interrupt_naming_a_superseded_policy_record():
    h = GOV.with_record("bad", "interrupt", "g8", GLATER, g_interrupt("g8", pol="p1"), actor=AGENT)
    gov_violation(h, "bad", "9")


def test_rule_9_interrupt_naming_the_policy_record_before_the_one_in_force():
    # right after p1: p0 is carried by the bundle (not policy_missing) but no longer in force
    h = GOV.with_record("bad", "interrupt", "g8", T(113), g_interrupt("g8", pol="p0"), after="p1", actor=AGENT)
    gov_violation(h, "bad", "9")


def test_rule_9_interrupt_naming_a_policy_before_any_policy_record():
    # (a record can name only earlier records: a later one's leaf hash depends on it)
    h = History()
    h.add("i", "interrupt", "g8", T(1), dict(interrupt("g8", D), policy="ab" * 32))
    h.add("p", "policy", None, T(2), policy(P0), ADMIN)
    # the named id is not carried: check 12 (policy_missing) comes before the replay
    r, seqs = verify(h)
    assert (r["problem"]["code"], r["problem"]["seq"]) == ("policy_missing", seqs["i"]), r


def test_rule_9_interrupt_naming_a_record_that_is_not_a_policy_record():
    # a bundle carries only policy records: not carried, so policy_missing (check 12)
    h = GOV.with_record("bad", "interrupt", "g8", GLATER, g_interrupt("g8", pol="ga1"), actor=AGENT)
    r, seqs = verify(h)
    assert (r["problem"]["code"], r["problem"]["seq"]) == ("policy_missing", seqs["bad"]), r


def test_rule_9_interrupt_naming_an_invalid_policy_record():
    bad = {"policy": P1, "policy_digest": vb.policy_digest(P0)}
    h = GOV.with_record("badp", "policy", None, GLATER, bad, actor=ADMIN)
    h = h.with_record("i8", "interrupt", "g8", GLATER, g_interrupt("g8", pol="badp"), actor=AGENT)
    gov_violation(h, "badp", "8")


def test_rule_1_is_checked_before_rule_9():
    h = GOV.with_record("bad", "interrupt", "g1", GLATER, g_interrupt("g1", pol="p1"), actor=AGENT)
    gov_violation(h, "bad", "1")


# 10: approvers and two-person approval

def _open_g8(pol="p2", action_tool="refund") -> History:
    return GOV.with_record("gi8", "interrupt", "g8", GLATER, g_interrupt("g8", pol=pol), actor=AGENT)


def test_rule_10a_approval_by_the_requester():
    h = _open_g8().with_record("bad", "decision", "g8", GLATER, g_approve(counts=(1, 2), approved_as="group:treasury"),
                               actor=actor("agent-1"))
    gov_violation(h, "bad", "10a")


def test_rule_10a_an_edit_by_the_requester():
    h = _open_g8().with_record("bad", "decision", "g8", GLATER, dict(edit(ticket(108), "g6"), approved_as="group:treasury"),
                               actor=actor("agent-1"))
    gov_violation(h, "bad", "10a")


def test_rule_10a_the_requester_of_an_edits_new_request_is_the_originals():
    # g6 (edit of g5, written by alice) was opened by agent-1: agent-1 may not approve it
    h = GOV.without("gb6").with_record("bad", "decision", "g6", T(120), g_approve(ticket(106), T(720), (2, 2), "group:treasury"),
                                       actor=actor("agent-1"))
    gov_violation(h, "bad", "10a")


def test_rule_10a_comes_before_10d_for_a_decision_without_a_ticket():
    body = dict(edit(None, "g6"), approved_as="group:treasury")
    h = _open_g8().with_record("bad", "decision", "g8", GLATER, body, actor=actor("agent-1"))
    gov_violation(h, "bad", "10a")


OUTSIDERS = {
    "approved_as absent": (ALICE, None),
    "approved_as not listed": (DAVE, "dave"),
    "approved_as another principal": (ALICE, "bob"),
    "approved_as a group not listed": (DAVE, "group:ops"),
}


@pytest.mark.parametrize("case", sorted(OUTSIDERS))
def test_rule_10b_decision_by_a_reviewer_outside_the_approvers(case):
    who, approved_as = OUTSIDERS[case]
    h = _open_g8().with_record("bad", "decision", "g8", GLATER, g_approve(counts=(1, 2), approved_as=approved_as), actor=who)
    gov_violation(h, "bad", "10b")


def test_rule_10b_an_edit_outside_the_approvers():
    h = _open_g8().with_record("bad", "decision", "g8", GLATER, edit(ticket(108), "g6"), actor=DAVE)
    gov_violation(h, "bad", "10b")


def test_rule_10b_a_listed_group_admits_any_reviewer():
    h = _open_g8().with_record("ok", "decision", "g8", GLATER, g_approve(counts=(1, 2), approved_as="group:treasury"), actor=DAVE)
    assert verify(h)[0]["ok"]


def test_rule_10c_second_approval_by_the_same_reviewer():
    h = _open_g8().with_record("a", "decision", "g8", GLATER, g_approve(counts=(1, 2), approved_as="alice"), actor=ALICE)
    gov_violation(h.with_record("bad", "decision", "g8", GLATER, g_approve(ticket(108), T(800), (2, 2), "alice"), actor=ALICE),
                  "bad", "10c")
    # through another entry (a group): still the same principal
    gov_violation(h.with_record("bad", "decision", "g8", GLATER, g_approve(ticket(108), T(800), (2, 2), "group:treasury"),
                                actor=ALICE), "bad", "10c")


def test_rule_10c_the_editor_counts_for_the_edits_new_request():
    h = GOV.without("gb6").with_record("bad", "decision", "g6", T(120), g_approve(ticket(106), T(720), (2, 2), "alice"),
                                       actor=ALICE)
    gov_violation(h, "bad", "10c")


def test_rule_10d_ticket_before_the_nth_approval():
    h = _open_g8().with_record("bad", "decision", "g8", GLATER, g_approve(ticket(108), T(800), (1, 2), "alice"), actor=ALICE)
    gov_violation(h, "bad", "10d")


def test_rule_10d_ticket_at_the_edits_new_request_before_the_nth_approval():
    h = GOV.without("gb6").without("ga6").with_record(
        "bad", "decision", "g6", T(119), g_approve(ticket(106), T(719), (1, 2), "alice"), after="gi6", actor=ALICE)
    gov_violation(h, "bad", "10d")


def test_rule_10d_partial_approval_where_the_ticket_was_due():
    h = GOV.without("gb1").with_record("bad", "decision", "g1", T(104), g_approve(counts=(2, 2), approved_as="bob"),
                                       after="grq1", actor=BOB)
    gov_violation(h, "bad", "10d")


WRONG_COUNTS = {
    "approvals low": (1, 2),
    "approvals high": (3, 2),
    "required high": (2, 3),
    "counts absent": None,
}


@pytest.mark.parametrize("case", sorted(WRONG_COUNTS))
def test_rule_10d_counts_that_are_not_the_replays(case):
    h = GOV.without("gb1").with_record("bad", "decision", "g1", T(104),
                                       g_approve(ticket(101), T(704), WRONG_COUNTS[case], "bob"), after="grq1", actor=BOB)
    gov_violation(h, "bad", "10d")


def test_rule_10d_counts_on_a_tool_needing_one_approval():
    h = GOV.with_record("gi9", "interrupt", "g9", GLATER, g_interrupt("g9", pol="p2"), actor=AGENT)
    gov_violation(h.with_record("bad", "decision", "g9", GLATER, g_approve(ticket(109), T(800), (1, 1)), actor=BOB), "bad", "10d")
    gov_violation(h.with_record("bad", "decision", "g9", GLATER, g_approve(counts=(1, 1)), actor=BOB), "bad", "10d")


def test_rule_10d_counts_follow_the_policy_in_force():
    # g1 needs 2 under p0; after one approval the policy drops to 1: the next one issues the
    # ticket, with no counts; under a policy requiring 3 it would be partial (2 of 3)
    one = copy.deepcopy(P0)
    one["tools"]["refund"]["approvals_required"] = 1
    three = copy.deepcopy(P0)
    three["tools"]["refund"]["approvals_required"] = 3
    base = History()
    base.specs = copy.deepcopy(GOV.specs[:GOV.names().index("ga1") + 1])
    drop = base.with_record("pd", "policy", None, T(103), policy(one), after="ga1", actor=ADMIN)
    assert verify(drop.with_record("ok", "decision", "g1", T(104), g_approve(ticket(101), T(704), None, "bob"), after="pd",
                                   actor=BOB))[0]["ok"]
    gov_violation(drop.with_record("bad", "decision", "g1", T(104), g_approve(ticket(101), T(704), (2, 2), "bob"), after="pd",
                                   actor=BOB), "bad", "10d")
    rise = base.with_record("pr", "policy", None, T(103), policy(three), after="ga1", actor=ADMIN)
    assert verify(rise.with_record("ok", "decision", "g1", T(104), g_approve(counts=(2, 3), approved_as="bob"), after="pr",
                                   actor=BOB))[0]["ok"]
    gov_violation(rise.with_record("bad", "decision", "g1", T(104), g_approve(ticket(101), T(704), (2, 3), "bob"), after="pr",
                                   actor=BOB), "bad", "10d")


def test_rule_10d_a_decision_without_a_ticket_that_is_not_an_approval():
    h = GOV.with_record("gi9", "interrupt", "g9", GLATER, g_interrupt("g9", pol="p2"), actor=AGENT)
    gov_violation(h.with_record("bad", "decision", "g9", GLATER, edit(None, "g6"), actor=BOB), "bad", "10d")


# 11: break-glass

@pytest.mark.parametrize("who", ["agent", "reviewer", "admin", "auditor"])
def test_rule_11a_break_glass_not_by_the_break_glass_role(who):
    h = GOV.with_record("gi9", "interrupt", "g9", GLATER, g_interrupt("g9", pol="p2"), actor=AGENT)
    h = h.with_record("bad", "decision", "g9", GLATER, g_break_glass(ticket(109), T(500)), actor=actor("bg-1", who))
    gov_violation(h, "bad", "11a")


def test_rule_11a_break_glass_that_is_not_an_approval_with_a_ticket():
    h = GOV.with_record("gi9", "interrupt", "g9", GLATER, g_interrupt("g9", pol="p2"), actor=AGENT)
    gov_violation(h.with_record("bad", "decision", "g9", GLATER, dict(g_break_glass(None, None)), actor=BG), "bad", "11a")
    gov_violation(h.with_record("bad", "decision", "g9", GLATER, dict(edit(ticket(109), "g6"), break_glass=True, reason="x"),
                                actor=BG), "bad", "11a")


def test_rule_11a_a_decision_by_the_break_glass_role_without_the_mark():
    h = GOV.with_record("gi9", "interrupt", "g9", GLATER, g_interrupt("g9", pol="p2"), actor=AGENT)
    gov_violation(h.with_record("bad", "decision", "g9", GLATER, g_approve(ticket(109), T(500)), actor=BG), "bad", "11a")


def test_rule_10_comes_before_11a_for_an_unmarked_decision_of_the_break_glass_role():
    h = _open_g8().with_record("bad", "decision", "g8", GLATER, g_approve(counts=(1, 2)), actor=BG)
    gov_violation(h, "bad", "10b")


def test_rule_11b_break_glass_where_the_policy_does_not_allow_it():
    h = _open_g8().with_record("bad", "decision", "g8", GLATER, g_break_glass(ticket(108), T(800)), actor=BG)
    gov_violation(h, "bad", "11b")


def test_rule_11b_break_glass_after_the_policy_stopped_allowing_it():
    no = copy.deepcopy(P0)
    no["tools"]["wire_transfer"]["break_glass"] = False
    h = GOV.with_record("gi9", "interrupt", "g9", GLATER, g_interrupt("g9", pol="p2"), actor=AGENT)
    h = h.with_record("pn", "policy", None, GLATER, policy(no), actor=ADMIN)
    gov_violation(h.with_record("bad", "decision", "g9", GLATER, g_break_glass(ticket(109), T(500)), actor=BG), "bad", "11b")


def test_rule_11_break_glass_ignores_approvers_and_counts_and_a_pause():
    # break-glass of a paused wire transfer is allowed; its grant is 6f until the unpause
    h = GOV.with_record("gbg4", "decision", "g4", T(115), g_break_glass(ticket(104), T(415)), after="gi4", actor=BG)
    h = h.without("ga4")
    assert verify(h)[0]["ok"]
    gov_violation(h.with_record("bad", "authorization", "g4", T(115), authorization(ticket(104), DIGEST["g4"], T(115), T(415)),
                                after="gbg4", actor=AGENT), "bad", "6f")


def test_rule_3a_break_glass_of_a_closed_request():
    h = GOV.with_record("bad", "decision", "g3", GLATER, g_break_glass(ticket(190), T(500)), actor=BG)
    gov_violation(h, "bad", "3a")


# 12: reviews

def test_rule_12a_review_of_a_request_without_a_break_glass_use():
    h = GOV.with_record("bad", "review", "g3", GLATER, review(ref("ga3")), actor=ALICE)
    gov_violation(h, "bad", "12a")


def test_rule_12a_review_before_the_break_glass_use():
    h = GOV.without("grv2").with_record("bad", "review", "g2", T(106), review("ab" * 32), after="gi2", actor=ALICE)
    gov_violation(h, "bad", "12a")


def test_rule_2_review_of_a_request_without_an_interrupt():
    h = GOV.with_record("bad", "review", "g-none", GLATER, review(ref("gbg2")), actor=ALICE)
    gov_violation(h, "bad", "2")


def test_rule_12b_review_by_the_break_glass_user():
    h = GOV.without("grv2").with_record("bad", "review", "g2", T(108), review(ref("gbg2")), after="gbg2", actor=actor("bg-1"))
    gov_violation(h, "bad", "12b")


def test_rule_12c_second_review():
    h = GOV.with_record("bad", "review", "g2", GLATER, review(ref("gbg2"), "disputed"), actor=BOB)
    gov_violation(h, "bad", "12c")


def test_rule_12d_review_naming_another_record():
    for other in (ref("gi2"), ref("ga1"), "cd" * 32):
        h = GOV.without("grv2").with_record("bad", "review", "g2", T(108), review(other), after="gbg2", actor=ALICE)
        gov_violation(h, "bad", "12d")


# ---------------------------------------------------------------------------
# The bundle's policy member (docs/protocol.md section 6.2, checks 11 and 12)

def _gov_bundle() -> tuple[dict, dict[str, int], gen.Log]:
    log, seqs = GOV.build_log()
    return log.bundle(THREAD), seqs, log


def _expect(bundle, code, seq):
    r = agree(bundle)
    assert ((r["problem"] or {}).get("code"), (r["problem"] or {}).get("seq")) == (code, seq), r
    assert vb.exit_status(r) == (0 if code is None else 2 if code == "bad_input" else 1)
    return r


def test_policy_member_stripped():
    b, seqs, _ = _gov_bundle()
    del b["policy"]
    _expect(b, "policy_missing", seqs["gi1"])


def test_policy_member_stripped_of_a_record():
    b, seqs, _ = _gov_bundle()
    first = copy.deepcopy(b)
    del first["policy"]["records"][0]
    _expect(first, "thread_gap", seqs["p1"])
    middle = copy.deepcopy(b)
    del middle["policy"]["records"][1]
    _expect(middle, "thread_gap", seqs["p2"])
    last = copy.deepcopy(b)
    del last["policy"]["records"][-1]
    _expect(last, "thread_head_mismatch", None)


def test_policy_thread_head_mismatched():
    b, seqs, log = _gov_bundle()
    older = log.bundle(THREAD, size=seqs["p2"])  # the head before p2
    for head in (older["policy"]["thread_head"], b["thread_head"],
                 gen.sign_note(gen.thread_head_text(gen.ORIGIN, THREAD, 3, gen.lh(log.leaves[seqs["p2"]]).hex(), len(log.leaves)))):
        c = copy.deepcopy(b)
        c["policy"]["thread_head"] = head
        _expect(c, "thread_head_mismatch", None)
    c = copy.deepcopy(b)
    c["policy"]["thread_head"] = gen.sign_note(c["policy"]["thread_head"].split("\n\n")[0] + "\n", gen.OTHER_SIGNER)
    _expect(c, "thread_head_signature", None)
    c = copy.deepcopy(b)
    c["policy"]["thread_head"] = gen.sign_note("hitl-ledger thread-head v2\n")
    _expect(c, "thread_head_body", None)


def test_policy_entries_with_a_broken_chain():
    # a policy record whose thread_prev is not its predecessor's (the log is otherwise intact)
    log, seqs = GOV.build_log()
    pos = log.threads[vb.POLICY_THREAD].index(seqs["p1"])
    log2 = gen.Log()
    for t, s in sorted(((t, s) for t, ss in log.threads.items() for s in ss), key=lambda x: x[1]):
        rec = json.loads(log.leaves[s])
        log2.append(t, rec["kind"], tweak=lambda r, rec=rec: r.update(rec, prev=r["prev"], thread_prev=r["thread_prev"]))
    assert log2.leaves == log.leaves  # the same log, rebuilt record by record
    log3 = gen.Log()
    for t, s in sorted(((t, s) for t, ss in log.threads.items() for s in ss), key=lambda x: x[1]):
        rec = json.loads(log.leaves[s])
        broken = s == seqs["p1"]
        log3.append(t, rec["kind"], tweak=lambda r, rec=rec, broken=broken: r.update(
            rec, prev=r["prev"], thread_prev="77" * 32 if broken else r["thread_prev"]))
    _expect(log3.bundle(THREAD), "thread_prev", seqs["p1"])
    assert pos == 1
    # entries swapped
    b = log.bundle(THREAD)
    e = b["policy"]["records"]
    e[0], e[1] = e[1], e[0]
    _expect(b, "thread_gap", seqs["p1"])


def test_policy_entries_that_are_not_policy_records():
    b, seqs, log = _gov_bundle()
    # a record of the thread in the policy member
    c = copy.deepcopy(b)
    c["policy"]["records"].insert(0, copy.deepcopy(b["records"][0]))
    _expect(c, "record_thread", seqs["gi1"])
    # a policy record in the thread's records (out of its thread)
    c = copy.deepcopy(b)
    c["records"].insert(0, copy.deepcopy(b["policy"]["records"][0]))
    _expect(c, "record_thread", seqs["p0"])


@pytest.mark.parametrize("bad", [None, "x", [], {"records": []}, {"thread_head": 1, "records": []},
                                 {"thread_head": "x"}, {"thread_head": "x", "records": {}},
                                 {"thread_head": "x", "records": [1]}, {"thread_head": "x", "records": [{"seq": 0}]}])
def test_policy_member_structure(bad):
    b, seqs, _ = _gov_bundle()
    b["policy"] = bad
    _expect(b, "bad_input", None)
    # check 11 comes after the thread's records (check 9) and the key checks (check 3)
    gap = copy.deepcopy(b)
    del gap["records"][0]
    _expect(gap, "thread_gap", seqs["ga1"])
    other = copy.deepcopy(b)
    other["verifier_key"] = gen.OTHER_KEY
    _expect(other, "verifier_key_mismatch", None)


def test_policy_member_unknown_fields_are_ignored():
    b, _, _ = _gov_bundle()
    b["policy"]["extra"] = [1]
    b["policy"]["records"][0]["extra"] = {}
    _expect(b, None, None)


def test_policy_member_of_an_old_bundle_is_optional():
    # a bundle of a ledger holding no policy record has no policy member, and verifies as before
    bundle, _ = GOOD.build()
    assert "policy" not in bundle
    _expect(bundle, None, None)
    # but an interrupt naming a policy record needs it
    h = GOOD.with_record("i", "interrupt", "r10", LATER, dict(interrupt("r10", D), policy="ab" * 32))
    bundle, seqs = h.build()
    _expect(bundle, "policy_missing", seqs["i"])


# ---------------------------------------------------------------------------
# Envelopes of the new kinds and members (docs/protocol.md sections 2.1 and 2.3)

def _with_body_member(name, member, value):
    """GOV with record `name`'s body member set (or removed when value is ...)."""
    h = History()
    for spec in GOV.specs:
        n, kind, rid, ts, body, act = copy.deepcopy(spec)
        if n == name:
            if value is ...:
                del body[member]
            else:
                body[member] = value
        h.specs.append((n, kind, rid, ts, body, act))
    return h


BAD_ENVELOPES = {
    "approvals zero": ("ga1", "approvals", 0),
    "approvals a string": ("ga1", "approvals", "1"),
    "approvals a fraction": ("ga1", "approvals", 1.5),
    "approvals true": ("ga1", "approvals", True),
    "approvals_required null": ("ga1", "approvals_required", None),
    "approved_as a number": ("ga1", "approved_as", 1),
    "break_glass false": ("gbg2", "break_glass", False),
    "break_glass null": ("gbg2", "break_glass", None),
    "reason blank": ("gbg2", "reason", "  "),
    "reason null": ("gbg2", "reason", None),
    "interrupt policy not hex": ("gi1", "policy", "AB" * 32),
    "interrupt policy null": ("gi1", "policy", None),
    "approvals on an interrupt": ("gi1", "approvals", 1),
    "policy on a decision": ("ga1", "policy", "ab" * 32),
    "break_glass on an authorization": ("gg2", "break_glass", True),
    "review without rationale": ("grv2", "rationale", ...),
    "review rationale blank": ("grv2", "rationale", " \t"),
    "review reviews not hex": ("grv2", "reviews", "xyz"),
    "review verdict not a string": ("grv2", "verdict", 1),
    "review unknown member": ("grv2", "reason", "x"),
    "policy without digest": ("p1", "policy_digest", ...),
    "policy document not an object": ("p1", "policy", []),
    "policy unknown member": ("p1", "approvals", 1),
    "decision ticket_id a number": ("ga3", "ticket_id", 5),
}


@pytest.mark.parametrize("case", sorted(BAD_ENVELOPES))
def test_envelope_of_the_new_members(case):
    name, member, value = BAD_ENVELOPES[case]
    h = _with_body_member(name, member, value)
    r, seqs = verify(h)
    assert (r["problem"]["code"], r["problem"]["seq"]) == ("envelope", seqs[name]), r


def test_envelope_of_policy_records_and_the_policy_thread():
    log, seqs = GOV.build_log()
    # a policy record with a request id; in another thread; another kind in the policy thread
    for thread, kind, tweak in [
        (vb.POLICY_THREAD, "policy", lambda r: r.update(request_id="g1")),
        (THREAD, "policy", None),
        (vb.POLICY_THREAD, "refusal", None),
        (vb.POLICY_THREAD, "interrupt", lambda r: r.update(request_id="g9")),
    ]:
        l2 = copy.deepcopy(log)
        seq = l2.append(thread, kind, tweak=tweak)
        bundle = l2.bundle(THREAD)
        r = agree(bundle)
        assert (r["problem"]["code"], r["problem"]["seq"]) == ("envelope", seq), (thread, kind, r)


def test_envelope_roles():
    # break_glass is a role; a made-up one is not
    h = GOV.with_record("x", "refusal", "g1", GLATER, governed_refusal("g1", "forbidden"), actor=BG)
    assert verify(h)[0]["ok"]
    h = GOV.with_record("x", "refusal", "g1", GLATER, governed_refusal("g1", "forbidden"), actor=actor("z", "superuser"))
    r, seqs = verify(h)
    assert (r["problem"]["code"], r["problem"]["seq"]) == ("envelope", seqs["x"]), r


# ---------------------------------------------------------------------------
# Policy resolution and validation (section 12), unit level

def test_policy_resolution_per_tool():
    doc = {"default": {"redact": ["/pin"], "approvers": ["group:ops"], "mode": "observe"},
           "tools": {"wire": {"redact": ["/account", "/pin"], "approvals_required": 2, "approvers": ["alice", "bob"],
                              "break_glass": True, "mode": "paused"}}}
    assert vb.validate_policy(doc) is None
    assert vb.resolve_tool(doc, "wire") == {
        "review_window_seconds": 3600, "approval_ttl_seconds": 600, "mode": "paused", "redact": ["/pin", "/account"],
        "approvers": ["alice", "bob"], "approvals_required": 2, "break_glass": True}
    assert vb.resolve_tool(doc, "other") == {
        "review_window_seconds": 3600, "approval_ttl_seconds": 600, "mode": "observe", "redact": ["/pin"],
        "approvers": ["group:ops"], "approvals_required": 1, "break_glass": False}
    assert vb.resolve_tool({}, "x") == vb.POLICY_DEFAULTS


def test_policy_members_are_never_null():
    # Section 12: "a value of the wrong type" (schemas/policy.json allows no null). The Rust
    # gate and verifier (src/model/policy.rs) read a null member of an entry as absent and
    # record such documents; reported, so no agreement case here until that is settled.
    for doc in ({"default": {"mode": None}}, {"tools": {"t": {"approvers": None}}}, {"tools": {"t": {"break_glass": None}}},
                {"default": {"approval_ttl_seconds": None}}):
        assert vb.validate_policy(doc) is not None, doc
