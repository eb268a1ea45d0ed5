"""RFC 8785 (JCS) canonical JSON, the action digest and the idempotency key (spec sections 1, 3).

Two parties must never digest "the same" call differently, so everything here is strict:

- :func:`canonicalize` takes Python values and refuses what the ledger refuses in a request:
  an integer beyond ±(2^53−1), NaN and Infinity, a lone surrogate, a non-string key, a value
  that is not JSON (``not_canonicalizable``).
- :func:`canonicalize_text` takes JSON text and also refuses duplicate member names and numbers
  that overflow a double. With ``strict=False`` it follows RFC 8785 to the letter and rounds an
  out-of-range integer to the nearest double (the shared vectors' expectation); with
  ``strict=True`` it refuses such integers, as the ledger does for request bodies.
- :func:`loads_record` and :func:`canonicalize_record` read what the ledger *answers*: a stored
  record (a leaf) may hold integer literals beyond 2^53, because JCS writes a large double such
  as ``1e20`` as ``100000000000000000000`` (spec section 2.2). Every number of a record is a
  double, so such a literal is read as the double it names (a Python ``float``; the literal is
  that double's shortest text, so nothing is lost) and written back as JCS writes it: every
  record the ledger accepts is read, and its leaf hash checks.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Callable

import rfc8785

from .errors import NotCanonicalizable

#: The largest integer magnitude that a double represents exactly with all its neighbours.
MAX_SAFE_INTEGER = (1 << 53) - 1

#: The ``action_schema`` of interrupt bodies.
ACTION_SCHEMA = "hitl-ledger/action/v1"


def _check(value: Any, path: str = "") -> None:
    """Refuse what the ledger would refuse, with a pointer to the offending place."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise NotCanonicalizable(f"integer at {path or '/'} is beyond ±(2^53-1): {value}")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotCanonicalizable(f"number at {path or '/'} is not finite: {value}")
        return
    if isinstance(value, str):
        _check_string(value, path)
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check(item, f"{path}/{i}")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotCanonicalizable(f"object key at {path or '/'} is not a string: {key!r}")
            _check_string(key, path)
            _check(item, f"{path}/{_escape_pointer(key)}")
        return
    raise NotCanonicalizable(f"value at {path or '/'} is not JSON: {type(value).__name__}")


def _check_string(s: str, path: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise NotCanonicalizable(f"string at {path or '/'} holds a lone surrogate") from e


def _escape_pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def canonicalize(value: Any) -> bytes:
    """The RFC 8785 canonical UTF-8 bytes of a JSON value given as Python objects.

    Raises :class:`~hitl_ledger.errors.NotCanonicalizable` for anything the ledger refuses.
    """
    _check(value)
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, UnicodeError, TypeError, ValueError) as e:
        raise NotCanonicalizable(str(e)) from e


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise NotCanonicalizable(f"duplicate member name {key!r}")
        out[key] = value
    return out


def _refuse_constant(name: str) -> Any:
    raise NotCanonicalizable(f"{name} is not JSON")


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotCanonicalizable(f"number {text} overflows a double")
    return value


def _loads(text: str | bytes, parse_int: Callable[[str], Any]) -> Any:
    """UTF-8 JSON with no duplicate names, no NaN/Infinity, no overflowing number, integer
    literals read by ``parse_int``; every failure is :class:`NotCanonicalizable`."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise NotCanonicalizable(f"not UTF-8: {e}") from e
    try:
        return json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_refuse_constant,
            parse_float=_parse_float,
            parse_int=parse_int,
        )
    except NotCanonicalizable:
        raise
    except (ValueError, RecursionError) as e:
        raise NotCanonicalizable(f"not JSON: {e}") from e


def loads_strict(text: str | bytes, *, strict: bool = True) -> Any:
    """Parse JSON text as the ledger does: no duplicate names, no NaN/Infinity, no overflow.

    With ``strict`` (the default, as for request bodies) an integer literal beyond ±(2^53−1) is
    refused; without it, it becomes the nearest double, as RFC 8785 reads every number.
    """

    def parse_int(digits: str) -> int | float:
        value = int(digits)
        if abs(value) <= MAX_SAFE_INTEGER:
            return value
        if strict:
            raise NotCanonicalizable(f"integer {digits} is beyond ±(2^53-1)")
        return float(value)

    return _loads(text, parse_int)


def leaf_int(digits: str) -> int | float:
    """An integer literal of a record: an ``int`` up to ±(2^53−1), else the double it names
    (RFC 8785 reads every number as a double; a leaf spells a large double as its shortest
    integer text, ``1e20`` as ``100000000000000000000``). Refuses one beyond every double."""
    # A literal of more than 309 digits is beyond the largest double (about 1.8e308).
    if len(digits.lstrip("-")) > 309:
        raise NotCanonicalizable(f"number {digits[:20]}... overflows a double")
    value = int(digits)
    if abs(value) <= MAX_SAFE_INTEGER:
        return value
    try:
        return float(value)
    except OverflowError as e:
        raise NotCanonicalizable(f"number {digits} overflows a double") from e


def loads_record(text: str | bytes) -> Any:
    """Parse JSON the ledger answered (a record, an event's data) strictly and losslessly.

    As :func:`loads_strict` (no duplicate names, no NaN/Infinity, no number that overflows a
    double), except that an integer literal beyond ±(2^53−1) is accepted and read as the double
    it names (:func:`leaf_int`): a leaf holds such literals for large doubles (``1e20`` is
    stored as ``100000000000000000000``), and a reader must not fail on a record the ledger
    accepted. :func:`canonicalize` writes the value back to the same bytes.
    """
    return _loads(text, leaf_int)


def _as_doubles(value: Any, path: str = "") -> Any:
    """``value`` with each integer beyond ±(2^53−1) as the double JCS reads it as."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if abs(value) <= MAX_SAFE_INTEGER:
            return value
        try:
            return float(value)
        except OverflowError as e:
            raise NotCanonicalizable(f"number at {path or '/'} overflows a double") from e
    if isinstance(value, (list, tuple)):
        return [_as_doubles(item, f"{path}/{i}") for i, item in enumerate(value)]
    if isinstance(value, dict):
        return {k: _as_doubles(v, f"{path}/{_escape_pointer(k) if isinstance(k, str) else k}")
                for k, v in value.items()}
    return value


def canonicalize_record(value: Any) -> bytes:
    """The RFC 8785 bytes of a value read from the ledger (a record, also as a plain
    ``json.loads`` gives it): as :func:`canonicalize`, except that an integer beyond
    ±(2^53−1) is written as JCS writes the corresponding double (RFC 8785 reads every number
    as a double). For a record as the ledger stored it these are exactly its leaf bytes; an
    integer that is not a double's canonical text (``9007199254740993``) comes out as that
    double's (``9007199254740992``), so the leaf hash of such a forged record does not check.
    """
    return canonicalize(_as_doubles(value))


def canonicalize_text(text: str | bytes, *, strict: bool = False) -> bytes:
    """The canonical bytes of JSON text (see :func:`loads_strict` for ``strict``)."""
    return canonicalize(loads_strict(text, strict=strict))


def action(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """The action object ``{"tool": TOOL, "args": ARGS}``, checked for shape."""
    validate_action({"tool": tool, "args": args})
    return {"tool": tool, "args": args}


def validate_action(value: Any) -> None:
    """Raise ``ValueError`` unless ``value`` is ``{"tool": str, "args": object}`` and canonical."""
    if not isinstance(value, dict) or set(value) != {"tool", "args"}:
        raise ValueError('an action is exactly {"tool": TOOL, "args": {...}}')
    if not isinstance(value["tool"], str) or not value["tool"]:
        raise ValueError("an action's tool is a non-empty string")
    if not isinstance(value["args"], dict):
        raise ValueError("an action's args are a JSON object")
    _check(value)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def action_digest(action_value: dict[str, Any]) -> str:
    """``"sha256:" + hex(SHA-256(JCS(action)))``: the digest of an action that redacts nothing.

    (An action with redacted fields is digested by the ledger with its secret key, as
    ``hmac-sha256:…``; no one without the key can compute that form, by design.)
    """
    validate_action(action_value)
    return "sha256:" + sha256_hex(canonicalize(action_value))


def idempotency_key(origin: str, request_id: str) -> str:
    """A grant's idempotency key: ``hex(SHA-256(JCS({"origin": ORIGIN, "request_id": R})))``."""
    return sha256_hex(canonicalize({"origin": origin, "request_id": request_id}))


def leaf_hash(leaf: bytes) -> str:
    """A record's id: ``hex(SHA-256(0x00 || leaf))`` (RFC 6962 leaf hash)."""
    return hashlib.sha256(b"\x00" + leaf).hexdigest()


def record_leaf(record: dict[str, Any]) -> bytes:
    """The leaf bytes of a record as answered in JSON: its JCS canonical form (large integers
    as JCS writes doubles, see :func:`canonicalize_record`)."""
    return canonicalize_record(record)
