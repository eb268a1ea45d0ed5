"""The decision stream, ``GET /v1/events``: every committed record the token may see, in ``seq``
order, as Server-Sent Events (see :meth:`hitl_ledger.LedgerClient.events`).

What the stream promises and what this iterator checks:

- Each event is ``event: record`` with ``id: SEQ`` and one ``data:`` line
  ``{"leaf_hash", "record", "seq"}``. The iterator checks that the id is a decimal integer equal
  to ``seq`` and to ``record["seq"]``, that ids strictly increase (and start above ``after``), and
  that ``leaf_hash`` is the leaf hash of the record's canonical form. The data is read as the
  ledger writes leaves: strictly (no duplicate names, no NaN), and losslessly: an integer
  literal beyond 2^53 (JCS writes a large double such as ``1e20`` as one) is read as the double
  it names (a ``float``), so a record holding one is delivered like any other. Records are
  not checked against a list of kinds or body members: the ``policy`` and ``review`` kinds, the
  optional members of later v1 extensions (``approvals``, ``approved_as``, ``break_glass``, an
  interrupt's ``policy``) and whatever a later version adds are delivered as they are (spec
  section 11.5: a client that refuses a record stops at it for ever). Any failure raises
  :class:`~hitl_ledger.errors.EventStreamError`: an event is never skipped or repeated silently.
- A dropped connection, a read that sees neither an event nor a heartbeat for ``read_timeout``
  seconds, a connection error or a 5xx answer (503 included) makes it reconnect with
  ``Last-Event-ID`` (and ``?after``) set to the last event it received, after a bounded
  exponential backoff that starts at the server's ``retry:`` (else the client's ``backoff``)
  and honours ``Retry-After``. The ledger resumes after that id, so a consumer sees every event
  once, in order, also across a server restart.
- A 4xx answer (400 ``invalid_request``, 401 ``unauthenticated``, 403 ``forbidden``, …) raises
  the client's typed error; it is never retried.
- The token is sent only in the ``Authorization: Bearer`` header, never in the URL.
"""

from __future__ import annotations

import http.client
import logging
import random
import re
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .digest import canonicalize_record, leaf_hash, loads_record
from .errors import EventStreamError, HitlLedgerError, LedgerConnectionError
from .sse import SSEError, SSEEvent, SSEParser

if TYPE_CHECKING:
    from .client import LedgerClient

__all__ = ["Event", "EventStream"]

log = logging.getLogger("hitl_ledger.events")

_SEQ = re.compile(r"[0-9]{1,16}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Event:
    """One record of the decision stream.

    ``seq`` is the record's position in the log (the event id), ``leaf_hash`` its id (checked
    against the record), ``record`` the stored record as JSON (envelope and ``body``).
    """

    seq: int
    leaf_hash: str
    record: dict[str, Any] = field(repr=False)

    @property
    def kind(self) -> str:
        """The record's ``kind``: ``interrupt``, ``decision``, ``rejection``, ``follow_up``,
        ``authorization``, ``timeout``, ``revocation``, ``refusal``, ``policy`` (a change of
        the policy in force, thread ``hitl-ledger/policy``, no request; not sent to agent
        tokens) or ``review`` (a break-glass use's post-event review). A kind this client does
        not know is delivered like any other (spec section 11.5: clients read every record)."""
        return self.record.get("kind", "")

    @property
    def partial(self) -> bool:
        """A partial approval (spec section 7.5): a ``decision`` that approves with
        ``ticket_id: null`` (``body["approvals"]`` of ``body["approvals_required"]``). It
        issues nothing and leaves the request open: nothing may resume or authorize with it;
        the last approval carries the ticket."""
        body = self.body
        return (
            self.kind == "decision"
            and body.get("decision") == "approve"
            and body.get("ticket_id") is None
        )

    @property
    def request_id(self) -> str | None:
        """The record's ``request_id`` (``None`` on a refusal that names no request)."""
        return self.record.get("request_id")

    @property
    def thread_id(self) -> str | None:
        """The record's ``thread_id``."""
        return self.record.get("thread_id")

    @property
    def body(self) -> dict[str, Any]:
        """The record's ``body`` (the kind's fields)."""
        return self.record.get("body") or {}


def parse_record_event(sse: SSEEvent, after: int | None) -> Event:
    """Check one ``record`` event against the stream's promises; answer it as an :class:`Event`.

    ``after`` is the seq of the previous event (or the position the stream was asked from).
    """
    raw_id = sse.id
    if raw_id is None or not _SEQ.fullmatch(raw_id):
        raise EventStreamError(
            f"a record event has no decimal id (id {raw_id!r})", event_id=raw_id, after=after
        )
    seq = int(raw_id)
    if after is not None and seq <= after:
        raise EventStreamError(
            f"event id {seq} does not follow {after}: ids must strictly increase "
            "(the stream repeated or reordered a record)",
            event_id=raw_id,
            after=after,
        )
    try:
        data = loads_record(sse.data)
    except HitlLedgerError as e:
        raise EventStreamError(
            f"event {seq}: data is not JSON: {e}", event_id=raw_id, after=after
        ) from e
    if not isinstance(data, dict):
        raise EventStreamError(f"event {seq}: data is not a JSON object", event_id=raw_id,
                               after=after)
    record, data_seq, hash_ = data.get("record"), data.get("seq"), data.get("leaf_hash")
    if not isinstance(record, dict):
        raise EventStreamError(f"event {seq}: data has no record object", event_id=raw_id,
                               after=after)
    if type(data_seq) is not int or data_seq != seq or record.get("seq") != seq:
        raise EventStreamError(
            f"event id {seq} names another record: data seq {data_seq!r}, "
            f"record seq {record.get('seq')!r}",
            event_id=raw_id,
            after=after,
        )
    if not isinstance(hash_, str) or not _HEX64.fullmatch(hash_):
        raise EventStreamError(f"event {seq}: leaf_hash is not 64 lowercase hex digits",
                               event_id=raw_id, after=after)
    try:
        actual = leaf_hash(canonicalize_record(record))
    except HitlLedgerError as e:
        raise EventStreamError(f"event {seq}: record is not canonical JSON: {e}",
                               event_id=raw_id, after=after) from e
    if actual != hash_:
        raise EventStreamError(
            f"event {seq}: leaf_hash {hash_} is not the record's ({actual})",
            event_id=raw_id,
            after=after,
        )
    return Event(seq=seq, leaf_hash=hash_, record=record)


class EventStream:
    """An iterator over :class:`Event`, following ``GET /v1/events`` (see the module doc).

    Made by :meth:`hitl_ledger.LedgerClient.events`. :attr:`last_seq` is the seq of the last
    event yielded (or the ``after`` it started from); :meth:`close` (safe from another thread)
    ends the iteration, also while it waits for an event.
    """

    def __init__(
        self,
        client: LedgerClient,
        after: int | None,
        *,
        idle_timeout: float | None = None,
        read_timeout: float = 45.0,
        backoff: float | None = None,
        max_backoff: float = 30.0,
        max_reconnects: int | None = None,
    ) -> None:
        if after is not None and (type(after) is not int or after < 0):
            raise ValueError(f"after is a non-negative integer seq or None, got {after!r}")
        if read_timeout <= 0 or max_backoff < 0 or (idle_timeout is not None and idle_timeout < 0):
            raise ValueError("timeouts and backoffs are positive")
        self._client = client
        #: The seq of the last event yielded, or the position the stream started after.
        self.last_seq: int | None = after
        self._seen: int | None = after  # the last event checked (queued or yielded)
        self.idle_timeout = idle_timeout
        self.read_timeout = read_timeout
        self.backoff = client.backoff if backoff is None else backoff
        self.max_backoff = max_backoff
        self.max_reconnects = max_reconnects
        #: Connections opened so far (the first included), and the ``Last-Event-ID`` each sent.
        self.connections: list[int | None] = []
        self._queue: deque[Event] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._conn: http.client.HTTPConnection | None = None
        # The connection's socket, kept here: http.client lets go of it (conn.sock = None) when
        # the response will close the connection, yet the response still reads from it.
        self._sock: socket.socket | None = None
        self._resp: http.client.HTTPResponse | None = None
        self._parser: SSEParser | None = None
        self._retry_ms: int | None = None
        self._failures = 0  # consecutive attempts without an event
        self._retry_after: float | None = None
        self._connected_at = 0.0
        self._idle_since = time.monotonic()
        self._ever_connected = False

    def __repr__(self) -> str:
        return f"EventStream({self._client.base_url!r}, last_seq={self.last_seq})"

    def __iter__(self) -> EventStream:
        return self

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """``True`` once :meth:`close` was called or the iteration ended."""
        return self._closed

    def close(self) -> None:
        """Stop the stream: the connection is shut down, a blocked read or wait returns, and the
        iteration ends (``StopIteration``). Safe to call from any thread, more than once."""
        with self._lock:
            self._closed = True
            sock = self._sock
        self._wake.set()
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __next__(self) -> Event:
        while True:
            if self._closed:
                self._drop()
                raise StopIteration
            if self._queue:
                event = self._queue.popleft()
                self.last_seq = event.seq
                return event
            if self._idle_over():
                self._drop()
                self._give_up_idle()
            if self._resp is None:
                if not self._connect():
                    continue
            self._read_some()

    # ------------------------------------------------------------------ internals

    def _idle_over(self) -> bool:
        return (
            self.idle_timeout is not None
            and time.monotonic() - self._idle_since >= self.idle_timeout
        )

    def _idle_remaining(self) -> float | None:
        if self.idle_timeout is None:
            return None
        return max(0.0, self.idle_timeout - (time.monotonic() - self._idle_since))

    def _delay(self) -> float:
        if self._retry_after is not None:
            delay = self._retry_after
        else:
            base = self._retry_ms / 1000.0 if self._retry_ms is not None else self.backoff
            delay = base * (2 ** max(0, self._failures - 1))
            delay *= 1.0 + random.random() * 0.25  # spread reconnecting clients a little
        return min(delay, self.max_backoff)

    def _wait(self, delay: float) -> None:
        remaining = self._idle_remaining()
        if remaining is not None and delay >= remaining:
            self._wake.wait(remaining)
            if not self._closed:
                self._give_up_idle()
        self._wake.wait(delay)

    def _give_up_idle(self) -> None:
        """The idle window ended: stop, or raise when no connection ever came up."""
        self._closed = True
        if not self._ever_connected:
            raise LedgerConnectionError(
                f"cannot reach hitl-ledger at {self._client.base_url} for GET /v1/events "
                f"within {self.idle_timeout}s",
                url=self._client.base_url + "/v1/events",
                retried=max(0, len(self.connections) - 1),
            )
        raise StopIteration

    def _failed(self, why: str) -> None:
        """A connection attempt or a stream failed: count it, or give up past the bound."""
        self._failures += 1
        if self.max_reconnects is not None and self._failures > self.max_reconnects:
            self._closed = True
            raise LedgerConnectionError(
                f"hitl-ledger event stream at {self._client.base_url}: {why} "
                f"({self._failures} attempts in a row)",
                url=self._client.base_url + "/v1/events",
                retried=self._failures - 1,
            )
        log.info("event stream: %s; reconnecting after seq %s", why, self._seen)

    def _connect(self) -> bool:
        """Open one connection; answer whether the stream is up (else the caller loops)."""
        if self.connections:
            self._wait(self._delay())
            if self._closed:
                return False
        self._retry_after = None
        position = self._seen
        query = f"?after={position}" if position is not None else ""
        headers = {
            "Accept": "text/event-stream",
            "Cache-Control": "no-cache",
        }
        if self._client.token is not None:
            headers["Authorization"] = f"Bearer {self._client.token}"
        if position is not None:
            headers["Last-Event-ID"] = str(position)
        self.connections.append(position)
        conn = self._client._connection()
        with self._lock:
            if self._closed:
                conn.close()
                return False
            self._conn = conn
        try:
            conn.putrequest("GET", self._client._prefix + "/v1/events" + query,
                            skip_accept_encoding=True)
            for name, value in headers.items():
                conn.putheader(name, value)
            conn.endheaders()
            with self._lock:
                self._sock = conn.sock
            resp = conn.getresponse()
            if self._closed:  # closed while connecting: close() may have missed the socket
                self._drop()
                return False
        except (OSError, http.client.HTTPException) as e:
            self._drop()
            if self._closed:
                return False
            from .client import _describe

            self._failed(_describe(e))
            return False
        ctype = (resp.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if resp.status == 200 and ctype == "text/event-stream":
            self._resp = resp
            self._parser = SSEParser()
            self._connected_at = time.monotonic()
            self._ever_connected = True
            return True
        try:
            payload = resp.read()
        except (OSError, http.client.HTTPException):
            payload = b""
        self._drop()
        if resp.status >= 500:
            from .client import _retry_after

            self._retry_after = _retry_after(resp.headers)
            self._failed(f"answer {resp.status}")
            return False
        # 4xx raises the typed error; a 2xx that is not an event stream is a protocol error.
        self._closed = True
        self._client._answer("GET", "/v1/events", resp.status, resp.headers, payload, True)
        from .errors import LedgerProtocolError

        raise LedgerProtocolError(
            f"GET /v1/events answered {resp.status} {ctype or 'without a Content-Type'}, "
            "not text/event-stream",
            status=resp.status,
            body=payload[:200],
        )

    def _read_some(self) -> None:
        resp, parser, sock = self._resp, self._parser, self._sock
        if self._closed or resp is None or parser is None or sock is None:
            self._drop()
            return
        timeout = self.read_timeout
        remaining = self._idle_remaining()
        idle_bound = remaining is not None and remaining < timeout
        if idle_bound:
            timeout = max(remaining, 0.001)
        try:
            sock.settimeout(timeout)
            chunk = resp.read1(65536)
        except (TimeoutError, socket.timeout):
            self._drop()
            if self._closed:
                return
            if idle_bound:
                self._closed = True
                return  # the idle window ended: __next__ stops
            self._end_of_connection(f"no event or heartbeat for {self.read_timeout}s")
            return
        except (OSError, http.client.HTTPException, ValueError) as e:
            self._drop()
            if not self._closed:
                from .client import _describe

                self._end_of_connection(f"the stream broke: {_describe(e)}")
            return
        if not chunk:
            self._drop()
            if not self._closed:
                self._end_of_connection("the server closed the stream")
            return
        try:
            events = parser.feed(chunk)
        except SSEError as e:
            self._drop()
            self._closed = True
            raise EventStreamError(str(e), event_id=None, after=self._seen) from e
        if parser.retry_ms is not None:
            self._retry_ms = parser.retry_ms
        for sse in events:
            if sse.event != "record":
                log.debug("event stream: ignoring an event of type %r", sse.event)
                continue
            try:
                event = parse_record_event(sse, self._seen)
            except EventStreamError:
                self._drop()
                self._closed = True
                raise
            self._seen = event.seq
            self._queue.append(event)
            self._failures = 0
            self._idle_since = time.monotonic()

    def _end_of_connection(self, why: str) -> None:
        if time.monotonic() - self._connected_at >= self.max_backoff:
            self._failures = 0  # a long-lived connection: start the backoff afresh
        self._failed(why)

    def _drop(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            self._sock = None
        resp, self._resp = self._resp, None
        self._parser = None
        for closable in (resp, conn):
            if closable is not None:
                try:
                    closable.close()
                except (OSError, http.client.HTTPException):
                    pass
