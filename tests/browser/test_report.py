"""The console's report page (issue 21) in headless Chromium against the real server: the page
draws ``GET /v1/report`` of a known history written through the HTTP API (interrupts,
approvals, rejections with reason codes, a timeout, a revocation, grants and each kind of
denial, observe-mode would-be denials, a recorded refusal), every number it shows is the
JSON's, a shift the ledger flags is marked on the chart with its p-value, a reviewer's token is
told the report is for auditors (403), the ledger's 400 codes are shown, and hostile group keys
(a tool name, a principal) stay text.
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from datetime import UTC, datetime
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from browser_support import browser_errors, network_log, sign_in, start_ledger, wait_for
from hitl_ledger.errors import ApproverAlreadyApproved
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

HOSTILE_TOOL = '<img src=x onerror="window.__pwned=1">\u202egnp.exe'
HOSTILE_REVIEWER = '<svg onload="window.__pwned=2"></svg>\u200breviewer'

#: The report ledger's policy: refund in observe mode, payout needs two approvals.
REPORT_POLICY = {
    "default": {"review_window_seconds": 3600, "approval_ttl_seconds": 600},
    "tools": {
        "wire_transfer": {"redact": ["/account"]},
        "refund": {"mode": "observe"},
        "payout": {"approvals_required": 2},
    },
}

COUNT_FIELDS = ("opened", "approved", "edited", "rejected", "timed_out", "revoked", "pending", "granted")
MAP_FIELDS = ("rejection_reasons", "denials", "observe_denials")


def uuid7() -> str:
    """A canonical UUID version 7 that names no ticket of the ledger."""
    ms = int(time.time() * 1000)
    rand = uuid.uuid4().int
    value = (ms << 80) | (0x7 << 76) | ((rand >> 64) & 0x0FFF) << 64 | (0b10 << 62) | (rand & ((1 << 62) - 1))
    return str(uuid.UUID(int=value))


def action(tool: str, **args) -> dict:
    return {"tool": tool, "args": args or {"n": 1}}


class History:
    """Writes requests and their outcomes through the HTTP API and counts, per tool, what it
    wrote: the counts the report must give, kept apart from the ledger's."""

    def __init__(self, ledger):
        self.ledger = ledger
        self.agent = ledger.client("agent")
        self.tools: dict[str, dict] = {}

    def tool(self, tool: str) -> dict:
        return self.tools.setdefault(tool, {
            **{f: 0 for f in COUNT_FIELDS}, **{f: {} for f in MAP_FIELDS}, "refusals": 0})

    def bump(self, tool: str, field: str, code: str | None = None) -> None:
        t = self.tool(tool)
        if code is None:
            t[field] += 1
        else:
            t[field][code] = t[field].get(code, 0) + 1

    def open(self, tool: str, ttl: int | None = None, **args) -> tuple[str, dict]:
        rid = f"rep-{uuid.uuid4().hex[:10]}"
        act = action(tool, **args)
        self.agent.append_interrupt(request_id=rid, thread_id=f"t-{rid}", interrupt_id="i", action=act,
                                    review_ttl_seconds=ttl)
        self.bump(tool, "opened")
        self.bump(tool, "pending")
        return rid, act

    def approve(self, tool: str, rid: str, reviewer: str = "reviewer") -> str:
        answer = self.ledger.client(reviewer).approve(rid)
        if answer.ticket_id is not None:
            self.bump(tool, "approved")
            self.tool(tool)["pending"] -= 1
        return answer.ticket_id

    def reject(self, tool: str, rid: str, code: str, reviewer: str = "reviewer") -> str:
        status, answer = self.ledger.client(reviewer).request(
            "POST", f"/v1/requests/{quote(rid, safe='')}/decision",
            {"decision": "reject", "rationale": "not this one", "reason_code": code}, idempotent=True)
        assert status == 201, answer
        self.bump(tool, "rejected")
        self.bump(tool, "rejection_reasons", code)
        self.tool(tool)["pending"] -= 1
        return answer.get("ticket_id")

    def authorize(self, tool: str, rid: str, ticket: str, act: dict) -> None:
        a = self.agent.authorize(rid, ticket_id=ticket, action=act)
        if a.would_deny is not None:
            self.bump(tool, "observe_denials", a.would_deny)
        elif a.granted:
            self.bump(tool, "granted")
        else:
            self.bump(tool, "denials", a.code)


def write_history(ledger) -> History:
    """Per tool: approvals, rejections with codes, a timeout, a revocation, grants and denials
    (already used, action mismatch, rejected, pending, revoked, not found), observe-mode
    would-be denials, a two-person tool's recorded refusal; a hostile tool name; a hostile
    reviewer's decision."""
    h = History(ledger)
    ledger.client("admin").set_policy(REPORT_POLICY)
    w = "wire_transfer"
    # a grant, then the same ticket again (already used)
    rid, act = h.open(w, account="DE00 1234", amount_cents=100)
    ticket = h.approve(w, rid)
    h.authorize(w, rid, ticket, act)
    h.authorize(w, rid, ticket, act)
    # an approval presented with another action
    rid, act = h.open(w, account="DE00 1234", amount_cents=200)
    ticket = h.approve(w, rid, "reviewer2")
    h.authorize(w, rid, ticket, action(w, account="DE00 9999", amount_cents=200))
    # rejections with reason codes; a rejected ticket presented
    rid, act = h.open(w, account="DE00 1234", amount_cents=300)
    ticket = h.reject(w, rid, "wrong_amount")
    h.authorize(w, rid, ticket, act)
    rid, _ = h.open(w, account="DE00 1234", amount_cents=400)
    h.reject(w, rid, "wrong_payee", "reviewer2")
    # a request still open, presented with a ticket it never had
    rid, act = h.open(w, account="DE00 1234", amount_cents=500)
    h.authorize(w, rid, uuid7(), act)
    # an approval revoked, then presented
    rid, act = h.open(w, account="DE00 1234", amount_cents=600)
    ticket = h.approve(w, rid)
    h.agent.revoke(rid, "the payee called")
    h.bump(w, "revoked")
    h.authorize(w, rid, ticket, act)
    # a request nobody answers in time
    rid, _ = h.open(w, ttl=1, account="DE00 1234", amount_cents=700)
    wait_for(lambda: ledger.client("auditor").get_request(rid).state == "timed_out", 20, "the timeout")
    h.bump(w, "timed_out")
    h.tool(w)["pending"] -= 1
    # observe mode: would-be denials, and a real grant
    r = "refund"
    rid, act = h.open(r, order_id="O-1")
    h.authorize(r, rid, uuid7(), act)
    ticket = h.approve(r, rid)
    h.authorize(r, rid, ticket, act)
    h.authorize(r, rid, ticket, act)
    # two approvals needed: the same reviewer's second approval is refused (recorded)
    p = "payout"
    rid, _ = h.open(p, amount_cents=5)
    assert h.approve(p, rid) is None
    with pytest.raises(ApproverAlreadyApproved):
        ledger.client("reviewer").decide(rid, "approve", rationale="again")
    h.bump(p, "refusals")
    h.approve(p, rid, "reviewer2")
    # hostile names: a tool, and a reviewer's principal
    rid, _ = h.open(HOSTILE_TOOL)
    h.approve(HOSTILE_TOOL, rid, "hostile")
    return h


@pytest.fixture(scope="module")
def report_ledger(tmp_path_factory):
    server = start_ledger(tmp_path_factory.mktemp("report"),
                          extra_tokens=(("hostile", HOSTILE_REVIEWER, "reviewer", ()),))
    history = write_history(server)
    yield server, history
    server.stop()


# ------------------------------------------------------------------------------ helpers


def go(d, ledger, hash_: str) -> None:
    d.get(ledger.url + "/console/" + hash_)


def text(d, el) -> str:
    return d.execute_script("return arguments[0].textContent", el)


def show(d, *, range_: str | None = None, since: str | None = None, until: str | None = None,
         window: str | None = None, by: str | None = None) -> None:
    """Sets the report's controls and asks for it."""
    if range_ is not None:
        Select(d.find_element(By.ID, "report-range")).select_by_value(range_)
    if since is not None:
        box = d.find_element(By.ID, "report-since")
        box.clear()
        box.send_keys(since)
    if until is not None:
        box = d.find_element(By.ID, "report-until")
        box.clear()
        box.send_keys(until)
    if window is not None:
        if window in ("1h", "1d", "7d"):
            Select(d.find_element(By.ID, "report-window")).select_by_value(window)
        else:
            Select(d.find_element(By.ID, "report-window")).select_by_value("other")
            box = d.find_element(By.ID, "report-window-other")
            box.clear()
            box.send_keys(window)
    if by is not None:
        Select(d.find_element(By.ID, "report-by")).select_by_value(by)
    d.execute_script("document.getElementById('report-result').replaceChildren();"
                     "document.getElementById('report-status').replaceChildren()")
    d.find_element(By.ID, "report-show").click()


def drawn(d, timeout: float = 20):
    """Waits for the page to draw a report (or to show why not) and answers the result box."""
    return wait_for(lambda: d.find_elements(By.ID, "report-facts") or d.find_elements(By.ID, "report-error"),
                    timeout, "the report page to draw or refuse")


def page_report(d) -> tuple[str, dict]:
    """The last ``GET /v1/report`` the page made and the JSON the ledger answered it, from the
    DevTools network log (exactly what the page was given)."""
    events = network_log(d)
    ids = [(e["params"]["requestId"], e["params"]["response"]["url"]) for e in events
           if e["method"] == "Network.responseReceived" and "/v1/report" in e["params"]["response"]["url"]]
    assert ids, "the page made no GET /v1/report"
    rid, url = ids[-1]
    body = d.execute_cdp_cmd("Network.getResponseBody", {"requestId": rid})
    return url, json.loads(body["body"])


def fmt_rate(r) -> str:
    return "—" if r is None else f"{r * 100:.1f}%"


def no_injected_markup(d) -> None:
    assert d.execute_script("return window.__pwned === undefined"), "a hostile key ran script"
    assert d.execute_script(
        "return document.querySelectorAll('#place-report img, #place-report iframe, #place-report script, "
        "#place-report [onerror], #place-report [onload], #place-report [style]').length") == 0
    # the SVG's own elements only: nothing a key could have brought in
    tags = set(d.execute_script(
        "return [...document.querySelectorAll('#report-result svg *')].map((e) => e.localName)"))
    assert tags <= {"title", "desc", "g", "line", "text", "rect", "polyline", "circle"}, tags


# -------------------------------------------------------------------------------- tests


def test_the_page_draws_the_ledgers_report_of_a_known_history(driver, report_ledger, shoot):
    d = driver
    ledger, history = report_ledger
    sign_in(d, ledger, "auditor")
    go(d, ledger, "#report")
    drawn(d)  # the place reads the default report (the last 7 days by day) on its own
    assert d.find_elements(By.ID, "report-facts"), d.find_element(By.ID, "report-status").text
    show(d, range_="all", window="1d", by="tool")
    drawn(d)
    url, r = page_report(d)
    q = parse_qs(urlsplit(url).query)
    assert q == {"window": ["1d"], "by": ["tool"]}, url
    # The ledger's numbers are the history's (the counts the test wrote, apart from the ledger's).
    groups = {g["key"]: g for g in r["groups"]}
    assert set(groups) == set(history.tools), (set(groups), set(history.tools))
    for tool, want in history.tools.items():
        t = groups[tool]["totals"]
        for f in COUNT_FIELDS:
            assert t[f] == want[f], (tool, f, t[f], want[f])
        for f in MAP_FIELDS:
            assert {k: v for k, v in t[f].items() if v} == want[f], (tool, f, t[f], want[f])
        refusals = t["refusals"] if isinstance(t["refusals"], int) else sum(t["refusals"].values())
        assert refusals == want["refusals"], (tool, t["refusals"])
    assert groups["wire_transfer"]["totals"]["approval_rate"] == pytest.approx(3 / 5)
    assert r["shifts"] == []  # one window: nothing to compare it with
    # What the page shows is the JSON's.
    facts = d.find_element(By.ID, "report-facts")
    assert f"checkpoint of size {r['checkpoint']['size']}" in facts.text
    assert d.find_element(By.ID, "report-root").text == r["checkpoint"]["root"]
    assert "1 day each, grouped by tool: 4 groups" in facts.text
    assert d.find_element(By.ID, "no-shift").is_displayed()
    rows = d.find_elements(By.CSS_SELECTOR, "#report-totals tbody tr")
    assert [row.get_attribute("data-key") for row in rows] == [g["key"] for g in r["groups"]]
    for row, g in zip(rows, r["groups"]):
        t = g["totals"]

        def cell(f, row=row):
            return row.find_element(By.CSS_SELECTOR, f"td[data-field={f}]")

        for f in COUNT_FIELDS:
            assert cell(f).text == str(t[f]), (g["key"], f)
        rate = t["approval_rate"]
        assert cell("approval_rate").get_attribute("data-value") == ("" if rate is None else _js_num(rate))
        assert cell("approval_rate").text == fmt_rate(rate)  # this history's rates are 3/5 and 1
        for p in ("p50", "p90", "p99"):
            v = t["decision_seconds"][p]
            assert cell(p).get_attribute("data-value") == ("" if v is None else _js_num(v)), (g["key"], p)
        for f in (*MAP_FIELDS, *(["revocation_reasons"] if "revocation_reasons" in t else [])):
            assert cell(f).get_attribute("data-value") == str(sum(t[f].values()))
            for code, n in t[f].items():
                assert f"{code} {n}" in cell(f).text, (g["key"], f, code)
    # the charts: a point per window with a rate, the denials and reasons by code, percentiles, queue
    for g in r["groups"]:
        series = [s for s in d.find_elements(By.CSS_SELECTOR, "#chart-approval g.series")
                  if s.get_attribute("data-key") == g["key"]]
        assert len(series) == 1
        rates = [float(c.get_attribute("data-rate")) for c in series[0].find_elements(By.CSS_SELECTOR, "circle.point")]
        assert rates == pytest.approx([w["approval_rate"] for w in g["windows"] if w["approval_rate"] is not None])
    # denials by the design's classes when the report has them (else by code)
    denied = "denial_classes" if "denial_classes" in r["groups"][0]["totals"] else "denials"
    for kind, chart in ((denied, "chart-denials"), ("observe_denials", "chart-denials"),
                        ("rejection_reasons", "chart-reasons")):
        want: dict[str, int] = {}
        for g in r["groups"]:
            for code, n in g["totals"][kind].items():
                want[code] = want.get(code, 0) + n
        bars = d.find_elements(By.CSS_SELECTOR, f"#{chart} g.bar")
        got = {b.get_attribute("data-code"): int(b.get_attribute("data-count")) for b in bars
               if chart != "chart-denials" or b.get_attribute("data-kind") == kind}
        assert got == {k: v for k, v in want.items() if v}, (kind, got, want)
    decision = {(b.get_attribute("data-key"), b.get_attribute("data-percentile")): b.get_attribute("data-seconds")
                for b in d.find_elements(By.CSS_SELECTOR, "#chart-decision g.bar")}
    for g in r["groups"]:
        for p in ("p50", "p90", "p99"):
            v = g["totals"]["decision_seconds"][p]
            assert decision[(g["key"], p)] == ("" if v is None else _js_num(v))
    queue = {b.get_attribute("data-key"): b for b in d.find_elements(By.CSS_SELECTOR, "#chart-queue g.bar")}
    for g in r["groups"]:
        assert queue[g["key"]].get_attribute("data-pending") == str(g["totals"]["pending"])
    assert f"{groups['wire_transfer']['totals']['pending']} pending, oldest" in text(d, queue["wire_transfer"])
    # nothing but counts, codes and durations: no argument, rationale or reason text reached the page
    content = d.execute_script("return document.getElementById('place-report').textContent")
    for secret in ("DE00 1234", "not this one", "the payee called"):
        assert secret not in content
    no_injected_markup(d)
    errors = browser_errors(d)
    assert not [m for m in errors if "Content Security Policy" in m or "Uncaught" in m], errors
    d.execute_script("document.getElementById('report-facts').scrollIntoView()")  # the charts, for the docs
    shoot("report")


def _js_num(v) -> str:
    """A JSON number as JavaScript's String() writes it (the page's data attributes)."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e21:
        return str(int(v))
    return repr(v) if isinstance(v, float) else str(v)


def test_hostile_keys_are_text(driver, report_ledger):
    d = driver
    ledger, _ = report_ledger
    sign_in(d, ledger, "auditor")
    go(d, ledger, "#report")
    drawn(d)
    for by, key, marked in (("tool", HOSTILE_TOOL, '<img src=x onerror="window.__pwned=1">\u27e6U+202E\u27e7gnp.exe'),
                            ("reviewer", HOSTILE_REVIEWER, '<svg onload="window.__pwned=2"></svg>\u27e6U+200B\u27e7reviewer')):
        show(d, range_="all", window="1d", by=by)
        drawn(d)
        _, r = page_report(d)
        assert key in [g["key"] for g in r["groups"]], (by, [g["key"] for g in r["groups"]])
        row = [row for row in d.find_elements(By.CSS_SELECTOR, "#report-totals tbody tr")
               if row.get_attribute("data-key") == key]
        assert len(row) == 1
        head = text(d, row[0].find_element(By.TAG_NAME, "th"))
        assert head.startswith(marked) or marked in head, head
        legend = [li for li in d.find_elements(By.CSS_SELECTOR, ".legend li") if li.get_attribute("data-key") == key]
        assert marked in text(d, legend[0])
        # the SVG's labels and titles: the same text, its hidden characters as markers
        svg_text = d.execute_script("return [...document.querySelectorAll('#report-result svg')].map((s) => s.textContent).join('\\n')")
        assert marked[:30] in svg_text
        content = d.execute_script("return document.getElementById('place-report').textContent")
        assert "\u202e" not in content and "\u200b" not in content
        no_injected_markup(d)


def test_a_reviewer_token_is_told_the_report_is_for_auditors(driver, report_ledger):
    d = driver
    ledger, _ = report_ledger
    status, answer = _get(ledger, "reviewer", "/v1/report")
    assert status == 403, (status, answer)
    sign_in(d, ledger, "reviewer")
    go(d, ledger, "#report")
    err = drawn(d)[0]
    assert err.get_attribute("id") == "report-error", err.text
    assert err.get_attribute("data-status") == "403"
    assert err.get_attribute("data-code") == answer["error"]
    assert "The report is for auditors and admins" in err.text and "Sign in with an auditor token" in err.text
    assert f"403 {answer['error']}" in err.text
    assert not d.find_elements(By.CSS_SELECTOR, "#report-result *")
    # the rest of the console goes on: the queue is the reviewer's
    assert d.find_element(By.ID, "tab-queue").is_displayed()


def _get(ledger, role: str, path: str) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(ledger.url + path, headers={"Authorization": f"Bearer {ledger.tokens[role]}"})
    try:
        with urllib.request.urlopen(req) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_the_ledgers_refusals_of_bad_input_are_shown_with_their_code(driver, report_ledger):
    d = driver
    ledger, _ = report_ledger
    sign_in(d, ledger, "admin")  # an admin may read the report too
    go(d, ledger, "#report")
    drawn(d)
    assert d.find_elements(By.ID, "report-facts")
    cases = (
        ({"range_": "custom", "since": "2026-12-02T00:00:00Z", "until": "2026-12-01T00:00:00Z"},
         "since=2026-12-02T00:00:00Z&until=2026-12-01T00:00:00Z&window=1d&by=tool"),
        ({"range_": "custom", "since": "yesterday", "until": ""}, "since=yesterday&window=1d&by=tool"),
        ({"range_": "custom", "since": "2026-12-01T00:00:00Z", "until": "2026-12-01T06:00:00Z", "window": "1d"},
         "since=2026-12-01T00:00:00Z&until=2026-12-01T06:00:00Z&window=1d&by=tool"),
    )
    for controls, query in cases:
        status, answer = _get(ledger, "auditor", f"/v1/report?{query}")
        assert status == 400, (query, status, answer)
        show(d, **controls)
        err = drawn(d)[0]
        assert err.get_attribute("id") == "report-error", (query, err.text)
        assert err.get_attribute("data-code") == answer["error"], (query, err.get_attribute("data-code"), answer)
        assert f"400 {answer['error']}" in err.text and "The ledger refused the report" in err.text
        url, _ = page_report_request(d)
        assert parse_qs(urlsplit(url).query) == parse_qs(query), (url, query)
    # a window the page itself cannot send: said before anything is asked
    show(d, range_="all", window="1.5d")
    err = drawn(d)[0]
    assert "The window is a duration" in err.text and err.get_attribute("data-code") is None


def page_report_request(d) -> tuple[str, str]:
    events = network_log(d)
    urls = [e["params"]["request"]["url"] for e in events
            if e["method"] == "Network.requestWillBeSent" and "/v1/report" in e["params"]["request"]["url"]]
    assert urls, "the page made no GET /v1/report"
    return urls[-1], ""


# ------------------------------------------------------------------------------- shifts


def _ts(s: str) -> float:
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_shift_the_ledger_flags_is_marked_with_its_window_metric_and_p_value(driver, tmp_path, shoot):
    """Ten approvals of wire_transfer, then, in a window of its own, ten rejections: the ledger
    flags the approval rate's shift in that window and the page marks it. The windows are
    chosen from the records' own timestamps (a duration in seconds, a custom range ending with
    the rejections' window), so nothing depends on how fast the writes go."""
    ledger = start_ledger(tmp_path)
    try:
        h = History(ledger)
        approvals = []
        for _ in range(10):
            rid, _ = h.open("wire_transfer", account="A", amount_cents=1)
            h.approve("wire_transfer", rid)
            approvals.append(rid)
        last_a = max(_ts(r["ts"]) for rid in approvals for r in ledger.client("auditor").get_request(rid).records)
        first_a = min(_ts(ledger.client("auditor").get_request(rid).records[0]["ts"]) for rid in approvals)
        boundary = math.floor(last_a) + 1  # a whole second after every approval's records
        while time.time() < boundary + 0.05:
            time.sleep(0.05)
        rejections = []
        for _ in range(10):
            rid, _ = h.open("wire_transfer", account="A", amount_cents=1)
            h.reject("wire_transfer", rid, "wrong_amount")
            rejections.append(rid)
        recs = [r for rid in rejections for r in ledger.client("auditor").get_request(rid).records]
        first_b, last_b = min(_ts(r["ts"]) for r in recs), max(_ts(r["ts"]) for r in recs)
        assert first_b >= boundary, (first_b, boundary)  # the rejections' records all follow it
        window = math.ceil(last_b - boundary) + 1
        n = math.ceil((boundary - first_a) / window) + 1
        since, until = boundary - n * window, boundary + window
        status, r = _get(ledger, "auditor", f"/v1/report?since={_rfc3339(since)}&until={_rfc3339(until)}"
                                            f"&window={window}s&by=tool")
        assert status == 200, r
        assert r["shifts"], f"the ledger flagged no shift: {json.dumps(r)[:2000]}"
        d = driver
        sign_in(d, ledger, "auditor")
        go(d, ledger, "#report")
        drawn(d)
        show(d, range_="custom", since=_rfc3339(since), until=_rfc3339(until), window=f"{window}s", by="tool")
        drawn(d)
        _, got = page_report(d)
        assert got["shifts"] == r["shifts"]
        shown = d.find_elements(By.CSS_SELECTOR, "#report-shifts li.shift")
        assert len(shown) == len(r["shifts"])
        for li, s in zip(shown, r["shifts"]):
            assert li.get_attribute("data-key") == s["key"] and li.get_attribute("data-metric") == s["metric"]
            assert li.get_attribute("data-window-start") == s["window_start"]
            assert float(li.get_attribute("data-p-value")) == pytest.approx(s["p_value"])
            assert "p = " in li.text and s["metric"] in li.text
        rate_shift = [s for s in r["shifts"] if s["key"] == "wire_transfer" and "rate" in s["metric"]]
        assert rate_shift, r["shifts"]
        assert _ts(rate_shift[0]["window_start"]) == boundary
        bands = [b for b in d.find_elements(By.CSS_SELECTOR, "#chart-approval g.shift-band")
                 if b.get_attribute("data-metric") == rate_shift[0]["metric"]]
        assert len(bands) == 1 and bands[0].get_attribute("data-window-start") == rate_shift[0]["window_start"]
        assert "p = " in text(d, bands[0])
        row = d.find_element(By.CSS_SELECTOR, "#report-totals tbody tr.has-shift")
        assert row.get_attribute("data-key") == "wire_transfer" and "shift" in row.text
        d.execute_script("document.getElementById('report-shifts').scrollIntoView()")  # the charts, for the docs
        shoot("report-shift")
    finally:
        ledger.stop()


def test_a_saved_report_file_is_drawn_as_the_ledgers(driver, report_ledger, tmp_path):
    """``hitl-ledger report --format json`` saved to a file: the page draws it like the
    ledger's answer, says it is a file, and refuses a file that is not a report."""
    d = driver
    ledger, _ = report_ledger
    status, r = _get(ledger, "auditor", "/v1/report?window=1d&by=tool")
    assert status == 200
    saved = tmp_path / "report.json"
    saved.write_text(json.dumps(r), encoding="utf-8")
    sign_in(d, ledger, "auditor")
    go(d, ledger, "#report")
    drawn(d)
    d.find_element(By.ID, "report-file").send_keys(str(saved))
    wait_for(lambda: "the file report.json" in d.find_element(By.ID, "report-facts").text, 10, "the file's report")
    rows = d.find_elements(By.CSS_SELECTOR, "#report-totals tbody tr")
    assert [row.get_attribute("data-key") for row in rows] == [g["key"] for g in r["groups"]]
    bad = tmp_path / "not-a-report.json"
    bad.write_text(json.dumps({**r, "groups": [{"key": 1, "totals": {}, "windows": []}]}), encoding="utf-8")
    d.find_element(By.ID, "report-file").send_keys(str(bad))
    err = wait_for(lambda: d.find_element(By.ID, "report-error"), 10, "the refusal")
    assert "not a report this page can read" in err.text and "groups[0].key" in err.text
    assert not d.find_elements(By.ID, "report-facts")
    if os.environ.get("HITL_REPORT_DEBUG"):
        print(json.dumps(r, indent=1))
