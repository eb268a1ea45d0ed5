// The reviewer's console (docs/console.md). Places that never mix:
//   - "Needs an answer now": the ledger's pending queue (GET /v1/pending), kept live from the
//     decision stream (GET /v1/events), with approve / reject / edit; a tool needing several
//     approvals shows "n of N approvals" and by whom (GET /v1/requests/{id});
//   - "Recorded": histories of requests and threads, read-only, no action controls;
//   - "Policy in force": the policy record in force and every earlier one (GET /v1/policy,
//     GET /v1/policy/history), read-only;
//   - "Break-glass reviews": the emergency grants awaiting their post-event review
//     (GET /v1/reviews/break-glass), each with a form to record one (POST .../review);
//   - "Verify": an export bundle checked in the browser (verify.js), trusting only the key the
//     auditor pastes or pins;
//   - "Report": the ledger's report of its records (GET /v1/report, auditor), drawn by report.js.
// The token lives in sessionStorage and travels only in the Authorization header. The DOM is
// built with createElement / textContent only: no data is ever parsed as HTML.

import { HIDDEN_CHARS, JsonError, canonicalize, isObject, parseJson, readableJson, requestJson } from './jcs.js';
import { DecisionStream } from './sse.js';
import { clearReport, setupReport, showReport } from './report.js';
import { EnvironmentError, validId, verifyBundle } from './verify.js';

const TOKEN_KEY = 'hitl-ledger.console.token';
const PIN_KEY = 'hitl-ledger.console.verifier-key';
/** How many records before the current end the stream starts, for "closed while open". */
const STREAM_BACKLOG = 200;
const MAX_CLOSED_SHOWN = 50;

// ------------------------------------------------------------------------------------ DOM

/** `el('p', {class: 'x'}, 'text', child)`: an element with attributes and children. */
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (v === true) e.setAttribute(k, '');
    else e.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    e.append(typeof c === 'string' ? document.createTextNode(c) : c);
  }
  return e;
}

const $ = (id) => document.getElementById(id);

function clear(node) {
  while (node.firstChild) node.firstChild.remove();
}

/** A timestamp of the ledger's (RFC 3339 UTC) as "2026-12-01 14:32:05 UTC". */
function fmtTs(ts) {
  if (typeof ts !== 'string') return String(ts);
  const m = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(\.\d+)?Z$/.exec(ts);
  return m ? `${m[1]} ${m[2]} UTC` : ts;
}

/** "14:32:05 UTC" of a ledger timestamp. */
function fmtClock(ts) {
  const m = /T(\d{2}:\d{2}:\d{2})/.exec(ts ?? '');
  return m ? `${m[1]} UTC` : String(ts);
}

function fmtDuration(ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const r = s % 60;
  const two = (n) => String(n).padStart(2, '0');
  return h > 0 ? `${h} h ${two(m)} min ${two(r)} s` : m > 0 ? `${m} min ${two(r)} s` : `${r} s`;
}

/** Names of the hidden characters met most often (others are shown by code point only). */
const CHAR_NAMES = {
  0x00a0: 'NO-BREAK SPACE', 0x00ad: 'SOFT HYPHEN', 0x034f: 'COMBINING GRAPHEME JOINER',
  0x061c: 'ARABIC LETTER MARK', 0x115f: 'HANGUL CHOSEONG FILLER', 0x1160: 'HANGUL JUNGSEONG FILLER',
  0x180e: 'MONGOLIAN VOWEL SEPARATOR', 0x200b: 'ZERO WIDTH SPACE', 0x200c: 'ZERO WIDTH NON-JOINER',
  0x200d: 'ZERO WIDTH JOINER', 0x200e: 'LEFT-TO-RIGHT MARK', 0x200f: 'RIGHT-TO-LEFT MARK',
  0x2028: 'LINE SEPARATOR', 0x2029: 'PARAGRAPH SEPARATOR', 0x202a: 'LEFT-TO-RIGHT EMBEDDING',
  0x202b: 'RIGHT-TO-LEFT EMBEDDING', 0x202c: 'POP DIRECTIONAL FORMATTING', 0x202d: 'LEFT-TO-RIGHT OVERRIDE',
  0x202e: 'RIGHT-TO-LEFT OVERRIDE', 0x202f: 'NARROW NO-BREAK SPACE', 0x2060: 'WORD JOINER',
  0x2066: 'LEFT-TO-RIGHT ISOLATE', 0x2067: 'RIGHT-TO-LEFT ISOLATE', 0x2068: 'FIRST STRONG ISOLATE',
  0x2069: 'POP DIRECTIONAL ISOLATE', 0x3000: 'IDEOGRAPHIC SPACE', 0x3164: 'HANGUL FILLER',
  0xfeff: 'ZERO WIDTH NO-BREAK SPACE',
};

/** One character of jcs.js HIDDEN_CHARS (a non-global copy: no lastIndex to carry). */
const HIDDEN_ONE = new RegExp(`^(?:${HIDDEN_CHARS.source})$`, 'u');

const codePoint = (c) => `U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}`;

/** The marker shown in place of a character that would not show as itself: ⟦U+202E⟧. */
function hiddenMarker(c) {
  const name = CHAR_NAMES[c.codePointAt(0)];
  return el('span', {
    class: 'hidden-char',
    title: `${codePoint(c)}${name ? ` ${name}` : ''}: an invisible or formatting character, shown here as its code point`,
  }, `\u27e6${codePoint(c)}\u27e7`);
}

/**
 * Text from a record for the page: characters that would not show as themselves, or would
 * reorder or hide what is around them (bidirectional overrides and isolates, zero-width and
 * other invisible characters, controls, unusual spaces: jcs.js HIDDEN_CHARS), are replaced by
 * visible markers (⟦U+202E⟧), so the reviewer sees every character that is there and in the
 * order it is stored. With `lookalikes`, every other character outside printable ASCII is
 * also marked, with its code point (for tool names, where a Cyrillic "а" can pass for "a").
 * @returns {DocumentFragment}
 */
function vis(text, { lookalikes = false } = {}) {
  const s = String(text);
  const frag = document.createDocumentFragment();
  let run = '';
  const flush = () => {
    if (run) frag.append(document.createTextNode(run));
    run = '';
  };
  for (const c of s) {
    if (HIDDEN_ONE.test(c)) {
      flush();
      frag.append(hiddenMarker(c));
    } else if (lookalikes && !/^[\x20-\x7e]$/.test(c)) {
      flush();
      frag.append(el('mark', { class: 'non-ascii', title: `${codePoint(c)}: not an ASCII character` }, c, `\u27e6${codePoint(c)}\u27e7`));
    } else {
      run += c;
    }
  }
  flush();
  return frag;
}

const SCRIPTS = ['Latin', 'Cyrillic', 'Greek', 'Armenian', 'Georgian', 'Cherokee', 'Hebrew', 'Arabic',
  'Devanagari', 'Thai', 'Han', 'Hiragana', 'Katakana', 'Hangul', 'Ethiopic', 'Coptic']
  .map((name) => [name, new RegExp(`^\\p{Script=${name}}$`, 'u')]);

/** The writing systems of the letters of `s` (Latin, Cyrillic, ...), in order of appearance. */
function scriptsOf(s) {
  const found = [];
  for (const c of s) {
    if (!/^\p{L}$/u.test(c)) continue;
    const hit = SCRIPTS.find(([, re]) => re.test(c));
    const name = hit ? hit[0] : 'another script';
    if (!found.includes(name)) found.push(name);
  }
  return found;
}

/**
 * What may make a tool name pass for another: characters outside printable ASCII, letters of
 * more than one writing system. Null when the name is plain.
 */
function toolWarning(tool) {
  const s = String(tool);
  const odd = [...new Set([...s].filter((c) => !/^[\x20-\x7e]$/.test(c)))];
  if (odd.length === 0) return null;
  const scripts = scriptsOf(s);
  const parts = [];
  if (scripts.length > 1) parts.push(`mixes writing systems (${scripts.join(', ')})`);
  parts.push(`holds ${odd.length === 1 ? 'a character' : 'characters'} outside ASCII (${odd.map(codePoint).join(', ')})`);
  return `Look closely: this tool name ${parts.join(' and ')}, so it may imitate the name of another tool.`;
}

/** A tool name, every non-ASCII character marked, with a warning when it could deceive. */
function toolName(tool, { warn = true } = {}) {
  const warning = warn ? toolWarning(tool) : null;
  const code = el('code', { class: 'tool' }, vis(tool, { lookalikes: true }));
  if (!warning) return code;
  return el('span', { class: 'tool-name' }, code, ' ', el('strong', { class: 'lookalike-warning', role: 'note' }, warning));
}

/** Who wrote a record: principal, role and (when recorded) tenant. */
function who(actor) {
  if (!isObject(actor)) return 'the ledger';
  const frag = document.createDocumentFragment();
  frag.append(vis(actor.principal), ` (${actor.role}`);
  if (typeof actor.tenant === 'string') frag.append(', tenant ', vis(actor.tenant));
  frag.append(')');
  return frag;
}

/** An id from a record, as code, hidden characters marked. */
const idCode = (v) => el('code', {}, vis(v));

const escPtr = (k) => k.replace(/~/g, '~0').replace(/\//g, '~1');

/**
 * A JSON value as a definition list. The values at the JSON Pointers `redacted` lists (the
 * record's own `body.redacted`: the ledger stores only an HMAC of each) are shown as
 * "redacted"; everything else is shown verbatim — a string that merely looks like a
 * placeholder (`hmac-sha256:...`) is shown as the string it is — with hidden characters
 * marked (vis) and numbers exactly as the record spells them (JCS writes numbers as
 * ECMAScript does, so JSON.stringify gives back the stored literal).
 */
function renderArgs(args, redacted) {
  const pointers = new Set(Array.isArray(redacted) ? redacted : []);
  const walk = (v, ptr) => {
    if (pointers.has(ptr)) {
      return el('span', { class: 'redacted', title: 'redacted by the ledger: only its HMAC is stored' }, 'redacted');
    }
    if (Array.isArray(v)) {
      if (v.length === 0) return el('code', { text: '[]' });
      const ol = el('ol', { class: 'json-list', start: '0' });
      v.forEach((x, i) => ol.append(el('li', {}, walk(x, `${ptr}/${i}`))));
      return ol;
    }
    if (isObject(v)) {
      const keys = Object.keys(v);
      if (keys.length === 0) return el('code', { text: '{}' });
      const dl = el('dl', { class: 'json-obj' });
      for (const k of keys) {
        dl.append(el('dt', {}, el('code', {}, vis(k))), el('dd', {}, walk(v[k], `${ptr}/${escPtr(k)}`)));
      }
      return dl;
    }
    return el('code', { class: 'json-scalar' }, vis(JSON.stringify(v)));
  };
  return walk(args, '');
}

/**
 * A JSON value as one line of text, the parts at the pointers in `secrets` (and below them)
 * written as ⟦redacted⟧ (outside any string, so no string can pass for it).
 */
function maskedJson(v, ptr, secrets) {
  if (v === undefined) return '\u2014';
  if ([...secrets].some((s) => ptr === s || ptr.startsWith(`${s}/`))) return '\u27e6redacted\u27e7';
  if (Array.isArray(v)) return `[${v.map((x, i) => maskedJson(x, `${ptr}/${i}`, secrets)).join(',')}]`;
  if (isObject(v)) {
    return `{${Object.keys(v).map((k) => `${JSON.stringify(k)}:${maskedJson(v[k], `${ptr}/${escPtr(k)}`, secrets)}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

// ------------------------------------------------------------------------------------ API

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

/** A call of the ledger's API with the token in the Authorization header only. */
async function api(method, path, body = undefined, { raw = false } = {}) {
  const headers = { Authorization: `Bearer ${token()}`, Accept: raw ? '*/*' : 'application/json' };
  const init = { method, headers, cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = requestJson(body); // large doubles as 1e+20: the ledger refuses such integer literals
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, 'network', `the ledger did not answer (${e.message})`);
  }
  if (!res.ok) {
    let code = 'http_' + res.status;
    let message = `the ledger answered ${res.status}`;
    try {
      const j = await res.json();
      if (j && typeof j.error === 'string') code = j.error;
      if (j && typeof j.message === 'string') message = j.message;
    } catch {
      // not JSON: keep the status
    }
    if (res.status === 401) signOut('The ledger does not know this token (401). Sign in again.');
    throw new ApiError(res.status, code, message);
  }
  if (raw) return new Uint8Array(await res.arrayBuffer());
  return res.json();
}

const seg = (id) => encodeURIComponent(id);

// ------------------------------------------------------------------------- governance

/**
 * What the ledger's governed refusals (docs/protocol.md 7.5, 7.6) mean for the person at the
 * page. Each is also recorded by the ledger as a `refusal` record in the request.
 */
const REFUSALS = {
  approver_is_requester: 'you opened this request yourself, and its tool\'s policy lets only someone else decide it (four eyes)',
  approver_already_approved: 'your approval of this request is already counted; the next approval must be another reviewer\'s',
  approver_not_allowed: 'the policy in force names who may decide this tool\'s calls, and you are not among them',
  reviewer_is_break_glass_user: 'you used break-glass on this request yourself; its post-event review must be recorded by someone else',
  break_glass_not_allowed: 'the policy in force does not allow break-glass for this tool',
};
/** What a recorded `refusal` record's code means, for whoever reads the history. */
const REFUSAL_RECORDS = {
  approver_is_requester: 'the reviewer had opened the request, and its tool\'s policy lets only someone else decide it',
  approver_already_approved: 'the reviewer\'s approval of the request was already counted',
  approver_not_allowed: 'the reviewer is not among the approvers the policy in force names for the tool',
  reviewer_is_break_glass_user: 'the reviewer had used break-glass on the request; its review is someone else\'s',
  break_glass_not_allowed: 'the policy in force does not allow break-glass for the tool',
  break_glass_action_mismatch: 'the break-glass action was not the request\'s own',
  forbidden: 'the caller\'s role may not do this',
  append_only: 'records are never changed or deleted',
};
/** Refusals the ledger answers without recording them, with what they mean. */
const OTHER_ERRORS = {
  no_break_glass: 'this request was not decided by break-glass: there is nothing to review',
  idempotency_conflict: 'the ledger already holds another answer to this (another verdict or rationale)',
  forbidden: 'this token\'s role may not do this',
};

/**
 * The page's message for a refused call: what it means, the ledger's own message and code,
 * and whether the refusal was recorded. A DocumentFragment (the message is the ledger's text,
 * shown with its hidden characters marked).
 */
function refusalText(e, what) {
  const meaning = REFUSALS[e.code] ?? OTHER_ERRORS[e.code];
  return frag(
    `The ledger refused ${what}`,
    meaning ? `: ${meaning}.` : '.',
    ' ',
    vis(`(${e.status} ${e.code}: ${e.message})`),
    REFUSALS[e.code] ? ' The refusal is recorded in the request\'s history.' : null,
  );
}

const hasOwn = (o, k) => isObject(o) && Object.prototype.hasOwnProperty.call(o, k);

/** The defaults of a policy document's fields (docs/protocol.md 12). */
const POLICY_DEFAULTS = {
  review_window_seconds: 3600, approval_ttl_seconds: 600, mode: 'enforce', approvers: null,
  approvals_required: 1, break_glass: false,
};

/**
 * A tool's policy resolved as the ledger resolves it: its entry over the default, field by
 * field, `redact` added to the default's. For display only: the ledger decides.
 */
function resolveTool(doc, tool) {
  const d = hasOwn(doc, 'default') && isObject(doc.default) ? doc.default : {};
  const t = tool !== null && hasOwn(doc, 'tools') && hasOwn(doc.tools, tool) && isObject(doc.tools[tool]) ? doc.tools[tool] : {};
  const out = {};
  for (const [k, v] of Object.entries(POLICY_DEFAULTS)) {
    out[k] = hasOwn(t, k) ? t[k] : hasOwn(d, k) ? d[k] : v;
  }
  const redact = Array.isArray(d.redact) ? [...d.redact] : [];
  for (const r of Array.isArray(t.redact) ? t.redact : []) if (!redact.includes(r)) redact.push(r);
  out.redact = redact;
  return out;
}

/** The policy in force as last read or streamed: {policy, policy_digest, seq, record, leaf_hash}. */
let policyNow = null;

async function loadPolicyNow() {
  const p = await api('GET', '/v1/policy');
  if (!p || !isObject(p.policy)) throw new ApiError(0, 'protocol', 'the ledger answered the policy without its document');
  policyNow = p;
  return p;
}

/** "seq 0, sha256:…" of a policy in force. */
function policyRef(p) {
  return p.seq === null || p.seq === undefined ? 'the ledger\'s file (no policy record yet)' : `policy record seq ${p.seq}`;
}

// ------------------------------------------------------------------------------- the queue

/** Request id -> {interrupt, card, countdown, state}. */
const queue = new Map();
/** Request ids the stream saw closed, so a pending list read later cannot bring one back. */
const closedIds = new Set();
let stream = null;
let ticker = null;

const CLOSING = new Set(['decision', 'rejection', 'timeout', 'revocation']);

function updateCount() {
  const n = [...queue.values()].filter((q) => q.state === 'open').length;
  $('queue-count').textContent = n ? `(${n})` : '';
  $('queue-empty').hidden = queue.size > 0;
}

/** The first seq recorded after the page started: earlier records are only history. */
let liveFrom = 0;

/** A partial approval: a `decision` that issued no ticket (the request stays open). */
const isPartial = (rec) => rec.kind === 'decision' && rec.body.ticket_id === null;

/**
 * An edit's new request, seen on the stream, until the approval written with it arrives: a
 * final approval closes it at once (it never waits for an answer); a partial one (its tool
 * needs more approvals) leaves it open, and it joins the queue.
 */
const editedPending = new Map();

async function onRecord(rec, leafHash, seq) {
  if (rec.kind === 'policy') {
    onPolicyRecord(rec, leafHash);
    return;
  }
  const rid = rec.request_id;
  if (rid === null) return;
  if (rec.kind === 'interrupt') {
    // Earlier requests come from the pending list.
    if (seq < liveFrom || closedIds.has(rid) || queue.has(rid)) return;
    if (rec.body.edit_of === null) addToQueue(rec);
    else editedPending.set(rid, rec);
    return;
  }
  if (rec.kind === 'decision' && rec.body.break_glass === true) onBreakGlassUse(rec, leafHash);
  if (rec.kind === 'review') onReview(rec);
  const edited = editedPending.get(rid);
  editedPending.delete(rid);
  if (isPartial(rec)) {
    if (edited && !closedIds.has(rid) && !queue.has(rid)) addToQueue(edited, { approvals: [] });
    const q = queue.get(rid);
    if (q) countApproval(q, rec.actor.principal, rec.seq, rec.body.approvals_required);
    return;
  }
  if (!CLOSING.has(rec.kind)) return;
  if (rec.kind === 'revocation' && closedIds.has(rid)) return; // revoking an approval
  closedIds.add(rid);
  noteClosed(rec);
  const q = queue.get(rid);
  if (!q) return;
  if (rec.kind === 'timeout') {
    markTimedOut(q, rec.body.expires_at);
  } else if (q.state === 'open') {
    removeFromQueue(rid, frag('Request ', vis(rid), ' was answered elsewhere (', describeClosing(rec), '); it left the queue.'));
  }
  // 'deciding': this page's own decision; decide() shows the ledger's answer.
}

/** Strings and nodes as one fragment. */
function frag(...parts) {
  const f = document.createDocumentFragment();
  for (const p of parts) if (p !== null && p !== undefined && p !== false) f.append(p);
  return f;
}

function describeClosing(rec) {
  switch (rec.kind) {
    case 'decision':
      if (rec.body.break_glass === true) {
        return frag('opened by break-glass by ', who(rec.actor), ', reason: ', vis(rec.body.reason));
      }
      return frag(rec.body.decision === 'edit' ? 'edited by ' : 'approved by ', who(rec.actor),
        typeof rec.body.approvals === 'number' ? ` (approval ${rec.body.approvals} of ${rec.body.approvals_required})` : null);
    case 'rejection':
      return frag('rejected by ', who(rec.actor));
    case 'timeout':
      return frag(`timed out at ${fmtClock(rec.body.expires_at)}`);
    case 'revocation':
      return frag('revoked by ', who(rec.actor));
    default:
      return frag(rec.kind);
  }
}

function noteClosed(rec) {
  const list = $('closed');
  const link = el('a', { href: `#recorded/request/${encodeURIComponent(rec.request_id)}` }, vis(rec.request_id));
  list.prepend(el('li', {}, link, ' — ', describeClosing(rec), `, ${fmtTs(rec.ts)}`));
  while (list.children.length > MAX_CLOSED_SHOWN) list.lastChild.remove();
}

function removeFromQueue(rid, note) {
  const q = queue.get(rid);
  if (!q) return;
  q.card.remove();
  queue.delete(rid);
  updateCount();
  if (note) announce(note);
}

function announce(text, cls = 'info') {
  $('answers').prepend(el('p', { class: `answer ${cls}` }, text));
}

function markTimedOut(q, expiresAt) {
  // Also when already marked: a forced or late attempt must leave nothing decidable.
  for (const b of q.card.querySelectorAll('[data-decide]')) {
    b.disabled = true;
    b.setAttribute('aria-expanded', 'false');
  }
  for (const f of q.card.querySelectorAll('.decide-form')) f.hidden = true;
  if (q.state === 'timed_out') return;
  q.state = 'timed_out';
  q.card.classList.add('timed-out');
  q.countdown.textContent = 'none (timed out)';
  q.deadline.textContent = `Timed out at ${fmtTs(expiresAt)}: nobody answered in time, the ledger recorded a `
    + 'timeout and the agent is told timeout. It can no longer be decided.';
  q.card.append(el('button', {
    type: 'button', class: 'dismiss',
    onclick: () => removeFromQueue(q.rid, null),
  }, 'Remove from this list'));
  updateCount();
}

/**
 * Adds the request an interrupt opened. `counted` is what a read of the request said of its
 * approvals ({approvals, approvals_required}); without `approvals_required` the request is read
 * for them.
 */
async function addToQueue(interrupt, counted = null) {
  const rid = interrupt.request_id;
  const q = buildCard(interrupt);
  queue.set(rid, q);
  $('queue').append(q.card);
  updateCount();
  tick();
  if (counted) setApprovals(q, counted);
  if (counted && counted.approvals_required !== undefined) return;
  try {
    const r = await readRequest(rid, { firstPage: true });
    if (queue.get(rid) === q) setApprovals(q, r);
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    // the card stands without its counts; a decision still shows the ledger's answer
  }
}

/**
 * Merges what the ledger says of a request's approvals into its card: `approvals` a list of
 * {principal, seq} (counted approvals), `approvals_required` (null when unknown).
 */
function setApprovals(q, { approvals, approvals_required: required }) {
  for (const a of Array.isArray(approvals) ? approvals : []) {
    if (isObject(a) && typeof a.principal === 'string' && Number.isSafeInteger(a.seq)) q.approvals.set(a.seq, a.principal);
  }
  if (Number.isSafeInteger(required) && required > 0) q.required = required;
  showApprovals(q);
}

/** One more approval counted on a card (a partial approval seen on the stream or answered). */
function countApproval(q, principal, seq, required) {
  setApprovals(q, { approvals: [{ principal, seq }], approvals_required: required });
}

/** "1 of 2 approvals: by …" for a request, as nodes. */
function approvalsLine(approvals, required, open = true) {
  const n = approvals.length;
  const f = frag(el('strong', { class: 'approvals-count' }, `${n} of ${required} approval${required === 1 ? '' : 's'}`));
  if (n > 0) {
    f.append(': by ');
    approvals.forEach(([seq, principal], i) => f.append(i ? ', ' : '', el('code', {}, vis(principal)), ` (seq ${seq})`));
  }
  if (open && n < required) {
    const more = required - n;
    f.append(`. ${more} more approval${more === 1 ? '' : 's'} by ${n ? 'other reviewers' : 'distinct reviewers'} needed before the ledger issues a ticket; until then nothing is resumed.`);
  }
  return f;
}

function showApprovals(q) {
  const required = q.required ?? 1;
  const shown = required > 1 || q.approvals.size > 0;
  q.approvalsRow.forEach((e) => { e.hidden = !shown; });
  clear(q.approvalsDd);
  if (shown) q.approvalsDd.append(approvalsLine([...q.approvals.entries()].sort((a, b) => a[0] - b[0]), required));
}

/** What the policy in force says of the card's tool: paused, who may decide, break-glass. */
function showGovernance(q) {
  const box = q.governance;
  clear(box);
  if (!policyNow) return;
  const t = resolveTool(policyNow.policy, q.rec.body.tool);
  const rows = [];
  if (t.mode === 'paused') {
    rows.push(['Gate', el('strong', { class: 'paused' }, 'this tool is paused by the policy in force: the ledger still records '
      + 'your decision, but every authorize of it is denied tool_paused and the host hands the action to a manual operator, '
      + 'until a later policy unpauses it.')]);
  } else if (t.mode === 'observe') {
    rows.push(['Gate', 'observe mode: a denial is recorded as would_deny and the action runs']);
  }
  if (Array.isArray(t.approvers)) {
    const f = frag();
    t.approvers.forEach((a, i) => f.append(i ? ', ' : '', el('code', {}, vis(a))));
    rows.push(['Who may decide', f]);
  }
  if (t.approvals_required > 1 || Array.isArray(t.approvers)) {
    rows.push(['Four eyes', 'the principal that opened the request may not decide it; each approval must be a different reviewer\'s']);
  }
  if (t.break_glass === true) rows.push(['Break-glass', 'allowed: a break_glass operator may open an emergency grant, reviewed afterwards']);
  if (rows.length === 0) return;
  rows.unshift(['Policy in force', frag(el('a', { href: '#policy' }, policyRef(policyNow)), ', for this tool:')]);
  for (const [dt, dd] of rows) box.append(el('dt', {}, dt), el('dd', {}, dd));
}

/**
 * A request's state and records (GET /v1/requests/{id}). The ledger pages the records (a page
 * ends after 10,000 records or 16 MiB, with `next_after`, the last seq it holds): this follows
 * `next_after` until a page comes without it, so the records are complete, and reads the state
 * of the last page. With `firstPage` it stops after one page of one record: the request's
 * interrupt (its first record) and its current state, all the queue needs. A ledger that does
 * not page answers everything at once, which reads as one page.
 */
async function readRequest(rid, { firstPage = false } = {}) {
  const records = [];
  let after = null;
  let page;
  for (;;) {
    const params = [];
    if (after !== null) params.push(`after=${after}`);
    if (firstPage) params.push('limit=1');
    page = await api('GET', `/v1/requests/${seg(rid)}${params.length ? `?${params.join('&')}` : ''}`);
    if (!page || !Array.isArray(page.records) || typeof page.state !== 'string') {
      throw new ApiError(0, 'protocol', 'the ledger answered a request read without its records');
    }
    records.push(...page.records);
    const next = page.next_after;
    if (firstPage || next === undefined || next === null) break;
    if (!Number.isSafeInteger(next) || next < 0 || (after !== null && next <= after) || page.records.length === 0) {
      throw new ApiError(0, 'protocol', `the ledger's next_after ${JSON.stringify(next)} does not move past ${after}`);
    }
    after = next;
  }
  // The counted approvals and how many the tool needs (absent from a ledger before them).
  const approvals = Array.isArray(page.approvals) ? page.approvals : [];
  const required = Number.isSafeInteger(page.approvals_required) ? page.approvals_required : null;
  return { state: page.state, records, approvals, approvals_required: required };
}

async function loadRequest(rid, { firstPage = false } = {}) {
  const r = await readRequest(rid, { firstPage });
  const interrupt = r.records.find((x) => x.kind === 'interrupt' && x.request_id === rid);
  return { ...r, interrupt };
}

function buildCard(rec) {
  const b = rec.body;
  const rid = rec.request_id;
  const id = `req-${queue.size}-${Math.random().toString(36).slice(2, 8)}`;
  const card = el('li', { class: 'card', 'aria-labelledby': `${id}-title`, 'data-request-id': rid });
  const deadline = el('p', { class: 'deadline', id: `${id}-deadline` });
  const countdown = el('span', { class: 'countdown', role: 'timer', 'aria-live': 'off' });
  const approvalsDt = el('dt', { hidden: true }, 'Approvals');
  const approvalsDd = el('dd', { class: 'approvals', hidden: true });
  // (rows of the facts list, redrawn when the policy changes)
  const governance = el('div', { class: 'governance' });
  const q = {
    rid, rec, card, deadline, countdown, state: 'open', expires: Date.parse(b.expires_at),
    approvals: new Map(), required: null, approvalsDd, approvalsRow: [approvalsDt, approvalsDd], governance,
    ruledOut: new Set(), note: el('p', { class: 'note own-approval' }),
  };

  card.append(
    el('h3', { id: `${id}-title` }, 'Call ', toolName(b.tool, { warn: false }), ' — request ', vis(rid)),
    el('p', { class: 'when' }, 'Time left: ', countdown),
    deadline,
    el('dl', { class: 'facts' },
      el('dt', {}, 'Tool'), el('dd', {}, toolName(b.tool)),
      el('dt', {}, 'Arguments'), el('dd', { class: 'args' }, renderArgs(b.args, b.redacted)),
      b.redacted.length ? el('dt', {}, 'Redacted fields') : null,
      b.redacted.length ? el('dd', {}, vis(b.redacted.join(', ')), ' (the ledger holds only an HMAC of each)') : null,
      el('dt', {}, 'Bound to digest'), el('dd', {}, el('code', { class: 'digest', text: b.action_digest })),
      el('dt', {}, 'Thread'), el('dd', {}, idCode(rec.thread_id)),
      el('dt', {}, 'Run'), el('dd', {}, rec.run_id === null ? 'not named' : idCode(rec.run_id)),
      el('dt', {}, 'Asked by'), el('dd', {}, who(rec.actor)),
      el('dt', {}, 'Asked at'), el('dd', {}, fmtTs(rec.ts)),
      el('dt', {}, 'You may'), el('dd', {}, b.allowed_decisions.join(', ')),
      approvalsDt, approvalsDd,
      governance,
    ),
  );
  showGovernance(q);
  deadline.textContent = `Times out at ${fmtTs(b.expires_at)}; if nobody answers by then the agent is told timeout.`;

  const actions = el('div', { class: 'actions' });
  const forms = el('div', {});
  const allowed = new Set(b.allowed_decisions);
  const addAction = (kind, label, form) => {
    const btn = el('button', { type: 'button', 'data-decide': kind, 'aria-expanded': 'false' }, label);
    btn.addEventListener('click', () => {
      for (const f of forms.children) if (f !== form) f.hidden = true;
      for (const other of actions.querySelectorAll('[data-decide]')) other.setAttribute('aria-expanded', 'false');
      form.hidden = !form.hidden;
      btn.setAttribute('aria-expanded', String(!form.hidden));
      if (!form.hidden) form.querySelector('textarea, input')?.focus();
    });
    form.setAttribute('data-kind', kind);
    actions.append(btn);
    forms.append(form);
  };
  if (allowed.has('approve')) addAction('approve', 'Approve…', approveForm(q, id));
  if (allowed.has('reject')) addAction('reject', 'Reject…', rejectForm(q, id));
  if (allowed.has('edit')) addAction('edit', 'Edit…', editForm(q, id));
  const error = el('p', { class: 'error', role: 'alert' });
  q.error = error;
  card.append(q.note, actions, forms, error);
  return q;
}

function rationaleField(id, required) {
  const input = el('textarea', { id, rows: '2', required: required || null, 'aria-required': String(required) });
  const label = el('label', { for: id }, required ? 'Rationale (required)' : 'Rationale (optional)');
  return { input, nodes: [label, input] };
}

function approveForm(q, id) {
  const r = rationaleField(`${id}-approve-rationale`, false);
  const form = el('form', { class: 'decide-form', hidden: true, 'aria-label': `Approve request ${q.rid}` },
    ...r.nodes, el('button', { type: 'submit' }, 'Approve this call'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const rationale = r.input.value.trim() === '' ? undefined : r.input.value;
    decide(q, { decision: 'approve', rationale });
  });
  return form;
}

function rejectForm(q, id) {
  const r = rationaleField(`${id}-reject-rationale`, true);
  const form = el('form', { class: 'decide-form', hidden: true, novalidate: true, 'aria-label': `Reject request ${q.rid}` },
    ...r.nodes, el('button', { type: 'submit' }, 'Reject this call'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    if (r.input.value.trim() === '') {
      q.error.textContent = 'A rejection needs a rationale: say why, the agent is told it.';
      r.input.focus();
      return;
    }
    decide(q, { decision: 'reject', rationale: r.input.value });
  });
  return form;
}

/** Validates the editor's text as `{tool, args}`: the action, or a message. */
function readAction(text) {
  let v;
  try {
    v = parseJson(text, { maxDepth: 64, rejectUnsafeIntegers: true });
  } catch (e) {
    if (e instanceof JsonError) return { error: `not JSON the ledger accepts: ${e.message}` };
    throw e;
  }
  if (!isObject(v)) return { error: 'the edited call must be an object {"tool": ..., "args": {...}}' };
  const extra = Object.keys(v).filter((k) => k !== 'tool' && k !== 'args');
  if (extra.length) return { error: `unknown member ${JSON.stringify(extra[0])}: only "tool" and "args"` };
  if (typeof v.tool !== 'string' || !validId(v.tool)) return { error: '"tool" must be a tool name (1 to 256 bytes, no control characters)' };
  if (!isObject(v.args)) return { error: '"args" must be an object' };
  try {
    canonicalize(v);
  } catch (e) {
    return { error: `the call has no canonical form: ${e.message}` };
  }
  return { action: v };
}

/** The changes from `a` to `b` as [pointer, kind, old, new] rows. */
function diff(a, b, ptr = '') {
  const out = [];
  const bothObj = isObject(a) && isObject(b);
  const bothArr = Array.isArray(a) && Array.isArray(b);
  if (bothObj || bothArr) {
    const keys = bothArr
      ? [...Array(Math.max(a.length, b.length)).keys()].map(String)
      : [...new Set([...Object.keys(a), ...Object.keys(b)])];
    for (const k of keys) {
      const p = `${ptr}/${k.replace(/~/g, '~0').replace(/\//g, '~1')}`;
      const inA = bothArr ? Number(k) < a.length : Object.prototype.hasOwnProperty.call(a, k);
      const inB = bothArr ? Number(k) < b.length : Object.prototype.hasOwnProperty.call(b, k);
      if (inA && !inB) out.push([p, 'removed', a[k], undefined]);
      else if (!inA && inB) out.push([p, 'added', undefined, b[k]]);
      else out.push(...diff(a[k], b[k], p));
    }
    return out;
  }
  if (canonicalize(a) !== canonicalize(b)) out.push([ptr || '/', 'changed', a, b]);
  return out;
}

/** The value at a JSON Pointer, or undefined. */
function atPointer(doc, pointer) {
  let v = doc;
  for (const raw of pointer.split('/').slice(1)) {
    const k = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    if (Array.isArray(v) && /^(0|[1-9][0-9]*)$/.test(k) && Number(k) < v.length) v = v[Number(k)];
    else if (isObject(v) && Object.prototype.hasOwnProperty.call(v, k)) v = v[k];
    else return undefined;
  }
  return v;
}

/** A string of the form of the ledger's placeholders for redacted values. */
const isPlaceholder = (v) => typeof v === 'string' && v.startsWith('hmac-sha256:');

/**
 * The redacted pointers (the record's `redacted` list only) at which an edited call still
 * holds one of the ledger's placeholders.
 */
function keptPlaceholders(pointers, args) {
  return pointers.filter((p) => isPlaceholder(atPointer(args, p)));
}

function editForm(q, id) {
  const b = q.rec.body;
  const original = { tool: b.tool, args: b.args };
  const ta = el('textarea', { id: `${id}-edit`, rows: '10', spellcheck: 'false', class: 'editor', 'aria-describedby': `${id}-edit-help ${id}-edit-check` });
  // Large numbers in exponent form and hidden characters as \u escapes: the same call, text
  // the ledger accepts back unchanged, with nothing that can hide or reorder what is around it.
  ta.value = readableJson(original);
  const help = el('p', { id: `${id}-edit-help`, class: 'note' },
    'The edited call as JSON {"tool": ..., "args": {...}}. The ledger records the edit, opens the edited call '
    + 'as a new request and approves it; the original call can then never run.'
    + (b.redacted.length ? ' Redacted values appear as the ledger\'s placeholders (an HMAC, not the value): an edit '
      + 'must give each of them in clear.' : ''));
  const check = el('div', { id: `${id}-edit-check`, class: 'edit-check', 'aria-live': 'polite' });
  const r = rationaleField(`${id}-edit-rationale`, false);
  const submit = el('button', { type: 'submit' }, 'Approve the edited call');
  const refresh = () => {
    clear(check);
    const got = readAction(ta.value);
    if (got.error) {
      check.append(el('p', { class: 'error' }, `Not a valid call: ${got.error}`));
      submit.disabled = true;
      return null;
    }
    const changes = diff(original, got.action);
    const kept = keptPlaceholders(b.redacted, got.action.args);
    submit.disabled = changes.length === 0 || kept.length > 0;
    if (kept.length > 0) {
      check.append(el('p', { class: 'error' },
        `Redacted ${kept.length === 1 ? 'field' : 'fields'} ${kept.join(', ')}: the ledger never had `
        + 'the value, only its HMAC, so an edit cannot keep it (the approved call would hold the '
        + 'placeholder and could never run). Enter the value in clear (the ledger stores it redacted '
        + 'again) or reject the request and let the agent ask again.'));
    }
    if (changes.length === 0) {
      check.append(el('p', {}, 'No change yet: an edit must change the call.'));
      return got.action;
    }
    const table = el('table', { class: 'diff' },
      el('caption', {}, 'Changes against the original call'),
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Field'), el('th', { scope: 'col' }, 'Change'),
        el('th', { scope: 'col' }, 'Original'), el('th', { scope: 'col' }, 'Edited'))));
    const tbody = el('tbody');
    // (`redacted` points into args; the change table's pointers into the whole call)
    const secrets = new Set(b.redacted.map((r) => `/args${r}`));
    const secret = (p) => [...secrets].some((r) => p === r || p.startsWith(`${r}/`));
    for (const [p, kind, o, n] of changes) {
      // A redacted field's new value is the reviewer's own entry: not echoed back either.
      const shownNew = secret(p) && n !== undefined ? 'new value (stored redacted)' : maskedJson(n, p, secrets);
      tbody.append(el('tr', { class: `diff-${kind}` }, el('td', {}, el('code', {}, vis(p))), el('td', {}, kind),
        el('td', {}, el('code', {}, secret(p) && o !== undefined ? 'redacted' : vis(maskedJson(o, p, secrets)))),
        el('td', {}, el('code', {}, vis(shownNew)))));
    }
    table.append(tbody);
    check.append(table);
    return got.action;
  };
  ta.addEventListener('input', refresh);
  const form = el('form', { class: 'decide-form', hidden: true, 'aria-label': `Edit request ${q.rid}` },
    el('label', { for: ta.id }, 'Edited call'), ta, help, check, ...r.nodes, submit);
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const action = refresh();
    if (!action || submit.disabled) return;
    const rationale = r.input.value.trim() === '' ? undefined : r.input.value;
    decide(q, { decision: 'edit', rationale, edited_action: action });
  });
  refresh();
  return form;
}

/** The decisions a governed refusal rules out for this reviewer on this request. */
const RULES_OUT = {
  approver_is_requester: ['approve', 'edit', 'reject'],
  approver_not_allowed: ['approve', 'edit', 'reject'],
  approver_already_approved: ['approve', 'edit'],
};

/** Enables the card's buttons but the decisions ruled out for this reviewer. */
function enableButtons(q) {
  for (const btn of q.card.querySelectorAll('button')) {
    const kind = btn.getAttribute('data-decide');
    btn.disabled = kind !== null && (q.state !== 'open' || q.ruledOut.has(kind));
  }
  for (const f of q.card.querySelectorAll('.decide-form')) {
    if (q.ruledOut.has(f.getAttribute('data-kind'))) f.hidden = true;
  }
}

function ruleOut(q, kinds) {
  for (const k of kinds) q.ruledOut.add(k);
  for (const btn of q.card.querySelectorAll('[data-decide]')) {
    if (q.ruledOut.has(btn.getAttribute('data-decide'))) btn.setAttribute('aria-expanded', 'false');
  }
}

async function decide(q, body) {
  clear(q.error);
  for (const btn of q.card.querySelectorAll('button')) btn.disabled = true;
  const before = q.state;
  if (q.state === 'open') q.state = 'deciding';
  try {
    const a = await api('POST', `/v1/requests/${seg(q.rid)}/decision`, body);
    const counts = Number.isSafeInteger(a.approvals) && Number.isSafeInteger(a.approvals_required)
      ? ` (approval ${a.approvals} of ${a.approvals_required})` : '';
    if (body.decision === 'approve' && a.ticket_id === null) {
      // A partial approval: counted, no ticket; the request stays open for other reviewers.
      if (q.state === 'deciding') q.state = before;
      const seq = Number.isSafeInteger(a.seq) ? a.seq : null;
      if (seq !== null && isObject(a.record) && isObject(a.record.actor)) {
        countApproval(q, a.record.actor.principal, seq, a.approvals_required);
      }
      ruleOut(q, RULES_OUT.approver_already_approved);
      enableButtons(q);
      for (const f of q.card.querySelectorAll('.decide-form')) f.hidden = true;
      const text = frag('Your approval of request ', vis(q.rid), ` is recorded: ${a.approvals} of ${a.approvals_required} approvals. `
        + 'No ticket yet: the ledger issues it with the last approval needed, by other reviewers; the agent is not resumed until then. '
        + 'The request stays in the queue.');
      if (a.duplicate) text.append(' (It was already recorded: this is the recorded answer.)');
      q.note.textContent = `You approved this request${seq === null ? '' : ` (seq ${seq})`}: it now needs other reviewers' approvals.`;
      announce(text, 'partial');
      return;
    }
    closedIds.add(q.rid);
    let text;
    if (body.decision === 'approve') {
      text = frag('Approved request ', vis(q.rid), `${counts}. The ledger issued ticket ${a.ticket_id}, valid until ${fmtTs(a.expires_at)}.`);
    } else if (body.decision === 'reject') {
      text = frag('Rejected request ', vis(q.rid), `. Ticket ${a.ticket_id}; the agent is told the rationale.`);
    } else if (a.ticket_id === null) {
      text = frag('Edited request ', vis(q.rid), `: the edited call is request ${a.new_request_id}, with your approval counted`
        + `${counts}. No ticket yet: its tool needs other reviewers' approvals, and it waits for them in the queue.`);
    } else {
      text = frag('Edited request ', vis(q.rid), `: the edited call is request ${a.new_request_id}, approved with ticket `
        + `${a.ticket_id}, valid until ${fmtTs(a.expires_at)}${counts}.`);
    }
    if (a.duplicate) text.append(' (It was already recorded: this is the recorded answer.)');
    removeFromQueue(q.rid, null);
    announce(text, 'done');
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    if (q.state === 'deciding') q.state = before;
    clear(q.error);
    q.error.append(refusalText(e, `your ${body.decision === 'approve' ? 'approval' : body.decision === 'reject' ? 'rejection' : 'edit'}`));
    if (RULES_OUT[e.code]) ruleOut(q, RULES_OUT[e.code]);
    enableButtons(q);
    if (e.status === 409) {
      // Closed meanwhile (a timeout, another reviewer): show what the ledger recorded.
      try {
        const r = await loadRequest(q.rid);
        if (r.state === 'timed_out') {
          const t = r.records.find((x) => x.kind === 'timeout');
          markTimedOut(q, t ? t.body.expires_at : q.rec.body.expires_at);
        } else if (r.state !== 'open') {
          closedIds.add(q.rid);
          for (const btn of q.card.querySelectorAll('[data-decide]')) btn.disabled = true;
          for (const f of q.card.querySelectorAll('.decide-form')) f.hidden = true;
          q.state = r.state;
          q.deadline.textContent = `Already ${r.state.replace('_', ' ')}: it can no longer be decided.`;
          updateCount();
        }
      } catch {
        // the message above stands
      }
    }
  }
}

function tick() {
  const now = Date.now();
  for (const q of queue.values()) {
    if (q.state !== 'open' && q.state !== 'deciding') continue;
    const left = q.expires - now;
    if (left > 0) {
      q.countdown.textContent = fmtDuration(left);
      q.card.classList.toggle('urgent', left < 60000);
    } else {
      q.countdown.textContent = 'deadline passed';
      q.deadline.textContent = `The deadline passed at ${fmtTs(q.rec.body.expires_at)}: the ledger records a `
        + 'timeout and the agent is told timeout; waiting for the ledger to confirm.';
    }
  }
}

async function startQueue() {
  // Start the stream a little before the current end, then read the pending list: a request
  // closed on the stream is never brought back by the list.
  const cp = await fetch('/v1/checkpoint', {
    headers: { Authorization: `Bearer ${token()}` }, cache: 'no-store', credentials: 'omit',
  });
  if (!cp.ok) throw new ApiError(cp.status, 'checkpoint', `the ledger answered ${cp.status} for its checkpoint`);
  const size = Number((await cp.text()).split('\n')[1]);
  liveFrom = Number.isSafeInteger(size) ? size : 0;
  const after = Number.isSafeInteger(size) && size - 1 - STREAM_BACKLOG >= 0 ? size - 1 - STREAM_BACKLOG : null;
  stream = new DecisionStream({ after, token, onRecord, onStatus: setStreamStatus });
  const pending = await api('GET', '/v1/pending');
  // The policy in force, for what the cards say of their tools (a reader that may not read
  // it sees the cards without).
  try {
    await loadPolicyNow();
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
  }
  stream.start();
  loadBreakGlass();
  for (const p of pending.pending) {
    if (closedIds.has(p.request_id) || queue.has(p.request_id)) continue;
    try {
      const r = await loadRequest(p.request_id, { firstPage: true });
      if (r.state === 'open' && r.interrupt && !closedIds.has(p.request_id) && !queue.has(p.request_id)) {
        addToQueue(r.interrupt, r);
      }
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      announce(frag('Could not read request ', vis(p.request_id), `: ${e.message}`), 'warn');
    }
  }
  ticker = setInterval(tick, 500);
}

function setStreamStatus(state, text) {
  const s = $('stream-status');
  s.textContent = text;
  s.dataset.state = state;
}

// ---------------------------------------------------------------------------- history

/** Denial codes of an authorization that deserve more than their code. */
const DENIALS = {
  tool_paused: 'the tool is paused by the policy in force; the host was told to route the action to a manual operator',
  approval_pending: 'the request was still waiting for its decision (or for more approvals)',
};

/** What a decision record says: approval (partial or final, with its counts), break-glass, edit. */
function decisionSummary(b) {
  const v = (x) => vis(x);
  const counts = typeof b.approvals === 'number' ? `approval ${b.approvals} of ${b.approvals_required}` : null;
  const as = typeof b.approved_as === 'string' ? frag('; admitted as ', el('code', {}, v(b.approved_as))) : null;
  const why = typeof b.rationale === 'string' && b.rationale !== '' ? frag('; rationale: ', v(b.rationale)) : null;
  if (b.decision === 'edit') return frag('edited: superseded by request ', v(b.superseded_by), as, why);
  if (b.break_glass === true) {
    return frag(el('strong', { class: 'break-glass' }, 'break-glass'), ` emergency approval, ticket ${b.ticket_id}, valid until ${fmtTs(b.expires_at)}; reason: `,
      v(b.reason));
  }
  if (b.ticket_id === null) {
    return frag(el('strong', { class: 'partial' }, `partial approval (${counts ?? 'counted'})`),
      ': no ticket issued, the request stays open for other reviewers', as, why);
  }
  return frag(`approved${counts ? ` (${counts})` : ''}, ticket ${b.ticket_id}, valid until ${fmtTs(b.expires_at)}`, as, why);
}

/** What a record says, in words; every string from the record with its hidden characters marked. */
function recordSummary(r) {
  const b = r.body;
  const v = (x) => vis(x);
  switch (r.kind) {
    case 'interrupt':
      return frag('asked to run ', toolName(b.tool), b.edit_of ? frag(' (an edit of request ', v(b.edit_of), ')') : null,
        `; deadline ${fmtTs(b.expires_at)}`);
    case 'decision':
      return decisionSummary(b);
    case 'rejection':
      return frag('rejected: ', v(b.rationale));
    case 'authorization':
      if (b.granted) return frag('authorization granted', b.would_deny ? frag(' (observe mode; would deny: ', v(b.would_deny), ')') : null);
      return frag(el('strong', { class: b.code === 'tool_paused' ? 'denied paused' : 'denied' }, 'authorization denied: ', v(b.code)),
        DENIALS[b.code] ? ` — ${DENIALS[b.code]}` : null);
    case 'follow_up':
      return frag('follow-up: ', v(b.outcome), b.operation_id ? frag(' (operation ', v(b.operation_id), ')') : null,
        typeof b.detail === 'string' ? frag('; detail: ', v(b.detail)) : null);
    case 'timeout':
      return frag(`timed out (deadline ${fmtTs(b.expires_at)})`);
    case 'revocation':
      return frag('revoked: ', v(b.reason));
    case 'refusal':
      return frag('refused ', v(b.method), ' ', v(b.path), ': ', el('code', {}, v(b.error)),
        REFUSAL_RECORDS[b.error] ? ` — ${REFUSAL_RECORDS[b.error]}` : null);
    case 'policy':
      return frag('policy recorded, in force from this record on: ', el('code', { class: 'digest' }, v(b.policy_digest)));
    case 'review':
      return frag('post-event review of the break-glass use (record ', el('code', { class: 'digest' }, v(b.reviews)), '): ',
        el('strong', { class: `verdict-${b.verdict === 'disputed' ? 'disputed' : 'acknowledged'}` }, v(b.verdict)), '; rationale: ', v(b.rationale));
    default:
      return frag(v(r.kind));
  }
}

function historyTable(records, caption, withRequest) {
  const table = el('table', { class: 'records' }, el('caption', {}, caption));
  const head = ['Thread seq', 'Log seq', 'Recorded at', 'Kind', ...(withRequest ? ['Request'] : []), 'By', 'What'];
  table.append(el('thead', {}, el('tr', {}, ...head.map((h) => el('th', { scope: 'col' }, h)))));
  const tbody = el('tbody');
  for (const r of records) {
    const what = el('td', {}, recordSummary(r));
    if (r.kind === 'interrupt') what.append(el('div', { class: 'args' }, renderArgs(r.body.args, r.body.redacted)));
    if (r.kind === 'follow_up' && isObject(r.body.detail)) {
      what.append(el('div', { class: 'args detail' }, renderArgs(r.body.detail, [])));
    }
    if (r.kind === 'policy' && isObject(r.body.policy)) {
      what.append(el('div', { class: 'args policy-doc' }, renderArgs(r.body.policy, [])));
    }
    tbody.append(el('tr', { 'data-seq': String(r.seq), 'data-kind': r.kind },
      el('td', {}, String(r.thread_seq)), el('td', {}, String(r.seq)), el('td', {}, fmtTs(r.ts)), el('td', {}, vis(r.kind)),
      ...(withRequest ? [el('td', {}, r.request_id === null ? '—' : idCode(r.request_id))] : []),
      el('td', {}, who(r.actor)), what));
  }
  table.append(tbody);
  return table;
}

/** What a request's records say of its break-glass use and review, for its history. */
function breakGlassNote(records) {
  const use = records.find((x) => x.kind === 'decision' && x.body.break_glass === true);
  if (!use) return null;
  const review = records.find((x) => x.kind === 'review');
  return el('p', { class: 'break-glass-state' },
    el('strong', {}, 'Break-glass: '), 'decided in an emergency by ', who(use.actor), ` (seq ${use.seq}); `,
    review
      ? frag('post-event review recorded by ', who(review.actor), ` (seq ${review.seq}): `, vis(review.body.verdict), '.')
      : frag('its post-event review is still awaited (see ', el('a', { href: '#break-glass' }, 'Break-glass reviews'), ').'));
}

async function showRequestHistory(rid) {
  const out = $('history');
  clear(out);
  out.append(el('p', {}, 'Reading request ', vis(rid), '…'));
  try {
    const r = await readRequest(rid);
    clear(out);
    out.append(
      el('h3', {}, 'History of request ', vis(rid)),
      el('p', { class: 'state' }, 'State recorded by the ledger: ', el('strong', { text: r.state.replace('_', ' ') }),
        r.state === 'open' ? ' — still open: decide it under "Needs an answer now", not here.' : ' — answered; nothing to decide.'),
      r.approvals_required !== null && r.approvals_required > 1
        ? el('p', { class: 'approvals' }, 'Approvals counted: ', approvalsLine(
          r.approvals.filter((a) => isObject(a)).map((a) => [a.seq, a.principal]), r.approvals_required, r.state === 'open'))
        : null,
      breakGlassNote(r.records),
      historyTable(r.records, frag('Records of request ', vis(rid), ', in log order (history, read-only)'), false),
    );
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    clear(out);
    out.append(el('p', { class: 'error', role: 'alert' }, 'Could not read request ', vis(rid), ': ', vis(`${e.message} (${e.code}).`)));
  }
}

async function showThreadHistory(tid) {
  const out = $('history');
  clear(out);
  out.append(el('p', {}, 'Reading thread ', vis(tid), '…'));
  try {
    const records = [];
    let after = null;
    for (;;) {
      const q = after === null ? '' : `?after=${after}`;
      const page = await api('GET', `/v1/threads/${seg(tid)}/records${q}`);
      records.push(...page.records);
      if (page.next_after === undefined || page.next_after === null) break;
      after = page.next_after;
    }
    clear(out);
    out.append(
      el('h3', {}, 'History of thread ', vis(tid)),
      records.length === 0
        ? el('p', {}, 'The ledger has no records for this thread.')
        : historyTable(records, frag('Records of thread ', vis(tid), ', in thread order (history, read-only)'), true),
    );
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    clear(out);
    const why = e.status === 403
      ? 'A thread\'s history is for auditors: this token\'s role may not read it. Sign in with an auditor token.'
      : `${e.message} (${e.code}).`;
    out.append(el('p', { class: 'error', role: 'alert' }, 'Could not read thread ', vis(tid), `: ${why}`));
  }
}

// ------------------------------------------------------------------------------ policy

const MODE_WORDS = {
  enforce: 'enforce',
  observe: 'observe: a denial is recorded as would_deny, the action runs',
  paused: 'PAUSED: every authorize denied (tool_paused), the action routed to a manual operator',
};

/** A value of a policy document as text (strings and numbers as the document holds them). */
const policyValue = (v) => (typeof v === 'string' ? v : JSON.stringify(v));

/** The policy's decisions, tool by tool: each named tool resolved over the default, then the default. */
function policyToolsTable(doc) {
  const names = hasOwn(doc, 'tools') && isObject(doc.tools) ? Object.keys(doc.tools) : [];
  const table = el('table', { class: 'records policy-tools' },
    el('caption', {}, 'What it decides, tool by tool (a tool\'s entry over the default, field by field)'));
  const head = ['Tool', 'Mode', 'Who may decide', 'Approvals needed', 'Break-glass', 'Review window', 'Approval lifetime', 'Redacted'];
  table.append(el('thead', {}, el('tr', {}, ...head.map((h) => el('th', { scope: 'col' }, h)))));
  const tbody = el('tbody');
  const row = (label, tool, t) => {
    const mode = MODE_WORDS[t.mode] ?? policyValue(t.mode);
    const approvers = Array.isArray(t.approvers) ? frag() : frag('every reviewer');
    if (Array.isArray(t.approvers)) t.approvers.forEach((a, i) => approvers.append(i ? ', ' : '', el('code', {}, vis(policyValue(a)))));
    tbody.append(el('tr', { 'data-tool': tool ?? '', class: t.mode === 'paused' ? 'row-paused' : null },
      el('th', { scope: 'row' }, label),
      el('td', {}, t.mode === 'paused' ? el('strong', { class: 'paused' }, mode) : mode),
      el('td', {}, approvers),
      el('td', {}, vis(policyValue(t.approvals_required))),
      el('td', {}, t.break_glass === true ? 'allowed' : 'no'),
      el('td', {}, vis(`${policyValue(t.review_window_seconds)} s`)),
      el('td', {}, vis(`${policyValue(t.approval_ttl_seconds)} s`)),
      el('td', {}, t.redact.length ? vis(t.redact.map(policyValue).join(', ')) : '—')));
  };
  for (const name of names) row(toolName(name), name, resolveTool(doc, name));
  row('every other tool (the default)', null, resolveTool(doc, null));
  table.append(tbody);
  return table;
}

/** The changes from one policy document to the next, as a table (or a sentence when none). */
function policyChanges(before, after) {
  if (before === null) return el('p', { class: 'note' }, 'The first policy of this ledger.');
  const changes = diff(before, after);
  if (changes.length === 0) return el('p', { class: 'note' }, 'No change to the document.');
  const table = el('table', { class: 'diff' },
    el('caption', {}, 'Changes against the version before'),
    el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Field'), el('th', { scope: 'col' }, 'Change'),
      el('th', { scope: 'col' }, 'Before'), el('th', { scope: 'col' }, 'After'))));
  const tbody = el('tbody');
  const none = new Set();
  for (const [p, kind, o, n] of changes) {
    tbody.append(el('tr', { class: `diff-${kind}` }, el('td', {}, el('code', {}, vis(p))), el('td', {}, kind),
      el('td', {}, el('code', {}, vis(maskedJson(o, p, none)))), el('td', {}, el('code', {}, vis(maskedJson(n, p, none))))));
  }
  table.append(tbody);
  return table;
}

/** The document of a policy record, folded. */
function policyDocument(doc, summary) {
  return el('details', { class: 'policy-doc' }, el('summary', {}, summary), el('div', { class: 'args' }, renderArgs(doc, [])));
}

let policyShown = 0;

async function showPolicy() {
  const cur = $('policy-current');
  const hist = $('policy-history');
  const turn = ++policyShown;
  clear(cur);
  clear(hist);
  cur.append(el('p', {}, 'Reading the policy in force…'));
  let p;
  let h;
  try {
    [p, h] = await Promise.all([loadPolicyNow(), api('GET', '/v1/policy/history')]);
    if (!h || !Array.isArray(h.policies)) throw new ApiError(0, 'protocol', 'the ledger answered the policy history without its list');
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    if (turn !== policyShown) return;
    clear(cur);
    const why = e.status === 403 ? 'this token\'s role may not read the policy history: sign in with a reviewer or auditor token.'
      : frag(vis(`${e.message} (${e.code}).`));
    cur.append(el('p', { class: 'error', role: 'alert' }, 'Could not read the policy: ', why));
    return;
  }
  if (turn !== policyShown) return; // a later call shows a later state
  clear(cur);
  const rec = isObject(p.record) ? p.record : null;
  cur.append(
    el('h3', {}, 'In force now'),
    el('dl', { class: 'facts', id: 'policy-facts' },
      el('dt', {}, 'Record'), el('dd', {}, rec ? `seq ${p.seq}, in thread ` : 'none yet: the ledger\'s file is in force until its first write records it',
        rec ? idCode(rec.thread_id) : null),
      el('dt', {}, 'Recorded at'), el('dd', {}, rec ? fmtTs(rec.ts) : '—'),
      el('dt', {}, 'Set by'), el('dd', { class: 'set-by' }, rec ? who(rec.actor) : '—'),
      el('dt', {}, 'Digest'), el('dd', {}, el('code', { class: 'digest' }, vis(p.policy_digest))),
      el('dt', {}, 'Record id'), el('dd', {}, p.leaf_hash ? el('code', { class: 'digest' }, vis(p.leaf_hash)) : '—')),
    el('div', { class: 'table-wrap' }, policyToolsTable(p.policy)),
    policyDocument(p.policy, 'The document as recorded'),
  );
  const table = el('table', { class: 'records policy-history' },
    el('caption', {}, `${h.policies.length} version${h.policies.length === 1 ? '' : 's'} of the policy, oldest first (history, read-only)`));
  const head = ['Log seq', 'Recorded at', 'Set by', 'Digest', 'What changed'];
  table.append(el('thead', {}, el('tr', {}, ...head.map((x) => el('th', { scope: 'col' }, x)))));
  const tbody = el('tbody');
  let before = null;
  for (const entry of h.policies) {
    const doc = isObject(entry.record) && isObject(entry.record.body) ? entry.record.body.policy : null;
    const inForce = entry.seq === p.seq;
    tbody.append(el('tr', { 'data-seq': String(entry.seq), class: inForce ? 'in-force' : null },
      el('td', {}, String(entry.seq), inForce ? frag(' ', el('span', { class: 'badge' }, 'in force')) : null),
      el('td', {}, fmtTs(entry.ts)),
      el('td', { class: 'set-by' }, who(entry.actor)),
      el('td', { class: 'digest-cell' }, el('code', { class: 'digest' }, vis(entry.policy_digest))),
      el('td', { class: 'changes-cell' }, isObject(doc) ? frag(policyChanges(before, doc), policyDocument(doc, `The document of seq ${entry.seq}`)) : '—')));
    if (isObject(doc)) before = doc;
  }
  table.append(tbody);
  hist.append(el('div', { class: 'table-wrap' }, table));
}

/** A policy record on the stream: the policy in force changed. */
function onPolicyRecord(rec, leafHash) {
  if (policyNow && Number.isSafeInteger(policyNow.seq) && rec.seq <= policyNow.seq) return;
  policyNow = { policy: rec.body.policy, policy_digest: rec.body.policy_digest, seq: rec.seq, record: rec, leaf_hash: leafHash };
  for (const q of queue.values()) showGovernance(q);
  if (rec.seq >= liveFrom) {
    announce(frag(`The policy changed (seq ${rec.seq}, by `, who(rec.actor), '): what it says of each tool is under "Policy in force".'), 'warn');
  }
  if (!$('place-policy').hidden) showPolicy();
}

// ---------------------------------------------------------------------- break-glass reviews

/** Request id -> {card}: the break-glass uses awaiting their post-event review. */
const bgQueue = new Map();
/** Request ids whose break-glass use the stream saw reviewed (a list read later cannot bring one back). */
const bgReviewed = new Set();
let bgLoaded = false;
let bgSerial = 0;

function updateBgCount() {
  $('bg-count').textContent = bgQueue.size ? `(${bgQueue.size})` : '';
  $('bg-empty').hidden = bgQueue.size > 0 || !bgLoaded;
}

function bgAnnounce(text, cls) {
  $('bg-answers').prepend(el('p', { class: `answer ${cls}` }, text));
}

/** Reads the review queue and brings the page's list in line with it (keeping what is typed). */
async function loadBreakGlass() {
  const problem = $('bg-problem');
  try {
    const a = await api('GET', '/v1/reviews/break-glass');
    if (!a || !Array.isArray(a.break_glass)) throw new ApiError(0, 'protocol', 'the ledger answered the break-glass queue without its list');
    clear(problem);
    const listed = new Set(a.break_glass.map((u) => u.request_id));
    for (const rid of [...bgQueue.keys()]) if (!listed.has(rid)) removeBg(rid);
    for (const u of a.break_glass) if (isObject(u) && !bgQueue.has(u.request_id) && !bgReviewed.has(u.request_id)) addBg(u);
    bgLoaded = true;
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    clear(problem);
    problem.append(e.status === 403
      ? 'This token\'s role may not read the break-glass review queue (403): it is for reviewers and auditors.'
      : frag('Could not read the break-glass review queue: ', vis(`${e.message} (${e.code}).`)));
  }
  updateBgCount();
}

function removeBg(rid) {
  const u = bgQueue.get(rid);
  if (!u) return;
  u.card.remove();
  bgQueue.delete(rid);
  updateBgCount();
}

/** A break-glass decision on the stream: a use to review. */
function onBreakGlassUse(rec, leafHash) {
  const rid = rec.request_id;
  if (bgQueue.has(rid) || bgReviewed.has(rid)) return;
  addBg({ request_id: rid, seq: rec.seq, ts: rec.ts, actor: rec.actor, reason: rec.body.reason, leaf_hash: leafHash, record: rec });
}

/** A review on the stream: its use leaves the queue. */
function onReview(rec) {
  const rid = rec.request_id;
  bgReviewed.add(rid);
  if (!bgQueue.has(rid)) return;
  removeBg(rid);
  bgAnnounce(frag('The break-glass use on request ', vis(rid), ' was reviewed by ', who(rec.actor), ': ', vis(rec.body.verdict), '.'), 'info');
}

/** One break-glass use, as {request_id, seq, ts, actor, reason, leaf_hash, record}. */
function addBg(u) {
  const rid = u.request_id;
  const id = `bg-${bgSerial++}`;
  const b = isObject(u.record) && isObject(u.record.body) ? u.record.body : {};
  const card = el('li', { class: 'card bg-card', 'data-request-id': rid, 'aria-labelledby': `${id}-title` });
  const call = el('dd', { class: 'args' }, 'reading the request…');
  card.append(
    el('h3', { id: `${id}-title` }, 'Break-glass use on request ', vis(rid)),
    el('dl', { class: 'facts' },
      el('dt', {}, 'Used by'), el('dd', { class: 'used-by' }, who(u.actor)),
      el('dt', {}, 'At'), el('dd', {}, fmtTs(u.ts)),
      el('dt', {}, 'Reason given'), el('dd', { class: 'reason' }, vis(u.reason)),
      el('dt', {}, 'Grant'), el('dd', {}, vis(`ticket ${b.ticket_id}, valid until ${fmtTs(b.expires_at)} (single use)`)),
      el('dt', {}, 'Call'), call,
      el('dt', {}, 'Decision record'), el('dd', {}, `seq ${u.seq}, id `, el('code', { class: 'digest' }, vis(u.leaf_hash))),
      el('dt', {}, 'History'), el('dd', {}, el('a', { href: `#recorded/request/${encodeURIComponent(rid)}` }, 'the request\'s records'))),
  );
  const ack = el('input', { type: 'radio', name: `${id}-verdict`, id: `${id}-ack`, value: 'acknowledged' });
  const dis = el('input', { type: 'radio', name: `${id}-verdict`, id: `${id}-dis`, value: 'disputed' });
  const verdicts = el('fieldset', { class: 'verdicts' }, el('legend', {}, 'Verdict'),
    el('div', { class: 'choice' }, ack, el('label', { for: ack.id }, 'Acknowledged: the emergency use was justified')),
    el('div', { class: 'choice' }, dis, el('label', { for: dis.id }, 'Disputed: it was not justified, or needs follow-up')));
  const r = rationaleField(`${id}-rationale`, true);
  const submit = el('button', { type: 'submit' }, 'Record the review');
  const error = el('p', { class: 'error', role: 'alert' });
  const form = el('form', { class: 'review-form', novalidate: true, 'aria-label': `Review the break-glass use on request ${rid}` },
    el('h4', {}, 'Post-event review'), verdicts, ...r.nodes, submit, error);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    clear(error);
    const verdict = ack.checked ? 'acknowledged' : dis.checked ? 'disputed' : null;
    if (verdict === null) {
      error.textContent = 'Choose a verdict first: acknowledged or disputed.';
      ack.focus();
      return;
    }
    if (r.input.value.trim() === '') {
      error.textContent = 'A review needs a rationale: say why.';
      r.input.focus();
      return;
    }
    const controls = [...form.querySelectorAll('button, input, textarea')];
    for (const c of controls) c.disabled = true;
    try {
      const a = await api('POST', `/v1/requests/${seg(rid)}/review`, { verdict, rationale: r.input.value });
      bgReviewed.add(rid);
      removeBg(rid);
      const text = frag('Recorded your review of the break-glass use on request ', vis(rid), `: ${verdict} (record seq ${a.seq}).`);
      if (a.duplicate) text.append(' (It was already recorded: this is the recorded answer.)');
      bgAnnounce(text, 'done');
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      for (const c of controls) c.disabled = false;
      clear(error);
      error.append(err.code === 'forbidden'
        ? frag('The ledger refused your review: only a reviewer records one, and this token\'s role may not. ', vis(`(${err.status} ${err.code}: ${err.message})`))
        : refusalText(err, 'your review'));
      if (err.status === 409) loadBreakGlass(); // reviewed or gone meanwhile: the list says
    }
  });
  card.append(form);
  bgQueue.set(rid, { card });
  $('bg-queue').append(card);
  updateBgCount();
  readRequest(rid, { firstPage: true }).then((got) => {
    const i = got.records.find((x) => x.kind === 'interrupt');
    clear(call);
    if (i) call.append(toolName(i.body.tool), el('div', {}, renderArgs(i.body.args, i.body.redacted)));
    else call.append('—');
  }, (e) => {
    clear(call);
    call.append(e instanceof ApiError ? vis(`could not read the request: ${e.message} (${e.code})`) : 'could not read the request');
  });
}

// ----------------------------------------------------------------------------- verify

async function runVerify(bytes, source) {
  const out = $('verify-result');
  clear(out);
  const key = $('verify-key').value.trim();
  if (key === '') {
    out.append(el('p', { class: 'error', role: 'alert' }, 'Paste or pin the verifier key you trust first: a bundle is never checked against the key it names.'));
    $('verify-key').focus();
    return;
  }
  const witnessKeys = $('verify-witnesses').value.split('\n').map((l) => l.trim()).filter((l) => l !== '');
  const minText = $('verify-min-witnesses').value.trim();
  const policy = witnessKeys.length === 0 && minText === ''
    ? null
    : { keys: witnessKeys, min: minText === '' ? null : Number(minText) };
  if (policy && witnessKeys.length === 0) {
    out.append(el('p', { class: 'error', role: 'alert' }, 'A number of cosignatures needs witness keys: paste them, one per line.'));
    $('verify-witnesses').focus();
    return;
  }
  out.append(el('p', {}, `Verifying ${source}…`));
  let result;
  try {
    result = await verifyBundle(bytes, key, policy);
  } catch (e) {
    clear(out);
    const msg = e instanceof EnvironmentError ? e.message : `the verifier failed: ${e.message}`;
    out.append(el('p', { class: 'error', role: 'alert' }, `This browser cannot verify: ${msg}`));
    return;
  }
  const { report, checks } = result;
  clear(out);
  const verdict = report.ok
    ? el('p', { class: 'verdict ok', id: 'verdict', 'data-ok': 'true' },
      `Intact: ${report.records} records (${report.decisions} decisions, ${report.rejections} rejections), `
      + `${fmtTs(report.first_ts)} to ${fmtTs(report.last_ts)}.`)
    : el('p', { class: 'verdict fail', id: 'verdict', 'data-ok': 'false', 'data-code': report.problem.code },
      `Not verified. First failure: `, el('code', { text: report.problem.code }),
      report.problem.seq === null ? '' : ` at record seq ${report.problem.seq}`, ': ', vis(report.problem.message));
  const list = el('ol', { class: 'checks', id: 'checks' });
  const label = { pass: 'passed', fail: 'FAILED', incomplete: 'stopped', skipped: 'skipped', not_run: 'not run' };
  for (const c of checks) {
    list.append(el('li', { class: `check ${c.status}`, 'data-check': c.id, 'data-status': c.status },
      el('strong', {}, `${label[c.status]}: `), c.title,
      el('div', { class: 'note' }, c.what),
      c.detail ? el('div', { class: 'detail' }, vis(c.detail)) : null));
  }
  out.append(el('h3', {}, `Result for ${source}`), verdict, list);
  out.append(el('pre', { class: 'report', id: 'verify-report', 'aria-label': 'The report as verify-export --format json prints it' },
    readableJson(report))); // hidden characters of a message as \u escapes
}

function showPinned() {
  const pinned = localStorage.getItem(PIN_KEY);
  $('pinned').textContent = pinned ? `Pinned: ${pinned}` : 'No key pinned.';
}

function setupVerify() {
  const pinned = localStorage.getItem(PIN_KEY);
  if (pinned) $('verify-key').value = pinned;
  showPinned();
  $('pin-key').addEventListener('click', () => {
    const k = $('verify-key').value.trim();
    if (k) localStorage.setItem(PIN_KEY, k);
    showPinned();
  });
  $('unpin-key').addEventListener('click', () => {
    localStorage.removeItem(PIN_KEY);
    showPinned();
  });
  $('verify-form').addEventListener('submit', (e) => e.preventDefault());
  const readFile = async (file) => runVerify(new Uint8Array(await file.arrayBuffer()), `file ${file.name}`);
  $('bundle-file').addEventListener('change', (e) => {
    const f = e.target.files[0];
    if (f) readFile(f);
  });
  const drop = $('drop');
  drop.addEventListener('dragover', (e) => {
    e.preventDefault();
    drop.classList.add('over');
  });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (e) => {
    e.preventDefault();
    drop.classList.remove('over');
    const f = e.dataTransfer.files[0];
    if (f) readFile(f);
  });
  const choose = () => $('bundle-file').click();
  drop.addEventListener('click', choose);
  drop.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' || e.key === ' ') {
      e.preventDefault();
      choose();
    }
  });
  $('open-export').addEventListener('click', async () => {
    const tid = $('export-thread').value;
    const out = $('verify-result');
    if (tid === '') {
      $('export-thread').focus();
      return;
    }
    try {
      const bytes = await api('GET', `/v1/threads/${seg(tid)}/export`, undefined, { raw: true });
      await runVerify(bytes, `the export of thread ${tid}`);
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      clear(out);
      const why = e.status === 403 ? 'exports are for auditors: sign in with an auditor token.' : `${e.message} (${e.code}).`;
      out.append(el('p', { class: 'error', role: 'alert' }, `Could not export thread ${tid}: ${why}`));
    }
  });
}

// ------------------------------------------------------------------------ places, sign-in

const PLACES = ['queue', 'recorded', 'policy', 'break-glass', 'verify', 'report'];
/** The places a link names by their name alone. */
const PLAIN_PLACES = new Set(['queue', 'policy', 'break-glass', 'verify', 'report']);
/** The longest part of a link quoted back in a message. */
const MAX_QUOTED = 120;

/**
 * What a location fragment asks for: `{place, requestId, problem}`. Never throws: a fragment
 * that is not percent-encoded UTF-8 (`#recorded/request/%E0%A4`), names no place, or names a
 * request id that is not an id gives the place it can (the queue when none) and a `problem`
 * to show. The parts are split on "/" before decoding, so an id's own "/" (sent as %2F) stays
 * in the id.
 */
function parseRoute(hash) {
  const raw = String(hash ?? '').replace(/^#/, '');
  if (raw === '') return { place: 'queue', requestId: null, problem: null };
  const [head, ...rest] = raw.split('/');
  const unknown = { place: 'queue', requestId: null, problem: 'This link names no place of the console' };
  if (PLAIN_PLACES.has(head)) return rest.length === 0 ? { place: head, requestId: null, problem: null } : unknown;
  if (head !== 'recorded') return unknown;
  if (rest.length === 0 || (rest.length === 1 && rest[0] === '')) return { place: 'recorded', requestId: null, problem: null };
  if (rest[0] !== 'request' || rest.length < 2) {
    return { place: 'recorded', requestId: null, problem: 'This link names nothing the "Recorded" place can show' };
  }
  let id;
  try {
    id = decodeURIComponent(rest.slice(1).join('/'));
  } catch {
    return { place: 'recorded', requestId: null, problem: 'The request id in this link is not percent-encoded UTF-8' };
  }
  if (!validId(id)) {
    return { place: 'recorded', requestId: null, problem: 'The request id in this link is not a request id (1 to 256 bytes, no control characters)' };
  }
  return { place: 'recorded', requestId: id, problem: null };
}

/** Shows the place the location asks for. Never throws: the queue and the stream go on. */
function route() {
  let r;
  try {
    r = parseRoute(location.hash);
  } catch (e) {
    r = { place: 'queue', requestId: null, problem: `This link could not be read (${e.message})` };
  }
  for (const p of PLACES) {
    $(`place-${p}`).hidden = p !== r.place;
    const tab = $(`tab-${p}`);
    if (p === r.place) tab.setAttribute('aria-current', 'page');
    else tab.removeAttribute('aria-current');
  }
  const note = $('route-problem');
  clear(note);
  note.hidden = r.problem === null;
  if (r.problem !== null) {
    const quoted = location.hash.length > MAX_QUOTED ? `${location.hash.slice(0, MAX_QUOTED)}…` : location.hash;
    note.append(`${r.problem}: `, el('code', {}, vis(quoted)), `. Showing "${$(`tab-${r.place}`).firstChild.textContent.trim()}" instead; `
      + 'the queue and the live stream are not affected.');
  }
  if (r.place === 'policy' && token()) {
    showPolicy().catch((e) => {
      clear($('policy-current'));
      $('policy-current').append(el('p', { class: 'error', role: 'alert' }, `Could not show the policy: ${e.message}`));
    });
  }
  if (r.place === 'break-glass' && token()) loadBreakGlass();
  if (r.place === 'report' && token()) showReport();
  if (r.requestId !== null) {
    $('request-id').value = r.requestId;
    showRequestHistory(r.requestId).catch((e) => {
      clear($('history'));
      $('history').append(el('p', { class: 'error', role: 'alert' }, `Could not show the request: ${e.message}`));
    });
  }
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  if (stream) stream.stop();
  stream = null;
  if (ticker) clearInterval(ticker);
  ticker = null;
  for (const rid of [...queue.keys()]) removeFromQueue(rid, null);
  for (const rid of [...bgQueue.keys()]) removeBg(rid);
  closedIds.clear();
  editedPending.clear();
  bgReviewed.clear();
  bgLoaded = false;
  policyNow = null;
  policyShown++;
  clear($('answers'));
  clear($('bg-answers'));
  clear($('bg-problem'));
  clear($('policy-current'));
  clear($('policy-history'));
  clear($('history'));
  clear($('closed'));
  clear($('verify-result'));
  clearReport();
  $('app').hidden = true;
  $('session').hidden = true;
  $('signin').hidden = false;
  $('signin-error').textContent = message ?? '';
  $('token').value = '';
  $('token').focus();
}

async function signIn() {
  $('signin').hidden = true;
  $('app').hidden = false;
  $('session').hidden = false;
  $('session-who').textContent = 'Signed in (token held in this tab only)';
  route();
  try {
    await startQueue();
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    if (e.status === 403) {
      setStreamStatus('error', 'This token may not read the queue: the console needs a reviewer or auditor token.');
    } else if (e.status !== 401) {
      setStreamStatus('error', `Could not read the queue: ${e.message}`);
    }
  }
}

function main() {
  $('signin-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const t = $('token').value.trim();
    if (t === '') return;
    sessionStorage.setItem(TOKEN_KEY, t);
    $('token').value = '';
    // Check the token before showing anything: 401 means the ledger does not know it.
    try {
      await api('GET', '/v1/pending');
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      if (err.status === 401) return; // api() signed out with the message
      if (err.status !== 403) {
        sessionStorage.removeItem(TOKEN_KEY);
        $('signin-error').textContent = `The ledger did not accept the sign-in: ${err.message}`;
        return;
      }
      // 403: an agent token. The console is not for agents.
      sessionStorage.removeItem(TOKEN_KEY);
      $('signin-error').textContent = 'This token\'s role may not review (403): use your own reviewer token.';
      return;
    }
    signIn();
  });
  $('sign-out').addEventListener('click', () => signOut('Signed out.'));
  $('request-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const rid = $('request-id').value;
    if (!rid) return;
    const target = `#recorded/request/${encodeURIComponent(rid)}`;
    if (location.hash === target) showRequestHistory(rid);
    else location.hash = target;
  });
  $('thread-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const tid = $('thread-id').value;
    if (tid) showThreadHistory(tid);
  });
  window.addEventListener('hashchange', route);
  setupVerify();
  setupReport({ get: (path) => api('GET', path), vis });
  if (token()) signIn();
  else $('signin').hidden = false;
}

main();
