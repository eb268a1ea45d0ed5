"""The in-browser verifier (console/verify.js) on bundles that carry policy records and
governance records (docs/protocol.md 6.1, 6.2 checks 11 to 13, 6.3 rules 6f and 8 to 12).

The bundles are built with the interop tests' synthetic generator
(tests/interop/test_verify_bundle_vectors.py: freshly chained, proven and signed with the
public test key), so every bundle passes the structural checks and exactly one record breaks
one rule. Each verdict is checked against what the contract says it must be: the problem
code, the seq of exactly that record and the rule the message names.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import sys

import pytest
import rfc8785
from browser_support import REPO, sign_in, wait_for
from selenium.webdriver.common.by import By
from test_verify import browser_verify

sys.path.insert(0, str(REPO / "tests" / "interop"))
import test_verify_bundle_vectors as gen  # noqa: E402

POLICY_THREAD = "hitl-ledger/policy"
THREAD = "thread-gov"
DEADLINE = "2026-11-30T21:00:00.000000Z"
EXPIRES = "2026-11-30T20:30:00.000000Z"

DOC = {
    "default": {"review_window_seconds": 3600, "approval_ttl_seconds": 600},
    "tools": {
        "pay": {"approvals_required": 2},
        "vault": {"approvers": ["alice", "group:ops"]},
        "bg": {"break_glass": True},
        "stop": {"mode": "paused"},
    },
}


def digest(doc) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(doc)).hexdigest()


class Scenario:
    """One log: policy records in hitl-ledger/policy, governance records in THREAD."""

    def __init__(self):
        self.log = gen.Log()
        self.policy_id: str | None = None
        self.policy_ids: list[str] = []
        self.interrupts: dict[str, dict] = {}
        self.tickets = 0
        self.names: dict[str, int] = {}

    def _append(self, name, thread, kind, rid, actor, body) -> int:
        def tweak(rec):
            rec.update(request_id=rid, body=body, actor=actor)
            if kind == "authorization":
                body["evaluated_at"] = rec["ts"]  # the same instant as its ts
        seq = self.log.append(thread, kind, tweak=tweak)
        if name:
            self.names[name] = seq
        return seq

    def hash_of(self, seq: int) -> str:
        return gen.lh(self.log.leaves[seq]).hex()

    def policy(self, doc, name=None, policy_digest=None) -> int:
        seq = self._append(name, POLICY_THREAD, "policy", None, {"principal": "hitl-ledger", "role": "system"},
                           {"policy": doc, "policy_digest": policy_digest or digest(doc)})
        self.policy_id = self.hash_of(seq)
        self.policy_ids.append(self.policy_id)
        return seq

    def interrupt(self, rid, tool, name=None, opener="agent-1", policy_id=None) -> int:
        action = {"tool": tool, "args": {"n": len(self.interrupts)}}
        body = {"interrupt_id": f"int-{rid}", "tool": tool, "args": action["args"], "redacted": [],
                "action_digest": gen.action_digest(action), "action_schema": "hitl-ledger/action/v1",
                "allowed_decisions": ["approve", "edit", "reject"], "expires_at": DEADLINE, "edit_of": None}
        named = policy_id if policy_id is not None else self.policy_id
        if named is not None:
            body["policy"] = named
        self.interrupts[rid] = body
        return self._append(name, THREAD, "interrupt", rid, {"principal": opener, "role": "agent"}, body)

    def ticket(self) -> str:
        self.tickets += 1
        return "0192f3c0-2222-7000-8000-%012x" % self.tickets

    def decision(self, rid, principal, name=None, role="reviewer", ticket=True, counts=None, approved_as=None,
                 reason=None) -> tuple[int, str | None]:
        t = self.ticket() if ticket else None
        body = {"decision": "approve", "rationale": None, "ticket_id": t, "expires_at": EXPIRES if t else None,
                "edited_digest": None, "superseded_by": None}
        if counts:
            body["approvals"], body["approvals_required"] = counts
        if approved_as:
            body["approved_as"] = approved_as
        if reason is not None:
            body["break_glass"] = True
            body["reason"] = reason
        return self._append(name, THREAD, "decision", rid, {"principal": principal, "role": role}, body), t

    def authorization(self, rid, ticket, name=None, granted=True, code=None) -> int:
        body = {"ticket_id": ticket, "attempt_id": None, "action_digest": self.interrupts[rid]["action_digest"],
                "granted": granted, "code": code, "evaluated_at": "2026-11-30T20:00:00.000000Z",
                "expires_at": EXPIRES if granted else None, "idempotency_key": "0" * 64 if granted else None,
                "mode": "enforce", "would_deny": None}
        return self._append(name, THREAD, "authorization", rid, {"principal": "agent-1", "role": "agent"}, body)

    def review(self, rid, principal, reviews, name=None, verdict="acknowledged") -> int:
        return self._append(name, THREAD, "review", rid, {"principal": principal, "role": "reviewer"},
                            {"reviews": reviews, "verdict": verdict, "rationale": "looked at it"})

    def bundle(self, with_policy=True) -> dict:
        b = self.log.bundle(THREAD)
        if with_policy and POLICY_THREAD in self.log.threads:
            p = self.log.bundle(POLICY_THREAD)
            assert p["checkpoint"] == b["checkpoint"]
            b["policy"] = {"thread_head": p["thread_head"], "records": p["records"]}
        return b


def good() -> Scenario:
    """Every governance outcome the rules allow."""
    s = Scenario()
    s.policy({"default": {"approval_ttl_seconds": 60}}, "p0")
    s.policy(DOC, "p1")
    # two-person: a partial approval, then the second reviewer's with the ticket, then a grant
    s.interrupt("pay-1", "pay", "i-pay")
    s.decision("pay-1", "alice", "partial", ticket=False, counts=(1, 2))
    _, t = s.decision("pay-1", "bob", "final", counts=(2, 2))
    s.authorization("pay-1", t, "grant-pay")
    # a named approver, admitted as herself or through a group
    s.interrupt("vault-1", "vault", "i-vault")
    s.decision("vault-1", "alice", "vault-ok", approved_as="alice")
    s.interrupt("vault-2", "vault")
    s.decision("vault-2", "carol", approved_as="group:ops")
    # break-glass, its grant, and another reviewer's review
    s.interrupt("bg-1", "bg", "i-bg")
    bg_seq, t = s.decision("bg-1", "operator", "bg-use", role="break_glass", reason="plant on fire")
    s.authorization("bg-1", t)
    s.review("bg-1", "carol", s.hash_of(bg_seq), "bg-review")
    # a paused tool: interrupts and decisions go on, authorize is denied
    s.interrupt("stop-1", "stop", "i-stop")
    _, t = s.decision("stop-1", "alice", "stop-approved")
    s.authorization("stop-1", t, "stop-denied", granted=False, code="tool_paused")
    return s


def verdict(d, bundle: dict) -> dict:
    got = browser_verify(d, json.dumps(bundle).encode("utf-8"), gen.KEY)
    assert "error" not in got, got.get("error")
    return got


@pytest.fixture
def page(driver, ledger):
    driver.get(ledger.url + "/console/")
    wait_for(lambda: driver.find_element(By.ID, "token"))
    return driver


def test_a_governed_history_with_its_policy_records_verifies(page):
    got = verdict(page, good().bundle())
    assert got["report"]["ok"] is True, got["report"]
    assert [s for c, s in got["checks"] if c != "witnesses"] == ["pass"] * 12
    assert dict(got["checks"])["witnesses"] == "skipped"
    assert dict(got["checks"])["policy"] == "pass"


def test_a_bundle_without_policy_records_is_verified_as_before(page):
    s = Scenario()
    s.interrupt("r-1", "refund")
    _, t = s.decision("r-1", "alice")
    s.authorization("r-1", t)
    got = verdict(page, s.bundle())
    assert "policy" not in s.bundle()
    assert got["report"]["ok"] is True, got["report"]


def at(s: Scenario, name: str) -> int:
    return s.names[name]


def violation(page, s: Scenario, name: str, rule: str, phrase: str) -> None:
    got = verdict(page, s.bundle())
    r = got["report"]
    assert r["ok"] is False and r["problem"]["code"] == "rule_violation", r
    assert r["problem"]["seq"] == at(s, name), (r, s.names)
    assert f"rule {rule}: " in r["problem"]["message"] and phrase in r["problem"]["message"], r["problem"]
    status = dict(got["checks"])
    assert status["policy"] == "pass" and status["rules"] == "fail", status


def test_rule_6f_a_grant_of_a_paused_tool(page):
    s = good()
    s.interrupt("stop-2", "stop")
    _, t = s.decision("stop-2", "alice")
    s.authorization("stop-2", t, "paused-grant")
    violation(page, s, "paused-grant", "6f", "whose tool is paused")


@pytest.mark.parametrize("doc,policy_digest,why", [
    ({"default": {"approvals_required": 0}}, None, "positive integer"),
    ({"tools": {"t": {"approvers": ["a"], "approvals_required": 2}}}, None, "more than the 1 approvers"),
    ({"tools": {"t": {"mode": "pause"}}}, None, "not a mode"),
    ({"default": {"loud": True}}, None, "unknown field"),
    ({"tools": {"t": {"approvers": ["a", "a"]}}}, None, "twice"),
    ({"tools": {"t": {"redact": ["x"]}}}, None, "not a JSON Pointer"),
    (DOC, "sha256:" + "0" * 64, "policy_digest"),
])
def test_rule_8_an_invalid_policy_record(page, doc, policy_digest, why):
    s = good()
    s.policy(doc, "bad", policy_digest=policy_digest)
    violation(page, s, "bad", "8", why)


def test_rule_9_an_interrupt_naming_a_policy_not_in_force(page):
    s = good()
    s.interrupt("late", "refund", "stale", policy_id=s.policy_ids[0])  # the earlier policy, not the one in force
    violation(page, s, "stale", "9", "not the one in force")


def test_rule_10a_an_approval_by_the_requester(page):
    s = good()
    s.interrupt("pay-2", "pay", opener="alice")
    s.decision("pay-2", "alice", "self", ticket=False, counts=(1, 2))
    violation(page, s, "self", "10a", "by the principal that opened it")


def test_rule_10b_a_reviewer_outside_the_approvers(page):
    s = good()
    s.interrupt("vault-3", "vault")
    s.decision("vault-3", "bob", "outsider", approved_as="bob")
    violation(page, s, "outsider", "10b", "outside the approvers")
    s = good()
    s.interrupt("vault-3", "vault")
    s.decision("vault-3", "bob", "claims-alice", approved_as="alice")
    violation(page, s, "claims-alice", "10b", "outside the approvers")
    s = good()
    s.interrupt("vault-3", "vault")
    s.decision("vault-3", "alice", "unnamed")
    violation(page, s, "unnamed", "10b", "outside the approvers")


def test_rule_10c_the_same_reviewer_twice(page):
    s = good()
    s.interrupt("pay-2", "pay")
    s.decision("pay-2", "alice", ticket=False, counts=(1, 2))
    s.decision("pay-2", "alice", "twice", counts=(2, 2))
    violation(page, s, "twice", "10c", "same reviewer")


def test_rule_10d_a_ticket_before_the_last_approval_and_wrong_counts(page):
    s = good()
    s.interrupt("pay-2", "pay")
    s.decision("pay-2", "alice", "early", counts=(1, 2))
    violation(page, s, "early", "10d", "before its 2th approval")
    s = good()
    s.interrupt("pay-2", "pay")
    s.decision("pay-2", "alice", ticket=False, counts=(1, 2))
    s.decision("pay-2", "bob", "stalled", ticket=False, counts=(2, 2))
    violation(page, s, "stalled", "10d", "should have issued the ticket")
    s = good()
    s.interrupt("pay-2", "pay")
    s.decision("pay-2", "alice", "miscounted", ticket=False, counts=(1, 3))
    violation(page, s, "miscounted", "10d", "not the replay's")


def test_rule_11_break_glass_by_another_role_or_where_not_allowed(page):
    s = good()
    s.interrupt("bg-2", "bg")
    s.decision("bg-2", "alice", "reviewer-bg", role="reviewer", reason="hurry")
    violation(page, s, "reviewer-bg", "11a", "not by the break_glass role")
    s = good()
    s.interrupt("bg-2", "bg")
    s.decision("bg-2", "operator", "plain", role="break_glass")
    violation(page, s, "plain", "11a", "not by the break_glass role")
    s = good()
    s.interrupt("pay-2", "pay")
    s.decision("pay-2", "operator", "not-allowed", role="break_glass", reason="hurry")
    violation(page, s, "not-allowed", "11b", "does not allow it")


def test_rule_12_reviews(page):
    s = good()
    s.review("pay-1", "carol", s.hash_of(at(s, "final")), "no-use")
    violation(page, s, "no-use", "12a", "no break-glass use")
    s = good()
    s.interrupt("bg-2", "bg")
    seq, _ = s.decision("bg-2", "operator", role="break_glass", reason="hurry")
    s.review("bg-2", "operator", s.hash_of(seq), "own")
    violation(page, s, "own", "12b", "by its break-glass user")
    s = good()
    s.review("bg-1", "dave", s.hash_of(at(s, "bg-use")), "second")
    violation(page, s, "second", "12c", "a second review")
    s = good()
    s.interrupt("bg-2", "bg")
    s.decision("bg-2", "operator", role="break_glass", reason="hurry")
    s.review("bg-2", "carol", s.hash_of(at(s, "bg-use")), "other")
    violation(page, s, "other", "12d", "another record")


def failure(page, bundle) -> tuple[dict, dict]:
    got = verdict(page, bundle)
    assert got["report"]["ok"] is False, got["report"]
    return got["report"]["problem"], dict(got["checks"])


def test_the_policy_records_are_checked_as_a_thread_of_their_own(page):
    s = good()
    first_interrupt = at(s, "i-pay")
    # stripped of its policy records: the interrupts name records it does not hold
    b = s.bundle()
    del b["policy"]
    problem, status = failure(page, b)
    assert (problem["code"], problem["seq"]) == ("policy_missing", first_interrupt), problem
    assert status["head"] == "pass" and status["policy"] == "fail" and status["rules"] == "not_run"
    # the last policy record dropped: the signed head says there is one more
    b = s.bundle()
    b["policy"]["records"].pop()
    problem, status = failure(page, b)
    assert problem["code"] == "thread_head_mismatch", problem
    assert status["head"] == "pass" and status["policy"] == "fail"
    # the first dropped: the chain has a gap
    b = s.bundle()
    b["policy"]["records"].pop(0)
    problem, _ = failure(page, b)
    assert (problem["code"], problem["seq"]) == ("thread_gap", at(s, "p1")), problem
    # a record of the thread passed off as a policy record
    b = s.bundle()
    b["policy"]["records"][0] = copy.deepcopy(b["records"][0])
    problem, status = failure(page, b)
    assert (problem["code"], problem["seq"]) == ("record_thread", b["records"][0]["seq"]), problem
    assert status["leaves"] == "pass" and status["policy"] == "fail"
    # the thread's own head in place of the policy thread's
    b = s.bundle()
    b["policy"]["thread_head"] = b["thread_head"]
    problem, _ = failure(page, b)
    assert problem["code"] == "thread_head_mismatch", problem
    # a policy thread head signed by another key
    b = s.bundle()
    text = b["policy"]["thread_head"].split("\n\n")[0] + "\n"
    b["policy"]["thread_head"] = gen.sign_note(text, signer=gen.OTHER_SIGNER)
    problem, _ = failure(page, b)
    assert problem["code"] == "thread_head_signature", problem
    # a policy member of the wrong shape
    for wrong in ([], {"records": []}, {"thread_head": "x", "records": {}}, {"thread_head": "x", "records": [{"seq": 1}]}):
        b = s.bundle()
        b["policy"] = wrong
        problem, status = failure(page, b)
        assert problem["code"] == "bad_input", (wrong, problem)
        assert status["structure"] == "pass" and status["policy"] == "fail", status
    # a policy leaf edited: its proof no longer holds
    b = s.bundle()
    entry = b["policy"]["records"][1]
    leaf = base64.b64decode(entry["leaf"]).replace(b'"approvals_required":2', b'"approvals_required":1')
    entry["leaf"] = base64.b64encode(leaf).decode()
    problem, _ = failure(page, b)
    assert (problem["code"], problem["seq"]) == ("inclusion_proof", at(s, "p1")), problem


def test_the_verify_place_shows_the_policy_check(driver, ledger, tmp_path, shoot):
    d = driver
    sign_in(d, ledger, "auditor")
    d.find_element(By.ID, "tab-verify").click()
    wait_for(lambda: d.find_element(By.ID, "place-verify").is_displayed())
    d.find_element(By.ID, "verify-key").send_keys(gen.KEY)
    s = good()
    f = tmp_path / "governed.json"
    f.write_text(json.dumps(s.bundle()), "utf-8")
    d.find_element(By.ID, "bundle-file").send_keys(str(f))
    v = wait_for(lambda: d.find_element(By.ID, "verdict"), what="the verdict")
    assert v.get_attribute("data-ok") == "true", v.text
    check = d.find_element(By.CSS_SELECTOR, "#checks li[data-check=policy]")
    assert check.get_attribute("data-status") == "pass" and "2 policy records" in check.text
    # a paused tool granted: the replay names the record and the rule
    s.interrupt("stop-2", "stop")
    _, t = s.decision("stop-2", "alice")
    seq = s.authorization("stop-2", t)
    f2 = tmp_path / "paused-grant.json"
    f2.write_text(json.dumps(s.bundle()), "utf-8")
    d.execute_script("document.getElementById('bundle-file').value = ''")
    d.find_element(By.ID, "bundle-file").send_keys(str(f2))
    wait_for(lambda: d.find_element(By.ID, "verdict").get_attribute("data-code") == "rule_violation",
             what="the rule violation")
    v = d.find_element(By.ID, "verdict")
    assert f"at record seq {seq}" in v.text and "rule 6f" in v.text
    d.execute_script("arguments[0].scrollIntoView()", d.find_element(By.ID, "verify-result"))
    shoot("verify-rule-violation")
