"""The console's in-browser bundle verifier (console/verify.js) against `hitl-ledger verify-export`.

The bundles and their tamper cases are the interop tests' own (tests/interop/test_agreement.py):
its ledgers are built with the real binary, and each of its mutation tests is run with its
``expect`` replaced by a collector, so every good and tampered bundle it checks is checked here
too. For each one the page's verdict (ok, problem code, problem seq, summary) must equal
verify-export's. A few go through the page itself: the file chooser, a dropped file, a thread
opened from the ledger with an auditor token.
"""

from __future__ import annotations

import base64
import inspect
import json
import sys

import pytest
from browser_support import REPO, sign_in, wait_for
from selenium.webdriver.common.by import By

sys.path.insert(0, str(REPO / "tests" / "interop"))
import test_agreement as interop  # noqa: E402

#: The problem codes the interop tamper cases reach; each must be among the collected cases.
CODES = {"bad_input", "verifier_key_mismatch", "checkpoint_signature", "thread_head_signature",
         "thread_head_mismatch", "inclusion_proof", "thread_gap", "record_thread"}


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    world_of = getattr(interop.world, "__wrapped__", interop.world)
    world = world_of(tmp_path_factory)
    tmp = tmp_path_factory.mktemp("verify-cases")
    collected: list[dict] = []

    def collect(data, key, tmp, name, status, code, seq="any"):
        got, r, _ = interop.rust_verify(data, key, tmp, name)
        assert got == status, f"{name}: verify-export exits {got}, the interop test expects {status}"
        collected.append({"name": name, "data": data, "key": key, "status": got, "rust": r})
        return r, r

    saved = interop.expect
    interop.expect = collect
    try:
        for name, fn in inspect.getmembers(interop, inspect.isfunction):
            if name.startswith("test_") and list(inspect.signature(fn).parameters) == ["world", "tmp"]:
                fn(world, tmp)
    finally:
        interop.expect = saved
    assert len(collected) >= 30, [c["name"] for c in collected]
    return {"world": world, "cases": collected}


def browser_verify(d, data: bytes, key: str, policy: dict | None = None) -> dict:
    return d.execute_async_script(
        """
        const [b64, key, policy, done] = arguments;
        import('/console/verify.js').then(async (m) => {
          const bin = atob(b64);
          const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
          const r = await m.verifyBundle(bytes, key, policy);
          done({report: r.report, checks: r.checks.map((c) => [c.id, c.status])});
        }).catch((e) => done({error: String(e && e.stack || e)}));
        """,
        base64.b64encode(data).decode("ascii"), key, policy)


def test_the_page_agrees_with_verify_export_on_every_interop_bundle(driver, ledger, cases):
    d = driver
    d.get(ledger.url + "/console/")
    wait_for(lambda: d.find_element(By.ID, "token"))
    seen = set()
    ok = 0
    for c in cases["cases"]:
        got = browser_verify(d, c["data"], c["key"])
        assert "error" not in got, f"{c['name']}: the page's verifier threw: {got['error']}"
        page, rust = got["report"], c["rust"]
        detail = f"{c['name']}: page {json.dumps(page)} / verify-export {json.dumps(rust)}"
        assert page["ok"] == rust["ok"], detail
        status = 0 if page["ok"] else 2 if page["problem"]["code"] == "bad_input" else 1
        assert status == c["status"], detail
        if rust["ok"]:
            ok += 1
            for f in ("records", "decisions", "rejections", "first_ts", "last_ts"):
                assert page[f] == rust[f], detail
            assert page["problem"] is None
            # every check passes; the witness check is skipped without witness keys
            assert all(s == ("skipped" if c == "witnesses" else "pass") for c, s in got["checks"]), detail
            continue
        assert page["problem"]["code"] == rust["problem"]["code"], detail
        assert page["problem"]["seq"] == rust["problem"]["seq"], detail
        seen.add(rust["problem"]["code"])
        # the failing check is named, and nothing after it is claimed to pass
        statuses = [s for _, s in got["checks"]]
        assert statuses.count("fail") == 1, detail
        assert "pass" not in statuses[statuses.index("fail") + 1:], detail
    assert ok >= 5, "too few good bundles"
    assert CODES <= seen, f"tamper cases reach only {sorted(seen)}"


def _write(tmp_path, name: str, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_verify_screen_file_drop_pinned_key_and_thread_export(driver, ledger, cases, tmp_path, shoot):
    d = driver
    world = cases["world"]
    key = world["a"].key
    good = world["bundles"]["t1"]
    sign_in(d, ledger, "reviewer")
    d.find_element(By.ID, "tab-verify").click()
    wait_for(lambda: d.find_element(By.ID, "place-verify").is_displayed())
    result = d.find_element(By.ID, "verify-result")
    # no key: nothing is verified (the bundle's own key is never used)
    d.find_element(By.ID, "bundle-file").send_keys(str(_write(tmp_path, "t1.json", good)))
    wait_for(lambda: "Paste or pin the verifier key" in result.text, what="the missing-key message")
    # the key pasted, then the good bundle chosen: every check passes
    d.find_element(By.ID, "verify-key").send_keys(key)
    d.execute_script("document.getElementById('bundle-file').value = ''")
    d.find_element(By.ID, "bundle-file").send_keys(str(_write(tmp_path, "t1-again.json", good)))
    verdict = wait_for(lambda: d.find_element(By.ID, "verdict"), what="a verdict")
    assert verdict.get_attribute("data-ok") == "true", verdict.text
    checks = d.find_elements(By.CSS_SELECTOR, "#checks li")
    assert len(checks) == 13 and all(
        c.get_attribute("data-status") == ("skipped" if c.get_attribute("data-check") == "witnesses" else "pass")
        for c in checks)
    assert "Intact" in verdict.text
    d.execute_script("arguments[0].scrollIntoView()", d.find_element(By.ID, "verify-result"))
    shoot("verify-pass")
    # a tampered bundle, dropped on the page: the same code as verify-export, checks named
    edited = next(c for c in cases["cases"] if c["name"] == "edited-rationale")
    d.execute_script(
        """
        const [b64, target] = arguments;
        const bin = atob(b64);
        const file = new File([Uint8Array.from(bin, (c) => c.charCodeAt(0))], 'edited.json',
                              {type: 'application/json'});
        const dt = new DataTransfer();
        dt.items.add(file);
        target.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));
        """, base64.b64encode(edited["data"]).decode("ascii"), d.find_element(By.ID, "drop"))
    wait_for(lambda: d.find_element(By.ID, "verdict").get_attribute("data-ok") == "false",
             what="the tampered verdict")
    verdict = d.find_element(By.ID, "verdict")
    assert verdict.get_attribute("data-code") == edited["rust"]["problem"]["code"] == "inclusion_proof"
    assert f"seq {edited['rust']['problem']['seq']}" in verdict.text
    status = {c.get_attribute("data-check"): c.get_attribute("data-status")
              for c in d.find_elements(By.CSS_SELECTOR, "#checks li")}
    assert status["inclusion"] == "fail" and status["checkpoint"] == "pass"
    assert status["rules"] == "not_run"
    report = json.loads(d.find_element(By.ID, "verify-report").text)
    assert report["problem"]["code"] == "inclusion_proof" and report["ok"] is False
    d.execute_script("arguments[0].scrollIntoView()", d.find_element(By.ID, "verify-result"))
    shoot("verify-fail")
    # another log's key pasted: the good bundle fails as verify-export says
    other = world["b"].key
    box = d.find_element(By.ID, "verify-key")
    box.clear()
    box.send_keys(other)
    d.execute_script("document.getElementById('bundle-file').value = ''")
    d.find_element(By.ID, "bundle-file").send_keys(str(_write(tmp_path, "t1-other.json", good)))
    wait_for(lambda: d.find_element(By.ID, "verdict").get_attribute("data-code") == "verifier_key_mismatch",
             what="the wrong-key verdict")
    # a pinned key survives a reload (localStorage holds only the public key)
    box.clear()
    box.send_keys(ledger.verifier_key)
    d.find_element(By.ID, "pin-key").click()
    d.refresh()
    wait_for(lambda: d.find_element(By.ID, "app").is_displayed())
    assert d.find_element(By.ID, "verify-key").get_attribute("value") == ledger.verifier_key
    assert ledger.verifier_key in d.find_element(By.ID, "pinned").text
    # a thread of the live ledger, opened from it: reviewers may not export, auditors may
    agent = ledger.client("agent")
    agent.append_interrupt(request_id="export-r1", thread_id="export-t1", interrupt_id="i",
                           action={"tool": "refund", "args": {"amount_cents": 12}})
    ledger.client("reviewer").approve("export-r1", "fine")
    d.get(ledger.url + "/console/#verify")
    d.find_element(By.ID, "export-thread").send_keys("export-t1")
    d.find_element(By.ID, "open-export").click()
    result = d.find_element(By.ID, "verify-result")
    wait_for(lambda: "exports are for auditors" in result.text, what="the reviewer's 403")
    d.find_element(By.ID, "sign-out").click()
    sign_in(d, ledger, "auditor")
    d.get(ledger.url + "/console/#verify")
    d.find_element(By.ID, "export-thread").send_keys("export-t1")
    d.find_element(By.ID, "open-export").click()
    verdict = wait_for(lambda: d.find_element(By.ID, "verdict"), what="the export's verdict")
    assert verdict.get_attribute("data-ok") == "true", verdict.text
    assert "2 records" in verdict.text
    d.find_element(By.ID, "unpin-key").click()
    assert d.execute_script("return localStorage.length") == 0


# ------------------------------------------------------------------ witness policy (protocol 14)


def _witness(name: str, seed: int):
    """A cosignature/v1 witness written from c2sp.org/tlog-cosignature: (vkey, cosign(body, ts))."""
    import hashlib
    import struct

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    sk = Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32)
    pub = sk.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    key_id = hashlib.sha256(name.encode() + b"\n\x04" + pub).digest()[:4]
    vkey = "%s+%s+%s" % (name, key_id.hex(), base64.b64encode(b"\x04" + pub).decode())

    def cosign(body: str, ts: int) -> str:
        sig = sk.sign(b"cosignature/v1\ntime %d\n" % ts + body.encode())
        return "\u2014 %s %s\n" % (name, base64.b64encode(key_id + struct.pack(">Q", ts) + sig).decode())

    return vkey, cosign


def _rekeyed(line: str) -> str:
    """The cosignature line with its key id's first byte flipped, signature unchanged."""
    prefix, b64 = line.rstrip("\n").rsplit(" ", 1)
    raw = bytearray(base64.b64decode(b64))
    raw[0] ^= 0xFF
    return "%s %s\n" % (prefix, base64.b64encode(bytes(raw)).decode())


def _with_lines(bundle: bytes, lines: str) -> bytes:
    doc = json.loads(bundle)
    doc["checkpoint"] += lines
    return json.dumps(doc).encode()


def _body(bundle: bytes) -> str:
    note = json.loads(bundle)["checkpoint"]
    return note[: note.rindex("\n\n") + 1]


def test_the_page_agrees_with_verify_export_under_a_witness_policy(driver, ledger, cases, tmp_path, shoot):
    d = driver
    world = cases["world"]
    key = world["a"].key
    good = world["bundles"]["t1"]
    body = _body(good)
    ts = 1_780_000_000
    k1, c1 = _witness("w1.example", 1)
    k2, c2 = _witness("w2.example", 2)
    k3, _ = _witness("w3.example", 3)
    _, stranger = _witness("w2.example", 9)
    l1, l2 = c1(body, ts), c2(body, ts)
    other_body = body.replace("\n", "x\n", 1)
    policy2 = {"keys": [k1, k2, k3], "min": 2}
    cases_ = [
        ("two-of-three", _with_lines(good, l1 + l2), policy2, None),
        ("all-three-by-default", _with_lines(good, l1 + l2), {"keys": [k1, k2, k3], "min": None},
         "insufficient_cosignatures"),
        ("one-line-twice", _with_lines(good, l1 + l1), {"keys": [k1, k2], "min": 2}, "insufficient_cosignatures"),
        ("same-name-other-key", _with_lines(good, l1 + stranger(body, ts)), {"keys": [k1, k2], "min": 2},
         "insufficient_cosignatures"),
        ("over-another-body", _with_lines(good, l1 + c2(other_body, ts)), {"keys": [k1, k2], "min": 2},
         "insufficient_cosignatures"),
        ("huge-timestamp", _with_lines(good, l1 + c2(body, 1 << 63)), {"keys": [k1, k2], "min": 2},
         "insufficient_cosignatures"),
        ("bare", good, {"keys": [k1], "min": 1}, "insufficient_cosignatures"),
        # w2's valid signature under another name, or with another key id: not w2's line
        ("renamed-line", _with_lines(good, l1 + l2.replace("w2.example", "w9.example")),
         {"keys": [k1, k2], "min": 2}, "insufficient_cosignatures"),
        ("other-key-id", _with_lines(good, l1 + _rekeyed(l2)), {"keys": [k1, k2], "min": 2},
         "insufficient_cosignatures"),
    ]
    d.get(ledger.url + "/console/")
    wait_for(lambda: d.find_element(By.ID, "token"))
    for name, data, policy, code in cases_:
        f = _write(tmp_path, name + ".json", data)
        argv = ["verify-export", str(f), "--key", key, "--format", "json"]
        for k in policy["keys"]:
            argv += ["--witness", k]
        if policy["min"] is not None:
            argv += ["--min-witnesses", str(policy["min"])]
        p = interop.run(*argv, check=False)
        rust = json.loads(p.stdout)
        got = browser_verify(d, data, key, policy)
        assert "error" not in got, f"{name}: {got['error']}"
        page = got["report"]
        detail = f"{name}: page {json.dumps(page)} / verify-export {json.dumps(rust)}"
        assert page["ok"] == rust["ok"] == (code is None), detail
        assert p.returncode == (0 if code is None else 1), detail
        if code is None:
            assert page["witnesses"] == rust["witnesses"] == ["w1.example", "w2.example"], detail
            assert dict(got["checks"])["witnesses"] == "pass", detail
        else:
            assert page["problem"]["code"] == rust["problem"]["code"] == code, detail
            assert page["problem"]["message"] == rust["problem"]["message"], detail
            assert dict(got["checks"])["witnesses"] == "fail", detail
    # through the page: witness keys pasted, a cosigned bundle chosen
    sign_in(d, ledger, "reviewer")
    d.find_element(By.ID, "tab-verify").click()
    wait_for(lambda: d.find_element(By.ID, "place-verify").is_displayed())
    box = d.find_element(By.ID, "verify-key")
    box.clear()
    box.send_keys(key)
    d.find_element(By.ID, "verify-witnesses").send_keys(k1 + "\n" + k2 + "\n" + k3)
    d.find_element(By.ID, "verify-min-witnesses").send_keys("2")
    d.execute_script("document.getElementById('bundle-file').value = ''")
    d.find_element(By.ID, "bundle-file").send_keys(str(_write(tmp_path, "cosigned.json", _with_lines(good, l1 + l2))))
    verdict = wait_for(lambda: d.find_element(By.ID, "verdict"), what="a verdict")
    assert verdict.get_attribute("data-ok") == "true", verdict.text
    item = d.find_element(By.CSS_SELECTOR, "#checks li[data-check=witnesses]")
    assert item.get_attribute("data-status") == "pass"
    assert "w1.example, w2.example" in item.text
    d.execute_script("arguments[0].scrollIntoView()", d.find_element(By.ID, "verify-result"))
    shoot("verify-witnessed")
    # the bare bundle under the same policy: refused, the check named
    d.execute_script("document.getElementById('bundle-file').value = ''")
    d.find_element(By.ID, "bundle-file").send_keys(str(_write(tmp_path, "bare.json", good)))
    wait_for(lambda: d.find_element(By.ID, "verdict").get_attribute("data-code") == "insufficient_cosignatures",
             what="the unwitnessed verdict")
