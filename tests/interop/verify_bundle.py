#!/usr/bin/env python3
"""Independent offline verifier for hitl-ledger export bundles (format v1).

This is a second implementation of `hitl-ledger verify-export`, written from the
contract (docs/protocol.md: records, chain and tree, checkpoints, approval semantics,
idempotent appends, export bundle) only, so that the Rust verifier can be checked
against code that shares none of its logic.

A bundle may carry a `policy` member (section 6.1): the policy records (thread
`hitl-ledger/policy`) its thread's records were evaluated under, with their own signed
thread head. They are checked like the thread's records (check 11, after the thread's
records and head); every policy record an interrupt names must be among them (check 12,
`policy_missing`). Bundles without the member, and records without the v1 extension members
of section 2.3, are verified exactly as before.

After every structural check of a bundle passed, the approval rules are replayed over
its records and its policy records merged in seq order (`RuleReplay`,
`first_rule_violation`): the rules of sections 3 and 4 of the replay and the governance
rules (a paused tool never granted, approvals counted by distinct allowed reviewers, no
ticket before the N-th approval, break-glass only where allowed and only by that role, its
post-event review), each judged under the policy record in force (section 12's validation
and per-tool resolution: `validate_policy`, `resolve_tool`). The first record (lowest seq)
whose outcome they forbid is reported as problem `rule_violation` at that record's seq, with
a message naming the rule (exit status 1).

Dependencies: Python 3.11, `cryptography` (Ed25519) and `rfc8785` (JCS).

Command line::

    python3 verify_bundle.py BUNDLE_FILE --key VERIFIER_KEY [--json]

BUNDLE_FILE may be `-` for standard input. Exit status: 0 the bundle verifies,
1 content fails a check, 2 bad usage, unreadable file, wrong JSON structure,
unknown `format` or an invalid `--key` (problem code `bad_input`).

In-process use::

    result = verify_bundle_bytes(data, key)   # never raises; returns the --json dict
    status = exit_status(result)              # 0, 1 or 2, as the command line exits

`result` is ``{"ok", "records", "decisions", "rejections", "first_ts", "last_ts",
"problem"}`` with ``problem`` None or ``{"code", "message", "seq"}``. The exit status
is a function of the result alone: 0 when ``ok``, 2 when the problem code is
``bad_input``, else 1.

The summary fields are exact when ``ok`` is true. When a check fails they are
best effort: ``records`` is the number of entries in the bundle (0 when its
structure is wrong), and ``decisions``, ``rejections``, ``first_ts`` and ``last_ts``
come from the entries whose leaf decodes to a JSON object.

Judgement calls (the contract leaves them open; see the report next to this file's
tests for the list): base64 must be canonical (standard alphabet, padding, zero pad
bits); hex must be lowercase; duplicate keys anywhere in the bundle JSON are
`bad_input`; in a leaf, text that is syntactically JSON but has no canonical form
(duplicate keys, lone surrogates, numbers out of range) is `leaf_not_canonical`, while
bad base64, bad UTF-8, JSON syntax errors (including NaN/Infinity) and non-objects
are `leaf_encoding`. Every trusted signature line on a note must verify. The rule
replay reads record bodies defensively and fails closed; where section 6.3 can be read two
ways it takes the stricter reading (see the comment above `ts_micros`). A `policy` member
given as null is present and not an object (`bad_input`).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import json
import re
import sys
import unicodedata
from dataclasses import dataclass
from datetime import datetime

try:
    import rfc8785
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
except ImportError as _e:  # pragma: no cover - environment problem, not input
    if __name__ == "__main__":
        sys.stderr.write("verify_bundle.py needs the packages 'cryptography' and 'rfc8785': %s\n" % _e)
        sys.exit(2)
    raise

FORMAT = "hitl-ledger/export/v1"
ZERO_HASH_HEX = "0" * 64
MAX_SAFE_INTEGER = 2**53 - 1
MAX_U64 = 2**64 - 1
KINDS = frozenset(
    {
        "interrupt",
        "decision",
        "rejection",
        "follow_up",
        "authorization",
        "timeout",
        "revocation",
        "refusal",
        "policy",
        "review",
    }
)
# The reserved thread of the policy records (docs/protocol.md section 2.1): it holds every
# `policy` record and nothing else.
POLICY_THREAD = "hitl-ledger/policy"
THREAD_HEAD_MAGIC = "hitl-ledger thread-head v1"

_DECIMAL_RE = re.compile(r"0|[1-9][0-9]*")
_HEX64_RE = re.compile(r"[0-9a-f]{64}")
_KEYID_RE = re.compile(r"[0-9a-f]{8}")
_TS_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})\.([0-9]{6})Z")


# ---------------------------------------------------------------------------
# Small encodings


def b64decode_strict(s: str) -> bytes:
    """Standard base64 with padding (RFC 4648 section 4), canonical form only.

    Raises ValueError on anything else (wrong alphabet, missing padding,
    whitespace, non-zero pad bits)."""
    if not isinstance(s, str) or not s.isascii():
        raise ValueError("not base64")
    try:
        out = base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError("not base64") from e
    if base64.b64encode(out).decode("ascii") != s:
        raise ValueError("not canonical base64")
    return out


def parse_decimal(s: str, limit: int = MAX_U64) -> int:
    """A non-negative ASCII decimal without sign or leading zeros, at most `limit`."""
    if not isinstance(s, str) or not _DECIMAL_RE.fullmatch(s):
        raise ValueError("not a decimal without leading zeros")
    n = int(s)
    if n > limit:
        raise ValueError("number too large")
    return n


def is_hex64(s: object) -> bool:
    return isinstance(s, str) and _HEX64_RE.fullmatch(s) is not None


# ---------------------------------------------------------------------------
# Merkle tree (RFC 6962 / RFC 9162)


def leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def root_from_inclusion_proof(index: int, size: int, leaf_h: bytes, proof: list[bytes]) -> bytes:
    """RFC 9162 section 2.1.3.2: the root implied by an inclusion proof.

    Raises ValueError when the proof cannot be one for (index, size)."""
    if not (0 <= index < size):
        raise ValueError("leaf index not below tree size")
    if len(leaf_h) != 32 or any(len(p) != 32 for p in proof):
        raise ValueError("hashes must be 32 bytes")
    fn = index
    sn = size - 1
    r = leaf_h
    for p in proof:
        if sn == 0:
            raise ValueError("proof too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not (fn & 1 or fn == 0):
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ValueError("proof too short")
    return r


def verify_inclusion(index: int, size: int, leaf_h: bytes, proof: list[bytes], root: bytes) -> bool:
    try:
        return root_from_inclusion_proof(index, size, leaf_h, proof) == root
    except ValueError:
        return False


# ---------------------------------------------------------------------------
# Signed notes (C2SP signed-note, Ed25519)


def key_id(name: str, public_key: bytes) -> bytes:
    return hashlib.sha256(name.encode("utf-8") + b"\x0a\x01" + public_key).digest()[:4]


def is_valid_key_name(name: str) -> bool:
    """Non-empty UTF-8, no Unicode space, no '+', no control character."""
    if not isinstance(name, str) or name == "" or "+" in name:
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    for ch in name:
        if ch.isspace() or unicodedata.category(ch) in ("Cc", "Zs", "Zl", "Zp"):
            return False
    return True


@dataclass(frozen=True)
class VerifierKey:
    name: str
    key_id: bytes
    public_key: bytes

    def verify(self, message: bytes, signature: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, message)
            return True
        except (InvalidSignature, ValueError, TypeError):
            return False


def parse_verifier_key(vkey: str) -> VerifierKey:
    """`<name>+<8 lowercase hex key id>+<base64(0x01 || 32-byte Ed25519 key)>`.

    Raises ValueError when the string is not a valid Ed25519 verifier key."""
    if not isinstance(vkey, str):
        raise ValueError("verifier key is not a string")
    parts = vkey.split("+", 2)
    if len(parts) != 3:
        raise ValueError("verifier key needs three '+'-separated parts")
    name, id_hex, key_b64 = parts
    if not is_valid_key_name(name):
        raise ValueError("invalid key name")
    if not _KEYID_RE.fullmatch(id_hex):
        raise ValueError("key id must be 8 lowercase hex digits")
    material = b64decode_strict(key_b64)
    if len(material) != 33 or material[0] != 0x01:
        raise ValueError("key material must be 0x01 followed by a 32-byte Ed25519 key")
    pub = material[1:]
    if key_id(name, pub) != bytes.fromhex(id_hex):
        raise ValueError("key id does not match the key")
    try:
        Ed25519PublicKey.from_public_bytes(pub)
    except ValueError as e:
        raise ValueError("not an Ed25519 public key") from e
    return VerifierKey(name, bytes.fromhex(id_hex), pub)


class NoteError(Exception):
    """Opening a signed note failed; `reason` is `malformed`, `invalid_signature`
    or `no_verified_signature` (the reasons of signed_note.json)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


_EM_DASH_PREFIX = "\u2014 "


def _is_forbidden_note_char(ch: str) -> bool:
    o = ord(ch)
    return (o < 0x20 and ch != "\n") or o == 0x7F or 0xD800 <= o <= 0xDFFF


def open_signed_note(note: bytes | str, trusted: list[VerifierKey]) -> tuple[str, list[str]]:
    """Open a C2SP signed note against trusted keys.

    Returns (text, names of the trusted keys whose signatures verified, in line
    order). Raises NoteError otherwise. Signature lines whose (name, key id) match
    no trusted key are ignored; any trusted signature that fails rejects the note."""
    if isinstance(note, bytes):
        try:
            msg = note.decode("utf-8")
        except UnicodeDecodeError as e:
            raise NoteError("malformed", "note is not UTF-8") from e
    elif isinstance(note, str):
        msg = note
    else:
        raise NoteError("malformed", "note is not text")
    for ch in msg:
        if _is_forbidden_note_char(ch):
            raise NoteError("malformed", "note contains a control character")
    split = msg.rfind("\n\n")
    if split < 0:
        raise NoteError("malformed", "no blank line before the signatures")
    text, sigs = msg[: split + 1], msg[split + 2 :]
    if sigs == "" or not sigs.endswith("\n"):
        raise NoteError("malformed", "no signature lines, or no final newline")
    verified: list[str] = []
    failed = False
    for line in sigs[:-1].split("\n"):
        if not line.startswith(_EM_DASH_PREFIX):
            raise NoteError("malformed", "a line after the blank line is not a signature line")
        rest = line[len(_EM_DASH_PREFIX) :]
        fields = rest.split(" ")
        if len(fields) != 2:
            raise NoteError("malformed", "signature line is not '— name signature'")
        name, sig_b64 = fields
        if not is_valid_key_name(name):
            raise NoteError("malformed", "invalid key name in a signature line")
        try:
            raw = b64decode_strict(sig_b64)
        except ValueError as e:
            raise NoteError("malformed", "signature is not base64") from e
        if len(raw) < 5:
            raise NoteError("malformed", "signature too short")
        kid, sig = raw[:4], raw[4:]
        for k in trusted:
            if k.name == name and k.key_id == kid:
                if k.verify(text.encode("utf-8"), sig):
                    verified.append(name)
                else:
                    failed = True
    if failed:
        raise NoteError("invalid_signature", "a signature by a trusted key does not verify")
    if not verified:
        raise NoteError("no_verified_signature", "no signature by a trusted key")
    return text, verified


# ---------------------------------------------------------------------------
# Note bodies


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes


def parse_checkpoint_body(text: str, origin: str) -> Checkpoint:
    """C2SP tlog-checkpoint body `<origin>\\n<size>\\n<base64 root>\\n[extensions]`.

    The origin line must equal `origin`; non-empty extension lines are ignored, an
    empty one is refused. Raises ValueError."""
    if not isinstance(text, str) or not text.endswith("\n"):
        raise ValueError("checkpoint body does not end in a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise ValueError("checkpoint body has fewer than three lines")
    if lines[0] == "":
        raise ValueError("checkpoint origin line is empty")
    if lines[0] != origin:
        raise ValueError("checkpoint origin line is not the bundle's origin")
    size = parse_decimal(lines[1])
    root = b64decode_strict(lines[2])
    if len(root) != 32:
        raise ValueError("checkpoint root is not 32 bytes")
    for ext in lines[3:]:
        if ext == "":
            raise ValueError("empty extension line in the checkpoint")
    return Checkpoint(lines[0], size, root)


@dataclass(frozen=True)
class ThreadHead:
    origin: str
    thread: str
    size: int
    head: str
    tree: int


def parse_thread_head_body(text: str) -> ThreadHead:
    """The thread-head body of spec section 2, exactly. Raises ValueError."""
    if not isinstance(text, str) or not text.endswith("\n"):
        raise ValueError("thread head does not end in a newline")
    lines = text[:-1].split("\n")
    if len(lines) != 6:
        raise ValueError("thread head must have exactly six lines")
    if lines[0] != THREAD_HEAD_MAGIC:
        raise ValueError("thread head does not start with %r" % THREAD_HEAD_MAGIC)
    values = []
    for line, label in zip(lines[1:], ("origin", "thread", "size", "head", "tree")):
        prefix = label + " "
        if not line.startswith(prefix) or line == prefix:
            raise ValueError("thread head line %r is not '%s <value>'" % (label, label))
        values.append(line[len(prefix) :])
    origin, thread, size_s, head, tree_s = values
    size = parse_decimal(size_s)
    tree = parse_decimal(tree_s)
    if not is_hex64(head):
        raise ValueError("thread head 'head' is not 64 lowercase hex digits")
    return ThreadHead(origin, thread, size, head, tree)


# ---------------------------------------------------------------------------
# Leaves


class LeafEncodingError(ValueError):
    pass


class LeafNotCanonical(ValueError):
    pass


def _raise_constant(name: str):
    raise ValueError("%s is not JSON" % name)


def parse_leaf(leaf: bytes) -> dict:
    """Parse leaf bytes and check they are the RFC 8785 form of the value.

    Raises LeafEncodingError (not UTF-8, not JSON, not an object) or
    LeafNotCanonical (valid JSON syntax, but not the exact canonical bytes: duplicate
    keys, lone surrogates, numbers without a double value, any other difference).
    Integers within +-(2^53-1) parse as int; other numbers as IEEE-754 doubles."""
    try:
        text = leaf.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LeafEncodingError("leaf is not UTF-8") from e
    duplicates = []

    def pairs_hook(pairs):
        d = {}
        for k, v in pairs:
            if k in d:
                duplicates.append(k)
            d[k] = v
        return d

    def parse_int(s: str):
        if len(s) <= 17:
            n = int(s)
            if -MAX_SAFE_INTEGER <= n <= MAX_SAFE_INTEGER:
                return n
        return float(s)

    try:
        value = json.loads(
            text,
            object_pairs_hook=pairs_hook,
            parse_int=parse_int,
            parse_float=float,
            parse_constant=_raise_constant,
        )
    except RecursionError as e:
        raise LeafEncodingError("leaf JSON nests too deeply") from e
    except ValueError as e:
        raise LeafEncodingError("leaf is not JSON: %s" % e) from e
    if not isinstance(value, dict):
        raise LeafEncodingError("leaf is not a JSON object")
    if duplicates:
        raise LeafNotCanonical("leaf has a duplicate key")
    try:
        canonical = rfc8785.dumps(value)
    except RecursionError as e:
        raise LeafNotCanonical("leaf nests too deeply to canonicalize") from e
    except Exception as e:  # rfc8785.CanonicalizationError and friends
        raise LeafNotCanonical("leaf has no canonical form: %s" % e) from e
    if canonical != leaf:
        raise LeafNotCanonical("leaf is not its RFC 8785 canonical form")
    return value


def is_id(v: object) -> bool:
    """1 to 256 bytes of UTF-8 with no character of category Cc."""
    if not isinstance(v, str):
        return False
    try:
        n = len(v.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return 1 <= n <= 256 and not any(unicodedata.category(c) == "Cc" for c in v)


def is_timestamp(v: object) -> bool:
    """RFC 3339 UTC with `Z` and exactly six fractional digits, a real instant."""
    if not isinstance(v, str):
        return False
    m = _TS_RE.fullmatch(v)
    if not m:
        return False
    y, mo, d, h, mi, s, us = (int(x) for x in m.groups())
    try:
        datetime(y, mo, d, h, mi, s, us)
    except ValueError:
        return False
    return True


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_envelope(rec: dict) -> str | None:
    """None when the 15 envelope fields are present with their types; else a message."""
    def bad(field: str, what: str) -> str:
        return "envelope field %r %s" % (field, what)

    fields = (
        "v", "origin", "seq", "prev", "ts", "kind", "thread_id", "run_id", "checkpoint_ns",
        "checkpoint_id", "request_id", "thread_seq", "thread_prev", "actor", "body",
    )
    for f in fields:
        if f not in rec:
            return bad(f, "is missing")
    if not _is_int(rec["v"]) or rec["v"] != 1:
        return bad("v", "is not the integer 1")
    if not isinstance(rec["origin"], str):
        return bad("origin", "is not a string")
    for f in ("seq", "thread_seq"):
        if not _is_int(rec[f]) or rec[f] < 0:
            return bad(f, "is not a non-negative integer")
    for f in ("prev", "thread_prev"):
        if not is_hex64(rec[f]):
            return bad(f, "is not 64 lowercase hex digits")
    if not is_timestamp(rec["ts"]):
        return bad("ts", "is not an RFC 3339 UTC timestamp with 6 fractional digits")
    if not isinstance(rec["kind"], str) or rec["kind"] not in KINDS:
        return bad("kind", "is not one of the %d kinds" % len(KINDS))
    if not is_id(rec["thread_id"]):
        return bad("thread_id", "is not an id")
    for f in ("run_id", "checkpoint_id", "request_id"):
        if rec[f] is not None and not is_id(rec[f]):
            return bad(f, "is neither an id nor null")
    if not isinstance(rec["checkpoint_ns"], str):
        return bad("checkpoint_ns", "is not a string")
    actor = rec["actor"]
    if not isinstance(actor, dict):
        return bad("actor", "is not an object")
    if not is_id(actor.get("principal")):
        return bad("actor", "has no principal id")
    if not isinstance(actor.get("role"), str):
        return bad("actor", "has no role string")
    if not isinstance(rec["body"], dict):
        return bad("body", "is not an object")
    extra = sorted(set(rec) - set(fields))
    if extra:
        return bad(extra[0], "is not an envelope field")
    if actor.get("role") not in ROLES:
        return bad("actor", "must be exactly {principal, role} with a known role")
    if set(actor) == {"principal", "role", "tenant"}:
        # Protocol 2.1: an agent whose tenant is not its principal's name records it.
        if actor["role"] != "agent" or not is_id(actor["tenant"]) \
                or actor["tenant"] == actor["principal"]:
            return bad("actor", "records a tenant only for an agent, as an id other than its principal")
    elif set(actor) != {"principal", "role"}:
        return bad("actor", "must be exactly {principal, role} with a known role")
    if rec["kind"] == "policy":
        if rec["request_id"] is not None or rec["thread_id"] != POLICY_THREAD:
            return bad("kind", "policy belongs to thread %s with request_id null" % ascii(POLICY_THREAD))
    elif rec["thread_id"] == POLICY_THREAD:
        return bad("thread_id", "%s holds only policy records, not a %s" % (ascii(POLICY_THREAD), rec["kind"]))
    elif rec["request_id"] is None and rec["kind"] != "refusal":
        return bad("request_id", "is null on a %s" % rec["kind"])
    ns = rec["checkpoint_ns"]
    if len(ns.encode("utf-8")) > 256 or any(unicodedata.category(c) == "Cc" for c in ns):
        return bad("checkpoint_ns", "is longer than 256 bytes or holds a control character")
    return check_body(rec["kind"], rec["body"])


ROLES = ("agent", "reviewer", "auditor", "admin", "break_glass", "system")


def _opt(check):
    return lambda v: v is None or check(v)


def _non_empty(v: object) -> bool:
    return isinstance(v, str) and v.strip() != ""


def _str(v: object) -> bool:
    return isinstance(v, str)


def _str_list(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _count(v: object) -> bool:
    """A positive integer (docs/protocol.md section 2.3, `approvals`)."""
    return _is_int(v) and v >= 1


# The body fields of each kind (docs/protocol.md, "Bodies") and the type each must have.
BODY_FIELDS = {
    "interrupt": {
        "interrupt_id": _str, "tool": _str, "args": lambda v: isinstance(v, dict),
        "redacted": _str_list, "action_digest": _str, "action_schema": _str,
        "allowed_decisions": _str_list, "expires_at": lambda v: is_timestamp(v), "edit_of": _opt(_str),
    },
    "decision": {
        # ticket_id is null only on a partial approval (docs/protocol.md section 2.3); the
        # replay judges when null is allowed (rule 10d).
        "decision": _str, "rationale": _opt(_str), "ticket_id": _opt(_str),
        "expires_at": _opt(lambda v: is_timestamp(v)), "edited_digest": _opt(_str), "superseded_by": _opt(_str),
    },
    "rejection": {"rationale": _non_empty, "ticket_id": _str},
    "follow_up": {
        "follow_up_id": _str, "follows": is_hex64, "outcome": _non_empty,
        "detail": lambda v: v is None or isinstance(v, (str, dict)), "operation_id": _opt(_str),
    },
    "authorization": {
        "ticket_id": _str, "attempt_id": _opt(_str), "action_digest": _str,
        "granted": lambda v: isinstance(v, bool), "code": _opt(_str), "evaluated_at": lambda v: is_timestamp(v),
        "expires_at": _opt(lambda v: is_timestamp(v)), "idempotency_key": _opt(_str), "mode": _str,
        "would_deny": _opt(_str),
    },
    "timeout": {"expires_at": lambda v: is_timestamp(v)},
    "revocation": {"reason": _non_empty},
    "refusal": {"method": _str, "path": _str, "error": _str},
    # Whether the document is a valid policy and the digest its own is rule 8 (the replay's).
    "policy": {"policy": lambda v: isinstance(v, dict), "policy_digest": _str},
    "review": {"reviews": is_hex64, "verdict": _str, "rationale": _non_empty},
}

# Optional body members (docs/protocol.md section 2.3, "v1 extensions"): accepted only on
# these kinds, only with these types; records written before them lack them.
OPTIONAL_BODY_FIELDS = {
    "interrupt": {"policy": is_hex64},
    "decision": {
        "approvals": _count, "approvals_required": _count, "approved_as": _str,
        "break_glass": lambda v: v is True, "reason": _non_empty,
    },
    # A rejection's or revocation's reason code: a string here; whether the policy in force
    # lists it is the replay's rule 13.
    "rejection": {"reason_code": _str},
    "revocation": {"reason_code": _str},
}


def check_body(kind: str, body: dict) -> str | None:
    """None when the body has exactly its kind's fields, each of its type; else a message."""
    spec = BODY_FIELDS[kind]
    optional = OPTIONAL_BODY_FIELDS.get(kind, {})
    for k in body:
        if k not in spec and k not in optional:
            return "%s body field %r is unknown" % (kind, k)
    for k, ok in spec.items():
        if k not in body:
            return "%s body lacks %r" % (kind, k)
        if not ok(body[k]):
            return "%s body field %r has the wrong type" % (kind, k)
    for k, ok in optional.items():
        if k in body and not ok(body[k]):
            return "%s body field %r has the wrong type" % (kind, k)
    return None


# ---------------------------------------------------------------------------
# Approval rules (docs/protocol.md section 6.3; sections 7, 8 and 12 for what they mean)
#
# After every structural check passed, the records (in a bundle: the thread's and its policy
# records merged) are replayed in seq order and the first one whose outcome the rules forbid
# is reported as `rule_violation`. The checks, numbered as in section 6.3:
#
#   1   a second interrupt of a request
#   2   any other kind naming a request with no interrupt before it
#   3a  a decision or rejection of a closed request
#   3b  a decision or rejection at or after the review deadline
#   3   a ticket id issued twice
#   4a  a timeout of a closed request
#   4b  a timeout before the review deadline
#   4c  a timeout naming another deadline
#   5a  a revocation of an open request at or after its deadline
#   5c  a revocation of a rejected, edited, timed out or already revoked request
#   6f  a grant (real or observe) of a request whose tool is paused in the policy in force
#   6a-6e  a real grant (granted true, would_deny null): ticket not issued by an approval
#       of its request, another digest, at or after the approval's expires_at, after a
#       revocation, a second real grant of one ticket
#   7   a follow-up whose `follows` is not an earlier record of the same request
#   8   a policy record whose document is not a valid policy (section 12), or whose
#       policy_digest is not its document's; it is then not in force
#   9   an interrupt whose `policy` member is not the id of the policy record in force
#   10a-10d  a decision (not a break-glass one) breaking the tool's approvers and
#       approvals_required: by the requester, by a reviewer outside the approvers, a second
#       approval by one reviewer, a ticket before the N-th approval (or a partial approval
#       where the ticket was due, or counts that are not the replay's)
#   11a-11b  break-glass: not by the break_glass role (or not an approval with a ticket; or
#       a decision by that role without the mark), or where the policy does not allow it
#   12a-12d  a review: of a request without a break-glass use, by its user, a second one,
#       naming another record
#   13  a rejection (after 3a and 3b) or an allowed revocation (after rule 5) whose
#       `reason_code` is not among its tool's `reason_codes` in the policy in force
#
# The policy in force at a record is the document of the last valid policy record before it;
# before the first one it is the empty document {} (no tool paused, no approvers, one
# approval, no break-glass), so records from before policy records are judged as before.
#
# Judgement calls where section 6.3 can be read two ways (each the stricter reading):
# rule 10d's ticket checks (a partial approval where the ticket was due, counts that are not
# the replay's, a null ticket on a decision that is not an approval) apply to every decision
# that is not a break-glass one, not only to governed tools, since a partial approval exists
# only where a tool needs more than one approval (sections 2.3 and 7.5); 10a-10c apply only
# to governed tools, as written. Rule 2 covers a review too ("any other kind"). A policy
# document's members are never null (a null is "a value of the wrong type", as
# schemas/policy.json says).
#
# Bodies are checked structurally with the envelope (check_body), so the replay sees well-
# typed fields; it still reads them defensively and fails closed: a deadline or expiry that is not a valid timestamp is never "later" than any
# ts (so a closing record, revocation of an open request, timeout or real grant that
# depends on it is a violation); a ticket_id or action_digest that is not a string matches
# nothing; a missing `would_deny` counts as null; a decision whose `decision` is not
# "approve" is not an approval (its request counts as edited). Records with request_id
# null are never violations otherwise (they can still be followed, which rule 7 then refuses).


def ts_micros(v: object) -> int | None:
    """A timestamp as microseconds since 1970-01-01T00:00:00Z; None when `v` is not one."""
    if not is_timestamp(v):
        return None
    y, mo, d, h, mi, s, us = (int(x) for x in _TS_RE.fullmatch(v).groups())
    delta = datetime(y, mo, d, h, mi, s) - datetime(1970, 1, 1)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + us


def _before(a: int | None, b: int | None) -> bool:
    """a < b as instants; False when either is not a timestamp (fail closed)."""
    return a is not None and b is not None and a < b


# ---------------------------------------------------------------------------
# Policy documents (docs/protocol.md section 12)

GROUP_PREFIX = "group:"
MODES = ("enforce", "observe", "paused")
# The value of each field where neither the tool's entry nor the default names it.
POLICY_DEFAULTS = {
    "review_window_seconds": 3600,
    "approval_ttl_seconds": 600,
    "mode": "enforce",
    "redact": [],
    "approvers": None,
    "approvals_required": 1,
    "break_glass": False,
}


# `reason_codes` (section 12) resolves apart from the fields above: a tool's list replaces the
# default's, and where neither names one the default list is in force.
DEFAULT_REASON_CODES = ["wrong_amount", "wrong_payee", "not_authorized", "duplicate", "policy_violation", "other"]
_REASON_CODE_RE = re.compile(r"[a-z][a-z0-9_]{0,63}")


def is_reason_code(v: object) -> bool:
    """A reason code: `[a-z][a-z0-9_]{0,63}`."""
    return isinstance(v, str) and _REASON_CODE_RE.fullmatch(v) is not None


def reason_codes(document: dict, tool: object) -> list:
    """The reason codes of `tool` under the valid `document`: its entry's list, else the
    default's, else DEFAULT_REASON_CODES."""
    entry = document.get("tools", {}).get(tool) if isinstance(tool, str) else None
    if entry is not None and "reason_codes" in entry:
        return entry["reason_codes"]
    return document.get("default", {}).get("reason_codes", DEFAULT_REASON_CODES)


def _positive_int(v: object) -> bool:
    return _is_int(v) and v >= 1


def is_json_pointer(p: object) -> bool:
    """A non-empty RFC 6901 JSON Pointer: `/`-separated tokens, `~` only as `~0` or `~1`
    (section 3; `""`, the whole args, is refused)."""
    if not isinstance(p, str) or not p.startswith("/"):
        return False
    return re.fullmatch(r"(?:/(?:[^/~]|~[01])*)+", p, flags=re.DOTALL) is not None


def is_approver_entry(a: object) -> bool:
    """A principal (an id) or `group:<name>` (name an id)."""
    if not isinstance(a, str):
        return False
    return is_id(a[len(GROUP_PREFIX):]) if a.startswith(GROUP_PREFIX) else is_id(a)


def _check_policy_entry(where: str, entry: object) -> str | None:
    if not isinstance(entry, dict):
        return "%s is not an object" % where
    for k in sorted(entry):
        if k not in POLICY_DEFAULTS and k != "reason_codes":
            return "%s has the unknown field %s" % (where, ascii(k))
    for k in ("review_window_seconds", "approval_ttl_seconds", "approvals_required"):
        if k in entry and not _positive_int(entry[k]):
            return "%s.%s is not a positive integer" % (where, k)
    if "mode" in entry and entry["mode"] not in MODES:
        return "%s.mode is not one of %s" % (where, ", ".join(MODES))
    if "redact" in entry:
        r = entry["redact"]
        if not isinstance(r, list) or not all(is_json_pointer(p) for p in r):
            return "%s.redact is not a list of JSON Pointers" % where
    if "approvers" in entry:
        a = entry["approvers"]
        if not isinstance(a, list) or not a:
            return "%s.approvers is not a non-empty list" % where
        if not all(is_approver_entry(x) for x in a):
            return "%s.approvers holds an entry that is neither a principal nor group:<name>" % where
        if len(set(a)) != len(a):
            return "%s.approvers names an entry twice" % where
    if "break_glass" in entry and not isinstance(entry["break_glass"], bool):
        return "%s.break_glass is not a boolean" % where
    if "reason_codes" in entry:
        c = entry["reason_codes"]
        if not isinstance(c, list) or not c:
            return "%s.reason_codes is not a non-empty list" % where
        if not all(is_reason_code(x) for x in c):
            return "%s.reason_codes holds an entry that is not a reason code" % where
        if len(set(c)) != len(c):
            return "%s.reason_codes names a code twice" % where
    return None


def resolve_tool(document: dict, tool: object) -> dict:
    """The policy of `tool` under `document`: its entry over the default, field by field,
    except `redact`, which adds to the default's; each field the defaults where neither
    names it. The document must be valid (validate_policy)."""
    out = dict(POLICY_DEFAULTS)
    default = document.get("default", {})
    out.update(default)
    entry = document.get("tools", {}).get(tool) if isinstance(tool, str) else None
    if entry is not None:
        redact = list(out["redact"])
        out.update(entry)
        out["redact"] = redact + [p for p in entry.get("redact", []) if p not in redact]
    return out


def validate_policy(document: object) -> str | None:
    """None when `document` is a valid policy document (section 12); else why not."""
    if not isinstance(document, dict):
        return "the policy is not an object"
    for k in sorted(document):
        if k not in ("default", "tools"):
            return "the policy has the unknown field %s" % ascii(k)
    msg = _check_policy_entry("default", document.get("default", {}))
    if msg:
        return msg
    tools = document.get("tools", {})
    if not isinstance(tools, dict):
        return "tools is not an object"
    for name in sorted(tools):
        if not is_id(name):
            return "the tool name %s is not an id" % ascii(name)
        msg = _check_policy_entry("tools.%s" % name, tools[name])
        if msg:
            return msg
    # every resolved tool, and the default, must be satisfiable where only principals are named
    for where, tool in [("default", None)] + [("tools.%s" % t, t) for t in sorted(tools)]:
        p = resolve_tool(document, tool)
        a = p["approvers"]
        if a is not None and not any(x.startswith(GROUP_PREFIX) for x in a) and p["approvals_required"] > len(a):
            return "%s needs %d approvals from %d approvers" % (where, p["approvals_required"], len(a))
    return None


def policy_digest(document: dict) -> str:
    """`sha256:` and the hex SHA-256 of JCS(document)."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(document)).hexdigest()


# ---------------------------------------------------------------------------
# The replay


@dataclass
class _RequestState:
    deadline: int | None  # the interrupt's expires_at
    action_digest: object  # the interrupt's action_digest
    tool: object  # the interrupt's tool
    opener: str  # the principal that opened it (an edit's new request: the original's)
    state: str = "open"  # open, approved, edited, rejected, timed_out, revoked (while open)
    revoked: bool = False
    approvals: list = None  # principals of its counted partial approvals
    break_glass: tuple | None = None  # (leaf hash hex, principal) of its break-glass decision
    reviewed: bool = False

    def __post_init__(self):
        if self.approvals is None:
            self.approvals = []


@dataclass
class _TicketState:
    request_id: str
    issued_by: str  # approve, edit, reject
    expires_at: int | None  # the approval's expires_at (approvals only)
    used: bool = False  # a real grant consumed it


_STATE_WORDS = {"rejected": "rejected", "edited": "edited", "timed_out": "timed out"}


class RuleReplay:
    """The approval-rule replay over records in seq order.

    `step(record, leaf_hash_hex)` returns None or the message of the violation the
    record is; the state after a violation is not meaningful (stop at the first)."""

    def __init__(self) -> None:
        self.requests: dict[str, _RequestState] = {}
        self.tickets: dict[str, _TicketState] = {}
        self.leaf_requests: dict[str, str | None] = {}  # leaf hash hex -> request_id
        # the policy in force: (its record's leaf hash hex, its document); None before the first
        self.policy: tuple[str, dict] | None = None

    def step(self, rec: dict, leaf_hash_hex: str) -> str | None:
        try:
            return self._check(rec, leaf_hash_hex)
        finally:
            self.leaf_requests.setdefault(leaf_hash_hex, rec["request_id"])

    def tool_policy(self, tool: object) -> dict:
        """The resolved policy of `tool` under the policy in force."""
        return resolve_tool(self.policy[1] if self.policy else {}, tool)

    def _reason_code(self, rid: str, req: _RequestState, rec: dict) -> str | None:
        """Rule 13: a recorded `reason_code` is one of the tool's `reason_codes` in force."""
        body = rec["body"]
        if "reason_code" not in body:
            return None
        if body["reason_code"] in reason_codes(self.policy[1] if self.policy else {}, req.tool):
            return None
        return "rule 13: a %s whose reason_code is not among its tool's reason_codes (%s, code %s)" % (
            rec["kind"], ascii(rid), ascii(body["reason_code"]))

    def _check(self, rec: dict, lh_hex: str) -> str | None:
        kind = rec["kind"]
        body = rec["body"]
        if kind == "policy":
            return self._policy(rec, lh_hex)
        rid = rec["request_id"]
        if rid is None:
            return None
        ts = ts_micros(rec["ts"])
        if kind == "interrupt":
            return self._interrupt(rid, rec)
        req = self.requests.get(rid)
        if req is None:
            return "rule 2: a %s record names request %s, which has no interrupt before it" % (kind, ascii(rid))
        if kind in ("decision", "rejection"):
            return self._closing(rid, req, rec, ts, lh_hex)
        if kind == "timeout":
            return self._timeout(rid, req, body, ts)
        if kind == "revocation":
            return self._revocation(rid, req, rec, ts)
        if kind == "authorization":
            return self._authorization(rid, req, body, ts)
        if kind == "follow_up":
            return self._follow_up(rid, body)
        if kind == "review":
            return self._review(rid, req, rec)
        return None  # a refusal naming a request that has an interrupt

    def _policy(self, rec: dict, lh_hex: str) -> str | None:
        document = rec["body"].get("policy")
        why = validate_policy(document)
        if why is None and rec["body"].get("policy_digest") != policy_digest(document):
            why = "policy_digest is not the digest of its document"
        if why is not None:
            return "rule 8: an invalid policy record (seq %d): %s" % (rec["seq"], why)
        self.policy = (lh_hex, document)
        return None

    def _interrupt(self, rid: str, rec: dict) -> str | None:
        body = rec["body"]
        if rid in self.requests:
            return "rule 1: a second interrupt of request %s" % ascii(rid)
        if "policy" in body:
            in_force = self.policy[0] if self.policy else None
            if body["policy"] != in_force:
                return "rule 9: an interrupt naming a policy record that is not in force (%s names %s, in force: %s)" % (
                    ascii(rid), body["policy"], in_force or "none")
        original = self.requests.get(body.get("edit_of")) if isinstance(body.get("edit_of"), str) else None
        opener = original.opener if original is not None else rec["actor"]["principal"]
        self.requests[rid] = _RequestState(ts_micros(body.get("expires_at")), body.get("action_digest"),
                                           body.get("tool"), opener)
        return None

    @staticmethod
    def _closed(rid: str, req: _RequestState) -> str:
        state = "revoked" if req.state == "revoked" else req.state.replace("_", " ")
        return "a second closing record (request %s is already %s)" % (ascii(rid), state)

    def _closing(self, rid: str, req: _RequestState, rec: dict, ts: int | None, lh_hex: str) -> str | None:
        kind, body = rec["kind"], rec["body"]
        if req.state != "open":
            return "rule 3a: " + self._closed(rid, req)
        if not _before(ts, req.deadline):
            return "rule 3b: a closing record at or after the review deadline of request %s" % ascii(rid)
        if kind == "rejection":
            msg = self._reason_code(rid, req, rec)
            if msg is not None:
                return msg
        if kind == "decision":
            msg = self._governed_decision(rid, req, rec)
            if msg is not None:
                return msg
            if body.get("ticket_id") is None:  # a partial approval: counted, closes nothing
                req.approvals.append(rec["actor"]["principal"])
                return None
        if kind == "rejection":
            issued_by, state = "reject", "rejected"
        elif body.get("decision") == "approve":
            issued_by, state = "approve", "approved"
        else:
            issued_by, state = "edit", "edited"
        ticket = body.get("ticket_id")
        if isinstance(ticket, str) and ticket in self.tickets:
            return "rule 3: a ticket id issued twice (%s)" % ascii(ticket)
        req.state = state
        if isinstance(ticket, str):
            expires = ts_micros(body.get("expires_at")) if issued_by == "approve" else None
            self.tickets[ticket] = _TicketState(rid, issued_by, expires)
        if body.get("break_glass") is True:
            req.break_glass = (lh_hex, rec["actor"]["principal"])
        return None

    def _governed_decision(self, rid: str, req: _RequestState, rec: dict) -> str | None:
        """Rules 10 and 11 for a decision of request `rid`: the first failing is the violation."""
        body, actor = rec["body"], rec["actor"]
        t = self.tool_policy(req.tool)
        q = ascii(rid)
        if body.get("break_glass") is True:
            if actor["role"] != "break_glass" or body.get("decision") != "approve" or body.get("ticket_id") is None:
                return "rule 11a: a break-glass decision not by the break_glass role, or not an approval with a ticket (%s)" % q
            if t["break_glass"] is not True:
                return "rule 11b: break-glass where the policy does not allow it (%s)" % q
            return None
        principal = actor["principal"]
        approving = body.get("decision") == "approve"
        ticket = body.get("ticket_id")
        approvers = t["approvers"]
        need = t["approvals_required"]
        if approvers is not None or need > 1:  # a governed tool
            if principal == req.opener:
                return "rule 10a: an approval by the requester (%s)" % q
            if approvers is not None:
                a = body.get("approved_as")
                if not isinstance(a, str) or a not in approvers or (
                        not a.startswith(GROUP_PREFIX) and a != principal):
                    return "rule 10b: a decision by a reviewer outside the approvers (%s)" % q
            if approving and principal in req.approvals:
                return "rule 10c: a second approval by the same reviewer (%s)" % q
        if ticket is None and not approving:
            return "rule 10d: a decision without a ticket that is not an approval (%s)" % q
        if approving:
            n = len(req.approvals) + 1
            if ticket is not None and n < need:
                return "rule 10d: a ticket before the N-th approval (%s: approval %d of %d)" % (q, n, need)
            if ticket is None and n >= need:
                return "rule 10d: a partial approval that should have issued the ticket (%s: approval %d of %d)" % (
                    q, n, need)
            counts = (body.get("approvals"), body.get("approvals_required"))
            # where N = 1 both are absent (the envelope allows no null for them)
            if counts != ((n, need) if need > 1 else (None, None)):
                return "rule 10d: approval counts that are not the replay's (%s: %d of %d)" % (q, n, need)
        if actor["role"] == "break_glass":
            return "rule 11a: a decision by the break_glass role without break_glass: true (%s)" % q
        return None

    def _timeout(self, rid: str, req: _RequestState, body: dict, ts: int | None) -> str | None:
        if req.state != "open":
            return "rule 4a: " + self._closed(rid, req)
        if _before(ts, req.deadline):
            return "rule 4b: a timeout before the review deadline of request %s" % ascii(rid)
        named = ts_micros(body.get("expires_at"))
        if named is None or req.deadline is None or named != req.deadline:
            return "rule 4c: a timeout naming another deadline than request %s's" % ascii(rid)
        req.state = "timed_out"
        return None

    def _revocation(self, rid: str, req: _RequestState, rec: dict, ts: int | None) -> str | None:
        if req.state == "open":
            if not _before(ts, req.deadline):
                return "rule 5a: a revocation of an overdue request (%s)" % ascii(rid)
            msg = self._reason_code(rid, req, rec)
            if msg is not None:
                return msg
            req.state = "revoked"
            req.revoked = True
            return None
        if req.state == "approved" and not req.revoked:
            msg = self._reason_code(rid, req, rec)
            if msg is not None:
                return msg
            req.revoked = True
            return None
        state = "already revoked" if req.revoked else _STATE_WORDS.get(req.state, req.state)
        return "rule 5c: a revocation of a request that is %s (%s)" % (state, ascii(rid))

    def _authorization(self, rid: str, req: _RequestState, body: dict, ts: int | None) -> str | None:
        if body.get("granted") is True and self.tool_policy(req.tool)["mode"] == "paused":
            return "rule 6f: a grant of a paused tool (%s, tool %s)" % (ascii(rid), ascii(req.tool))
        if body.get("granted") is not True or body.get("would_deny") is not None:
            return None  # a denial, or an observe-mode would-deny: never a violation
        ticket = body.get("ticket_id")
        tk = self.tickets.get(ticket) if isinstance(ticket, str) else None
        if tk is None or tk.issued_by != "approve" or tk.request_id != rid:
            return "rule 6a: real grant with a ticket not issued by an approval of its request (%s)" % ascii(rid)
        digest = body.get("action_digest")
        if not isinstance(digest, str) or digest != req.action_digest:
            return "rule 6b: real grant whose digest is not the approved one (%s)" % ascii(rid)
        if not _before(ts, tk.expires_at):
            return "rule 6c: real grant at or after the approval's expires_at (%s)" % ascii(rid)
        if req.revoked:
            return "rule 6d: real grant after a revocation (%s)" % ascii(rid)
        if tk.used:
            return "rule 6e: a second real grant of one ticket (%s)" % ascii(ticket)
        tk.used = True
        return None

    def _follow_up(self, rid: str, body: dict) -> str | None:
        follows = body.get("follows")
        if not isinstance(follows, str) or follows not in self.leaf_requests or self.leaf_requests[follows] != rid:
            return "rule 7: a follow-up that follows a record of another request (%s)" % ascii(rid)
        return None

    def _review(self, rid: str, req: _RequestState, rec: dict) -> str | None:
        q = ascii(rid)
        if req.break_glass is None:
            return "rule 12a: a review of a request with no break-glass use (%s)" % q
        if rec["actor"]["principal"] == req.break_glass[1]:
            return "rule 12b: a review by the break-glass user (%s)" % q
        if req.reviewed:
            return "rule 12c: a second review (%s)" % q
        if rec["body"].get("reviews") != req.break_glass[0]:
            return "rule 12d: a review of another record than the break-glass decision (%s)" % q
        req.reviewed = True
        return None


def first_rule_violation(records: list[tuple[dict, str]]) -> tuple[int, str] | None:
    """(seq, message) of the first record the approval rules forbid, or None.

    `records` are (record, leaf hash hex) in seq order, each with a checked envelope."""
    replay = RuleReplay()
    for rec, lh_hex in records:
        msg = replay.step(rec, lh_hex)
        if msg is not None:
            return rec["seq"], msg
    return None


# ---------------------------------------------------------------------------
# Bundle


class Problem(Exception):
    def __init__(self, code: str, message: str, seq: int | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.seq = seq


def _bundle_pairs_hook(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise Problem("bad_input", "duplicate key %s in the bundle" % ascii(k))
        d[k] = v
    return d


def _check_no_surrogates(value) -> None:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise Problem("bad_input", "the bundle contains a lone surrogate") from None
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def parse_bundle(data: bytes) -> dict:
    """Parse and check the JSON structure of a bundle. Raises Problem('bad_input')."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Problem("bad_input", "the bundle is not UTF-8") from None
    try:
        doc = json.loads(text, object_pairs_hook=_bundle_pairs_hook, parse_constant=_raise_constant)
    except Problem:
        raise
    except RecursionError:
        raise Problem("bad_input", "the bundle JSON nests too deeply") from None
    except ValueError as e:
        raise Problem("bad_input", "the bundle is not JSON: %s" % e) from None
    if not isinstance(doc, dict):
        raise Problem("bad_input", "the bundle is not a JSON object")
    _check_no_surrogates(doc)
    if not isinstance(doc.get("format"), str):
        raise Problem("bad_input", "bundle field 'format' is missing or not a string")
    if doc["format"] != FORMAT:
        raise Problem("bad_input", "unknown format %s" % ascii(doc["format"]))
    for f in ("origin", "verifier_key", "checkpoint", "thread_id", "thread_head"):
        if not isinstance(doc.get(f), str):
            raise Problem("bad_input", "bundle field %r is missing or not a string" % f)
    if not isinstance(doc.get("records"), list):
        raise Problem("bad_input", "bundle field 'records' is missing or not a list")
    _check_entries(doc["records"], "records")
    # The structure of `policy` is check 11 (docs/protocol.md section 6.2), after the
    # thread's records: see _check_policy_structure.
    return doc


def _check_entries(entries: list, what: str) -> None:
    """Each entry of a record list is an object with `seq`, `leaf`, `inclusion_proof`."""
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise Problem("bad_input", "%s[%d] is not an object" % (what, i))
        if not _is_int(e.get("seq")) or not (0 <= e["seq"] <= MAX_U64):
            raise Problem("bad_input", "%s[%d].seq is missing or not a non-negative integer" % (what, i))
        if not isinstance(e.get("leaf"), str):
            raise Problem("bad_input", "%s[%d].leaf is missing or not a string" % (what, i))
        proof = e.get("inclusion_proof")
        if not isinstance(proof, list) or not all(isinstance(p, str) for p in proof):
            raise Problem("bad_input", "%s[%d].inclusion_proof is missing or not a list of strings" % (what, i))


def _check_policy_structure(doc: dict) -> dict | None:
    """Check 11's structure: `policy`, when present (even as null), is an object with a string
    `thread_head` and a `records` list of entries. Returns it, or None when absent."""
    if "policy" not in doc:
        return None
    part = doc["policy"]
    if not isinstance(part, dict):
        raise Problem("bad_input", "bundle field 'policy' is not an object")
    if not isinstance(part.get("thread_head"), str):
        raise Problem("bad_input", "policy.thread_head is missing or not a string")
    if not isinstance(part.get("records"), list):
        raise Problem("bad_input", "policy.records is missing or not a list")
    _check_entries(part["records"], "policy.records")
    return part


def _summary(entries: list) -> dict:
    decisions = rejections = 0
    first_ts = last_ts = None
    for i, e in enumerate(entries):
        rec = None
        try:
            rec = json.loads(b64decode_strict(e["leaf"]).decode("utf-8"))
        except Exception:
            pass
        if not isinstance(rec, dict):
            continue
        kind = rec.get("kind")
        decisions += kind == "decision"
        rejections += kind == "rejection"
        ts = rec.get("ts") if isinstance(rec.get("ts"), str) else None
        if i == 0:
            first_ts = ts
        if i == len(entries) - 1:
            last_ts = ts
    return {
        "records": len(entries),
        "decisions": decisions,
        "rejections": rejections,
        "first_ts": first_ts,
        "last_ts": last_ts,
    }


def _check_bundle(doc: dict, key: VerifierKey, key_str: str) -> None:
    """Every content check, in order; raises the first Problem."""
    origin = doc["origin"]
    thread_id = doc["thread_id"]
    if doc["verifier_key"] != key_str:
        raise Problem("verifier_key_mismatch", "the bundle's verifier_key is not the trusted key")
    if origin != key.name:
        raise Problem("origin_mismatch", "the bundle's origin is not the trusted key's name")

    try:
        cp_text, _ = open_signed_note(doc["checkpoint"], [key])
    except NoteError as e:
        raise Problem("checkpoint_signature", "checkpoint: %s (%s)" % (e, e.reason)) from None
    try:
        cp = parse_checkpoint_body(cp_text, origin)
    except ValueError as e:
        raise Problem("checkpoint_body", "checkpoint body: %s" % e) from None

    th = _open_thread_head(doc["thread_head"], key)
    replayed = _check_chain(doc["records"], thread_id, th, origin, cp)

    # 11: the policy records the thread was evaluated under, chained and headed like a thread
    part = _check_policy_structure(doc)
    policies: list[tuple[dict, str]] = []
    if part is not None:
        ph = _open_thread_head(part["thread_head"], key)
        policies = _check_chain(part["records"], POLICY_THREAD, ph, origin, cp)

    # 12: every policy record an interrupt names is carried
    carried = {lh_hex for _, lh_hex in policies}
    for rec, _ in replayed:
        if rec["kind"] == "interrupt" and "policy" in rec["body"] and rec["body"]["policy"] not in carried:
            raise Problem("policy_missing", "the interrupt names the policy record %s, which the bundle does not carry"
                          % rec["body"]["policy"], rec["seq"])

    # 13: every structural check passed: replay the approval rules over both lists, in seq order
    merged = sorted(replayed + policies, key=lambda x: x[0]["seq"])
    violation = first_rule_violation(merged)
    if violation is not None:
        raise Problem("rule_violation", violation[1], violation[0])


def _open_thread_head(note: str, key: VerifierKey) -> ThreadHead:
    """Checks 7 and 8: a thread-head note opened with the trusted key, and its body."""
    try:
        th_text, _ = open_signed_note(note, [key])
    except NoteError as e:
        raise Problem("thread_head_signature", "thread head: %s (%s)" % (e, e.reason)) from None
    try:
        return parse_thread_head_body(th_text)
    except ValueError as e:
        raise Problem("thread_head_body", "thread head body: %s" % e) from None


def _check_chain(entries: list, thread_id: str, th: ThreadHead, origin: str, cp: Checkpoint) -> list[tuple[dict, str]]:
    """Checks 9 and 10 for one thread's entries: each leaf, its seq, order, origin, thread,
    inclusion proof and the thread chain, then the thread head against them. Returns the
    records with their leaf hashes (hex)."""
    prev_seq = None
    prev_hash_hex = ZERO_HASH_HEX
    out: list[tuple[dict, str]] = []
    for i, entry in enumerate(entries):
        seq = entry["seq"]
        try:
            leaf = b64decode_strict(entry["leaf"])
        except ValueError as e:
            raise Problem("leaf_encoding", "leaf is not canonical base64: %s" % e, seq) from None
        try:
            rec = parse_leaf(leaf)
        except LeafEncodingError as e:
            raise Problem("leaf_encoding", str(e), seq) from None
        except LeafNotCanonical as e:
            raise Problem("leaf_not_canonical", str(e), seq) from None
        msg = check_envelope(rec)
        if msg is not None:
            raise Problem("envelope", msg, seq)
        if rec["seq"] != seq:
            raise Problem("seq_mismatch", "leaf seq %d differs from the entry's seq %d" % (rec["seq"], seq), seq)
        if prev_seq is not None and seq <= prev_seq:
            raise Problem("seq_order", "seq %d does not follow seq %d" % (seq, prev_seq), seq)
        if rec["origin"] != origin:
            raise Problem("record_origin", "record origin is not the bundle's origin", seq)
        if rec["thread_id"] != thread_id:
            raise Problem("record_thread", "record thread_id is not %s" % ascii(thread_id), seq)
        lh = leaf_hash(leaf)
        proof_hex = entry["inclusion_proof"]
        if not all(is_hex64(p) for p in proof_hex):
            raise Problem("inclusion_proof", "proof hashes must be 64 lowercase hex digits", seq)
        proof = [bytes.fromhex(p) for p in proof_hex]
        if seq >= cp.size:
            raise Problem("inclusion_proof", "seq %d is not below the checkpoint size %d" % (seq, cp.size), seq)
        if not verify_inclusion(seq, cp.size, lh, proof, cp.root):
            raise Problem("inclusion_proof", "inclusion proof does not lead to the checkpoint root", seq)
        if rec["thread_seq"] != i:
            raise Problem("thread_gap", "thread_seq %d where %d was expected" % (rec["thread_seq"], i), seq)
        if rec["thread_prev"] != prev_hash_hex:
            raise Problem("thread_prev", "thread_prev is not the previous record's leaf hash", seq)
        prev_seq = seq
        prev_hash_hex = lh.hex()
        out.append((rec, prev_hash_hex))

    if th.origin != origin:
        raise Problem("thread_head_mismatch", "thread head origin is not the bundle's origin")
    if th.thread != thread_id:
        raise Problem("thread_head_mismatch", "thread head thread is not %s" % ascii(thread_id))
    if th.tree != cp.size:
        raise Problem("thread_head_mismatch", "thread head tree %d is not the checkpoint size %d" % (th.tree, cp.size))
    if th.size != len(entries):
        raise Problem("thread_head_mismatch", "thread head size %d but the list has %d records" % (th.size, len(entries)))
    if th.head != prev_hash_hex:
        raise Problem("thread_head_mismatch", "thread head is not the last record's leaf hash")
    return out


def _result(summary: dict, problem: Problem | None) -> dict:
    return {
        "ok": problem is None,
        "records": summary["records"],
        "decisions": summary["decisions"],
        "rejections": summary["rejections"],
        "first_ts": summary["first_ts"],
        "last_ts": summary["last_ts"],
        "problem": None
        if problem is None
        else {"code": problem.code, "message": problem.message, "seq": problem.seq},
    }


_EMPTY_SUMMARY = {"records": 0, "decisions": 0, "rejections": 0, "first_ts": None, "last_ts": None}


def verify_bundle_bytes(data: bytes, key: str) -> dict:
    """Verify a bundle given as bytes against the verifier key string `key`.

    Never raises: returns the --json dict. Use exit_status() for the exit code."""
    try:
        data = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        try:
            vkey = parse_verifier_key(key)
        except ValueError as e:
            raise Problem("bad_input", "--key is not a valid verifier key: %s" % e) from None
        doc = parse_bundle(data)
    except Problem as p:
        return _result(_EMPTY_SUMMARY, p)
    except Exception as e:  # a bug here must not crash the caller
        return _result(_EMPTY_SUMMARY, Problem("bad_input", "internal error: %s" % ascii(e)))
    try:
        summary = _summary(doc["records"])
    except Exception:
        summary = dict(_EMPTY_SUMMARY, records=len(doc["records"]))
    try:
        _check_bundle(doc, vkey, key)
    except Problem as p:
        return _result(summary, p)
    except Exception as e:
        return _result(summary, Problem("bad_input", "internal error: %s" % ascii(e)))
    return _result(summary, None)


def verify_bundle_file(path: str, key: str) -> dict:
    """Like verify_bundle_bytes, reading `path` (`-` for standard input)."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
    except Exception as e:
        return _result(_EMPTY_SUMMARY, Problem("bad_input", "cannot read %s: %s" % (ascii(path), ascii(e))))
    return verify_bundle_bytes(data, key)


def exit_status(result: dict) -> int:
    """0 when the bundle verified, 2 for bad_input, 1 for any other problem."""
    if result.get("ok"):
        return 0
    problem = result.get("problem") or {}
    return 2 if problem.get("code") == "bad_input" else 1


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _UsageError(message)


def _emit(result: dict, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(result) + "\n")
        return
    if result["ok"]:
        sys.stdout.write(
            "OK: %d records (%d decisions, %d rejections), %s .. %s\n"
            % (result["records"], result["decisions"], result["rejections"], result["first_ts"], result["last_ts"])
        )
    else:
        p = result["problem"]
        where = "" if p["seq"] is None else " at seq %d" % p["seq"]
        sys.stderr.write("FAILED %s%s: %s\n" % (p["code"], where, p["message"]))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    as_json = "--json" in argv
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except Exception:
            pass
    try:
        parser = _Parser(prog="verify_bundle.py", description="Verify a hitl-ledger export bundle offline.")
        parser.add_argument("bundle", metavar="BUNDLE_FILE")
        parser.add_argument("--key", required=True, metavar="VERIFIER_KEY")
        parser.add_argument("--json", action="store_true")
        try:
            args = parser.parse_args(argv)
        except _UsageError as e:
            _emit(_result(_EMPTY_SUMMARY, Problem("bad_input", "usage: %s" % e)), as_json)
            return 2
        result = verify_bundle_file(args.bundle, args.key)
        _emit(result, args.json)
        return exit_status(result)
    except Exception as e:
        try:
            _emit(_result(_EMPTY_SUMMARY, Problem("bad_input", "internal error: %s" % ascii(e))), as_json)
        except Exception:
            pass
        return 2


if __name__ == "__main__":
    try:
        code = main()
    except KeyboardInterrupt:
        code = 2
    sys.exit(code)
