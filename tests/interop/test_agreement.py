"""Agreement of the two bundle verifiers on bundles exported by the real binary.

The Rust binary (``$HITL_LEDGER_BIN``, default ``~/.cache/hitl-ledger/target/debug/hitl-ledger``)
builds ledgers in temporary directories: several threads with interrupts, approvals, a
rejection, an edit, granted and denied authorizations, follow-ups and a revocation, appended
over several `append` runs and batches, so the log has several batches and checkpoints. It
exports thread bundles; the tests then mutate them as the issue lists (truncated, a record
removed, reordered, edited, taken from another thread or another log, a proof for the wrong
index, a checkpoint signed by another key, a thread head older than the records, malformed
JSON, an unknown format, a wrong key string) and check, for the good bundles and for each
mutation, that

* `hitl-ledger verify-export FILE --key KEY --format json` and the independent Python
  verifier (`verify_bundle.verify_bundle_bytes`) agree on the exit status, `problem.code`
  and `problem.seq` (where both give one), and
* each mutation gets the problem code (and seq) it should per spec sections 5 and 7.

A second ledger (the governance tests at the end) is written by `hitl-ledger serve` over
HTTP with tokens of distinct principals, so its records are the governed ones the gate
writes (partial and final approvals with their counts and `approved_as`, governed refusals,
break-glass and its review, policy changes, a `tool_paused` denial, an edit counting as its
editor's approval); its bundles carry the policy records, and both verifiers agree on them
and on each way of breaking that `policy` member. Its records also fix the shapes the
record forms of tests/vectors/governance.json must have.

The module fails (it never skips) when the binary does not exist.

Run: python -m pytest tests/interop (needs `cryptography`, `rfc8785`, `pytest`).
"""

from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import verify_bundle as vb  # noqa: E402

BIN = Path(
    os.environ.get("HITL_LEDGER_BIN")
    or Path.home() / ".cache" / "hitl-ledger" / "target" / "debug" / "hitl-ledger"
)

if not BIN.is_file():
    raise FileNotFoundError(
        "hitl-ledger binary not found at %s: build it first (scripts/test.sh does), or set HITL_LEDGER_BIN" % BIN
    )

ORIGIN = "interop.example/agreement"
OTHER_ORIGIN = "interop.example/other"
TIMEOUT = 60


# ---------------------------------------------------------------------------
# Running the binary


def run(*args: str, data: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
    argv = [str(BIN)]
    if data is not None:
        argv += ["--data", str(data)]
    argv += list(args)
    env = dict(os.environ)
    env.pop("HITL_LEDGER_DATA", None)
    p = subprocess.run(argv, capture_output=True, timeout=TIMEOUT, env=env)
    if check and p.returncode != 0:
        raise AssertionError(
            "%s exited %d\nstdout: %s\nstderr: %s"
            % (argv, p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"))
        )
    return p


class Ledger:
    """One ledger directory driven through the command line."""

    def __init__(self, base: Path, name: str, origin: str):
        self.origin = origin
        self.work = base / (name + "-work")
        self.work.mkdir(parents=True)
        self._n = 0
        self.dir = base / name
        run("init", "--origin", origin, data=self.dir)
        self.key = (self.dir / "verifier.key").read_text("utf-8").strip()
        vb.parse_verifier_key(self.key)  # a well-formed key, or the test setup is wrong

    def append(self, lines: list[dict], batch: int | None = None) -> list[dict]:
        self._n += 1
        f = self.work / ("append-%d.jsonl" % self._n)
        f.write_text("".join(json.dumps(line) + "\n" for line in lines), "utf-8")
        args = ["append", str(f)]
        if batch is not None:
            args += ["--batch", str(batch)]
        p = run(*args, data=self.dir)
        answers = [json.loads(x) for x in p.stdout.decode("utf-8").splitlines() if x.strip()]
        assert len(answers) == len(lines), answers
        for line, a in zip(lines, answers):
            assert "error" not in a, (line, a)
            assert a["duplicate"] is False, (line, a)
        return answers

    def export(self, thread: str, name: str | None = None) -> bytes:
        self._n += 1
        out = self.work / ("%s-%d.json" % (name or "export", self._n))
        run("export", "--thread", thread, "--out", str(out), data=self.dir)
        return out.read_bytes()


def refund(cents: int) -> dict:
    return {"tool": "refund", "args": {"amount_cents": cents, "currency": "EUR"}}


def wire(account: str, cents: int) -> dict:
    return {"tool": "wire_transfer", "args": {"account": account, "amount_cents": cents}}


def populate(led: Ledger) -> dict:
    """The same scenario in any ledger: threads t1, t2, t3 over four appends."""
    info: dict = {}
    # 1. interrupts in three threads (batches of 2 lines)
    a = led.append(
        [
            {"kind": "interrupt", "request_id": "r1", "thread_id": "t1", "run_id": "run-1",
             "checkpoint_id": "cp-1", "interrupt_id": "i1", "action": refund(500)},
            {"kind": "interrupt", "request_id": "r2", "thread_id": "t1", "run_id": "run-1",
             "interrupt_id": "i2", "action": refund(99999)},
            {"kind": "interrupt", "request_id": "r3", "thread_id": "t2", "interrupt_id": "i3",
             "action": wire("DE02120300000000202051", 12000)},
            {"kind": "interrupt", "request_id": "r4", "thread_id": "t2", "interrupt_id": "i4",
             "action": refund(700), "allowed_decisions": ["approve", "reject"]},
            {"kind": "interrupt", "request_id": "r5", "thread_id": "t3", "interrupt_id": "i5",
             "checkpoint_ns": "sub:graph", "action": refund(42), "review_ttl_seconds": 1800},
        ],
        batch=2,
    )
    # 2. decisions: approvals, a rejection, an edit
    edited = wire("DE02120300000000202051", 10000)
    d = led.append(
        [
            {"kind": "decision", "request_id": "r1", "decision": "approve", "rationale": "within policy"},
            {"kind": "decision", "request_id": "r2", "decision": "reject", "rationale": "amount too large"},
            {"kind": "decision", "request_id": "r3", "decision": "edit", "rationale": "lower amount",
             "edited_action": edited},
            {"kind": "decision", "request_id": "r4", "decision": "approve"},
            {"kind": "decision", "request_id": "r5", "decision": "approve"},
        ]
    )
    tickets = {r: x["ticket_id"] for r, x in zip(("r1", "r2", "r3", "r4", "r5"), d)}
    new_request = d[2]["new_request_id"]
    # 3. authorizations granted and denied, a revocation
    z = led.append(
        [
            {"kind": "authorize", "request_id": "r1", "ticket_id": tickets["r1"], "action": refund(500),
             "attempt_id": "att-1"},
            {"kind": "authorize", "request_id": "r2", "ticket_id": tickets["r2"], "action": refund(99999)},
            {"kind": "authorize", "request_id": new_request, "ticket_id": tickets["r3"], "action": edited},
            {"kind": "authorize", "request_id": "r4", "ticket_id": tickets["r4"], "action": refund(701)},
            {"kind": "revoke", "request_id": "r5", "reason": "customer cancelled"},
        ],
        batch=3,
    )
    assert [x["granted"] for x in (z[0], z[1], z[2], z[3])] == [True, False, True, False], z
    assert z[1]["code"] == "approval_rejected" and z[3]["code"] == "approval_action_mismatch", z
    # 4. follow-ups on the granted calls, and a denied authorization after the revocation
    led.append(
        [
            {"kind": "follow_up", "request_id": "r1", "follow_up_id": "f1", "follows": z[0]["leaf_hash"],
             "outcome": "executed", "detail": {"refund_id": "re_1"}, "operation_id": "op-1"},
            {"kind": "follow_up", "request_id": new_request, "follow_up_id": "f2",
             "follows": z[2]["leaf_hash"], "outcome": "executed", "detail": "wired"},
            {"kind": "authorize", "request_id": "r5", "ticket_id": tickets["r5"], "action": refund(42)},
        ]
    )
    info["new_request"] = new_request
    return info


# ---------------------------------------------------------------------------
# Regression: `init` writes `PRIVATE+KEY+<name>+<key id>+<base64>`, and base64 may contain
# '+'. A reader that split from the right could not read such a key back, so about half of
# all fresh ledgers refused every later command ("signing key file: key is not base64").
# Names cannot contain '+' (spec section 2), so the key is everything after the fourth '+'.


def test_fresh_ledgers_open_whatever_their_key(tmp_path):
    tried = 0
    for i in range(40):
        d = tmp_path / ("k%d" % i)
        run("init", "--origin", ORIGIN, data=d)
        material = (d / "signing.key").read_text("utf-8").strip().split("+", 4)[4]
        if "+" not in material:
            continue
        tried += 1
        p = run("checkpoint", data=d, check=False)
        assert p.returncode == 0, (
            "a ledger whose signing key's base64 contains '+' cannot be opened after init: %s"
            % p.stderr.decode("utf-8", "replace").strip()
        )
        if tried >= 2:
            break
    assert tried, "no key with a '+' in 40 inits (probability about 1e-12)"


# ---------------------------------------------------------------------------
# Fixtures: the ledgers and their bundles


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("agreement")
    a = Ledger(base, "a", ORIGIN)
    populate(a)
    bundles = {t: a.export(t, t) for t in ("t1", "t2", "t3")}

    # b: the same origin with another key, the same scenario (same seqs, other leaves)
    b = Ledger(base, "b", ORIGIN)
    populate(b)
    b_bundles = {"t1": b.export("t1", "b-t1")}

    # c: another origin
    c = Ledger(base, "c", OTHER_ORIGIN)
    c.append([{"kind": "interrupt", "request_id": "c1", "thread_id": "t1", "interrupt_id": "i",
               "action": refund(1)}])
    c_bundles = {"t1": c.export("t1", "c-t1")}

    # a thread head older than the records: more records in t1 after its first export
    old_t1 = bundles["t1"]
    a.append(
        [
            {"kind": "interrupt", "request_id": "r6", "thread_id": "t1", "interrupt_id": "i6",
             "action": refund(60)},
            {"kind": "decision", "request_id": "r6", "decision": "approve"},
        ]
    )
    new_t1 = a.export("t1", "t1-new")
    return {"a": a, "b": b, "c": c, "bundles": bundles, "b_bundles": b_bundles, "c_bundles": c_bundles,
            "old_t1": old_t1, "new_t1": new_t1, "dir": base}


# ---------------------------------------------------------------------------
# Running both verifiers


def rust_verify(data: bytes, key: str, tmp: Path, name: str) -> tuple[int, dict, str]:
    f = tmp / ("%s.bundle.json" % name)
    f.write_bytes(data)
    p = run("verify-export", str(f), "--key", key, "--format", "json", check=False)
    out = p.stdout.decode("utf-8", "replace")
    try:
        doc = json.loads(out)
    except ValueError:
        raise AssertionError(
            "verify-export --format json did not print JSON for %s (exit %d)\nstdout: %r\nstderr: %r"
            % (name, p.returncode, out, p.stderr.decode("utf-8", "replace"))
        ) from None
    return p.returncode, doc, p.stderr.decode("utf-8", "replace")


def both(data: bytes, key: str, tmp: Path, name: str) -> tuple[int, dict, dict]:
    """Runs both verifiers, asserts they agree, returns (exit status, rust, python)."""
    r_code, r, r_err = rust_verify(data, key, tmp, name)
    py = vb.verify_bundle_bytes(data, key)
    p_code = vb.exit_status(py)
    detail = "%s:\n  rust (exit %d): %s%s\n  python (exit %d): %s" % (
        name, r_code, json.dumps(r), (" stderr: %r" % r_err) if r_err else "", p_code, json.dumps(py))
    assert r_code == p_code, "exit status differs; " + detail
    assert r["ok"] == py["ok"], "ok differs; " + detail
    assert set(r) == {"ok", "records", "decisions", "rejections", "first_ts", "last_ts", "problem"}, detail
    rp, pp = r["problem"], py["problem"]
    assert (rp is None) == (pp is None), "problem presence differs; " + detail
    if rp is not None:
        assert rp["code"] == pp["code"], "problem.code differs; " + detail
        if rp.get("seq") is not None and pp.get("seq") is not None:
            assert rp["seq"] == pp["seq"], "problem.seq differs; " + detail
        assert isinstance(rp.get("message"), str) and rp["message"], "rust gives no message; " + detail
    return r_code, r, py


def expect(data: bytes, key: str, tmp: Path, name: str, status: int, code: str | set | None,
           seq: int | None | str = "any") -> tuple[dict, dict]:
    """Both agree, and the result is the expected one (seq "any": not checked)."""
    got, r, py = both(data, key, tmp, name)
    detail = "%s: rust %s / python %s" % (name, json.dumps(r), json.dumps(py))
    rp = r["problem"] or {}
    print("%-28s exit %d  %-22s seq rust %-5s python %s" % (
        name, got, rp.get("code"), rp.get("seq"), (py["problem"] or {}).get("seq")))
    assert got == status, detail
    if code is None:
        assert r["problem"] is None, detail
        return r, py
    codes = {code} if isinstance(code, str) else code
    assert r["problem"]["code"] in codes, detail
    # the text output names what is wrong too, with the same exit status
    f = tmp / ("%s.bundle.json" % name)
    t = run("verify-export", str(f), "--key", key, check=False)
    text = (t.stdout + t.stderr).decode("utf-8", "replace")
    assert t.returncode == status, "%s: text mode exits %d: %r" % (name, t.returncode, text)
    assert r["problem"]["code"] in text and r["problem"]["message"] in text, "%s: text mode says %r" % (name, text)
    if seq != "any":
        assert r["problem"]["seq"] == seq, "rust seq; " + detail
        assert py["problem"]["seq"] == seq, "python seq; " + detail
    return r, py


def load(data: bytes) -> dict:
    return json.loads(data)


def dump(doc: dict) -> bytes:
    return (json.dumps(doc, indent=2) + "\n").encode("utf-8")


def leaf_record(entry: dict) -> dict:
    return json.loads(base64.b64decode(entry["leaf"]))


@pytest.fixture
def tmp(tmp_path):
    return tmp_path


# ---------------------------------------------------------------------------
# Good bundles


def test_good_bundles_agree_and_verify(world, tmp):
    a = world["a"]
    cases = dict(world["bundles"])
    cases["t1-old"] = world["old_t1"]
    cases["t1-new"] = world["new_t1"]
    kinds_seen = set()
    for name, data in cases.items():
        r, py = expect(data, a.key, tmp, name, 0, None)
        doc = load(data)
        # on success the summary is exact; both must give the same one
        for f in ("records", "decisions", "rejections", "first_ts", "last_ts"):
            assert r[f] == py[f], "%s: summary field %s differs: rust %r, python %r" % (name, f, r[f], py[f])
        assert r["records"] == len(doc["records"])
        recs = [leaf_record(e) for e in doc["records"]]
        kinds_seen |= {x["kind"] for x in recs}
        assert r["first_ts"] == recs[0]["ts"] and r["last_ts"] == recs[-1]["ts"]
    for name, data in list(world["b_bundles"].items()):
        expect(data, world["b"].key, tmp, "b-" + name, 0, None)
    for name, data in list(world["c_bundles"].items()):
        expect(data, world["c"].key, tmp, "c-" + name, 0, None)
    # the scenario covers every kind the command line can write
    assert {"interrupt", "decision", "rejection", "authorization", "follow_up", "revocation"} <= kinds_seen


def test_scenario_has_several_batches_and_checkpoints(world):
    t1 = load(world["bundles"]["t1"])
    new = load(world["new_t1"])
    cp_old = vb.parse_checkpoint_body(vb.open_signed_note(t1["checkpoint"], [vb.parse_verifier_key(world["a"].key)])[0], ORIGIN)
    cp_new = vb.parse_checkpoint_body(vb.open_signed_note(new["checkpoint"], [vb.parse_verifier_key(world["a"].key)])[0], ORIGIN)
    assert cp_new.size > cp_old.size >= 15
    recs = [leaf_record(e) for e in t1["records"]]
    assert len({r["ts"] for r in recs}) >= 3, "records of t1 come from several atomic writes"
    assert len(t1["records"]) >= 6 and len(load(world["bundles"]["t2"])["records"]) >= 6


# ---------------------------------------------------------------------------
# Mutations that exit 2


def test_truncated_file(world, tmp):
    data = world["bundles"]["t1"]
    for cut in (len(data) // 2, len(data) - 3, 1):
        expect(data[:cut], world["a"].key, tmp, "truncated-%d" % cut, 2, "bad_input", None)


def test_malformed_json(world, tmp):
    data = world["bundles"]["t1"]
    body = data.rstrip()
    assert body.endswith(b"}")
    expect(body[:-1] + b",}", world["a"].key, tmp, "trailing-comma", 2, "bad_input", None)
    expect(b"{not json}", world["a"].key, tmp, "not-json", 2, "bad_input", None)
    expect(b"", world["a"].key, tmp, "empty", 2, "bad_input", None)
    expect(b"[]", world["a"].key, tmp, "array", 2, "bad_input", None)


def test_unknown_format_version(world, tmp):
    doc = load(world["bundles"]["t1"])
    doc["format"] = "hitl-ledger/export/v2"
    expect(dump(doc), world["a"].key, tmp, "format-v2", 2, "bad_input", None)


def test_wrong_key_string(world, tmp):
    data = world["bundles"]["t1"]
    key = world["a"].key
    for i, bad in enumerate(("not+a+key", "", key + "x", key.replace("+", "-", 1))):
        expect(data, bad, tmp, "bad-key-%d" % i, 2, "bad_input", None)


# ---------------------------------------------------------------------------
# Mutations that exit 1


def test_last_record_removed(world, tmp):
    doc = load(world["bundles"]["t1"])
    doc["records"].pop()
    expect(dump(doc), world["a"].key, tmp, "last-removed", 1, "thread_head_mismatch", None)


def test_middle_record_removed(world, tmp):
    doc = load(world["bundles"]["t1"])
    i = len(doc["records"]) // 2
    nxt = doc["records"][i + 1]["seq"]
    del doc["records"][i]
    expect(dump(doc), world["a"].key, tmp, "middle-removed", 1, "thread_gap", nxt)


def test_first_record_removed(world, tmp):
    doc = load(world["bundles"]["t2"])
    nxt = doc["records"][1]["seq"]
    del doc["records"][0]
    expect(dump(doc), world["a"].key, tmp, "first-removed", 1, "thread_gap", nxt)


def test_two_records_swapped(world, tmp):
    doc = load(world["bundles"]["t1"])
    recs = doc["records"]
    i = 1
    recs[i], recs[i + 1] = recs[i + 1], recs[i]
    # at position i sits the record with thread_seq i+1 (its seq is still above records[i-1]'s)
    expect(dump(doc), world["a"].key, tmp, "swapped", 1, "thread_gap", recs[i]["seq"])
    # swapping the last two: same
    doc = load(world["bundles"]["t2"])
    recs = doc["records"]
    recs[-2], recs[-1] = recs[-1], recs[-2]
    expect(dump(doc), world["a"].key, tmp, "swapped-last", 1, "thread_gap", recs[-2]["seq"])


def _edit_leaf(entry: dict, old: bytes, new: bytes) -> None:
    leaf = base64.b64decode(entry["leaf"])
    assert leaf.count(old) >= 1, (old, leaf)
    edited = leaf.replace(old, new, 1)
    # still the canonical form of the edited record: only content changed
    import rfc8785

    assert rfc8785.dumps(json.loads(edited)) == edited
    entry["leaf"] = base64.b64encode(edited).decode("ascii")


def test_leaf_edited(world, tmp):
    key = world["a"].key
    # the rejection's rationale
    doc = load(world["bundles"]["t1"])
    i = next(k for k, e in enumerate(doc["records"]) if leaf_record(e)["kind"] == "rejection")
    _edit_leaf(doc["records"][i], b'"amount too large"', b'"amount too largE"')
    expect(dump(doc), key, tmp, "edited-rationale", 1, "inclusion_proof", doc["records"][i]["seq"])
    # an authorization's granted flag cannot be flipped by editing a string, so: the tool name
    doc = load(world["bundles"]["t1"])
    _edit_leaf(doc["records"][0], b'"tool":"refund"', b'"tool":"refunc"')
    expect(dump(doc), key, tmp, "edited-tool", 1, "inclusion_proof", doc["records"][0]["seq"])
    # the last record of a thread
    doc = load(world["bundles"]["t3"])
    last = doc["records"][-1]
    rec = leaf_record(last)
    s = rec["actor"]["principal"].encode("utf-8")
    _edit_leaf(last, b'"principal":"' + s + b'"', b'"principal":"' + s[:-1] + (b"X" if s[-1:] != b"X" else b"Y") + b'"')
    expect(dump(doc), key, tmp, "edited-last", 1, "inclusion_proof", last["seq"])


def test_record_from_another_thread(world, tmp):
    t1 = load(world["bundles"]["t1"])
    t2 = load(world["bundles"]["t2"])
    # the same export moment: the same checkpoint, so t2's proofs hold against it
    assert t1["checkpoint"] == t2["checkpoint"]
    # position 0: any record of t2 will do
    doc = copy.deepcopy(t1)
    doc["records"][0] = copy.deepcopy(t2["records"][0])
    expect(dump(doc), world["a"].key, tmp, "other-thread-first", 1, "record_thread", t2["records"][0]["seq"])
    # a middle position: a t2 record whose seq lies after the previous t1 record's
    doc = copy.deepcopy(t1)
    i = 2
    prev_seq = doc["records"][i - 1]["seq"]
    cand = next(e for e in t2["records"] if e["seq"] > prev_seq)
    doc["records"][i] = copy.deepcopy(cand)
    expect(dump(doc), world["a"].key, tmp, "other-thread-middle", 1, "record_thread", cand["seq"])


def test_bundle_from_another_ledger_and_origin(world, tmp):
    # another origin, checked with the first ledger's key
    expect(world["c_bundles"]["t1"], world["a"].key, tmp, "other-origin", 1, "verifier_key_mismatch", None)
    # the same origin, another key
    expect(world["b_bundles"]["t1"], world["a"].key, tmp, "other-key", 1, "verifier_key_mismatch", None)


def test_record_from_another_log_spliced_in(world, tmp):
    a_doc = load(world["bundles"]["t1"])
    b_doc = load(world["b_bundles"]["t1"])
    assert a_doc["origin"] == b_doc["origin"]
    i = 2
    ea, eb = a_doc["records"][i], b_doc["records"][i]
    ra, rb = leaf_record(ea), leaf_record(eb)
    # the same scenario: the same seq, thread and thread_seq, but other bytes
    assert (ea["seq"], ra["thread_id"], ra["thread_seq"]) == (eb["seq"], rb["thread_id"], rb["thread_seq"])
    assert ea["leaf"] != eb["leaf"]
    a_doc["records"][i] = eb
    expect(dump(a_doc), world["a"].key, tmp, "spliced-other-log", 1, "inclusion_proof", ea["seq"])
    # the first record too
    a_doc = load(world["bundles"]["t1"])
    a_doc["records"][0] = b_doc["records"][0]
    expect(dump(a_doc), world["a"].key, tmp, "spliced-other-log-first", 1, "inclusion_proof",
           b_doc["records"][0]["seq"])


def test_proof_for_the_wrong_index(world, tmp):
    doc = load(world["bundles"]["t2"])
    recs = doc["records"]
    i, j = 1, 3
    assert recs[i]["inclusion_proof"] != recs[j]["inclusion_proof"]
    recs[i]["inclusion_proof"], recs[j]["inclusion_proof"] = recs[j]["inclusion_proof"], recs[i]["inclusion_proof"]
    expect(dump(doc), world["a"].key, tmp, "proofs-swapped", 1, "inclusion_proof", recs[i]["seq"])
    # a proof one hash short
    doc = load(world["bundles"]["t2"])
    e = doc["records"][-1]
    e["inclusion_proof"] = e["inclusion_proof"][:-1]
    expect(dump(doc), world["a"].key, tmp, "proof-shortened", 1, "inclusion_proof", e["seq"])


def test_checkpoint_signed_by_another_key(world, tmp):
    doc = load(world["bundles"]["t1"])
    other = load(world["b_bundles"]["t1"])
    assert other["origin"] == doc["origin"] and other["verifier_key"] != doc["verifier_key"]
    doc["checkpoint"] = other["checkpoint"]
    expect(dump(doc), world["a"].key, tmp, "checkpoint-other-key", 1, "checkpoint_signature", None)
    # and the thread head
    doc = load(world["bundles"]["t1"])
    doc["thread_head"] = other["thread_head"]
    expect(dump(doc), world["a"].key, tmp, "thread-head-other-key", 1, "thread_head_signature", None)


def test_thread_head_older_than_the_records(world, tmp):
    old = load(world["old_t1"])
    new = load(world["new_t1"])
    assert len(new["records"]) > len(old["records"])
    new["thread_head"] = old["thread_head"]
    expect(dump(new), world["a"].key, tmp, "old-thread-head", 1, "thread_head_mismatch", None)
    # the old thread head and the old checkpoint, with the newer records
    new = load(world["new_t1"])
    new["thread_head"] = old["thread_head"]
    new["checkpoint"] = old["checkpoint"]
    # (the proofs were made for the newer, larger tree)
    expect(dump(new), world["a"].key, tmp, "old-head-and-checkpoint", 1, "inclusion_proof", new["records"][0]["seq"])
    # the new checkpoint and thread head over the old records (proofs for the older tree)
    old["thread_head"] = load(world["new_t1"])["thread_head"]
    old["checkpoint"] = load(world["new_t1"])["checkpoint"]
    expect(dump(old), world["a"].key, tmp, "new-head-old-records", 1, "inclusion_proof", old["records"][0]["seq"])
    # the new bundle with its newest records dropped: its thread head names more records
    new = load(world["new_t1"])
    del new["records"][len(old["records"]):]
    expect(dump(new), world["a"].key, tmp, "new-records-dropped", 1, "thread_head_mismatch", None)


# ---------------------------------------------------------------------------
# Governance (issue 20): a ledger whose records the real gate wrote through the HTTP API, with
# tokens of distinct principals (two-person approval, approvers by principal and by group,
# refused approvals, break-glass and its review, a pause and its tool_paused denial, policy
# changes through PUT /v1/policy, an edit counting as its editor's approval). Its bundles carry
# the policy records; both verifiers agree on them and on each way of breaking that member.

import urllib.error  # noqa: E402
import urllib.request  # noqa: E402

GOV_ORIGIN = "interop.example/governance"
GOV_POLICY = {
    "default": {"review_window_seconds": 3600, "approval_ttl_seconds": 600, "mode": "enforce", "redact": []},
    "tools": {
        "refund": {"approvals_required": 2, "approvers": ["alice", "bob", "group:treasury"]},
        "wire_transfer": {"approval_ttl_seconds": 300, "redact": ["/account"], "break_glass": True},
        "send_email": {"mode": "observe"},
    },
}
GOV_TOKENS = [  # (name, principal, role, groups)
    ("agent", "agent-1", "agent", ()),
    ("alice", "alice", "reviewer", ()),
    ("bob", "bob", "reviewer", ()),
    ("carol", "carol", "reviewer", ("treasury",)),
    ("dave", "dave", "reviewer", ()),
    ("bg", "bg-1", "break_glass", ()),
    ("bg_reviewer", "bg-1", "reviewer", ()),  # the break-glass user's own reviewer token
    ("admin", "admin-1", "admin", ()),
    ("auditor", "auditor-1", "auditor", ()),
]


class Server:
    """`hitl-ledger serve` over a ledger directory, driven with one token per principal."""

    def __init__(self, led: Ledger):
        self.led = led
        self.tokens = {}
        for name, principal, role, groups in GOV_TOKENS:
            args = ["token", "add", "--principal", principal, "--role", role, "--format", "json"]
            for g in groups:
                args += ["--group", g]
            self.tokens[name] = json.loads(run(*args, data=led.dir).stdout)["token"]
        env = dict(os.environ)
        env.pop("HITL_LEDGER_DATA", None)
        self.proc = subprocess.Popen([str(BIN), "--data", str(led.dir), "serve", "--listen", "127.0.0.1:0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        line = self.proc.stdout.readline().decode("utf-8", "replace").strip()
        assert line.startswith("listening on "), line
        self.url = "http://" + line[len("listening on "):]

    def call(self, who: str, method: str, path: str, body=None) -> tuple[int, dict]:
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.tokens[who])
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def ok(self, who, method, path, body=None, status=(200, 201)) -> dict:
        code, answer = self.call(who, method, path, body)
        assert code in status, (who, method, path, body, code, answer)
        return answer

    def refused(self, who, method, path, body, status, error) -> None:
        code, answer = self.call(who, method, path, body)
        assert (code, answer.get("error")) == (status, error), (who, method, path, code, answer)

    def export(self, thread: str) -> bytes:
        req = urllib.request.Request(self.url + "/v1/threads/%s/export" % thread)
        req.add_header("Authorization", "Bearer " + self.tokens["auditor"])
        with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
            return resp.read()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=TIMEOUT)


def governed_scenario(s: Server) -> dict:
    """The governed outcomes, each as the gate answers them; returns what the tests check."""
    out: dict = {}
    decide = "/v1/requests/%s/decision"
    intr = lambda rid, action: s.ok("agent", "POST", "/v1/interrupts", {  # noqa: E731
        "request_id": rid, "thread_id": "gov", "interrupt_id": "i-" + rid, "action": action})
    # two-person approval: alice (partial), refusals, carol through group treasury (final)
    intr("q1", refund(1200))
    a = s.ok("alice", "POST", decide % "q1", {"decision": "approve"})
    assert (a["ticket_id"], a["approvals"], a["approvals_required"]) == (None, 1, 2), a
    s.refused("alice", "POST", decide % "q1", {"decision": "approve", "rationale": "again"}, 403, "approver_already_approved")
    s.refused("dave", "POST", decide % "q1", {"decision": "approve"}, 403, "approver_not_allowed")
    b = s.ok("carol", "POST", decide % "q1", {"decision": "approve"})
    assert b["ticket_id"] and (b["approvals"], b["approvals_required"]) == (2, 2), b
    assert b["record"]["body"]["approved_as"] == "group:treasury"
    g = s.ok("agent", "POST", "/v1/requests/q1/authorize", {"ticket_id": b["ticket_id"], "action": refund(1200)})
    assert g["granted"] is True, g
    # break-glass of a wire transfer: an agent is refused (recorded), bg-1 opens it, alice reviews
    action = wire("DE02120300000000202051", 9000)
    intr("q2", action)
    s.refused("agent", "POST", "/v1/requests/q2/break-glass", {"action": action, "reason": "outage"}, 403, "forbidden")
    bg = s.ok("bg", "POST", "/v1/requests/q2/break-glass", {"action": action, "reason": "payments outage"})
    assert bg["record"]["body"]["break_glass"] is True and bg["ticket_id"], bg
    s.refused("bg_reviewer", "POST", "/v1/requests/q2/review", {"verdict": "acknowledged", "rationale": "mine"}, 403,
              "reviewer_is_break_glass_user")
    s.ok("alice", "POST", "/v1/requests/q2/review", {"verdict": "acknowledged", "rationale": "the outage was real"})
    assert s.ok("agent", "POST", "/v1/requests/q2/authorize", {"ticket_id": bg["ticket_id"], "action": action})["granted"]
    # a pause: the approved ticket is denied tool_paused, then grants after the unpause
    action3 = wire("DE02120300000000202051", 9100)
    intr("q3", action3)
    t3 = s.ok("bob", "POST", decide % "q3", {"decision": "approve"})["ticket_id"]
    out["before_pause"] = s.export("gov")
    paused = copy.deepcopy(GOV_POLICY)
    paused["tools"]["wire_transfer"]["mode"] = "paused"
    s.refused("alice", "PUT", "/v1/policy", paused, 403, "forbidden")
    s.ok("admin", "PUT", "/v1/policy", paused)
    d = s.ok("agent", "POST", "/v1/requests/q3/authorize", {"ticket_id": t3, "action": action3})
    assert (d["granted"], d["code"], d["route"]) == (False, "tool_paused", "manual_operator"), d
    s.ok("admin", "PUT", "/v1/policy", GOV_POLICY)
    assert s.ok("agent", "POST", "/v1/requests/q3/authorize", {"ticket_id": t3, "action": action3})["granted"]
    # an edit: alice's edit counts as her approval of the edited call (1 of 2), bob's is the 2nd
    intr("q4", refund(5000))
    e = s.ok("alice", "POST", decide % "q4", {"decision": "edit", "edited_action": refund(4000)})
    assert (e["ticket_id"], e["approvals"], e["approvals_required"]) == (None, 1, 2), e
    f = s.ok("bob", "POST", decide % e["new_request_id"], {"decision": "approve"})
    assert f["ticket_id"] and (f["approvals"], f["approvals_required"]) == (2, 2), f
    out["bundle"] = s.export("gov")
    out["refusals"] = s.export("hitl-ledger%2Frefusals")
    return out


@pytest.fixture(scope="module")
def gov_world(tmp_path_factory):
    base = tmp_path_factory.mktemp("governance")
    led = Ledger(base, "g", GOV_ORIGIN)
    pf = led.work / "policy.json"
    pf.write_text(json.dumps(GOV_POLICY), "utf-8")
    run("policy", "set", str(pf), data=led.dir)
    server = Server(led)
    try:
        out = governed_scenario(server)
    finally:
        server.stop()
    # another ledger of the same origin (another key), for entries from another log
    other = Ledger(base, "h", GOV_ORIGIN)
    other.append([{"kind": "interrupt", "request_id": "q1", "thread_id": "gov", "interrupt_id": "i",
                   "action": refund(1)}])
    out["other"] = other.export("gov")
    out["led"] = led
    return out


def _records(doc: dict, member: str | None = None) -> list[dict]:
    entries = doc["records"] if member is None else doc[member]["records"]
    return [leaf_record(e) for e in entries]


def test_governed_bundle_agrees_and_verifies(gov_world, tmp):
    led = gov_world["led"]
    r, py = expect(gov_world["bundle"], led.key, tmp, "gov", 0, None)
    for f in ("records", "decisions", "rejections", "first_ts", "last_ts"):
        assert r[f] == py[f], f
    doc = load(gov_world["bundle"])
    pol = _records(doc, "policy")
    # init's record, policy set, the pause and the unpause
    assert [p["kind"] for p in pol] == ["policy"] * 4 and pol[0]["seq"] == 0
    assert [p["body"]["policy"] for p in pol[1:]][0] == GOV_POLICY
    recs = _records(doc)
    kinds = {x["kind"] for x in recs}
    assert {"interrupt", "decision", "refusal", "review", "authorization"} <= kinds, kinds
    assert any(x["body"].get("code") == "tool_paused" for x in recs if x["kind"] == "authorization")
    assert any(x["body"].get("break_glass") is True for x in recs if x["kind"] == "decision")
    assert any(x["body"].get("ticket_id") is None for x in recs if x["kind"] == "decision")
    assert {x["body"]["error"] for x in recs if x["kind"] == "refusal"} >= {
        "approver_already_approved", "approver_not_allowed", "forbidden", "reviewer_is_break_glass_user"}
    # the older export verifies too, with the policy records of its checkpoint
    expect(gov_world["before_pause"], led.key, tmp, "gov-before-pause", 0, None)
    # and the whole ledger
    p = run("verify", "--format", "json", data=led.dir, check=False)
    assert p.returncode == 0, p.stdout


def test_governed_bundle_stripped_of_its_policy_records(gov_world, tmp):
    doc = load(gov_world["bundle"])
    first_interrupt = doc["records"][0]["seq"]
    del doc["policy"]
    expect(dump(doc), gov_world["led"].key, tmp, "gov-no-policy", 1, "policy_missing", first_interrupt)


def test_governed_bundle_stripped_of_one_policy_record(gov_world, tmp):
    key = gov_world["led"].key
    doc = load(gov_world["bundle"])
    second = doc["policy"]["records"][1]["seq"]
    del doc["policy"]["records"][0]
    expect(dump(doc), key, tmp, "gov-policy-first-removed", 1, "thread_gap", second)
    doc = load(gov_world["bundle"])
    third = doc["policy"]["records"][2]["seq"]
    del doc["policy"]["records"][1]
    expect(dump(doc), key, tmp, "gov-policy-middle-removed", 1, "thread_gap", third)
    doc = load(gov_world["bundle"])
    doc["policy"]["records"].pop()
    expect(dump(doc), key, tmp, "gov-policy-last-removed", 1, "thread_head_mismatch", None)
    doc = load(gov_world["bundle"])
    doc["policy"]["records"] = []
    expect(dump(doc), key, tmp, "gov-policy-emptied", 1, "thread_head_mismatch", None)


def test_governed_bundle_policy_entries_reordered_or_edited(gov_world, tmp):
    key = gov_world["led"].key
    doc = load(gov_world["bundle"])
    e = doc["policy"]["records"]
    e[1], e[2] = e[2], e[1]
    expect(dump(doc), key, tmp, "gov-policy-swapped", 1, "thread_gap", e[1]["seq"])
    doc = load(gov_world["bundle"])
    entry = doc["policy"]["records"][1]
    _edit_leaf(entry, b'"approvals_required":2', b'"approvals_required":1')
    expect(dump(doc), key, tmp, "gov-policy-edited", 1, "inclusion_proof", entry["seq"])
    # an entry of another log at the same seq
    doc = load(gov_world["bundle"])
    other = load(gov_world["other"])
    doc["policy"]["records"][0] = other["policy"]["records"][0]
    expect(dump(doc), key, tmp, "gov-policy-other-log", 1, "inclusion_proof", 0)


def test_governed_bundle_policy_head_mismatched(gov_world, tmp):
    key = gov_world["led"].key
    older = load(gov_world["before_pause"])
    doc = load(gov_world["bundle"])
    doc["policy"]["thread_head"] = older["policy"]["thread_head"]
    expect(dump(doc), key, tmp, "gov-policy-older-head", 1, "thread_head_mismatch", None)
    doc = load(gov_world["bundle"])
    doc["policy"]["thread_head"] = doc["thread_head"]
    expect(dump(doc), key, tmp, "gov-policy-thread-head", 1, "thread_head_mismatch", None)
    doc = load(gov_world["bundle"])
    doc["policy"]["thread_head"] = load(gov_world["other"])["policy"]["thread_head"]
    expect(dump(doc), key, tmp, "gov-policy-other-key-head", 1, "thread_head_signature", None)
    # the older bundle's records and policy with the newer checkpoint
    doc = load(gov_world["before_pause"])
    doc["checkpoint"] = load(gov_world["bundle"])["checkpoint"]
    expect(dump(doc), key, tmp, "gov-older-with-newer-checkpoint", 1, "inclusion_proof", doc["records"][0]["seq"])


def test_governed_bundle_policy_member_malformed(gov_world, tmp):
    key = gov_world["led"].key
    for i, bad in enumerate([None, "x", {"records": []}, {"thread_head": "x", "records": [{"seq": -1}]}]):
        doc = load(gov_world["bundle"])
        doc["policy"] = bad
        expect(dump(doc), key, tmp, "gov-policy-malformed-%d" % i, 2, "bad_input", None)
        # check 11 comes after the thread's records: a removed record is reported first
        second = doc["records"][1]["seq"]
        del doc["records"][0]
        expect(dump(doc), key, tmp, "gov-policy-malformed-gap-%d" % i, 1, "thread_gap", second)


def _shape(rec: dict) -> tuple:
    """What a record form fixes: kind, body members, actor role, reserved thread, whether it
    names a request, and the values that tell the forms apart."""
    body = rec["body"]
    marks = tuple(sorted((k, body[k] is None) for k in ("ticket_id", "expires_at", "code", "would_deny") if k in body))
    thread = rec["thread_id"] if rec["thread_id"].startswith("hitl-ledger/") else "*"
    return (rec["kind"], tuple(sorted(body)), rec["actor"]["role"], thread, rec["request_id"] is None, marks,
            body.get("decision"), body.get("error") if rec["kind"] == "refusal" else None)


def test_governance_vector_forms_are_the_forms_the_binary_writes(gov_world):
    """Each record form of tests/vectors/governance.json has the shape of a record the real
    gate wrote in the governed scenario (the vectors are written in Python from the contract;
    this ties them to what the ledger does)."""
    vectors = json.loads((HERE.parents[1] / "tests" / "vectors" / "governance.json").read_text("utf-8"))
    real = _records(load(gov_world["bundle"])) + _records(load(gov_world["bundle"]), "policy") \
        + _records(load(gov_world["refusals"]))
    shapes = {_shape(r) for r in real}
    for form in vectors["records"]:
        rec = form["record"]
        shape = _shape(rec)
        assert shape in shapes, (form["form"], shape, sorted(x for x in shapes if x[0] == rec["kind"]))


# ---------------------------------------------------------------------------
# Structured reasons (issue 21): rejections and revocations with and without a reason_code,
# written by the real gate through the HTTP API under a policy with lists of its own, then a
# policy change; an unknown code is refused and writes nothing. Both verifiers agree on the
# bundle, and each record form of tests/vectors/reasons.json has the shape of one of these.

REASONS_POLICY = {
    "default": {"reason_codes": ["fraud", "other"]},
    "tools": {"refund": {"reason_codes": ["wrong_amount", "customer_withdrew"]}},
}


@pytest.fixture(scope="module")
def reasons_world(tmp_path_factory):
    base = tmp_path_factory.mktemp("reasons")
    led = Ledger(base, "r", GOV_ORIGIN)
    pf = led.work / "policy.json"
    pf.write_text(json.dumps(REASONS_POLICY), "utf-8")
    run("policy", "set", str(pf), data=led.dir)
    s = Server(led)
    try:
        decide = "/v1/requests/%s/decision"
        intr = lambda rid, action: s.ok("agent", "POST", "/v1/interrupts", {  # noqa: E731
            "request_id": rid, "thread_id": "why", "interrupt_id": "i-" + rid, "action": action})
        for rid in ("w1", "w2", "w3", "w4", "w5"):
            intr(rid, refund(100))
        before = s.export("why")
        s.refused("alice", "POST", decide % "w1", {"decision": "reject", "rationale": "no", "reason_code": "fraud"},
                  400, "unknown_reason_code")
        s.refused("agent", "POST", "/v1/requests/w1/revoke", {"reason": "stop", "reason_code": "Bad"},
                  400, "unknown_reason_code")
        assert s.export("why") == before, "an unknown code writes nothing"
        r = s.ok("alice", "POST", decide % "w1",
                 {"decision": "reject", "rationale": "the amount is wrong", "reason_code": "wrong_amount"})
        assert r["record"]["body"]["reason_code"] == "wrong_amount", r
        s.ok("alice", "POST", decide % "w2", {"decision": "reject", "rationale": "no"})
        s.ok("agent", "POST", "/v1/requests/w3/revoke", {"reason": "withdrawn", "reason_code": "customer_withdrew"})
        s.ok("bob", "POST", decide % "w4", {"decision": "approve"})
        s.ok("agent", "POST", "/v1/requests/w4/revoke", {"reason": "withdrawn"})
        changed = copy.deepcopy(REASONS_POLICY)
        changed["tools"]["refund"]["reason_codes"] = ["duplicate"]
        s.ok("admin", "PUT", "/v1/policy", changed)
        s.refused("alice", "POST", decide % "w5",
                  {"decision": "reject", "rationale": "no", "reason_code": "wrong_amount"}, 400, "unknown_reason_code")
        s.ok("alice", "POST", decide % "w5", {"decision": "reject", "rationale": "twice", "reason_code": "duplicate"})
        out = {"bundle": s.export("why"), "led": led}
    finally:
        s.stop()
    return out


def test_reasons_bundle_agrees_and_verifies(reasons_world, tmp):
    led = reasons_world["led"]
    expect(reasons_world["bundle"], led.key, tmp, "reasons", 0, None)
    recs = _records(load(reasons_world["bundle"]))
    codes = [(x["kind"], x["body"].get("reason_code")) for x in recs if x["kind"] in ("rejection", "revocation")]
    assert codes == [("rejection", "wrong_amount"), ("rejection", None), ("revocation", "customer_withdrew"),
                     ("revocation", None), ("rejection", "duplicate")], codes
    p = run("verify", "--format", "json", data=led.dir, check=False)
    assert p.returncode == 0, p.stdout


def test_reasons_vector_forms_are_the_forms_the_binary_writes(reasons_world):
    vectors = json.loads((HERE.parents[1] / "tests" / "vectors" / "reasons.json").read_text("utf-8"))
    shapes = {_shape(r) for r in _records(load(reasons_world["bundle"]))}
    for form in vectors["records"]:
        shape = _shape(form["record"])
        assert shape in shapes, (form["form"], shape, sorted(x for x in shapes if x[0] == form["record"]["kind"]))
