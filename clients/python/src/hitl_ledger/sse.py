"""A Server-Sent Events parser, as the WHATWG HTML standard ("Server-sent events", section
9.2.6, "Interpreting an event stream") specifies it, fed with bytes as they arrive.

- Lines end with CRLF, LF or CR, also when the CR and the LF arrive in different chunks.
- A UTF-8 byte order mark at the very start of the stream is dropped.
- ``:`` starts a comment (the ledger's ``: connected`` and ``: heartbeat``), reported through
  :attr:`SSEParser.comments` only as a count, never as an event.
- ``field: value`` (one space after the colon is dropped; a line without a colon is a field with
  an empty value). ``data`` lines are joined with ``\\n``; ``event`` sets the type (default
  ``message``); ``id`` sets the last event id unless the value holds U+0000, and the id persists
  to the following events until another ``id`` line; ``retry`` sets the reconnection time when
  the value is only ASCII digits; any other field is ignored.
- An empty line dispatches the event, unless no ``data`` line came (then only the type and data
  buffers are reset, while an ``id`` line still sets the last event id).
- An event that the end of the stream interrupts is discarded.

This module knows nothing of the ledger; :meth:`hitl_ledger.LedgerClient.events` checks what the
events say.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["SSEEvent", "SSEParser", "SSEError"]

_BOM = "\ufeff"


class SSEError(ValueError):
    """The stream broke a limit of the parser (an event or a line larger than allowed)."""


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched event: its type, its data (lines joined with ``\\n``) and the last event
    id in force when it was dispatched (``None`` when no ``id`` line has come yet)."""

    event: str
    data: str
    id: str | None


class SSEParser:
    """Feed bytes with :meth:`feed`; it answers the events completed by them, in order.

    ``max_event_bytes`` bounds the bytes one event (or one pending line) may hold, so a stream
    that never ends its line cannot exhaust memory: past it :class:`SSEError` is raised.
    """

    def __init__(self, *, max_event_bytes: int = 16 * 1024 * 1024) -> None:
        self.max_event_bytes = max_event_bytes
        #: The last event id (persists across events, as the standard says).
        self.last_event_id: str | None = None
        #: The reconnection time in milliseconds from the last valid ``retry`` field.
        self.retry_ms: int | None = None
        #: How many comment lines were seen (heartbeats among them).
        self.comments = 0
        self._pending = bytearray()  # bytes of a line not yet ended
        self._skip_lf = False  # the previous chunk ended with CR: a leading LF belongs to it
        self._started = False  # the BOM check happens once, on the first line
        self._data: list[str] = []
        self._data_bytes = 0
        self._event_type = ""

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk``; answer the events it completes."""
        out: list[SSEEvent] = []
        for line in self._lines(chunk):
            event = self._line(line)
            if event is not None:
                out.append(event)
        return out

    def _lines(self, chunk: bytes) -> Iterator[str]:
        i = 0
        n = len(chunk)
        if self._skip_lf and n:
            if chunk[0:1] == b"\n":
                i = 1
            self._skip_lf = False
        while i < n:
            cr = chunk.find(b"\r", i)
            lf = chunk.find(b"\n", i)
            if cr < 0 and lf < 0:
                self._pending += chunk[i:]
                if len(self._pending) > self.max_event_bytes:
                    raise SSEError(
                        f"an event-stream line exceeds {self.max_event_bytes} bytes"
                    )
                return
            end = min(x for x in (cr, lf) if x >= 0)
            self._pending += chunk[i:end]
            line = bytes(self._pending)
            self._pending.clear()
            if chunk[end:end + 1] == b"\r":
                if end + 1 < n:
                    i = end + 2 if chunk[end + 1:end + 2] == b"\n" else end + 1
                else:
                    self._skip_lf = True
                    i = n
            else:
                i = end + 1
            yield self._decode(line)

    def _decode(self, line: bytes) -> str:
        text = line.decode("utf-8", "replace")
        if not self._started:
            self._started = True
            if text.startswith(_BOM):
                text = text[1:]
        return text

    def _line(self, line: str) -> SSEEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            self.comments += 1
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._data_bytes += len(value) + 1
            if self._data_bytes > self.max_event_bytes:
                raise SSEError(f"an event's data exceeds {self.max_event_bytes} bytes")
        elif name == "event":
            self._event_type = value
        elif name == "id":
            if "\x00" not in value:
                self.last_event_id = value
        elif name == "retry":
            if value and value.isascii() and value.isdigit():
                self.retry_ms = int(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        data, event_type = self._data, self._event_type
        self._data, self._data_bytes, self._event_type = [], 0, ""
        if not data:
            return None
        return SSEEvent(event=event_type or "message", data="\n".join(data), id=self.last_event_id)
