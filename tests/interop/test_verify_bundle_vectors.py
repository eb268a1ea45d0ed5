"""Tests of the independent bundle verifier (verify_bundle.py).

1. Known-answer vectors from tests/vectors (merkle_rfc6962.json, signed_note.json).
2. A small synthetic bundle generator (test only): signs checkpoints and thread heads
   with the public test seed of signed_note.json, builds canonical leaves with rfc8785,
   computes RFC 6962 proofs, and checks good bundles and mutations.

The vectors are the repository's own copies in tests/vectors; a missing file fails the
module at import, it never skips it.

Run: python3 -m pytest tests/interop (needs `cryptography`, `rfc8785`, `pytest`).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import verify_bundle as vb  # noqa: E402

REPO = HERE.parents[1]
VECTORS = REPO / "tests" / "vectors"

MERKLE = json.loads((VECTORS / "merkle_rfc6962.json").read_text("utf-8"))
NOTES = json.loads((VECTORS / "signed_note.json").read_text("utf-8"))
TLOG = NOTES["tlog_checkpoint"]
ORIGIN = TLOG["origin"]
KEY = TLOG["verifier_key"]


# ---------------------------------------------------------------------------
# Known answers: Merkle


def h(x: str) -> bytes:
    return bytes.fromhex(x)


def test_hasher_vectors():
    for c in MERKLE["hasher"]:
        if c["kind"] == "leaf":
            assert vb.leaf_hash(h(c["input_hex"])).hex() == c["hash"]
        elif c["kind"] == "node":
            assert vb.node_hash(h(c["left"]), h(c["right"])).hex() == c["hash"]
    assert [vb.leaf_hash(h(x)).hex() for x in MERKLE["leaves_hex"]] == MERKLE["leaf_hashes"]


def test_inclusion_proofs_verify():
    cases = list(MERKLE["inclusion"]) + [MERKLE["ct_log_inclusion"]]
    for t in MERKLE["large_trees"]:
        for c in t["inclusion"]:
            cases.append(dict(c, root=t["root"]))
    assert len(cases) > 50
    for c in cases:
        proof = [h(p) for p in c["proof"]]
        assert vb.verify_inclusion(c["leaf_index"], c["tree_size"], h(c["leaf_hash"]), proof, h(c["root"])), c
    # and leaf_data of the large trees hashes to the stated leaf hash
    for t in MERKLE["large_trees"]:
        for c in t["inclusion"]:
            assert vb.leaf_hash(h(c["leaf_data"])).hex() == c["leaf_hash"]


def test_inclusion_invalid_rejected():
    assert len(MERKLE["inclusion_invalid"]) == 13
    for c in MERKLE["inclusion_invalid"]:
        proof = [h(p) for p in c["proof"]]
        ok = vb.verify_inclusion(c["leaf_index"], c["tree_size"], h(c["leaf_hash"]), proof, h(c["root"]))
        assert not ok, c["desc"]


def test_inclusion_edge_cases():
    lh = h(MERKLE["leaf_hashes"][0])
    assert not vb.verify_inclusion(0, 0, lh, [], hashlib.sha256(b"").digest())
    assert not vb.verify_inclusion(-1, 1, lh, [], lh)
    assert not vb.verify_inclusion(0, 1, lh[:31], [], lh[:31])
    assert vb.verify_inclusion(0, 1, lh, [], lh)


# ---------------------------------------------------------------------------
# Known answers: signed notes and checkpoints


def test_verifier_key_cases():
    for c in NOTES["verifier_key_cases"]:
        try:
            vb.parse_verifier_key(c["verifier_key"])
            valid = True
        except ValueError:
            valid = False
        assert valid == c["valid"], c["name"]
    k = vb.parse_verifier_key(KEY)
    assert k.name == ORIGIN and k.key_id.hex() == TLOG["key_id_hex"]
    assert k.public_key.hex() == TLOG["public_key_hex"]


def test_open_cases():
    assert len(NOTES["open_cases"]) == 36
    for c in NOTES["open_cases"]:
        keys = [vb.parse_verifier_key(k) for k in c["trusted_verifier_keys"]]
        note = c["signed_note"] if c.get("signed_note") is not None else bytes.fromhex(c["signed_note_hex"])
        try:
            text, names = vb.open_signed_note(note, keys)
            got = ("accept", names)
        except vb.NoteError as e:
            got = ("reject", e.reason)
        if c["expect"] == "accept":
            assert got == ("accept", c["verified_key_names"]), c["name"]
            if "signed_text" in c:
                assert text == c["signed_text"]
        else:
            assert got == ("reject", c["reason"]), c["name"]


def test_tlog_checkpoints_reproduce_and_parse():
    sk = Ed25519PrivateKey.from_private_bytes(h(TLOG["private_seed_hex"]))
    pub = sk.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    assert pub.hex() == TLOG["public_key_hex"]
    assert vb.key_id(ORIGIN, pub).hex() == TLOG["key_id_hex"]
    key = vb.parse_verifier_key(KEY)
    for cp in TLOG["checkpoints"]:
        assert sk.sign(cp["body"].encode()).hex() == cp["signature_hex"]
        assert sign_note(cp["body"]) == cp["signed_note"]
        text, names = vb.open_signed_note(cp["signed_note"], [key])
        assert text == cp["body"] and names == [ORIGIN]
        parsed = vb.parse_checkpoint_body(text, ORIGIN)
        assert parsed.size == cp["tree_size"] and parsed.root.hex() == cp["root_hex"]
        assert any(r["tree_size"] == parsed.size and r["root"] == cp["root_hex"] for r in MERKLE["roots"])


def test_checkpoint_body_cases():
    key = vb.parse_verifier_key(KEY)
    for c in NOTES["checkpoint_body_cases"]:
        try:
            vb.parse_checkpoint_body(c["body"], ORIGIN)
            valid = True
        except ValueError:
            valid = False
        assert valid == c["valid"], c["name"]
        if c.get("signed_note"):
            text, _ = vb.open_signed_note(c["signed_note"], [key])
            assert text == c["body"]


def test_checkpoint_body_cases_in_a_bundle():
    """Each signed checkpoint-body case as the checkpoint of an empty bundle."""
    for c in NOTES["checkpoint_body_cases"]:
        if not c.get("signed_note"):
            continue
        lines = c["body"].split("\n")
        tree = int(lines[1]) if c["valid"] else 8
        b = {
            "format": vb.FORMAT, "origin": ORIGIN, "verifier_key": KEY, "checkpoint": c["signed_note"],
            "thread_id": "t", "thread_head": sign_note(thread_head_text(ORIGIN, "t", 0, vb.ZERO_HASH_HEX, tree)),
            "records": [],
        }
        r = run(b)
        if c["valid"]:
            assert r["ok"], (c["name"], r)
        else:
            assert code(r) == "checkpoint_body", (c["name"], r)


# ---------------------------------------------------------------------------
# Synthetic bundles (test only)

SIGNER = Ed25519PrivateKey.from_private_bytes(h(TLOG["private_seed_hex"]))
OTHER_SIGNER = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"verify_bundle test other key").digest())
OTHER_PUB = OTHER_SIGNER.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
OTHER_KEY = "%s+%s+%s" % (ORIGIN, vb.key_id(ORIGIN, OTHER_PUB).hex(), base64.b64encode(b"\x01" + OTHER_PUB).decode())


def sign_note(text: str, signer=SIGNER, name: str = ORIGIN) -> str:
    pub = signer.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    sig = vb.key_id(name, pub) + signer.sign(text.encode("utf-8"))
    return text + "\n\u2014 " + name + " " + base64.b64encode(sig).decode() + "\n"


def thread_head_text(origin, thread, size, head, tree):
    return "hitl-ledger thread-head v1\norigin %s\nthread %s\nsize %d\nhead %s\ntree %d\n" % (
        origin, thread, size, head, tree)


def mth(hashes: list[bytes]) -> bytes:
    n = len(hashes)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashes[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return hashlib.sha256(b"\x01" + mth(hashes[:k]) + mth(hashes[k:])).digest()


def path(m: int, hashes: list[bytes]) -> list[bytes]:
    """RFC 6962 section 2.1.1 PATH(m, D[n])."""
    n = len(hashes)
    if n <= 1:
        return []
    k = 1
    while k * 2 < n:
        k *= 2
    if m < k:
        return path(m, hashes[:k]) + [mth(hashes[k:])]
    return path(m - k, hashes[k:]) + [mth(hashes[:k])]


def lh(leaf: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + leaf).digest()


KIND_CYCLE = ["interrupt", "decision", "authorization", "follow_up", "interrupt", "rejection", "follow_up"]

# Default bodies follow the approval rules (a bundle's records are replayed after its
# structural checks): deadlines and approval expiries lie after every default ts.
DEFAULT_DEADLINE = "2026-11-30T21:00:00.000000Z"
DEFAULT_APPROVAL_EXPIRES = "2026-11-30T20:30:00.000000Z"


def action_digest(action: dict) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(action)).hexdigest()


def ticket_for(seq: int) -> str:
    """A deterministic lowercase UUID v7 (the decision at `seq` issues it)."""
    return "0192f3c0-0000-7000-8000-%012x" % seq


class Log:
    """A tiny ledger: global chain, per-thread chains, leaves as canonical JCS.

    Records appended without a `tweak` form a history the approval rules allow: an
    interrupt opens a new request, the other kinds name the thread's latest request
    (a refusal names none), a decision approves, a grant presents the latest ticket
    with the interrupt's digest, a follow-up follows the request's latest record. A
    `tweak` edits the record after these defaults; the state follows the tweaked record."""

    def __init__(self, origin=ORIGIN):
        self.origin = origin
        self.leaves: list[bytes] = []
        self.threads: dict[str, list[int]] = {}
        self.current: dict[str, str] = {}  # thread -> latest request id
        self.interrupts: dict[str, dict] = {}  # request id -> interrupt body
        self.tickets: dict[str, dict] = {}  # request id -> latest closing body
        self.last_leaf: dict[str, str] = {}  # request id -> leaf hash hex of its latest record

    @staticmethod
    def extras(seq: int) -> dict:
        """Values that exercise canonical JSON (non-ASCII, an astral character, a fraction, a
        large integer) where the body has free content: interrupt args and follow-up detail
        (all of it), a decision's rationale and an authorization's attempt id (the text)."""
        return {"note": "r\u00e9cord %d \U0001F600" % seq, "amount": 1.5, "n": seq * 1000}

    def default_body(self, kind: str, seq: int, ts: str, request_id) -> dict:
        intr = self.interrupts.get(request_id, {})
        closing = self.tickets.get(request_id, {})
        if kind == "interrupt":
            action = {"tool": "refund", "args": {"amount_cents": 100 + seq, **self.extras(seq)}}
            return {"interrupt_id": "int-%d" % seq, "tool": action["tool"], "args": action["args"], "redacted": [],
                    "action_digest": action_digest(action), "action_schema": "hitl-ledger/action/v1",
                    "allowed_decisions": ["approve", "edit", "reject"], "expires_at": DEFAULT_DEADLINE, "edit_of": None}
        if kind == "decision":
            return {"decision": "approve", "rationale": self.extras(seq)["note"], "ticket_id": ticket_for(seq),
                    "expires_at": DEFAULT_APPROVAL_EXPIRES, "edited_digest": None, "superseded_by": None}
        if kind == "rejection":
            return {"rationale": "not this one", "ticket_id": ticket_for(seq)}
        if kind == "authorization":
            return {"ticket_id": closing.get("ticket_id", ticket_for(0)), "attempt_id": "attempt " + self.extras(seq)["note"],
                    "action_digest": intr.get("action_digest", "sha256:" + "0" * 64), "granted": True, "code": None,
                    "evaluated_at": ts, "expires_at": closing.get("expires_at"), "idempotency_key": "0" * 64,
                    "mode": "enforce", "would_deny": None}
        if kind == "follow_up":
            return {"follow_up_id": "fu-%d" % seq, "follows": self.last_leaf.get(request_id, "0" * 64),
                    "outcome": "done", "detail": self.extras(seq), "operation_id": None}
        if kind == "timeout":
            return {"expires_at": intr.get("expires_at", DEFAULT_DEADLINE)}
        if kind == "revocation":
            return {"reason": "no longer needed"}
        if kind == "policy":
            return {"policy": {}, "policy_digest": vb.policy_digest({})}
        return {"method": "PUT", "path": "/v1/threads/x", "error": "append_only"}

    def append(self, thread: str, kind: str | None = None, tweak=None) -> int:
        seq = len(self.leaves)
        mine = self.threads.setdefault(thread, [])
        kind = kind or KIND_CYCLE[len(mine) % len(KIND_CYCLE)]
        if kind == "interrupt":
            request_id = "req-%d" % seq
        elif kind in ("refusal", "policy"):
            request_id = None
        else:
            request_id = self.current.get(thread, "req-none")
        ts = "2026-11-30T20:00:%02d.%06dZ" % (seq % 60, 123456 + seq)
        rec = {
            "v": 1,
            "origin": self.origin,
            "seq": seq,
            "prev": lh(self.leaves[-1]).hex() if self.leaves else "0" * 64,
            "ts": ts,
            "kind": kind,
            "thread_id": thread,
            "run_id": "run-1",
            "checkpoint_ns": "",
            "checkpoint_id": None,
            "request_id": request_id,
            "thread_seq": len(mine),
            "thread_prev": lh(self.leaves[mine[-1]]).hex() if mine else "0" * 64,
            "actor": {"principal": "agent-1", "role": "agent"},
            "body": self.default_body(kind, seq, ts, request_id),
        }
        if tweak:
            tweak(rec)
        leaf = rfc8785.dumps(rec)
        self.leaves.append(leaf)
        mine.append(seq)
        rid = rec.get("request_id")
        if isinstance(rid, str) and isinstance(rec.get("body"), dict):
            if rec.get("kind") == "interrupt":
                self.current[thread] = rid
                self.interrupts.setdefault(rid, rec["body"])
            elif rec.get("kind") in ("decision", "rejection"):
                self.tickets[rid] = rec["body"]
            self.last_leaf[rid] = lh(leaf).hex()
        return seq

    def checkpoint(self, size=None, signer=SIGNER) -> tuple[str, int]:
        size = len(self.leaves) if size is None else size
        root = mth([lh(x) for x in self.leaves[:size]])
        body = "%s\n%d\n%s\n" % (self.origin, size, base64.b64encode(root).decode())
        return sign_note(body, signer), size

    def _part(self, thread: str, size: int, upto=None) -> tuple[str, list[dict]]:
        """A thread's signed head and entries in the tree of `size`: its first `upto` records."""
        hashes = [lh(x) for x in self.leaves[:size]]
        seqs = [s for s in self.threads.get(thread, []) if s < size][:upto]
        head = lh(self.leaves[seqs[-1]]).hex() if seqs else "0" * 64
        entries = [
            {"seq": s, "leaf": base64.b64encode(self.leaves[s]).decode(), "inclusion_proof": [p.hex() for p in path(s, hashes)]}
            for s in seqs
        ]
        return sign_note(thread_head_text(self.origin, thread, len(seqs), head, size)), entries

    def bundle(self, thread: str, size=None, upto=None) -> dict:
        """Export `thread` against the checkpoint of `size` (default: all records),
        with its first `upto` records (default: all in the tree). When the tree holds policy
        records (thread hitl-ledger/policy), the bundle carries them all as its `policy`
        member (docs/protocol.md section 6.1), as the ledger exports."""
        cp, size = self.checkpoint(size)
        th, entries = self._part(thread, size, upto)
        b = {
            "format": vb.FORMAT,
            "origin": self.origin,
            "verifier_key": KEY,
            "checkpoint": cp,
            "thread_id": thread,
            "thread_head": th,
            "records": entries,
        }
        if any(s < size for s in self.threads.get(vb.POLICY_THREAD, [])):
            ph, pentries = self._part(vb.POLICY_THREAD, size)
            b["policy"] = {"thread_head": ph, "records": pentries}
        return b


def make_log() -> Log:
    log = Log()
    for t in ["A", "B", "A", "A", "B", "A", "C", "A", "B"]:
        log.append(t)
    return log


LOG = make_log()
GOOD = LOG.bundle("A")


def run(bundle, key=KEY) -> dict:
    data = bundle if isinstance(bundle, bytes) else json.dumps(bundle).encode()
    r = vb.verify_bundle_bytes(data, key)
    assert set(r) == {"ok", "records", "decisions", "rejections", "first_ts", "last_ts", "problem"}
    return r


def code(r):
    return r["problem"]["code"] if r["problem"] else None


def leaf_of(entry) -> dict:
    return json.loads(base64.b64decode(entry["leaf"]))


def set_leaf(entry, raw: bytes):
    entry["leaf"] = base64.b64encode(raw).decode()


def test_good_bundles_verify():
    r = run(GOOD)
    assert r == {
        "ok": True, "records": 5, "decisions": 1, "rejections": 0,
        "first_ts": leaf_of(GOOD["records"][0])["ts"], "last_ts": leaf_of(GOOD["records"][-1])["ts"],
        "problem": None,
    }
    assert vb.exit_status(r) == 0
    for t in ["A", "B", "C"]:
        assert run(LOG.bundle(t))["ok"], t
    # against an older checkpoint, every prefix, and single-record trees
    for size in range(1, len(LOG.leaves) + 1):
        for t in LOG.threads:
            if any(s < size for s in LOG.threads[t]):
                assert run(LOG.bundle(t, size=size))["ok"], (t, size)
    # unknown fields are ignored
    b = copy.deepcopy(GOOD)
    b["extra"] = {"x": [1, 2]}
    b["records"][0]["extra"] = None
    assert run(b)["ok"]


def test_an_agent_tenant_in_the_actor_verifies():
    """Protocol 2.1 and 11.5: an agent whose tenant is not its principal records it."""
    tenant = {"principal": "agent-1", "role": "agent", "tenant": "acme"}
    b = _leaf_tweak_log(0, _set("actor", tenant))(None)
    assert leaf_of(b["records"][0])["actor"] == tenant
    assert run(b)["ok"], run(b)


def test_empty_thread_bundle():
    b = copy.deepcopy(GOOD)
    b["records"] = []
    b["thread_head"] = sign_note(thread_head_text(ORIGIN, "A", 0, "0" * 64, len(LOG.leaves)))
    r = run(b)
    assert r["ok"] and r["records"] == 0 and r["first_ts"] is None


# Each mutation: (name, function(bundle) -> bundle or bytes, expected code, expected seq or "any")
def _remove(i):
    def f(b):
        del b["records"][i]
        return b
    return f


def _swap(i, j):
    def f(b):
        r = b["records"]
        r[i], r[j] = r[j], r[i]
        return b
    return f


def _dup(i):
    def f(b):
        b["records"].insert(i + 1, copy.deepcopy(b["records"][i]))
        return b
    return f


def _edit_leaf_byte(i, old: bytes, new: bytes):
    def f(b):
        raw = base64.b64decode(b["records"][i]["leaf"])
        assert old in raw
        set_leaf(b["records"][i], raw.replace(old, new, 1))
        return b
    return f


def _other_thread(b):
    b["thread_id"] = "B"
    return b


def _foreign_record(b):
    other = LOG.bundle("B")["records"][0]  # seq 1 sits between A's seq 0 and 2
    b["records"].insert(1, other)
    return b


def _other_origin(b):
    b["origin"] = "example.com/other"
    return b


def _wrong_index_proof(b):
    b["records"][2]["inclusion_proof"] = b["records"][1]["inclusion_proof"]
    return b


def _wrong_entry_seq(b):
    b["records"][1]["seq"] = 4
    return b


def _seq_beyond_tree(b):
    # a record appended after the checkpoint: size 8 tree, record 8 listed
    b8 = LOG.bundle("B", size=8)
    b8["records"].append(LOG.bundle("B")["records"][-1])
    return b8


def _cp_other_key(b):
    b["checkpoint"], _ = LOG.checkpoint(signer=OTHER_SIGNER)
    return b


def _cp_flip_sig(b):
    note = b["checkpoint"]
    i = note.rindex(" ") + 10
    b["checkpoint"] = note[:i] + ("A" if note[i] != "A" else "B") + note[i + 1 :]
    return b


def _cp_unsigned_text_change(b):
    b["checkpoint"] = b["checkpoint"].replace("\n9\n", "\n10\n")
    return b


def _cp_leading_zero(b):
    cp = LOG.checkpoint()[0].split("\n\n")[0] + "\n"
    b["checkpoint"] = sign_note(cp.replace("\n9\n", "\n09\n"))
    return b


def _cp_other_origin_line(b):
    body = LOG.checkpoint()[0].split("\n\n")[0] + "\n"
    b["checkpoint"] = sign_note(body.replace(ORIGIN + "\n", "example.com/x\n", 1))
    return b


def _cp_empty_extension(b):
    body = LOG.checkpoint()[0].split("\n\n")[0] + "\n"
    b["checkpoint"] = sign_note(body + "\next\n")
    return b


def _cp_extension(b):
    body = LOG.checkpoint()[0].split("\n\n")[0] + "\n"
    b["checkpoint"] = sign_note(body + "ext line\n")
    return b


def _th_other_key(b):
    text = b["thread_head"].split("\n\n")[0] + "\n"
    b["thread_head"] = sign_note(text, OTHER_SIGNER)
    return b


def _th_text(edit):
    def f(b):
        text = b["thread_head"].split("\n\n")[0] + "\n"
        b["thread_head"] = sign_note(edit(text))
        return b
    return f


def _edit_line(text, i, fn):
    lines = text.split("\n")
    lines[i] = fn(lines[i])
    return "\n".join(lines)


def _th_older(b):
    # the thread head of an earlier export (3 records, tree 6) with the current records
    b["thread_head"] = LOG.bundle("A", size=6)["thread_head"]
    return b


def _th_older_same_tree(b):
    b["thread_head"] = LOG.bundle("A", upto=4)["thread_head"]
    return b


def _cp_older(b):
    # older checkpoint and matching thread head, but records that are newer
    old = LOG.bundle("A", size=7)
    b["checkpoint"], b["thread_head"] = old["checkpoint"], old["thread_head"]
    return b


def _leaf_tweak_log(tweak_pos, tweak):
    """A bundle of a log whose thread A record number `tweak_pos` was written with `tweak`."""
    def f(b):
        log = Log()
        n = 0
        for t in ["A", "B", "A", "A", "B", "A", "C", "A", "B"]:
            log.append(t, tweak=tweak if (t == "A" and n == tweak_pos) else None)
            n += t == "A"
        return log.bundle("A")
    return f


def _set(field, value):
    def tw(rec):
        rec[field] = value
    return tw


def _replace_leaf(i, fn):
    def f(b):
        rec = leaf_of(b["records"][i])
        out = fn(rec)
        set_leaf(b["records"][i], out if isinstance(out, bytes) else rfc8785.dumps(rec))
        return b
    return f


def _del_field(field):
    def fn(rec):
        del rec[field]
    return fn


def _json_edit(fn):
    def f(b):
        return fn(json.dumps(b).encode())
    return f


MUTATIONS = [
    # structure: exit 2
    ("truncated JSON", _json_edit(lambda d: d[: len(d) // 2]), "bad_input", None),
    ("not JSON", lambda b: b"\xff\xfe garbage", "bad_input", None),
    ("JSON array", lambda b: b"[]", "bad_input", None),
    ("empty file", lambda b: b"", "bad_input", None),
    ("unknown format", lambda b: b | {"format": "hitl-ledger/export/v2"}, "bad_input", None),
    ("format missing", lambda b: {k: v for k, v in b.items() if k != "format"}, "bad_input", None),
    ("records not a list", lambda b: b | {"records": {}}, "bad_input", None),
    ("thread_head not a string", lambda b: b | {"thread_head": None}, "bad_input", None),
    ("seq is a string", lambda b: (b["records"][0].update(seq="0"), b)[1], "bad_input", None),
    ("seq is a bool", lambda b: (b["records"][0].update(seq=False), b)[1], "bad_input", None),
    ("seq negative", lambda b: (b["records"][0].update(seq=-1), b)[1], "bad_input", None),
    ("seq float", _json_edit(lambda d: d.replace(b'"seq": 0,', b'"seq": 0.0,')), "bad_input", None),
    ("leaf missing", lambda b: (b["records"][1].pop("leaf"), b)[1], "bad_input", None),
    ("proof missing", lambda b: (b["records"][1].pop("inclusion_proof"), b)[1], "bad_input", None),
    ("proof element not string", lambda b: (b["records"][1].update(inclusion_proof=[1]), b)[1], "bad_input", None),
    ("record not an object", lambda b: (b["records"].append([]), b)[1], "bad_input", None),
    ("duplicate bundle key", _json_edit(lambda d: d.replace(b'"thread_id": "A"', b'"thread_id": "A", "thread_id": "A"')), "bad_input", None),
    ("NaN in bundle", _json_edit(lambda d: d.replace(b'"records"', b'"x": NaN, "records"')), "bad_input", None),
    ("lone surrogate in bundle", _json_edit(lambda d: d.replace(b'"thread_id": "A"', b'"thread_id": "\\ud800"')), "bad_input", None),
    ("UTF-8 BOM", _json_edit(lambda d: b"\xef\xbb\xbf" + d), "bad_input", None),
    # keys and origin
    ("bundle lists another key", lambda b: b | {"verifier_key": OTHER_KEY}, "verifier_key_mismatch", None),
    ("other origin", _other_origin, "origin_mismatch", None),
    # checkpoint
    ("checkpoint signed by another key", _cp_other_key, "checkpoint_signature", None),
    ("checkpoint signature bit flipped", _cp_flip_sig, "checkpoint_signature", None),
    ("checkpoint size edited", _cp_unsigned_text_change, "checkpoint_signature", None),
    ("checkpoint without signature", lambda b: b | {"checkpoint": b["checkpoint"].split("\n\n")[0] + "\n"}, "checkpoint_signature", None),
    ("checkpoint CRLF", lambda b: b | {"checkpoint": b["checkpoint"].replace("\n", "\r\n")}, "checkpoint_signature", None),
    ("checkpoint size with leading zero", _cp_leading_zero, "checkpoint_body", None),
    ("checkpoint origin line differs", _cp_other_origin_line, "checkpoint_body", None),
    ("checkpoint empty extension line", _cp_empty_extension, "checkpoint_body", None),
    # thread head
    ("thread head signed by another key", _th_other_key, "thread_head_signature", None),
    ("thread head text edited", lambda b: b | {"thread_head": b["thread_head"].replace("size 5", "size 4")}, "thread_head_signature", None),
    ("thread head bad magic", _th_text(lambda t: t.replace("v1", "v2")), "thread_head_body", None),
    ("thread head extra line", _th_text(lambda t: t + "extra x\n"), "thread_head_body", None),
    ("thread head lines reordered", _th_text(lambda t: "\n".join([t.split("\n")[0]] + [t.split("\n")[2], t.split("\n")[1]] + t.split("\n")[3:])), "thread_head_body", None),
    ("thread head uppercase hex", _th_text(lambda t: _edit_line(t, 4, lambda l: "head " + l[5:].upper())), "thread_head_body", None),
    ("thread head empty thread", _th_text(lambda t: _edit_line(t, 2, lambda l: "thread ")), "thread_head_body", None),
    ("thread head size leading zero", _th_text(lambda t: t.replace("size 5", "size 05")), "thread_head_body", None),
    ("thread head older than the records", _th_older, "thread_head_mismatch", None),
    ("thread head one record behind", _th_older_same_tree, "thread_head_mismatch", None),
    ("thread head of another thread", lambda b: b | {"thread_head": LOG.bundle("B")["thread_head"]}, "thread_head_mismatch", None),
    ("last record removed", _remove(4), "thread_head_mismatch", None),
    ("checkpoint older than the records", _cp_older, "inclusion_proof", 0),
    # records
    ("leaf not base64", lambda b: (b["records"][1].update(leaf="!!!"), b)[1], "leaf_encoding", 2),
    ("leaf base64 without padding", lambda b: (b["records"][1].update(leaf="e30"), b)[1], "leaf_encoding", 2),
    ("leaf base64 non-zero pad bits", lambda b: (b["records"][1].update(leaf="e31="), b)[1], "leaf_encoding", 2),
    ("leaf not UTF-8", _replace_leaf(1, lambda r: b'{"a":"\xff"}'), "leaf_encoding", 2),
    ("leaf not JSON", _replace_leaf(1, lambda r: b'{"a":'), "leaf_encoding", 2),
    ("leaf is an array", _replace_leaf(1, lambda r: b"[1]"), "leaf_encoding", 2),
    ("leaf with NaN", _replace_leaf(1, lambda r: b'{"a":NaN}'), "leaf_encoding", 2),
    ("leaf with a space", _edit_leaf_byte(1, b'"v":1', b'"v": 1'), "leaf_not_canonical", 2),
    ("leaf keys unsorted", _replace_leaf(1, lambda r: b'{"b":1,"a":2}'), "leaf_not_canonical", 2),
    ("leaf duplicate key", _replace_leaf(1, lambda r: rfc8785.dumps(r)[:-1] + b',"v":1}'), "leaf_not_canonical", 2),
    ("leaf escaped non-ASCII", _edit_leaf_byte(1, "\u00e9".encode(), b"\\u00e9"), "leaf_not_canonical", 2),
    ("leaf number 1.0", _edit_leaf_byte(1, b'"v":1', b'"v":1.0'), "leaf_not_canonical", 2),
    ("leaf unsafe integer", _edit_leaf_byte(1, b'"v":1', b'"v":9007199254740993'), "leaf_not_canonical", 2),
    ("leaf lone surrogate", _edit_leaf_byte(1, "\u00e9".encode(), b"\\ud800"), "leaf_not_canonical", 2),
    ("leaf number overflow", _edit_leaf_byte(1, b'"v":1', b'"v":1e400'), "leaf_not_canonical", 2),
    ("envelope field missing", _replace_leaf(1, _del_field("body")), "envelope", 2),
    ("envelope v is 2", _replace_leaf(1, _set("v", 2)), "envelope", 2),
    ("envelope unknown kind", _replace_leaf(1, _set("kind", "approval")), "envelope", 2),
    ("envelope ts without micros", _replace_leaf(1, _set("ts", "2026-11-30T20:00:00Z")), "envelope", 2),
    ("envelope prev uppercase", _replace_leaf(1, lambda r: r.update(prev=r["prev"].upper())), "envelope", 2),
    ("envelope thread_seq string", _replace_leaf(1, _set("thread_seq", "1")), "envelope", 2),
    ("envelope actor not object", _replace_leaf(1, _set("actor", "x")), "envelope", 2),
    # Protocol 2.1: `tenant` only on an agent, and never equal to its principal.
    ("envelope reviewer with a tenant", _leaf_tweak_log(1, _set("actor", {"principal": "alice", "role": "reviewer", "tenant": "acme"})), "envelope", 2),
    ("envelope tenant equal to the principal", _leaf_tweak_log(0, _set("actor", {"principal": "agent-1", "role": "agent", "tenant": "agent-1"})), "envelope", 0),
    ("envelope tenant not an id", _leaf_tweak_log(0, _set("actor", {"principal": "agent-1", "role": "agent", "tenant": ""})), "envelope", 0),
    ("envelope actor with another member", _leaf_tweak_log(0, _set("actor", {"principal": "agent-1", "role": "agent", "team": "acme"})), "envelope", 0),
    ("envelope empty thread_id", _replace_leaf(1, _set("thread_id", "")), "envelope", 2),
    ("leaf seq differs from entry", _wrong_entry_seq, "seq_mismatch", 4),
    ("record duplicated", _dup(2), "seq_order", 3),
    ("record reordered", _swap(1, 2), "thread_gap", 3),
    ("first two swapped", _swap(0, 1), "thread_gap", 2),
    ("record removed", _remove(1), "thread_gap", 3),
    ("first record removed", _remove(0), "thread_gap", 2),
    ("other thread", _other_thread, "record_thread", 0),
    ("record of another thread inserted", _foreign_record, "record_thread", 1),
    ("record of another origin", _leaf_tweak_log(2, _set("origin", "example.com/other")), "record_origin", 3),
    ("record of another thread id in the log", _leaf_tweak_log(1, _set("thread_id", "Z")), "record_thread", 2),
    ("edited byte in the leaf", _edit_leaf_byte(2, b"r\xc3\xa9cord", b"r\xc3\xa8cord"), "inclusion_proof", 3),
    ("proof for the wrong index", _wrong_index_proof, "inclusion_proof", 3),
    ("proof truncated", lambda b: (b["records"][0]["inclusion_proof"].pop(), b)[1], "inclusion_proof", 0),
    ("proof element not hex", lambda b: (b["records"][0]["inclusion_proof"].__setitem__(0, "zz"), b)[1], "inclusion_proof", 0),
    ("proof element uppercase hex", lambda b: (b["records"][0]["inclusion_proof"].__setitem__(0, b["records"][0]["inclusion_proof"][0].upper()), b)[1], "inclusion_proof", 0),
    ("seq beyond the checkpoint", _seq_beyond_tree, "inclusion_proof", 8),
    ("thread_seq gap in the log", _leaf_tweak_log(2, _set("thread_seq", 3)), "thread_gap", 3),
    ("thread_prev wrong in the log", _leaf_tweak_log(2, _set("thread_prev", "0" * 64)), "thread_prev", 3),
    ("first thread_prev not zero", _leaf_tweak_log(0, _set("thread_prev", "1" * 64)), "thread_prev", 0),
]


@pytest.mark.parametrize("name,mutate,expected,seq", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_mutation(name, mutate, expected, seq):
    out = mutate(copy.deepcopy(GOOD))
    r = run(out)
    assert code(r) == expected, r
    assert r["ok"] is False
    assert r["problem"]["seq"] == seq, r
    assert isinstance(r["problem"]["message"], str) and r["problem"]["message"]
    assert vb.exit_status(r) == (2 if expected == "bad_input" else 1)


def test_extension_line_in_checkpoint_is_ignored():
    assert run(_cp_extension(copy.deepcopy(GOOD)))["ok"]


def test_bad_keys():
    for key in ["", "nonsense", KEY + "x", KEY.replace("+25bda5e3+", "+25BDA5E3+"),
                KEY.replace("+25bda5e3+", "+25bda5e4+"), ORIGIN + "+25bda5e3+" + base64.b64encode(b"\x01" * 33).decode()]:
        r = run(GOOD, key)
        assert code(r) == "bad_input" and vb.exit_status(r) == 2, key
    # a valid key that is not the bundle's
    r = run(GOOD, OTHER_KEY)
    assert code(r) == "verifier_key_mismatch" and vb.exit_status(r) == 1
    # a valid key of another name: the verifier_key string differs first
    r = run(GOOD, NOTES["spec_example"]["verifier_key"])
    assert code(r) == "verifier_key_mismatch"
    # bundle that names the right key string but another origin
    r = run(GOOD | {"origin": "example.com/foo"})
    assert code(r) == "origin_mismatch"


def test_summary_counts_kinds():
    log = Log()
    for kind in ["interrupt", "decision", "interrupt", "rejection", "interrupt", "decision", "refusal"]:
        log.append("T", kind=kind)
    r = run(log.bundle("T"))
    assert r["ok"] and (r["records"], r["decisions"], r["rejections"]) == (7, 2, 1)
    assert r["first_ts"] == "2026-11-30T20:00:00.123456Z" and r["last_ts"] == "2026-11-30T20:00:06.123462Z"


def test_thread_id_with_space_and_unicode():
    log = Log()
    for t in ["thread one \u00e9", "x", "thread one \u00e9"]:
        log.append(t)
    assert run(log.bundle("thread one \u00e9"))["ok"]


def test_random_byte_mutations_never_crash():
    data = json.dumps(GOOD).encode()
    rng = random.Random(20261130)
    seen = set()
    for _ in range(300):
        b = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        r = vb.verify_bundle_bytes(bytes(b), KEY)
        assert vb.exit_status(r) in (0, 1, 2)
        assert not (r["problem"] or {}).get("message", "").startswith("internal error"), r
        seen.add(code(r))
    assert len(seen) > 3


# ---------------------------------------------------------------------------
# Command line (subprocess; a handful of runs to keep it quick)

SCRIPT = HERE / "verify_bundle.py"


def cli(tmp_path, content, *args):
    f = tmp_path / "bundle.json"
    if content is not None:
        f.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    p = subprocess.run([sys.executable, str(SCRIPT), str(f), *args], capture_output=True, timeout=60)
    assert b"Traceback" not in p.stderr, p.stderr
    return p


def test_cli(tmp_path):
    p = cli(tmp_path, GOOD, "--key", KEY, "--json")
    assert p.returncode == 0 and json.loads(p.stdout) == run(GOOD)
    p = cli(tmp_path, GOOD, "--key", KEY)
    assert p.returncode == 0 and p.stdout.startswith(b"OK: 5 records")
    bad = _swap(1, 2)(copy.deepcopy(GOOD))
    p = cli(tmp_path, bad, "--key", KEY, "--json")
    assert p.returncode == 1 and json.loads(p.stdout)["problem"]["code"] == "thread_gap"
    p = cli(tmp_path, b"{", "--key", KEY, "--json")
    assert p.returncode == 2 and json.loads(p.stdout)["problem"]["code"] == "bad_input"
    p = cli(tmp_path, GOOD, "--key", "not-a-key", "--json")
    assert p.returncode == 2 and json.loads(p.stdout)["problem"]["code"] == "bad_input"
    (tmp_path / "bundle.json").unlink()
    p = cli(tmp_path, None, "--key", KEY, "--json")
    assert p.returncode == 2 and json.loads(p.stdout)["problem"]["code"] == "bad_input"
    p = cli(tmp_path, GOOD, "--json")  # --key missing
    assert p.returncode == 2 and json.loads(p.stdout)["problem"]["code"] == "bad_input"
