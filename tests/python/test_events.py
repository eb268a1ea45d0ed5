"""The decision stream: the SSE parser, ``LedgerClient.events`` against a scripted SSE server
(reconnects, backoff, the checks on ids), and against the real server binary (order, resume
across a restart, what an agent sees of its own and another agent's requests)."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import restart_server
from hitl_ledger import Event, EventStreamError, LedgerClient, digest, errors
from hitl_ledger.sse import SSEError, SSEEvent, SSEParser

# ------------------------------------------------------------------ the SSE parser


def parse(*chunks: bytes) -> tuple[list[SSEEvent], SSEParser]:
    p = SSEParser()
    out: list[SSEEvent] = []
    for c in chunks:
        out += p.feed(c)
    return out, p


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_parser_every_line_ending(eol):
    text = eol.join([b"id: 1", b"event: record", b"data: a", b"data: b", b"", b"data: c", b"",
                     b""])
    events, _ = parse(text)
    assert events == [SSEEvent("record", "a\nb", "1"), SSEEvent("message", "c", "1")]


def test_parser_byte_by_byte_with_crlf_split_between_chunks():
    text = (b"id: 7\r\nevent: record\r\ndata: {\"x\": 1}\r\n\r\n: heartbeat\r\n\r\n"
            b"id: 8\rdata: z\r\r")
    whole, _ = parse(text)
    split, p = parse(*[text[i:i + 1] for i in range(len(text))])
    assert split == whole == [SSEEvent("record", '{"x": 1}', "7"), SSEEvent("message", "z", "8")]
    assert p.comments == 1
    # A CR at the end of one chunk and the LF at the start of the next are one line ending,
    # not an extra empty line (which would dispatch early).
    events, _ = parse(b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n")
    assert events == [SSEEvent("message", "a\nb", None)]


def test_parser_fields_comments_and_retry():
    events, p = parse(
        b"\xef\xbb\xbfretry: 2500\n"  # a BOM at the start of the stream is dropped
        b": connected\n"
        b":no space comment\n"
        b"data:no-space\n"  # no space after the colon
        b"data\n"  # a field with no colon: empty value
        b"data:  two spaces\n"  # only one space is dropped
        b"unknown: ignored\n"
        b"retry: 12x\n"  # not all digits: ignored
        b"id: 3\x004\n"  # an id holding NUL is ignored
        b"\n"
    )
    assert events == [SSEEvent("message", "no-space\n\n two spaces", None)]
    assert p.retry_ms == 2500 and p.comments == 2


def test_parser_event_without_data_is_not_dispatched_and_id_persists():
    events, p = parse(b"id: 5\nevent: record\n\nevent: other\ndata: x\n\ndata: y\n\n")
    # The first block has no data: nothing dispatched, the type is reset, the id is kept.
    assert events == [SSEEvent("other", "x", "5"), SSEEvent("message", "y", "5")]
    assert p.last_event_id == "5"
    events, _ = parse(b"id: 1\ndata: a\n\nid\ndata: b\n\n")  # `id` with no value: empty id
    assert [e.id for e in events] == ["1", ""]


def test_parser_discards_an_event_the_end_interrupts():
    events, _ = parse(b"id: 1\ndata: complete\n\nid: 2\ndata: cut off")
    assert events == [SSEEvent("message", "complete", "1")]


def test_parser_bounds_an_endless_line():
    p = SSEParser(max_event_bytes=64)
    with pytest.raises(SSEError):
        p.feed(b"data: " + b"x" * 100)
    p = SSEParser(max_event_bytes=64)
    with pytest.raises(SSEError):
        for _ in range(10):
            p.feed(b"data: " + b"y" * 20 + b"\n")


# ------------------------------------------------------------------ a scripted SSE server


def record(seq: int, kind: str = "decision", **extra) -> dict:
    return {"v": 1, "origin": "fake.test/x", "seq": seq, "kind": kind, "thread_id": "t",
            "request_id": f"r-{seq}", "body": {}, **extra}


def frame(seq: int, *, id_: str | None = None, rec: dict | None = None,
          leaf_hash: str | None = None, data_seq: int | None = None, eol: bytes = b"\n") -> bytes:
    rec = rec if rec is not None else record(seq)
    leaf = digest.canonicalize_record(rec)
    h = leaf_hash or digest.leaf_hash(leaf)
    # As the server writes it: the leaf spliced in byte for byte.
    data = '{"leaf_hash":%s,"record":%s,"seq":%s}' % (
        json.dumps(h), leaf.decode("utf-8"), json.dumps(seq if data_seq is None else data_seq))
    lines = [] if id_ == "" else [f"id: {seq if id_ is None else id_}".encode()]
    lines += [b"event: record", b"data: " + data.encode(), b""]
    return eol.join(lines) + eol


class Conn:
    """What one connection to the fake server is answered: a status, headers, then chunks;
    then it closes (``hold=False``) or stays open until the test ends."""

    def __init__(self, chunks=(), *, status=200, headers=None, body=None, hold=False,
                 delay=0.0):
        self.chunks = list(chunks)
        self.status = status
        self.headers = headers or {}
        self.body = body
        self.hold = hold
        self.delay = delay


class FakeSSE:
    def __init__(self) -> None:
        self.script: list[Conn] = []
        self.requests: list[tuple[str, dict]] = []
        self.release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                fake.requests.append((self.path, dict(self.headers)))
                conn = fake.script.pop(0) if fake.script else Conn(hold=True,
                                                                   chunks=[b": idle\n\n"])
                if conn.body is not None:
                    data = json.dumps(conn.body).encode()
                    self.send_response(conn.status)
                    self.send_header("Content-Type", "application/json")
                    for k, v in conn.headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(conn.status)
                self.send_header("Content-Type", conn.headers.pop("Content-Type",
                                                                  "text/event-stream"))
                for k, v in conn.headers.items():
                    self.send_header(k, v)
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    for c in conn.chunks:
                        if conn.delay:
                            time.sleep(conn.delay)
                        self.wfile.write(c)
                        self.wfile.flush()
                    if conn.hold:
                        fake.release.wait(30)
                except OSError:
                    pass
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,),
                                       daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sse():
    fake = FakeSSE()
    yield fake
    fake.close()


def client(url: str, **kw) -> LedgerClient:
    return LedgerClient(url, "tok-secret", backoff=0.01, **kw)


def take(stream, n: int) -> list[Event]:
    out = []
    for ev in stream:
        out.append(ev)
        if len(out) == n:
            break
    return out


def test_events_reconnect_after_the_last_event_yielded(sse):
    sse.script += [
        Conn([b"retry: 10\n: connected\n\n", frame(0), frame(1), frame(2)[:-5]]),  # cut mid-event
        Conn([frame(2), frame(3)]),  # the server resumes after 1
        Conn([frame(4)], hold=True),
    ]
    with client(sse.url).events(max_backoff=0.05) as stream:
        events = take(stream, 5)
    assert [e.seq for e in events] == [0, 1, 2, 3, 4]
    assert events[2].record == record(2) and events[2].kind == "decision"
    assert events[2].leaf_hash == digest.leaf_hash(digest.canonicalize(record(2)))
    paths = [p for p, _ in sse.requests]
    assert paths == ["/v1/events", "/v1/events?after=1", "/v1/events?after=3"]
    heads = [h for _, h in sse.requests]
    assert "Last-Event-ID" not in heads[0]
    assert [h.get("Last-Event-ID") for h in heads[1:]] == ["1", "3"]
    for h in heads:  # the token only in the Authorization header
        assert h["Authorization"] == "Bearer tok-secret"
        assert h["Accept"] == "text/event-stream"
    assert all("tok-secret" not in p for p in paths)
    assert stream.connections == [None, 1, 3]


def test_events_start_after_a_position_and_crlf(sse):
    sse.script.append(Conn([frame(8, eol=b"\r\n"), frame(12, eol=b"\r\n")], hold=True))
    with client(sse.url).events(after=7) as stream:
        assert [e.seq for e in take(stream, 2)] == [8, 12]  # an agent's stream has gaps
        assert stream.last_seq == 12
    assert sse.requests[0][0] == "/v1/events?after=7"
    assert sse.requests[0][1]["Last-Event-ID"] == "7"


@pytest.mark.parametrize("bad, message", [
    (lambda: frame(1) + frame(1), "does not follow 1"),  # a repeat
    (lambda: frame(2) + frame(1), "does not follow 2"),  # out of order
    (lambda: frame(1, id_="2"), "names another record"),
    (lambda: frame(1, data_seq=2), "names another record"),
    (lambda: frame(1, rec=record(2)), "names another record"),
    (lambda: frame(1, id_=""), "no decimal id"),
    (lambda: frame(1, id_="-1"), "no decimal id"),
    (lambda: frame(1, id_="0x1"), "no decimal id"),
    (lambda: frame(1, leaf_hash="0" * 64), "is not the record's"),
    (lambda: b"id: 1\nevent: record\ndata: [1]\n\n", "not a JSON object"),
    (lambda: b"id: 1\nevent: record\ndata: {\"seq\": 1\n\n", "not JSON"),
])
def test_events_refuse_what_breaks_the_order(sse, bad, message):
    sse.script.append(Conn([bad()], hold=True))
    stream = client(sse.url).events(after=0, idle_timeout=2.0)  # ends rather than hangs
    with pytest.raises(EventStreamError, match=message):
        list(stream)
    assert stream.closed


#: Numbers a leaf holds as integer literals beyond 2^53 (JCS writes the double 1e20 as
#: 100000000000000000000), which a strict request parser refuses but a record may hold; they
#: are read as the doubles they name.
LARGE = {"n": 1e20, "m": -1.2345678901234567e19, "p": 1.8446744073709552e19, "f": 1.5e300,
         "e": 2e21, "list": [1e20, 1]}


def test_events_deliver_a_record_holding_large_numbers(sse):
    big = record(1, kind="follow_up", body={"detail": LARGE})
    sse.script.append(Conn([frame(1, rec=big), frame(2)], hold=True))
    with client(sse.url).events(after=0, idle_timeout=5.0) as stream:
        first, second = take(stream, 2)
    assert (first.seq, second.seq) == (1, 2)  # the record after it arrives too
    detail = first.body["detail"]
    assert detail == LARGE and type(detail["n"]) is float and detail["list"][1] == 1
    leaf = digest.record_leaf(first.record)
    assert leaf.count(b"100000000000000000000") == 2 and b"-12345678901234567000" in leaf
    assert first.leaf_hash == digest.leaf_hash(digest.record_leaf(first.record))


def test_events_still_refuse_a_large_integer_that_is_not_a_leafs(sse):
    # 2^53 + 1 is no double's canonical text: no leaf holds it, so the hash cannot check.
    forged = record(1, kind="follow_up", body={"detail": {"n": 9007199254740993}})
    leaf = digest.canonicalize_record(forged).replace(b"9007199254740992", b"9007199254740993")
    sse.script.append(Conn([frame(1, rec=forged, leaf_hash=digest.leaf_hash(leaf))], hold=True))
    with pytest.raises(EventStreamError, match="is not the record's"):
        next(client(sse.url).events(after=0, idle_timeout=2.0))


@pytest.mark.parametrize("text, message", [
    ('{"a": 1, "a": 2}', "duplicate"),
    ('{"a": NaN}', "NaN"),
    ('{"a": 1e400}', "overflows"),
    ('{"a": 1' + "0" * 400 + "}", "overflows"),
])
def test_loads_record_is_strict_about_everything_but_large_integers(text, message):
    with pytest.raises(errors.NotCanonicalizable, match=message):
        digest.loads_record(text)
    assert digest.loads_record('{"n": 100000000000000000000, "s": 3}') == {"n": 1e20, "s": 3}
    assert digest.canonicalize_record({"n": 10**20, "b": True}) == (
        b'{"b":true,"n":100000000000000000000}')


def test_events_refuse_a_record_at_or_before_after(sse):
    sse.script.append(Conn([frame(3)], hold=True))
    with pytest.raises(EventStreamError, match="does not follow 3"):
        next(client(sse.url).events(after=3))


def test_events_ignore_other_event_types_and_comments(sse):
    sse.script.append(Conn([b": heartbeat\n\nevent: other\ndata: {}\n\n", frame(1)], hold=True))
    assert [e.seq for e in take(client(sse.url).events(), 1)] == [1]


@pytest.mark.parametrize("status, code, cls", [
    (400, "invalid_request", errors.InvalidRequest),
    (401, "unauthenticated", errors.Unauthenticated),
    (403, "forbidden", errors.Forbidden),
])
def test_events_client_errors_raise_typed_and_are_not_retried(sse, status, code, cls):
    sse.script.append(Conn(status=status, body={"error": code, "message": "no"}))
    with pytest.raises(cls) as info:  # (a retry would end in LedgerConnectionError instead)
        next(client(sse.url).events(read_timeout=0.5, max_reconnects=1))
    assert info.value.code == code and info.value.status == status
    assert len(sse.requests) == 1


def test_events_5xx_is_retried_honouring_retry_after(sse):
    sse.script += [
        Conn(status=503, body={"error": "overloaded", "message": "busy"},
             headers={"Retry-After": "1"}),
        Conn(status=500, body={"error": "internal_error", "message": "oops"}),
        Conn([frame(0)], hold=True),
    ]
    started = time.monotonic()
    events = take(client(sse.url).events(), 1)
    elapsed = time.monotonic() - started
    assert [e.seq for e in events] == [0] and len(sse.requests) == 3
    assert elapsed >= 1.0  # the Retry-After of the 503 was waited


def test_events_backoff_is_bounded_and_gives_up_when_asked():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    stream = LedgerClient(f"http://127.0.0.1:{port}", "t", backoff=0.02).events(
        max_backoff=0.05, max_reconnects=4)
    started = time.monotonic()
    with pytest.raises(errors.LedgerConnectionError) as info:
        next(stream)
    assert len(stream.connections) == 5 and info.value.retried == 4
    assert time.monotonic() - started < 1.0  # 0.02, 0.04 then 0.05 (bounded), never more


def test_events_server_retry_field_sets_the_reconnect_delay(sse):
    sse.script += [Conn([b"retry: 700\n\n", frame(0)]), Conn([frame(1)], hold=True)]
    stream = client(sse.url).events()
    assert next(stream).seq == 0
    started = time.monotonic()
    assert next(stream).seq == 1
    assert 0.7 <= time.monotonic() - started < 3.0


def test_events_silent_connection_is_replaced(sse):
    # A connection that sends nothing (no heartbeat) for read_timeout is dead: reconnect.
    sse.script += [Conn([frame(0)], hold=True), Conn([frame(1)], hold=True)]
    stream = client(sse.url).events(read_timeout=0.3)
    assert [e.seq for e in take(stream, 2)] == [0, 1]
    assert stream.connections == [None, 0]
    stream.close()


def test_events_idle_timeout_ends_the_iteration(sse):
    sse.script.append(Conn([frame(0), frame(1), b": heartbeat\n\n"], hold=True, ))
    started = time.monotonic()
    assert [e.seq for e in client(sse.url).events(idle_timeout=0.3)] == [0, 1]
    assert time.monotonic() - started < 2.0


def test_events_idle_timeout_without_a_server_is_a_connection_error():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(errors.LedgerConnectionError):
        list(LedgerClient(f"http://127.0.0.1:{port}", "t", backoff=0.05).events(
            idle_timeout=0.3))


def test_events_close_from_another_thread_wakes_a_blocked_read(sse):
    sse.script.append(Conn([b": connected\n\n"], hold=True))
    stream = client(sse.url).events()
    got = []
    t = threading.Thread(target=lambda: got.extend(stream))
    t.start()
    time.sleep(0.3)
    stream.close()
    t.join(5)
    assert not t.is_alive() and got == []


def test_events_not_an_event_stream_is_a_protocol_error(sse):
    sse.script.append(Conn([b"<html>proxy</html>"], headers={"Content-Type": "text/html"}))
    with pytest.raises(errors.LedgerProtocolError):
        next(client(sse.url).events())


def test_events_after_must_be_a_seq():
    c = LedgerClient("http://127.0.0.1:1", "t")
    for bad in (-1, "3", 1.5, True):
        with pytest.raises(ValueError):
            c.events(after=bad)


# ------------------------------------------------------------------ the real server

ACTION = {"tool": "refund", "args": {"order_id": "O-7", "amount_cents": 300}}


def open_request(agent: LedgerClient, thread: str) -> str:
    rid = f"req-{uuid.uuid4().hex[:12]}"
    agent.append_interrupt(request_id=rid, thread_id=thread, interrupt_id=f"i-{rid}",
                           action=ACTION)
    return rid


def size(c: LedgerClient) -> int:
    return int(c.checkpoint().split("\n")[1])


class Consumer:
    """Reads a stream in a thread into a list, until closed."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.events: list[Event] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for ev in self.stream:
                self.events.append(ev)
        except BaseException as e:  # noqa: BLE001 - checked by the test
            self.error = e

    def wait_for(self, predicate, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self.events):
                return
            if self.error is not None:
                raise self.error
            time.sleep(0.02)
        raise AssertionError(f"timed out; got seqs {[e.seq for e in self.events]}")

    def close(self) -> None:
        self.stream.close()
        self.thread.join(10)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error


def test_reviewer_stream_is_the_whole_log_in_order(ledger):
    thread = f"ev-{uuid.uuid4().hex[:8]}"
    rids = [open_request(ledger.agent, thread) for _ in range(3)]
    ledger.reviewer.approve(rids[0], "ok")
    ledger.reviewer.reject(rids[1], "no")
    n = size(ledger.auditor)
    events = list(ledger.reviewer.events(idle_timeout=1.0))
    assert [e.seq for e in events] == list(range(n))  # gapless, from seq 0
    assert [e.record["seq"] for e in events] == list(range(n))
    for e in events:
        assert digest.leaf_hash(digest.record_leaf(e.record)) == e.leaf_hash
    ours = [e for e in events if e.thread_id == thread]
    assert [(e.kind, e.request_id) for e in ours] == [
        ("interrupt", rids[0]), ("interrupt", rids[1]), ("interrupt", rids[2]),
        ("decision", rids[0]), ("rejection", rids[1])]
    assert ours[3].body["ticket_id"] and ours[3].body["expires_at"]
    assert ours[4].body["rationale"] == "no"
    # The auditor sees the same; a later start resumes after the given seq.
    assert [e.seq for e in ledger.auditor.events(after=n - 3, idle_timeout=1.0)] == [
        n - 2, n - 1]


def test_live_events_arrive_as_they_commit(ledger):
    thread = f"live-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(ledger.reviewer.events(after=size(ledger.auditor) - 1))
    try:
        rid = open_request(ledger.agent, thread)
        consumer.wait_for(lambda evs: any(e.request_id == rid for e in evs))
        answer = ledger.reviewer.approve(rid)
        consumer.wait_for(lambda evs: any(e.seq == answer.seq for e in evs))
    finally:
        consumer.close()
    seqs = [e.seq for e in consumer.events]
    assert seqs == sorted(set(seqs))


def test_agent_sees_only_its_own_requests_and_reviewer_sees_all(ledger):
    thread = f"filter-{uuid.uuid4().hex[:8]}"
    start = size(ledger.auditor) - 1
    mine = open_request(ledger.agent, thread)
    theirs = open_request(ledger.clients["agent2"], thread + "-2")
    ledger.reviewer.approve(mine)
    ledger.reviewer.reject(theirs, "not this one")
    edited = ledger.reviewer.edit(open_request(ledger.clients["agent2"], thread + "-2"),
                                  {"tool": "refund", "args": {"order_id": "O-7",
                                                              "amount_cents": 100}})
    ledger.agent.revoke(mine, "changed my mind")

    def seen(c):
        return list(c.events(after=start if start >= 0 else None, idle_timeout=1.0))

    agent1, agent2, reviewer = seen(ledger.agent), seen(ledger.clients["agent2"]), seen(
        ledger.reviewer)
    assert [e.seq for e in reviewer] == list(range(start + 1, size(ledger.auditor)))
    assert {e.request_id for e in agent1} == {mine}
    assert [e.kind for e in agent1] == ["interrupt", "decision", "revocation"]
    assert all(e.record["actor"]["principal"] != "py-agent-2" for e in agent1)
    # The other agent sees its own requests, the edit's new request included (its interrupt
    # names the original in edit_of, and its approval carries the ticket).
    assert mine not in {e.request_id for e in agent2}
    assert theirs in {e.request_id for e in agent2}
    new = [e for e in agent2 if e.request_id == edited.new_request_id]
    assert [e.kind for e in new] == ["interrupt", "decision"]
    assert new[0].body["edit_of"] == edited.request_id
    assert new[1].body["ticket_id"] == edited.ticket_id
    edit_decision = [e for e in agent2 if e.kind == "decision" and
                     e.body.get("decision") == "edit"]
    assert [e.seq for e in edit_decision] == [new[0].seq - 1]
    assert new[1].seq == new[0].seq + 1  # one atomic write: three consecutive seqs
    assert {e.seq for e in agent1}.isdisjoint({e.seq for e in agent2})
    assert {e.seq for e in agent1} | {e.seq for e in agent2} == {e.seq for e in reviewer}


#: A follow-up whose detail holds numbers that the ledger stores as integer literals beyond 2^53.
BIG_FOLLOW_UP = (b'{"follow_up_id":"f-big","follows":"%s","outcome":"noted","detail":'
                 b'{"n":1e20,"m":-12345678901234567e3,"p":1.8446744073709552e19,'
                 b'"s":[1e300,2e21]}}')
BIG_STORED = {"n": 1e20, "m": -1.2345678901234567e19, "p": 1.8446744073709552e19,
              "s": [1e300, 2e21]}


def append_big_follow_up(agent: LedgerClient, rid: str, follows: str) -> dict:
    """Append BIG_FOLLOW_UP to ``rid`` as raw bytes (the client's own writer would refuse the
    literal 1e20, whose canonical form is an integer beyond 2^53); answer its record."""
    status, answer = agent.request("POST", f"/v1/requests/{rid}/follow-ups",
                                   raw_body=BIG_FOLLOW_UP % follows.encode(), idempotent=True)
    assert status == 201, answer
    assert answer["record"]["body"]["detail"] == BIG_STORED
    return answer["record"]


def test_a_record_holding_large_numbers_never_stalls_the_stream(ledger):
    """Issue 19, defect 1: a leaf holding 100000000000000000000 made events() raise at that
    seq on every reconnect, so nothing after it (the approval) ever arrived."""
    thread = f"big-{uuid.uuid4().hex[:8]}"
    start = size(ledger.auditor) - 1
    rid = f"req-{uuid.uuid4().hex[:12]}"
    intr = ledger.agent.append_interrupt(request_id=rid, thread_id=thread, interrupt_id="i-big",
                                         action=ACTION)
    append_big_follow_up(ledger.agent, rid, intr.leaf_hash)
    decision = ledger.reviewer.approve(rid)
    for reader in (ledger.agent, ledger.reviewer, ledger.auditor):
        events = list(reader.events(after=start, idle_timeout=1.0))
        ours = [e for e in events if e.request_id == rid]
        assert [e.kind for e in ours] == ["interrupt", "follow_up", "decision"]
        assert ours[1].body["detail"] == BIG_STORED
        assert digest.leaf_hash(digest.record_leaf(ours[1].record)) == ours[1].leaf_hash
        assert ours[2].seq == decision.seq and ours[2].body["ticket_id"] == decision.ticket_id
    # The request read and the thread read give the same values, exactly.
    (follow_up,) = ledger.reviewer.get_request(rid).of_kind("follow_up")
    assert follow_up["body"]["detail"] == BIG_STORED
    assert [r["body"].get("detail") for r in ledger.auditor.thread_records(thread)
            if r["kind"] == "follow_up"] == [BIG_STORED]


def test_invalid_position_and_token_are_typed_errors(ledger):
    with pytest.raises(errors.InvalidRequest):
        ledger.reviewer.request("GET", "/v1/events?after=-1")
    with pytest.raises(errors.Unauthenticated):
        next(LedgerClient(ledger.url, "not-a-token").events())


def test_stream_resumes_across_a_server_restart(make_ledger):
    server = make_ledger()
    thread = f"restart-{uuid.uuid4().hex[:8]}"
    # A fresh ledger opens with its policy records (init's at seq 0, the test's at seq 1).
    policies = [h.seq for h in server.auditor.policy_history()]
    assert policies == list(range(len(policies))) and policies[0] == 0
    p = len(policies)
    consumer = Consumer(server.reviewer.events(backoff=0.05, max_backoff=0.5))
    try:
        before = [open_request(server.agent, thread) for _ in range(5)]
        consumer.wait_for(lambda evs: len(evs) == p + 5)
        restart_server(server)
        after = [open_request(server.agent, thread) for _ in range(5)]
        server.reviewer.approve(after[-1])
        consumer.wait_for(lambda evs: len(evs) == p + 11)
        time.sleep(0.5)  # nothing more (no duplicate) arrives
    finally:
        consumer.close()
    events = consumer.events
    assert [e.seq for e in events] == list(range(p + 11))
    assert [e.kind for e in events[:p]] == ["policy"] * p
    assert [e.request_id for e in events] == [None] * p + [*before, *after, after[-1]]
    # It reconnected once, after the last event it had yielded before the restart.
    assert consumer.stream.connections[0] is None
    assert p + 4 in consumer.stream.connections[1:]
    assert set(consumer.stream.connections[1:]) == {p + 4}
