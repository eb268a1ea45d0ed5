"""The in-browser verifier (console/verify.js) on the structured-reasons vectors
(tests/vectors/reasons.json): rule 13 of docs/protocol.md 6.3 (a rejection's or revocation's
`reason_code` outside its tool's `reason_codes` in the policy in force), the member's type in
the envelope, and section 12's validation and resolution of `reason_codes`. Each verdict is the
one the vectors expect, which the Python verifier and `verify-export` also give
(tests/interop/test_reasons_vectors.py), so the three agree.
"""

from __future__ import annotations

import json

import pytest
from browser_support import REPO, wait_for
from selenium.webdriver.common.by import By
from test_verify import browser_verify

V = json.loads((REPO / "tests" / "vectors" / "reasons.json").read_text("utf-8"))


@pytest.fixture
def page(driver, ledger):
    driver.get(ledger.url + "/console/")
    wait_for(lambda: driver.find_element(By.ID, "token"))
    return driver


def test_every_bundle_gets_its_verdict(page):
    assert len(V["bundles"]) >= 10
    for case in V["bundles"]:
        got = browser_verify(page, json.dumps(case["bundle"]).encode("utf-8"), V["verifier_key"])
        assert "error" not in got, (case["name"], got.get("error"))
        r, exp = got["report"], case["expect"]
        assert r["ok"] is exp["ok"], (case["name"], r)
        if exp["ok"]:
            continue
        assert (r["problem"]["code"], r["problem"]["seq"]) == (exp["code"], exp["seq"]), (case["name"], r)
        if "rule" in exp:
            assert "rule %s: " % exp["rule"] in r["problem"]["message"], (case["name"], r["problem"])


def read_policies(d, docs: list) -> list:
    """Each document through the page's readPolicy: the error message, or the resolved
    reason_codes of the default and of each tool."""
    return d.execute_async_script(
        """
        const [docs, done] = arguments;
        import('/console/verify.js').then((m) => done(docs.map((doc) => {
          try {
            const p = m.readPolicy(doc);
            return {default: p.default.reason_codes, tools: Object.fromEntries([...p.tools].map(([t, e]) => [t, e.reason_codes]))};
          } catch (e) {
            return {error: String(e.message)};
          }
        }))).catch((e) => done([{error: 'import: ' + String(e)}]));
        """,
        docs)


def test_policy_documents_validate_and_resolve_as_the_contract_says(page):
    cases = V["policy_documents"]
    got = read_policies(page, [c["document"] for c in cases])
    resolved = {}
    for c, g in zip(cases, got, strict=True):
        assert ("error" not in g) is c["valid"], (c["name"], g)
        resolved[c["name"]] = g
    for c in V["reason_codes"]:
        g = resolved[c["document"]]
        assert g["tools"].get(c["tool"], g["default"]) == c["reason_codes"], (c, g)
