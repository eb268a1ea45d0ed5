"""The reviewer's console in headless Chromium, against the real server binary.

Graph scenarios use a real LangGraph graph (examples/refund_with_worker.py) resumed by the Python
client's ResumeWorker from the ledger's decision stream: the console only posts the reviewer's
decision, the worker resumes the graph with the ledger's answer.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import rfc8785
from browser_support import (
    ORIGIN,
    REPO,
    browser_errors,
    network_log,
    response_bodies,
    sign_in,
    wait_for,
)
from hitl_ledger.errors import ApiError
from hitl_ledger.langgraph import ResumeWorker, run_config
from refund_graph import RefundService
from refund_with_worker import build_graph, pending_request
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

CONSOLE = REPO / "console"


# ------------------------------------------------------------------------------ helpers


def card(d, rid: str):
    for c in d.find_elements(By.CSS_SELECTOR, "#queue > li.card"):
        if c.get_attribute("data-request-id") == rid:
            return c
    return None


def wait_card(d, rid: str, timeout: float = 15):
    return wait_for(lambda: card(d, rid), timeout, f"request {rid} in the queue")


def open_form(c, kind: str):
    c.find_element(By.CSS_SELECTOR, f"button[data-decide={kind}]").click()
    form = c.find_element(By.CSS_SELECTOR, f"form[aria-label^='{kind.capitalize()} request']")
    assert form.is_displayed()
    return form


def answers_text(d) -> str:
    return d.find_element(By.ID, "answers").text


def idempotency_key(rid: str) -> str:
    return hashlib.sha256(rfc8785.dumps({"origin": ORIGIN, "request_id": rid})).hexdigest()


class Host:
    """An agent host: the refund graph, its ResumeWorker, and the refunds that really ran."""

    def __init__(self, ledger, tmp_path: Path):
        self.agent = ledger.client("agent")
        self.service = RefundService()
        self.calls: list[dict] = []

        def refund(args, *, idempotency_key):
            self.calls.append({"args": dict(args), "idempotency_key": idempotency_key})
            return self.service(args, idempotency_key=idempotency_key)

        self.graph = build_graph(self.agent, refund)
        self.outcomes = []
        self.resumed = threading.Event()

        def on_outcome(o):
            self.outcomes.append(o)
            self.resumed.set()

        self.worker = ResumeWorker(self.agent, self.graph, state_file=tmp_path / "worker.json",
                                   on_outcome=on_outcome)

    def pause(self, amount: int = 2500, ttl: int | None = None) -> tuple[str, str]:
        thread = f"web-{uuid.uuid4().hex[:10]}"
        state = {"order_id": "O-77", "amount_cents": amount}
        if ttl is not None:
            state["review_ttl_seconds"] = ttl
        self.graph.invoke(state, run_config(thread))
        return thread, pending_request(self.graph, thread)["request_id"]

    def final(self, thread: str) -> dict:
        return self.graph.get_state(run_config(thread)).values["outcome"]

    def wait_resumed(self, timeout: float = 20):
        assert self.resumed.wait(timeout), f"the worker did not resume: {self.worker.error!r}"
        return self.outcomes[-1]


@pytest.fixture
def host(fresh_ledger, tmp_path):
    h = Host(fresh_ledger, tmp_path)
    h.worker.start()
    yield h
    h.worker.stop()


def no_decide_controls(root) -> None:
    """Nothing under ``root`` can decide: no decide buttons, no decision forms."""
    assert root.find_elements(By.CSS_SELECTOR, "[data-decide], .decide-form") == []
    for b in root.find_elements(By.TAG_NAME, "button"):
        assert not re.search(r"approve|reject|edit|revoke", b.text, re.I), b.text


# ------------------------------------------------------------------ serving and policy


def test_console_is_served_from_the_binary_with_its_security_headers(ledger):
    req = urllib.request.Request(ledger.url + "/console", method="GET")

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **k):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        opener.open(req)
        raise AssertionError("/console did not redirect")
    except urllib.error.HTTPError as e:
        assert e.code == 308 and e.headers["Location"] == "/console/"
    files = sorted(p.name for p in CONSOLE.iterdir() if p.is_file())
    assert {"index.html", "app.js", "sse.js", "jcs.js", "verify.js", "style.css"} <= set(files)
    for name in files:
        path = "/console/" if name == "index.html" else f"/console/{name}"
        with urllib.request.urlopen(ledger.url + path) as r:
            body = r.read()
            h = r.headers
        # every file of console/ is built into the binary, byte for byte (a stale binary fails)
        assert body == (CONSOLE / name).read_bytes(), f"{name} served differs from console/{name}"
        csp = h["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp
        assert "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
        assert h["X-Content-Type-Options"] == "nosniff"
        assert h["Referrer-Policy"] == "no-referrer"
        assert h["X-Frame-Options"] == "DENY"
        assert h["Cache-Control"] == "no-store"
    # a name the console does not have, a path that climbs out, a write: refused, same headers
    for path in ("/console/nope.js", "/console/%2e%2e/v1/pending", "/console/../Cargo.toml"):
        try:
            urllib.request.urlopen(ledger.url + path)
            raise AssertionError(f"{path} was served")
        except urllib.error.HTTPError as e:
            assert e.code == 404, (path, e.code)
            assert json.loads(e.read())["error"] == "not_found"
            assert "default-src 'none'" in e.headers["Content-Security-Policy"]
    for method in ("POST", "PUT", "DELETE"):
        try:
            urllib.request.urlopen(urllib.request.Request(ledger.url + "/console/", data=b"x",
                                                          method=method))
            raise AssertionError(f"{method} /console/ was answered")
        except urllib.error.HTTPError as e:
            assert e.code == 405, (method, e.code)
    with urllib.request.urlopen(urllib.request.Request(ledger.url + "/console/app.js",
                                                       method="HEAD")) as r:
        assert r.status == 200 and r.read() == b""
    html = (CONSOLE / "index.html").read_text("utf-8")
    # no inline script or style that the policy would block
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "inline script in index.html"
    assert not re.search(r"\s(style|on[a-z]+)\s*=", html, re.I), "inline style or handler"
    assert "<style" not in html
    for js in CONSOLE.glob("*.js"):
        text = js.read_text("utf-8")
        assert "innerHTML" not in text and "outerHTML" not in text and "insertAdjacentHTML" not in text, js
        assert "eval(" not in text and "new Function" not in text, js
        assert not re.search(r"https?://", text.replace("http://www.w3.org", "")), f"{js} names a URL"


def test_sign_in_keeps_the_token_in_session_storage_and_headers_only(driver, ledger, shoot):
    d = driver
    d.get(ledger.url + "/console/")
    shoot("sign-in")
    # a wrong token is refused by the ledger, and nothing is stored
    d.find_element(By.ID, "token").send_keys("not-a-token")
    d.find_element(By.CSS_SELECTOR, "#signin-form button[type=submit]").click()
    wait_for(lambda: "401" in d.find_element(By.ID, "signin-error").text, what="the 401 message")
    assert d.execute_script("return sessionStorage.length + localStorage.length") == 0
    # an agent token may not review
    d.find_element(By.ID, "token").send_keys(ledger.tokens["agent"])
    d.find_element(By.CSS_SELECTOR, "#signin-form button[type=submit]").click()
    wait_for(lambda: "403" in d.find_element(By.ID, "signin-error").text, what="the 403 message")
    sign_in(d, ledger, "reviewer")
    tok = ledger.tokens["reviewer"]
    assert d.execute_script("return sessionStorage.getItem('hitl-ledger.console.token')") == tok
    assert d.execute_script("return localStorage.length") == 0
    assert d.execute_script("return document.cookie") == ""
    wait_for(lambda: "Live" in d.find_element(By.ID, "stream-status").text, what="the live stream")
    # a reload keeps the session (same tab), a sign-out forgets it
    d.refresh()
    wait_for(lambda: d.find_element(By.ID, "app").is_displayed(), what="the console after reload")
    wait_for(lambda: "Live" in d.find_element(By.ID, "stream-status").text, what="the live stream")
    log = network_log(d)
    sent = [e["params"] for e in log if e["method"] == "Network.requestWillBeSent"]
    extra = [e["params"] for e in log if e["method"] == "Network.requestWillBeSentExtraInfo"]
    api_calls = [p for p in sent if "/v1/" in p["request"]["url"]]
    assert api_calls, "the console made no API call"
    used = (tok, "not-a-token", ledger.tokens["agent"])
    for p in sent:
        for t in used:
            assert t not in p["request"]["url"], p["request"]["url"]
            assert t not in (p["request"].get("postData") or "")
            for k, v in p["request"]["headers"].items():
                assert t not in v or (k.lower() == "authorization" and v == f"Bearer {t}"), (k, v)
    for p in api_calls:
        auth = {k.lower(): v for k, v in p["request"]["headers"].items()}.get("authorization")
        assert auth in {f"Bearer {t}" for t in used}, p["request"]["url"]
    assert sum(1 for p in api_calls if p["request"]["headers"].get("Authorization") == f"Bearer {tok}") >= 4
    for p in extra:  # the headers as sent on the wire: a token only in Authorization
        for k, v in p["headers"].items():
            assert not any(t in v for t in used) or k.lower() == "authorization", (k, v)
            assert k.lower() != "cookie"
    assert tok not in d.current_url
    d.find_element(By.ID, "sign-out").click()
    wait_for(lambda: d.find_element(By.ID, "signin").is_displayed(), what="the sign-in form")
    assert d.execute_script("return sessionStorage.length") == 0
    logged = [e["message"] for e in d.get_log("browser")]
    assert not [m for m in logged if "Content Security Policy" in m], logged
    assert not [m for m in logged if any(t in m for t in used)], "a token was logged"


# -------------------------------------------------------------------- graph scenarios


def test_approve_resumes_the_graph_and_the_tool_runs_once(driver, fresh_ledger, host, shoot):
    d = driver
    ledger = fresh_ledger
    sign_in(d, ledger)
    thread, rid = host.pause(amount=2500)
    c = wait_card(d, rid)
    text = c.text
    assert "refund" in text and "O-77" in text and "2500" in text
    assert thread in text and "web-agent (agent)" in text
    interrupt = ledger.client("reviewer").get_request(rid).of_kind("interrupt")[0]
    assert interrupt["body"]["action_digest"] in text
    assert interrupt["run_id"] in text
    deadline = c.find_element(By.CSS_SELECTOR, ".deadline").text
    hhmmss = interrupt["body"]["expires_at"][11:19]
    assert f"Times out at {interrupt['body']['expires_at'][:10]} {hhmmss} UTC" in deadline
    assert "the agent is told timeout" in deadline
    first = c.find_element(By.CSS_SELECTOR, ".countdown").text
    wait_for(lambda: c.find_element(By.CSS_SELECTOR, ".countdown").text != first, 5,
             "the countdown to move")
    assert re.match(r"^\d+ min \d\d s$", c.find_element(By.CSS_SELECTOR, ".countdown").text)
    assert d.find_element(By.ID, "queue-count").text == "(1)"
    shoot("queue")
    form = open_form(c, "approve")
    form.find_element(By.TAG_NAME, "textarea").send_keys("customer verified")
    shoot("approve")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(lambda: f"Approved request {rid}" in answers_text(d), what="the ledger's answer")
    state = ledger.client("reviewer").get_request(rid)
    decision = state.of_kind("decision")[0]
    ans = answers_text(d)
    assert decision["body"]["ticket_id"] in ans
    exp = decision["body"]["expires_at"]
    assert f"valid until {exp[:10]} {exp[11:19]} UTC" in ans
    assert decision["body"]["rationale"] == "customer verified"
    assert decision["actor"] == {"principal": "web-reviewer", "role": "reviewer"}
    assert card(d, rid) is None, "the decided request is still in the queue"
    shoot("answered")
    outcome = host.wait_resumed()
    assert outcome.request_id == rid and outcome.kind == "approved"
    final = wait_for(lambda: host.final(thread), what="the graph's outcome")
    assert final["executed"] is True and final["status"] == "approved"
    # exactly once, with the grant's idempotency key
    assert len(host.calls) == 1, host.calls
    assert host.calls[0]["idempotency_key"] == idempotency_key(rid) == final["idempotency_key"]
    assert host.calls[0]["args"] == {"order_id": "O-77", "amount_cents": 2500}
    records = ledger.client("auditor").thread_records(thread)
    kinds = [r["kind"] for r in records]
    assert kinds == ["interrupt", "decision", "authorization", "follow_up"], kinds
    assert records[2]["body"]["granted"] is True
    assert records[2]["body"]["idempotency_key"] == idempotency_key(rid)
    # it shows under "recorded", never again in the queue
    d.find_element(By.ID, "tab-recorded").click()
    wait_for(lambda: d.find_element(By.ID, "place-recorded").is_displayed(), what="Recorded")
    closed = d.find_element(By.ID, "closed")
    wait_for(lambda: rid in closed.text, what="the request among the closed ones")
    closed.find_element(By.LINK_TEXT, rid).click()
    hist = d.find_element(By.ID, "history")
    wait_for(lambda: f"History of request {rid}" in hist.text, what="the request's history")
    assert "approved" in hist.find_element(By.CSS_SELECTOR, ".state").text
    rows = hist.find_elements(By.CSS_SELECTOR, "table.records tbody tr")
    assert [r.find_elements(By.TAG_NAME, "td")[3].text for r in rows] == [
        "interrupt", "decision", "authorization", "follow_up"]
    no_decide_controls(d.find_element(By.ID, "place-recorded"))
    shoot("recorded")
    d.find_element(By.ID, "tab-queue").click()
    assert card(d, rid) is None
    assert d.find_element(By.ID, "queue-empty").is_displayed()


def test_reject_needs_a_rationale_and_the_tool_never_runs(driver, fresh_ledger, host):
    d = driver
    ledger = fresh_ledger
    sign_in(d, ledger)
    thread, rid = host.pause(amount=9000)
    c = wait_card(d, rid)
    form = open_form(c, "reject")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(lambda: "needs a rationale" in c.find_element(By.CSS_SELECTOR, ".error").text,
             what="the console refusing a rejection without rationale")
    form.find_element(By.TAG_NAME, "textarea").send_keys("   ")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    time.sleep(0.5)
    assert ledger.client("reviewer").get_request(rid).state == "open", "a blank rationale was sent"
    form.find_element(By.TAG_NAME, "textarea").send_keys("order already refunded")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(lambda: f"Rejected request {rid}" in answers_text(d), what="the ledger's answer")
    rejection = ledger.client("reviewer").get_request(rid).of_kind("rejection")[0]
    assert rejection["body"]["ticket_id"] in answers_text(d)
    assert card(d, rid) is None
    outcome = host.wait_resumed()
    assert outcome.kind == "rejected" and outcome.reason.strip() == "order already refunded"
    final = wait_for(lambda: host.final(thread), what="the graph's outcome")
    assert final == {"executed": False, "status": "rejected", "reason": rejection["body"]["rationale"]}
    assert host.calls == []


def test_edit_runs_the_edited_call_and_never_the_original(driver, fresh_ledger, host, shoot):
    d = driver
    ledger = fresh_ledger
    sign_in(d, ledger)
    thread, rid = host.pause(amount=5000)
    c = wait_card(d, rid)
    form = open_form(c, "edit")
    editor = form.find_element(By.TAG_NAME, "textarea")
    assert json.loads(editor.get_attribute("value")) == {
        "tool": "refund", "args": {"order_id": "O-77", "amount_cents": 5000}}
    submit = form.find_element(By.CSS_SELECTOR, "button[type=submit]")
    assert not submit.is_enabled(), "an unchanged call can be submitted as an edit"
    check = form.find_element(By.CSS_SELECTOR, ".edit-check")
    for bad, says in ((
        '{"tool": "refund", "args": {"order_id": "O-77", "amount_cents": 5000,}}', "not JSON"),
        ('{"tool": "refund", "args": [1]}', '"args" must be an object'),
        ('{"tool": "refund", "args": {}, "extra": 1}', "unknown member"),
        ('{"tool": "refund", "args": {"a": 1, "a": 2}}', "not JSON"),
    ):
        editor.clear()
        editor.send_keys(bad)
        wait_for(lambda: says in check.text, 5, f"the editor refusing {bad}")
        assert not submit.is_enabled()
    editor.clear()
    editor.send_keys('{"tool": "refund", "args": {"order_id": "O-77", "amount_cents": 3000}}')
    wait_for(lambda: "Changes against the original" in check.text, 5, "the diff")
    rows = check.find_elements(By.CSS_SELECTOR, "table.diff tbody tr")
    assert [[td.text for td in r.find_elements(By.TAG_NAME, "td")] for r in rows] == [
        ["/args/amount_cents", "changed", "5000", "3000"]]
    form.find_elements(By.TAG_NAME, "textarea")[1].send_keys("partial refund only")
    shoot("edit")
    assert submit.is_enabled()
    submit.click()
    wait_for(lambda: f"Edited request {rid}" in answers_text(d), what="the ledger's answer")
    st = ledger.client("reviewer").get_request(rid)
    edit = st.of_kind("decision")[0]
    assert st.state == "edited" and edit["body"]["decision"] == "edit"
    new_rid = edit["body"]["superseded_by"]
    assert f"request {new_rid}" in answers_text(d)
    new = ledger.client("reviewer").get_request(new_rid)
    assert new.of_kind("decision")[0]["body"]["ticket_id"] in answers_text(d)
    assert card(d, rid) is None and card(d, new_rid) is None, "an edit's request is in the queue"
    outcome = host.wait_resumed()
    assert outcome.kind == "edited" and outcome.new_request_id == new_rid
    final = wait_for(lambda: host.final(thread), what="the graph's outcome")
    assert final["executed"] is True and final["status"] == "edited"
    assert host.calls == [{"args": {"order_id": "O-77", "amount_cents": 3000},
                           "idempotency_key": idempotency_key(new_rid)}]


def test_a_request_timing_out_while_open_cannot_be_approved(driver, fresh_ledger, host, shoot):
    d = driver
    ledger = fresh_ledger
    sign_in(d, ledger)
    thread, rid = host.pause(amount=100, ttl=3)
    c = wait_card(d, rid)
    assert "the agent is told timeout" in c.find_element(By.CSS_SELECTOR, ".deadline").text
    wait_for(lambda: "timed-out" in c.get_attribute("class"), 15, "the page to show the timeout")
    assert "Timed out at" in c.find_element(By.CSS_SELECTOR, ".deadline").text
    assert c.find_element(By.CSS_SELECTOR, ".countdown").text == "none (timed out)"
    approve = c.find_element(By.CSS_SELECTOR, "button[data-decide=approve]")
    assert not approve.is_enabled()
    shoot("timed-out")
    # even a forced click (and a forced submit of the hidden form) decides nothing
    d.execute_script("arguments[0].disabled = false; arguments[0].click();", approve)
    form = c.find_element(By.CSS_SELECTOR, "form[aria-label^='Approve request']")
    d.execute_script("arguments[0].requestSubmit();", form)
    wait_for(lambda: "409" in c.find_element(By.CSS_SELECTOR, ".error").text, 10,
             "the ledger's refusal")
    wait_for(lambda: not form.is_displayed(), 5, "the forced form hidden again")
    assert not approve.is_enabled()
    st = ledger.client("reviewer").get_request(rid)
    assert st.state == "timed_out" and "decision" not in st.kinds()
    outcome = host.wait_resumed()
    assert outcome.kind == "timed_out"
    assert wait_for(lambda: host.final(thread))["status"] == "timed_out"
    assert host.calls == []


def test_a_late_approval_shows_the_ledgers_409(driver, ledger, shoot):
    """The page does not learn of the timeout (the stream is blocked): the reviewer's late
    approval reaches the ledger, which refuses it; the page shows the ledger's reason."""
    d = driver
    d.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*/v1/events*"]})
    agent = ledger.client("agent")
    rid = f"late-{uuid.uuid4().hex[:8]}"
    agent.append_interrupt(request_id=rid, thread_id=f"t-{rid}", interrupt_id="i",
                           action={"tool": "refund", "args": {"amount_cents": 1}},
                           review_ttl_seconds=2)
    sign_in(d, ledger)
    c = wait_card(d, rid)
    wait_for(lambda: c.find_element(By.CSS_SELECTOR, ".countdown").text == "deadline passed", 10,
             "the countdown to end")
    wait_for(lambda: ledger.client("reviewer").get_request(rid).state == "timed_out", 10,
             "the ledger's timeout")
    try:
        ledger.client("reviewer2").approve(rid)
        raise AssertionError("the ledger approved a timed-out request")
    except ApiError as e:
        assert e.status == 409
        message = e.message
    form = open_form(c, "approve")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    err = c.find_element(By.CSS_SELECTOR, ".error")
    wait_for(lambda: "409" in err.text, 10, "the 409 on the page")
    assert message in err.text and "conflict" in err.text
    wait_for(lambda: "timed-out" in c.get_attribute("class"), 10, "the card marked timed out")
    assert not c.find_element(By.CSS_SELECTOR, "button[data-decide=approve]").is_enabled()
    st = ledger.client("reviewer").get_request(rid)
    assert st.kinds() == ["interrupt", "timeout"]
    shoot("late-approval-409")


# --------------------------------------------------- history and redaction, DOM and network


SECRET = "DE89370400440532013000"


def dom_has_none_of(d, *values: str) -> None:
    html = d.execute_script("return document.documentElement.outerHTML")
    text = d.execute_script("return document.body.innerText")
    for v in values:
        assert v not in html and v not in text, f"{v!r} appears in the page"


def test_history_never_offers_an_action_and_redacted_values_stay_hidden(driver, ledger, shoot):
    d = driver
    agent = ledger.client("agent")
    rid = f"wire-{uuid.uuid4().hex[:8]}"
    thread = f"t-{rid}"
    agent.append_interrupt(request_id=rid, thread_id=thread, interrupt_id="i",
                           action={"tool": "wire_transfer",
                                   "args": {"account": SECRET, "amount_cents": 12000,
                                            "memo": {"pin": "4711", "note": "rent"}}},
                           redact=["/memo/pin"])
    stored = ledger.client("reviewer").get_request(rid).of_kind("interrupt")[0]["body"]
    assert stored["redacted"] == ["/account", "/memo/pin"]
    placeholders = [stored["args"]["account"], stored["args"]["memo"]["pin"]]
    assert all(p.startswith("hmac-sha256:") for p in placeholders)
    sign_in(d, ledger)
    c = wait_card(d, rid)
    shown = c.find_elements(By.CSS_SELECTOR, ".args .redacted")
    assert [s.text for s in shown] == ["redacted", "redacted"]
    assert "12000" in c.text and "rent" in c.text
    dom_has_none_of(d, SECRET, "4711", *placeholders)
    shoot("redacted")
    form = open_form(c, "approve")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(lambda: f"Approved request {rid}" in answers_text(d), what="the approval")
    # Recorded, with the reviewer's token: the request's history; a thread needs an auditor
    d.get(ledger.url + f"/console/#recorded/request/{rid}")
    hist = d.find_element(By.ID, "history")
    wait_for(lambda: "History of request" in hist.text, what="the history")
    assert [s.text for s in hist.find_elements(By.CSS_SELECTOR, ".redacted")] == ["redacted", "redacted"]
    no_decide_controls(d.find_element(By.ID, "place-recorded"))
    d.find_element(By.ID, "thread-id").send_keys(thread)
    d.find_element(By.CSS_SELECTOR, "#thread-form button").click()
    wait_for(lambda: "for auditors" in hist.text and "auditor token" in hist.text,
             what="the thread history refused to a reviewer")
    # an open request seen in history is still not decidable there
    open_rid = f"open-{uuid.uuid4().hex[:8]}"
    agent.append_interrupt(request_id=open_rid, thread_id=thread, interrupt_id="i2",
                           action={"tool": "refund", "args": {"amount_cents": 3}})
    d.get(ledger.url + f"/console/#recorded/request/{open_rid}")
    wait_for(lambda: "still open" in d.find_element(By.ID, "history").text, what="open history")
    no_decide_controls(d.find_element(By.ID, "place-recorded"))
    everything = network_log(d)
    # the auditor reads the thread: every record, redacted values shown as redacted
    d.find_element(By.ID, "sign-out").click()
    sign_in(d, ledger, "auditor")
    d.get(ledger.url + "/console/#recorded")
    d.find_element(By.ID, "thread-id").send_keys(thread)
    d.find_element(By.CSS_SELECTOR, "#thread-form button").click()
    hist = d.find_element(By.ID, "history")
    wait_for(lambda: f"History of thread {thread}" in hist.text, what="the auditor's thread history")
    rows = hist.find_elements(By.CSS_SELECTOR, "table.records tbody tr")
    assert [r.find_elements(By.TAG_NAME, "td")[3].text for r in rows] == [
        "interrupt", "decision", "interrupt"]
    assert [s.text for s in hist.find_elements(By.CSS_SELECTOR, ".redacted")] == ["redacted", "redacted"]
    no_decide_controls(d.find_element(By.ID, "place-recorded"))
    shoot("thread-history")
    everything += network_log(d)
    # neither the secret nor its placeholder in the DOM; the secret in no request or response
    dom_has_none_of(d, SECRET, "4711", *placeholders)
    assert d.execute_script("return document.querySelectorAll('[style]').length") == 0
    bodies = response_bodies(d, everything)
    assert any(placeholders[0] in b for b in bodies), "the response bodies were not captured"
    for b in bodies:
        assert SECRET not in b and '"4711"' not in b
    for e in everything:
        if e["method"] == "Network.requestWillBeSent":
            req = e["params"]["request"]
            assert SECRET not in req["url"] and SECRET not in (req.get("postData") or "")
    assert not [m for m in browser_errors(d) if "Content Security Policy" in m]


# ---------------------------------------------------------- keyboard, labels, 200% zoom


def test_keyboard_only_decision_labels_and_200_percent_zoom(driver, ledger, shoot):
    d = driver
    agent = ledger.client("agent")
    rid = f"kbd-{uuid.uuid4().hex[:8]}"
    agent.append_interrupt(request_id=rid, thread_id=f"t-{rid}", interrupt_id="i",
                           action={"tool": "refund", "args": {"amount_cents": 77}})
    d.get(ledger.url + "/console/")
    box = wait_for(lambda: d.find_element(By.ID, "token"))
    # every form control has a label (or an accessible name)
    unlabelled = d.execute_script("""
        return [...document.querySelectorAll('input, textarea, select')]
          .filter(e => e.labels.length === 0 && !e.getAttribute('aria-label')).map(e => e.id);""")
    assert unlabelled == []
    box.click()
    box.send_keys(ledger.tokens["reviewer"], Keys.ENTER)
    c = wait_card(d, rid)
    # Tab from the top of the page to the card's Approve button, then decide by keyboard
    d.find_element(By.TAG_NAME, "body").click()
    d.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
    target = c.find_element(By.CSS_SELECTOR, "button[data-decide=approve]")
    for _ in range(80):
        ActionChains(d).send_keys(Keys.TAB).perform()
        if d.switch_to.active_element == target:
            break
    else:
        raise AssertionError("Tab never reached the Approve button")
    ActionChains(d).send_keys(Keys.ENTER).perform()
    active = d.switch_to.active_element
    assert active.tag_name == "textarea", "the rationale did not get the focus"
    ActionChains(d).send_keys("checked by keyboard", Keys.TAB).perform()
    assert d.switch_to.active_element.text == "Approve this call"
    ActionChains(d).send_keys(Keys.ENTER).perform()
    wait_for(lambda: f"Approved request {rid}" in answers_text(d), what="the keyboard approval")
    unlabelled = d.execute_script("""
        return [...document.querySelectorAll('input, textarea, select')]
          .filter(e => e.labels.length === 0 && !e.getAttribute('aria-label')).map(e => e.id);""")
    assert unlabelled == []
    # 200% zoom: the same window at half the CSS pixels; nothing scrolls sideways
    rid2 = f"zoom-{uuid.uuid4().hex[:8]}"
    agent.append_interrupt(request_id=rid2, thread_id=f"t-{rid2}", interrupt_id="i",
                           action={"tool": "wire_transfer",
                                   "args": {"account": SECRET, "amount_cents": 5,
                                            "reference": "a-rather-long-reference-" * 4}})
    wait_card(d, rid2)
    d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                      {"width": 640, "height": 500, "deviceScaleFactor": 2, "mobile": False})
    try:
        for place in ("queue", "recorded", "policy", "break-glass", "verify"):
            d.find_element(By.ID, f"tab-{place}").click()
            wait_for(lambda: d.find_element(By.ID, f"place-{place}").is_displayed())
            if place == "policy":  # read from the ledger when shown: wait for it
                wait_for(lambda: d.find_elements(By.CSS_SELECTOR, "table.policy-history"), what="the policy")
            over = d.execute_script(
                "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
            assert over <= 0, f"{place} scrolls sideways by {over}px at 200% zoom"
        d.find_element(By.ID, "tab-queue").click()
        shoot("queue-200-percent")
    finally:
        d.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_edit_of_a_redacted_call_needs_the_value_in_clear(driver, fresh_ledger, tmp_path):
    """The reviewer edits a wire transfer whose account is redacted. The editor holds only the
    ledger's placeholder, which an edit cannot keep (the ledger binds the edit to what it is
    sent, and it never had the account): the page refuses to send it until the reviewer gives
    the account in clear, shows that change without echoing it, and the ledger stores it
    redacted again. The host resumes with the edited call; the bank gets it once."""
    from wire_transfer_graph import INVOICE, Bank, build_wire_graph

    d = driver
    ledger = fresh_ledger
    agent = ledger.client("agent")
    bank = Bank()
    calls: list[dict] = []

    def wire(args, *, idempotency_key):
        calls.append({"args": dict(args), "idempotency_key": idempotency_key})
        return bank(args, idempotency_key=idempotency_key)

    graph = build_wire_graph(agent, wire)
    resumed = threading.Event()
    outcomes = []
    worker = ResumeWorker(agent, graph, state_file=tmp_path / "worker.json",
                          on_outcome=lambda o: (outcomes.append(o), resumed.set()))
    worker.start()
    try:
        thread = f"wire-{uuid.uuid4().hex[:8]}"
        graph.invoke(dict(INVOICE), run_config(thread))
        rid = pending_request(graph, thread)["request_id"]
        sign_in(d, ledger)
        c = wait_card(d, rid)
        assert [s.text for s in c.find_elements(By.CSS_SELECTOR, ".args .redacted")] == ["redacted"]
        form = open_form(c, "edit")
        editor = form.find_element(By.TAG_NAME, "textarea")
        submit = form.find_element(By.CSS_SELECTOR, "button[type=submit]")
        check = form.find_element(By.CSS_SELECTOR, ".edit-check")
        original = json.loads(editor.get_attribute("value"))
        placeholder = original["args"]["account"]
        assert placeholder.startswith("hmac-sha256:")
        assert INVOICE["account"] not in editor.get_attribute("value")
        # only the amount changed: the placeholder is kept, so nothing can be sent
        edited = json.loads(json.dumps(original))
        edited["args"]["amount"] = "4800.00"
        editor.clear()
        editor.send_keys(json.dumps(edited))
        wait_for(lambda: "Redacted field /account" in check.text, 5, "the kept-placeholder refusal")
        assert not submit.is_enabled()
        submit_js = "arguments[0].requestSubmit()"
        d.execute_script(submit_js, form)
        time.sleep(0.5)
        assert ledger.client("reviewer").get_request(rid).state == "open", "the edit was sent"
        # the account given in clear: sent to the ledger, never echoed in the change table
        edited["args"]["account"] = INVOICE["account"]
        editor.clear()
        editor.send_keys(json.dumps(edited))
        wait_for(lambda: submit.is_enabled(), 5, "the edit to become sendable")
        rows = check.find_elements(By.CSS_SELECTOR, "table.diff tbody tr")
        assert [[td.text for td in r.find_elements(By.TAG_NAME, "td")] for r in rows] == [
            ["/args/account", "changed", "redacted", "new value (stored redacted)"],
            ["/args/amount", "changed", '"48000.00"', '"4800.00"']]
        assert INVOICE["account"] not in check.text and placeholder not in check.text
        submit.click()
        wait_for(lambda: f"Edited request {rid}" in answers_text(d), what="the ledger's answer")
        dom_has_none_of(d, INVOICE["account"], placeholder)
        new_rid = ledger.client("reviewer").get_request(rid).of_kind("decision")[0]["body"]["superseded_by"]
        stored = ledger.client("reviewer").get_request(new_rid).of_kind("interrupt")[0]["body"]
        assert stored["redacted"] == ["/account"] and stored["args"]["account"].startswith("hmac-sha256:")
        assert stored["args"]["amount"] == "4800.00"
        assert resumed.wait(20), f"the worker did not resume: {worker.error!r}"
        assert outcomes[-1].kind == "edited" and outcomes[-1].new_request_id == new_rid
        final = wait_for(lambda: graph.get_state(run_config(thread)).values.get("outcome"))
        assert final["executed"] is True, final
        assert calls == [{"args": {**INVOICE, "amount": "4800.00"},
                          "idempotency_key": idempotency_key(new_rid)}]
    finally:
        worker.stop()
