// The ledger's decision stream (GET /v1/events, docs/protocol.md) read with fetch(), because
// EventSource cannot send an Authorization header and the token must never be in a URL.
// Server-Sent Events are parsed here (the WHATWG event-stream grammar: LF, CR or CRLF line
// ends, comments, `id`, `event`, `data`, `retry`), and a reconnect resumes with Last-Event-ID
// set to the last event handled, so every record is handled once, in seq order.

/** The stream was refused (401, 403, 400): reconnecting cannot help. */
export class StreamRefused extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** The longest line accepted (a leaf is at most 1 MiB; its JSON escaping can grow it). */
const MAX_LINE = 8 * 1024 * 1024;

/**
 * Splits an event stream into events. Feed it text chunks; it calls `onEvent({id, event,
 * data})` for each complete event (an event the stream's end interrupts is dropped, as the
 * standard says).
 */
export class SseParser {
  /** @param {(ev: {id: string|null, event: string, data: string}) => void} onEvent */
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buf = '';
    this.lastId = null;
    this.event = '';
    this.data = null;
    this.retry = null;
  }

  /** @param {string} chunk decoded text */
  feed(chunk) {
    this.buf += chunk;
    let start = 0;
    const b = this.buf;
    for (;;) {
      let i = start;
      while (i < b.length && b[i] !== '\n' && b[i] !== '\r') i++;
      if (i >= b.length) break;
      // A CR at the very end may be the first half of a CRLF: wait for the next chunk.
      if (b[i] === '\r' && i === b.length - 1) break;
      this.line(b.slice(start, i));
      start = i + (b[i] === '\r' && b[i + 1] === '\n' ? 2 : 1);
    }
    this.buf = b.slice(start);
    if (this.buf.length > MAX_LINE) throw new Error('an event-stream line is longer than the ledger ever sends');
  }

  line(line) {
    if (line === '') {
      if (this.data !== null) {
        this.onEvent({ id: this.lastId, event: this.event || 'message', data: this.data });
      }
      this.event = '';
      this.data = null;
      return;
    }
    if (line[0] === ':') return;
    const c = line.indexOf(':');
    const field = c === -1 ? line : line.slice(0, c);
    let value = c === -1 ? '' : line.slice(c + 1);
    if (value[0] === ' ') value = value.slice(1);
    if (field === 'data') this.data = this.data === null ? value : `${this.data}\n${value}`;
    else if (field === 'event') this.event = value;
    else if (field === 'id') {
      if (!value.includes('\0')) this.lastId = value;
    } else if (field === 'retry' && /^[0-9]+$/.test(value)) this.retry = Number(value);
  }
}

/**
 * Follows the ledger's record stream from after `after` (null: from seq 0).
 *
 * `onRecord(record, leafHash, seq)` is awaited for each record in order; the stream's position
 * moves past a record only once it returned. `onStatus(state, text)` says `live`,
 * `reconnecting` or `error`.
 */
export class DecisionStream {
  /**
   * @param {{after: number|null, token: () => string, onRecord: Function, onStatus?: Function,
   *   path?: string}} opts
   */
  constructor({ after, token, onRecord, onStatus = () => {}, path = '/v1/events' }) {
    this.lastSeq = after;
    this.token = token;
    this.onRecord = onRecord;
    this.onStatus = onStatus;
    this.path = path;
    this.retryMs = 1000;
    this.abort = null;
    this.stopped = false;
    /** How many connections were opened (for tests and the status line). */
    this.connections = 0;
    /** Events that broke the order (a seq at or before the last one): each forces a reconnect. */
    this.protocolErrors = 0;
  }

  /** Starts following; returns at once. */
  start() {
    this.done = this.loop();
    return this;
  }

  /** Stops for good. */
  stop() {
    this.stopped = true;
    if (this.abort) this.abort.abort();
  }

  /** Drops the current connection; the stream reconnects after the last record handled. */
  reconnect() {
    if (this.abort) this.abort.abort();
  }

  async loop() {
    while (!this.stopped) {
      let delay = this.retryMs;
      try {
        await this.once();
        if (this.stopped) return;
        this.onStatus('reconnecting', 'The live stream ended; reconnecting.');
      } catch (e) {
        if (this.stopped) return;
        if (e instanceof StreamRefused) {
          this.onStatus('error', `The live stream was refused (${e.status}): ${e.message}`);
          return;
        }
        if (e && e.name === 'AbortError') delay = 0; // reconnect() asked for it
        else this.onStatus('reconnecting', `The live stream is interrupted (${e.message}); reconnecting.`);
      }
      if (delay > 0) await new Promise((r) => setTimeout(r, delay));
    }
  }

  async once() {
    const abort = new AbortController();
    this.abort = abort;
    const headers = { Authorization: `Bearer ${this.token()}`, Accept: 'text/event-stream' };
    if (this.lastSeq !== null) headers['Last-Event-ID'] = String(this.lastSeq);
    const res = await fetch(this.path, {
      headers, cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer', signal: abort.signal,
    });
    if (!res.ok) {
      let message = `the ledger answered ${res.status}`;
      try {
        const j = await res.json();
        if (j && typeof j.message === 'string') message = j.message;
      } catch {
        // not JSON: keep the status
      }
      if (res.status >= 400 && res.status < 500 && res.status !== 408 && res.status !== 429) {
        throw new StreamRefused(res.status, message);
      }
      throw new Error(message);
    }
    if (!(res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
      throw new Error('the answer is not an event stream');
    }
    this.connections += 1;
    this.onStatus('live', 'Live: new requests and decisions appear as the ledger records them.');
    const queue = [];
    const parser = new SseParser((ev) => queue.push(ev));
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        parser.feed(value);
        if (parser.retry !== null) this.retryMs = Math.min(Math.max(parser.retry, 100), 30000);
        while (queue.length > 0) {
          if (abort.signal.aborted) return;
          await this.dispatch(queue.shift());
        }
      }
    } finally {
      abort.abort();
    }
  }

  async dispatch(ev) {
    if (ev.event !== 'record') return;
    const msg = JSON.parse(ev.data);
    const seq = msg.seq;
    if (!Number.isSafeInteger(seq) || seq < 0 || String(seq) !== ev.id) {
      this.protocolErrors += 1;
      throw new Error(`an event's id ${JSON.stringify(ev.id)} is not its record's seq`);
    }
    if (this.lastSeq !== null && seq <= this.lastSeq) {
      this.protocolErrors += 1;
      throw new Error(`the stream sent seq ${seq} after ${this.lastSeq}`);
    }
    await this.onRecord(msg.record, msg.leaf_hash, seq);
    this.lastSeq = seq;
  }
}
