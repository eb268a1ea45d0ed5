"""The console's governance views (issue 20) in headless Chromium, against the real server:
the policy in force and its history, partial approvals ("1 of 2 approvals" and by whom, no
ticket until the last one), the governed refusals, a paused tool's denial in the history, the
break-glass post-event review queue and its form, and hostile strings in all of these shown as
text.
"""

from __future__ import annotations

import re
import uuid

import pytest
from browser_support import browser_errors, new_driver, sign_in, start_ledger, wait_for
from hitl_ledger.errors import ApiError
from selenium.webdriver.common.by import By

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")

#: The governance policy of these tests (over the suite's POLICY): a two-person tool, a tool
#: only one named reviewer decides, a break-glass tool and a paused one.
GOVERNED = {
    "default": {"review_window_seconds": 3600, "approval_ttl_seconds": 600},
    "tools": {
        "wire_transfer": {"redact": ["/account"]},
        "payout": {"approvals_required": 2},
        "vault_open": {"approvers": ["web-reviewer2"]},
        "emergency_stop": {"break_glass": True},
        "plant_valve": {"mode": "paused"},
    },
}


@pytest.fixture
def gov(tmp_path_factory):
    """A server with an admin, a break-glass operator (web-operator), a reviewer token of that
    same principal, and a reviewer token of the agent's own principal; GOVERNED in force."""
    server = start_ledger(tmp_path_factory.mktemp("gov"), extra_tokens=(
        ("operator", "web-operator", "break_glass", ()),
        ("operator_reviewer", "web-operator", "reviewer", ()),
        ("agent_reviewer", "web-agent", "reviewer", ()),
    ))
    put_policy(server, GOVERNED)
    yield server
    server.stop()


def put_policy(ledger, doc) -> dict:
    status, answer = ledger.client("admin").request("PUT", "/v1/policy", doc)
    assert status == 201, (status, answer)
    return answer


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def open_request(ledger, tool: str, args: dict | None = None, prefix: str = "r") -> tuple[str, dict]:
    rid = new_id(prefix)
    action = {"tool": tool, "args": args if args is not None else {"amount_cents": 500}}
    ledger.client("agent").append_interrupt(request_id=rid, thread_id=f"t-{rid}", interrupt_id="i",
                                            action=action)
    return rid, action


def card(d, rid: str, where: str = "queue"):
    for c in d.find_elements(By.CSS_SELECTOR, f"#{where} > li.card"):
        if c.get_attribute("data-request-id") == rid:
            return c
    return None


def wait_card(d, rid: str, where: str = "queue", timeout: float = 15):
    return wait_for(lambda: card(d, rid, where), timeout, f"request {rid} in #{where}")


def approve_in_page(c, rationale: str | None = None) -> None:
    c.find_element(By.CSS_SELECTOR, "button[data-decide=approve]").click()
    form = c.find_element(By.CSS_SELECTOR, "form[data-kind=approve]")
    if rationale:
        form.find_element(By.TAG_NAME, "textarea").send_keys(rationale)
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()


def answers(d, where: str = "answers") -> str:
    return d.find_element(By.ID, where).text


def request_state(ledger, rid: str) -> dict:
    _, page = ledger.client("reviewer").request("GET", f"/v1/requests/{rid}")
    return page


def go(d, ledger, fragment: str) -> None:
    d.execute_script("location.hash = arguments[0]", fragment)
    wait_for(lambda: d.execute_script("return location.hash") == fragment, what=fragment)


def into_view(d, element) -> None:
    """Scrolls ``element`` to the middle of the window (for a screenshot of it)."""
    d.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)


def no_injected_markup(d) -> None:
    """No element that record text could have made, no script of its own ran, no CSP report."""
    counts = d.execute_script("""
        const main = document.getElementById('main');
        return ['img', 'script', 'svg', 'iframe', 'b', 'i', 'object'].map((t) => main.querySelectorAll(t).length);""")
    assert counts == [0] * 7, counts
    assert d.execute_script("return window.__pwned === undefined")
    assert d.execute_script("return document.querySelectorAll('[style], [onerror], [onload]').length") == 0
    assert not [m for m in browser_errors(d) if "Content Security Policy" in m]


# ------------------------------------------------------------------------- the policy


def test_the_policy_in_force_and_its_history_follow_a_change(driver, gov, shoot):
    d = driver
    ledger = gov
    sign_in(d, ledger)
    go(d, ledger, "#policy")
    facts = wait_for(lambda: d.find_element(By.ID, "policy-facts"), what="the policy in force")
    _, now = ledger.client("reviewer").request("GET", "/v1/policy")
    assert now["seq"] == 2, now  # init's (0), the suite's (1), GOVERNED (2)
    assert f"seq {now['seq']}" in facts.text and now["policy_digest"] in facts.text
    assert "web-admin (admin)" in facts.find_element(By.CSS_SELECTOR, ".set-by").text
    # A change by the admin arrives on the stream: the page shows it without a reload.
    changed = {**GOVERNED, "tools": {**GOVERNED["tools"], "payout": {"approvals_required": 3, "approvers": ["group:treasury"]},
                                     "emergency_stop": {"break_glass": True, "mode": "paused"}}}
    record = put_policy(ledger, changed)
    seq = record["seq"]
    wait_for(lambda: f"seq {seq}," in d.find_element(By.ID, "policy-facts").text, what="the new policy in force")
    facts = d.find_element(By.ID, "policy-facts")
    assert record["record"]["body"]["policy_digest"] in facts.text
    assert record["leaf_hash"] in facts.text
    # what it decides, tool by tool
    tools = {r.get_attribute("data-tool"): r for r in d.find_elements(By.CSS_SELECTOR, "table.policy-tools tbody tr")}
    assert set(tools) == {"wire_transfer", "payout", "vault_open", "emergency_stop", "plant_valve", ""}
    cells = [td.text for td in tools["payout"].find_elements(By.TAG_NAME, "td")]
    assert cells[1] == "group:treasury" and cells[2] == "3", cells
    assert "PAUSED" in tools["emergency_stop"].text and "allowed" in tools["emergency_stop"].text
    assert "PAUSED" in tools["plant_valve"].text and "PAUSED" not in tools["payout"].text
    assert "every reviewer" in tools[""].text
    shoot("policy")
    # the history: every version, who recorded it, and what changed
    rows = d.find_elements(By.CSS_SELECTOR, "table.policy-history > tbody > tr")
    _, history = ledger.client("auditor").request("GET", "/v1/policy/history")
    assert [int(r.get_attribute("data-seq")) for r in rows] == [p["seq"] for p in history["policies"]] == [0, 1, 2, seq]
    by = [r.find_element(By.CSS_SELECTOR, ".set-by").text for r in rows]
    assert by[0] == "hitl-ledger (system)" and by[1].startswith("local:") and by[1].endswith("(admin)")
    assert by[2] == by[3] == "web-admin (admin)"
    assert ["in force" in r.text for r in rows] == [False, False, False, True]
    for r, p in zip(rows, history["policies"]):
        assert p["policy_digest"] in r.text
    assert "The first policy of this ledger" in rows[0].text
    diff = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
            for tr in rows[3].find_elements(By.CSS_SELECTOR, "table.diff tbody tr")]
    assert diff == [
        ["/tools/emergency_stop/mode", "added", "\u2014", '"paused"'],
        ["/tools/payout/approvals_required", "changed", "2", "3"],
        ["/tools/payout/approvers", "added", "\u2014", '["group:treasury"]'],
    ], diff
    into_view(d, rows[3])
    shoot("policy-history")
    # A reviewer cannot change it (the console offers no control; the ledger refuses).
    assert d.find_elements(By.CSS_SELECTOR, "#place-policy button, #place-policy form") == []
    with pytest.raises(ApiError) as e:
        ledger.client("reviewer").request("PUT", "/v1/policy", GOVERNED)
    assert e.value.status == 403
    # The queue's card of a paused tool says so, and the denial is in its history.
    rid, action = open_request(ledger, "plant_valve", prefix="valve")
    go(d, ledger, "#queue")
    c = wait_card(d, rid)
    paused = wait_for(lambda: c.find_element(By.CSS_SELECTOR, ".governance .paused"), what="the paused note")
    assert "paused by the policy in force" in paused.text and "tool_paused" in paused.text
    status, denied = ledger.client("agent").request(
        "POST", f"/v1/requests/{rid}/authorize",
        {"ticket_id": "0192f3c0-0000-7000-8000-000000000001", "action": action, "attempt_id": "a1"})
    assert status == 200 and denied["granted"] is False and denied["code"] == "tool_paused", denied
    assert denied["route"] == "manual_operator"
    go(d, ledger, f"#recorded/request/{rid}")
    row = wait_for(lambda: d.find_element(By.CSS_SELECTOR, "#history tr[data-kind=authorization]"),
                   what="the authorization in the history")
    assert "authorization denied: tool_paused" in row.text and "manual operator" in row.text
    assert row.find_elements(By.CSS_SELECTOR, ".denied.paused")


# ----------------------------------------------------------------- two-person approval


def test_two_person_approval_shows_who_approved_and_no_ticket_until_the_second(
        driver, gov, browser_paths, shoot):
    d = driver
    ledger = gov
    sign_in(d, ledger, "reviewer")
    rid, _ = open_request(ledger, "payout", {"amount_cents": 90000, "payee": "ACME"}, prefix="payout")
    c = wait_card(d, rid)
    line = wait_for(lambda: c.find_element(By.CSS_SELECTOR, "dd.approvals"), what="the approvals line")
    wait_for(lambda: "0 of 2 approvals" in line.text, what="0 of 2")
    assert "2 more approvals" in line.text
    assert "each approval must be a different reviewer's" in c.find_element(By.CSS_SELECTOR, ".governance").text
    # The first reviewer's approval: counted, no ticket, the request stays open and queued.
    approve_in_page(c, "first look: payee verified")
    wait_for(lambda: f"Your approval of request {rid} is recorded: 1 of 2 approvals" in answers(d),
             what="the partial answer")
    said = answers(d)
    assert "No ticket yet" in said and not UUID.search(said), said
    page = request_state(ledger, rid)
    assert page["state"] == "open" and page["approvals_required"] == 2
    [first] = page["approvals"]
    assert first["principal"] == "web-reviewer"
    partial = [r for r in page["records"] if r["kind"] == "decision"]
    assert len(partial) == 1 and partial[0]["body"]["ticket_id"] is None
    assert card(d, rid) == c, "a partially approved request left the queue"
    wait_for(lambda: f"1 of 2 approvals: by web-reviewer (seq {first['seq']})" in line.text, what="1 of 2, by whom")
    assert "1 more approval by other reviewers" in line.text
    assert not c.find_element(By.CSS_SELECTOR, "button[data-decide=approve]").is_enabled()
    assert c.find_element(By.CSS_SELECTOR, "button[data-decide=reject]").is_enabled()
    assert "You approved this request" in c.find_element(By.CSS_SELECTOR, ".own-approval").text
    into_view(d, c)
    shoot("partial-approval")
    # Its history says so too.
    go(d, ledger, f"#recorded/request/{rid}")
    hist = d.find_element(By.ID, "history")
    wait_for(lambda: "Approvals counted" in hist.text, what="the request's history")
    assert "1 of 2 approvals: by web-reviewer" in hist.find_element(By.CSS_SELECTOR, "p.approvals").text
    decision = hist.find_element(By.CSS_SELECTOR, "tr[data-kind=decision]")
    assert "partial approval (approval 1 of 2)" in decision.text and "no ticket issued" in decision.text
    # The same reviewer again (a fresh page does not know it approved): refused, and said why.
    d.refresh()
    go(d, ledger, "#queue")
    c = wait_card(d, rid)
    wait_for(lambda: "1 of 2 approvals: by web-reviewer" in c.find_element(By.CSS_SELECTOR, "dd.approvals").text,
             what="the counts read from the ledger")
    approve_in_page(c, "second look")
    err = c.find_element(By.CSS_SELECTOR, "p.error")
    wait_for(lambda: "approver_already_approved" in err.text, what="the refusal")
    assert "your approval of this request is already counted" in err.text
    assert "403" in err.text and "recorded in the request's history" in err.text
    assert not c.find_element(By.CSS_SELECTOR, "button[data-decide=approve]").is_enabled()
    into_view(d, err)
    shoot("approval-refused")
    page = request_state(ledger, rid)
    assert page["state"] == "open" and len(page["approvals"]) == 1
    refusals = [r["body"]["error"] for r in page["records"] if r["kind"] == "refusal"]
    assert refusals == ["approver_already_approved"]
    # The second reviewer, in a browser of their own, completes it; the first page sees it go.
    d2 = new_driver(browser_paths)
    try:
        sign_in(d2, ledger, "reviewer2")
        c2 = wait_card(d2, rid)
        wait_for(lambda: "1 of 2 approvals: by web-reviewer" in c2.find_element(By.CSS_SELECTOR, "dd.approvals").text,
                 what="the second reviewer's view of the counts")
        approve_in_page(c2)
        wait_for(lambda: f"Approved request {rid} (approval 2 of 2)" in answers(d2), what="the final answer")
        page = request_state(ledger, rid)
        final = [r for r in page["records"] if r["kind"] == "decision"][-1]
        ticket = final["body"]["ticket_id"]
        assert UUID.fullmatch(ticket) and f"ticket {ticket}" in answers(d2)
        assert page["state"] == "approved"
        assert [a["principal"] for a in page["approvals"]] == ["web-reviewer", "web-reviewer2"]
        assert card(d2, rid) is None
    finally:
        d2.quit()
    wait_for(lambda: card(d, rid) is None, what="the request to leave the first reviewer's queue")
    assert f"Request {rid} was answered elsewhere (approved by web-reviewer2 (reviewer) (approval 2 of 2))" in answers(d)
    go(d, ledger, f"#recorded/request/{rid}")
    hist = d.find_element(By.ID, "history")
    wait_for(lambda: "2 of 2 approvals" in hist.text, what="the closed request's history")
    assert "web-reviewer2" in hist.find_element(By.CSS_SELECTOR, "p.approvals").text
    assert "more approval" not in hist.find_element(By.CSS_SELECTOR, "p.approvals").text


def test_a_partial_approval_elsewhere_updates_the_card_live(driver, gov):
    d = driver
    ledger = gov
    sign_in(d, ledger, "reviewer")
    rid, _ = open_request(ledger, "payout", prefix="live")
    c = wait_card(d, rid)
    line = c.find_element(By.CSS_SELECTOR, "dd.approvals")
    wait_for(lambda: "0 of 2 approvals" in line.text, what="0 of 2")
    status, a = ledger.client("reviewer2").request("POST", f"/v1/requests/{rid}/decision", {"decision": "approve"})
    assert status == 201 and a["ticket_id"] is None and a["approvals"] == 1, a
    wait_for(lambda: f"1 of 2 approvals: by web-reviewer2 (seq {a['seq']})" in line.text, what="the live count")
    assert card(d, rid) == c and "answered elsewhere" not in answers(d)
    approve_in_page(c)
    wait_for(lambda: f"Approved request {rid} (approval 2 of 2)" in answers(d), what="the final approval")
    assert UUID.search(answers(d))


@pytest.mark.parametrize("who,tool,code,says", [
    ("reviewer", "vault_open", "approver_not_allowed", "you are not among them"),
    ("agent_reviewer", "payout", "approver_is_requester", "you opened this request yourself"),
])
def test_governed_refusals_are_clear_errors(driver, gov, who, tool, code, says):
    d = driver
    ledger = gov
    sign_in(d, ledger, who)
    rid, _ = open_request(ledger, tool, prefix="refused")
    c = wait_card(d, rid)
    if tool == "vault_open":
        wait_for(lambda: "web-reviewer2" in c.find_element(By.CSS_SELECTOR, ".governance").text,
                 what="who may decide")
    approve_in_page(c)
    err = c.find_element(By.CSS_SELECTOR, "p.error")
    wait_for(lambda: code in err.text, what=f"the {code} refusal")
    assert says in err.text and "403" in err.text and "recorded in the request's history" in err.text
    for kind in ("approve", "edit", "reject"):
        assert not c.find_element(By.CSS_SELECTOR, f"button[data-decide={kind}]").is_enabled(), kind
    page = request_state(ledger, rid)
    assert page["state"] == "open" and page["approvals"] == []
    assert [r["body"]["error"] for r in page["records"] if r["kind"] == "refusal"] == [code]
    go(d, ledger, f"#recorded/request/{rid}")
    row = wait_for(lambda: d.find_element(By.CSS_SELECTOR, "#history tr[data-kind=refusal]"), what="the refusal row")
    assert code in row.text and "the reviewer" in row.text


# ------------------------------------------------------------------------- break-glass


def break_glass(ledger, rid: str, action: dict, reason: str) -> dict:
    status, a = ledger.client("operator").request("POST", f"/v1/requests/{rid}/break-glass",
                                                  {"action": action, "reason": reason})
    assert status == 201 and UUID.fullmatch(a["ticket_id"]), (status, a)
    return a


def review_form(c):
    return c.find_element(By.CSS_SELECTOR, "form.review-form")


def test_break_glass_queue_refuses_its_user_and_takes_anothers_review(driver, gov, shoot):
    d = driver
    ledger = gov
    # The operator's own reviewer token: its page is open when the use arrives on the stream.
    sign_in(d, ledger, "operator_reviewer")
    go(d, ledger, "#break-glass")
    wait_for(lambda: d.find_element(By.ID, "bg-empty").is_displayed(), what="the empty review queue")
    rid, action = open_request(ledger, "emergency_stop", {"line": 4, "why": "pressure"}, prefix="stop")
    used = break_glass(ledger, rid, action, "line 4 pressure alarm, no reviewer reachable")
    c = wait_card(d, rid, "bg-queue")
    assert d.find_element(By.ID, "bg-count").text == "(1)"
    assert "web-operator (break_glass)" in c.find_element(By.CSS_SELECTOR, ".used-by").text
    assert c.find_element(By.CSS_SELECTOR, ".reason").text == "line 4 pressure alarm, no reviewer reachable"
    assert used["ticket_id"] in c.text and used["leaf_hash"] in c.text
    wait_for(lambda: "emergency_stop" in c.text and "pressure" in c.text, what="the call under review")
    form = review_form(c)
    # The form needs a verdict and a rationale before anything is sent.
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    err = form.find_element(By.CSS_SELECTOR, ".error")
    wait_for(lambda: "Choose a verdict" in err.text, what="the missing verdict")
    form.find_element(By.CSS_SELECTOR, "input[value=acknowledged]").click()
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(lambda: "needs a rationale" in err.text, what="the missing rationale")
    assert [r["kind"] for r in request_state(ledger, rid)["records"]] == ["interrupt", "decision"]
    # The break-glass user reviewing its own use: refused by the ledger, shown as such.
    form.find_element(By.TAG_NAME, "textarea").send_keys("it was needed")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(lambda: "reviewer_is_break_glass_user" in err.text, what="the refusal")
    assert "you used break-glass on this request yourself" in err.text and "403" in err.text
    into_view(d, err)
    shoot("break-glass-refused")
    assert card(d, rid, "bg-queue") is not None
    page = request_state(ledger, rid)
    assert [r["body"]["error"] for r in page["records"] if r["kind"] == "refusal"] == ["reviewer_is_break_glass_user"]
    _, q = ledger.client("reviewer").request("GET", "/v1/reviews/break-glass")
    assert [u["request_id"] for u in q["break_glass"]] == [rid]
    # Another reviewer records the review; the use leaves the queue (on the first page too).
    d.find_element(By.ID, "sign-out").click()
    sign_in(d, ledger, "reviewer")
    go(d, ledger, "#break-glass")
    c = wait_card(d, rid, "bg-queue")
    shoot("break-glass")
    form = review_form(c)
    form.find_element(By.CSS_SELECTOR, "input[value=disputed]").click()
    form.find_element(By.TAG_NAME, "textarea").send_keys("the alarm was a sensor fault; follow up with ops")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(lambda: f"Recorded your review of the break-glass use on request {rid}: disputed" in answers(d, "bg-answers"),
             what="the recorded review")
    assert card(d, rid, "bg-queue") is None
    assert d.find_element(By.ID, "bg-empty").is_displayed() and d.find_element(By.ID, "bg-count").text == ""
    _, q = ledger.client("reviewer").request("GET", "/v1/reviews/break-glass")
    assert q["break_glass"] == []
    page = request_state(ledger, rid)
    review = [r for r in page["records"] if r["kind"] == "review"]
    assert len(review) == 1 and review[0]["body"]["verdict"] == "disputed"
    assert review[0]["actor"] == {"principal": "web-reviewer", "role": "reviewer"}
    assert review[0]["body"]["reviews"] == used["leaf_hash"]
    # A reload reads the queue from the ledger: still empty.
    d.refresh()
    go(d, ledger, "#break-glass")
    wait_for(lambda: d.find_element(By.ID, "bg-empty").is_displayed(), what="the queue read again")
    assert card(d, rid, "bg-queue") is None
    # The request's history: the break-glass decision with its reason, and the review.
    go(d, ledger, f"#recorded/request/{rid}")
    hist = d.find_element(By.ID, "history")
    wait_for(lambda: "post-event review recorded by web-reviewer" in hist.text, what="the history")
    row = hist.find_element(By.CSS_SELECTOR, "tr[data-kind=decision]")
    assert "break-glass emergency approval" in row.text and "line 4 pressure alarm" in row.text
    row = hist.find_element(By.CSS_SELECTOR, "tr[data-kind=review]")
    assert "disputed" in row.text and "sensor fault" in row.text and used["leaf_hash"] in row.text


def test_a_review_elsewhere_takes_the_use_out_of_the_queue(driver, gov):
    d = driver
    ledger = gov
    rid, action = open_request(ledger, "emergency_stop", prefix="stop")
    break_glass(ledger, rid, action, "drill")
    sign_in(d, ledger, "reviewer")
    go(d, ledger, "#break-glass")
    wait_card(d, rid, "bg-queue")
    status, _ = ledger.client("reviewer2").request("POST", f"/v1/requests/{rid}/review",
                                                    {"verdict": "acknowledged", "rationale": "planned drill"})
    assert status == 201
    wait_for(lambda: card(d, rid, "bg-queue") is None, what="the reviewed use to leave the queue")
    assert f"was reviewed by web-reviewer2 (reviewer): acknowledged" in answers(d, "bg-answers")


# ------------------------------------------------------------------------ hostile text


HOSTILE_TOOL = '<img src=x onerror="window.__pwned=1">\u202egnp.exe'
HOSTILE_APPROVER = "<script>window.__pwned=2</script>\u200b"
HOSTILE_REASON = '<svg onload="window.__pwned=3"></svg> \u2066rm -rf /\u2069 <b>now</b>'


def test_hostile_policy_tool_names_and_reasons_are_text(driver, gov):
    d = driver
    ledger = gov
    doc = {"default": {"redact": ["/<i>x</i>"]},
           "tools": {HOSTILE_TOOL: {"approvers": [HOSTILE_APPROVER, "group:<b>ops</b>"], "break_glass": True}}}
    put_policy(ledger, doc)
    rid, action = open_request(ledger, HOSTILE_TOOL, {"note": "<iframe src=x></iframe>"}, prefix="hostile")
    break_glass(ledger, rid, action, HOSTILE_REASON)
    sign_in(d, ledger, "auditor")
    go(d, ledger, "#policy")
    table = wait_for(lambda: d.find_element(By.CSS_SELECTOR, "table.policy-tools"), what="the policy's tools")
    row = table.find_element(By.CSS_SELECTOR, "tbody tr")
    content = d.execute_script("return arguments[0].textContent", row)
    assert '<img src=x onerror="window.__pwned=1">' in content
    assert "\u202e" not in content and "\u27e6U+202E\u27e7" in content
    assert "Look closely" in content  # the tool name's non-ASCII characters are flagged
    assert "<script>window.__pwned=2</script>\u27e6U+200B\u27e7" in content and "group:<b>ops</b>" in content
    assert "\u200b" not in content
    doc_text = d.execute_script("return document.getElementById('policy-current').textContent")
    assert "/<i>x</i>" in doc_text
    hist = d.execute_script("return document.getElementById('policy-history').textContent")
    assert "<script>window.__pwned=2</script>\u27e6U+200B\u27e7" in hist and "\u202e" not in hist
    no_injected_markup(d)
    # the break-glass queue and the request's history
    go(d, ledger, "#break-glass")
    c = wait_card(d, rid, "bg-queue")
    reason = d.execute_script("return arguments[0].textContent", c.find_element(By.CSS_SELECTOR, ".reason"))
    assert reason == '<svg onload="window.__pwned=3"></svg> \u27e6U+2066\u27e7rm -rf /\u27e6U+2069\u27e7 <b>now</b>'
    wait_for(lambda: "<iframe src=x></iframe>" in c.text, what="the call's arguments")
    no_injected_markup(d)
    go(d, ledger, f"#recorded/request/{rid}")
    hist = wait_for(lambda: d.find_element(By.CSS_SELECTOR, "#history table.records"), what="the history")
    content = d.execute_script("return arguments[0].textContent", hist)
    assert "<svg onload=" in content and "\u2066" not in content and "\u27e6U+202E\u27e7" in content
    # the policy thread's records, as an auditor reads them
    d.find_element(By.ID, "thread-id").send_keys("hitl-ledger/policy")
    d.find_element(By.CSS_SELECTOR, "#thread-form button").click()
    hist = d.find_element(By.ID, "history")
    wait_for(lambda: "History of thread hitl-ledger/policy" in hist.text, what="the policy thread")
    rows = hist.find_elements(By.CSS_SELECTOR, "tr[data-kind=policy]")
    assert len(rows) == 4  # init's, the suite's, GOVERNED, this one
    last = d.execute_script("return arguments[0].textContent", rows[-1])
    assert "<script>window.__pwned=2</script>\u27e6U+200B\u27e7" in last and "\u27e6U+202E\u27e7" in last
    assert "\u200b" not in last and "policy recorded" in last
    no_injected_markup(d)
