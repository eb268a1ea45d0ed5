// The export-bundle verifier, in the browser: the checks of `hitl-ledger verify-export`
// (src/verify/bundle.rs, src/verify/rules.rs, src/verify/governance.rs; docs/protocol.md
// sections 4 to 6 and 12), in the same order and with the same problem codes, so that the page
// and the command line give the same verdict on every bundle. A bundle's `policy` member (the
// policy records its thread was evaluated under) is checked as docs/protocol.md 6.2 checks 11
// and 12 say, and the rule replay runs over the thread's and the policy's records together. Hashes (SHA-256) and signatures (Ed25519) are WebCrypto's; the only
// trust anchor is the verifier key the caller passes (never the key a bundle names).
//
// Public entry point: verifyBundle(bytes, key) -> {report, checks, records}.

import { JsonError, JsonInt, canonicalize, decodeUtf8, isObject, parseJson } from './jcs.js';

/** The bundle's format string. */
export const FORMAT = 'hitl-ledger/export/v1';

const ZERO_HASH_HEX = '0'.repeat(64);
const THREAD_HEAD_HEADER = 'hitl-ledger thread-head v1';
const SIG_PREFIX = '\u2014 ';
const MAX_SIGNATURES = 100;
const MAX_U64 = (1n << 64n) - 1n;
const KINDS = ['interrupt', 'decision', 'rejection', 'follow_up', 'authorization', 'timeout', 'revocation', 'refusal',
  'policy', 'review'];
const ROLES = ['agent', 'reviewer', 'auditor', 'admin', 'break_glass', 'system'];
/** The reserved thread that holds the `policy` records, and nothing else. */
export const POLICY_THREAD = 'hitl-ledger/policy';
const ENVELOPE_FIELDS = ['v', 'origin', 'seq', 'prev', 'ts', 'kind', 'thread_id', 'run_id', 'checkpoint_ns',
  'checkpoint_id', 'request_id', 'thread_seq', 'thread_prev', 'actor', 'body'];

/**
 * The checks, in the order they run, each with the problem codes it reports. Records are
 * checked one after another (encoding, envelope, position, proof, chain for record 0, then for
 * record 1, ...), so a failure in record k stops the record checks that had not finished.
 */
export const CHECKS = [
  { id: 'structure', title: 'Bundle structure and trusted key', codes: ['bad_input'],
    what: 'The bundle is strict JSON in format hitl-ledger/export/v1, and the trusted key is a C2SP Ed25519 verifier key.' },
  { id: 'key', title: 'The bundle is from the trusted log', codes: ['verifier_key_mismatch', 'origin_mismatch'],
    what: "The bundle names exactly the trusted verifier key, and its origin is the key's name." },
  { id: 'checkpoint', title: 'Checkpoint signature (C2SP signed note, Ed25519)', codes: ['checkpoint_signature', 'checkpoint_body'],
    what: 'The checkpoint is signed by the trusted key and is a well-formed tlog checkpoint of this origin.' },
  { id: 'witnesses', title: 'Cosigned by the named witnesses (C2SP tlog-cosignature)', codes: ['insufficient_cosignatures'],
    what: 'With witness keys given: the checkpoint carries valid cosignature/v1 cosignatures over exactly its body from at least the quorum of distinct named witnesses. Skipped without witness keys.' },
  { id: 'thread_head', title: 'Thread-head signature (C2SP signed note, Ed25519)', codes: ['thread_head_signature', 'thread_head_body'],
    what: "The thread head is signed by the trusted key and is a well-formed thread-head v1 body." },
  { id: 'leaves', title: 'Canonical leaves (RFC 8785)', codes: ['leaf_encoding', 'leaf_not_canonical'], perRecord: true,
    what: 'Each leaf is base64 of UTF-8 JSON that re-serializes with RFC 8785 to exactly the same bytes.' },
  { id: 'envelope', title: 'Complete envelopes and bodies', codes: ['envelope'], perRecord: true,
    what: 'Each record has every envelope field and its kind\u2019s body fields, of the right types.' },
  { id: 'binding', title: 'Records belong to this bundle', codes: ['seq_mismatch', 'seq_order', 'record_origin', 'record_thread'], perRecord: true,
    what: "Each leaf's seq is its entry's, seqs increase, and every record has the bundle's origin and thread." },
  { id: 'inclusion', title: 'Leaf hashes and inclusion proofs', codes: ['inclusion_proof'], perRecord: true,
    what: "Each leaf hash (SHA-256 of 0x00 and the leaf) leads through its RFC 6962 proof to the checkpoint's root." },
  { id: 'chain', title: 'Thread chain', codes: ['thread_gap', 'thread_prev'], perRecord: true,
    what: "thread_seq runs from 0 without a gap and each thread_prev is the previous record's leaf hash." },
  { id: 'head', title: 'Thread head covers the records', codes: ['thread_head_mismatch'],
    what: "The signed thread head names this thread, the checkpoint's tree size, the number of records and the last record's hash." },
  { id: 'policy', title: 'Policy records the thread was evaluated under', codes: ['policy_missing'],
    what: 'The bundle carries every policy record of the ledger up to its checkpoint (signed thread head of hitl-ledger/policy, proofs, chain), and every policy an interrupt names is among them.' },
  { id: 'rules', title: 'Approval-rule replay', codes: ['rule_violation'],
    what: 'Replaying the approval rules (the governance rules included: paused tools, approvers, counted approvals, break-glass and its review) over the records finds no outcome they forbid.' },
];

/** The check that reports a problem code. */
export function checkOf(code) {
  return CHECKS.find((c) => c.codes.includes(code)) ?? CHECKS[0];
}

/** A finding: a problem code of verify-export, its message and the record concerned. */
class Problem extends Error {
  /** `check`: the check that failed, when not the first that reports `code` (the policy records'). */
  constructor(code, message, seq = null, check = null) {
    super(message);
    this.code = code;
    this.seq = seq;
    this.check = check;
  }
}

/** The environment cannot verify (no WebCrypto, no Ed25519): not a verdict about the bundle. */
export class EnvironmentError extends Error {}

// ---------------------------------------------------------------------------------- encodings

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const B64_INDEX = new Map([...B64].map((c, i) => [c, i]));

/** Standard base64 with padding. */
export function b64encode(bytes) {
  let out = '';
  for (let i = 0; i < bytes.length; i += 3) {
    const a = bytes[i];
    const b = i + 1 < bytes.length ? bytes[i + 1] : 0;
    const c = i + 2 < bytes.length ? bytes[i + 2] : 0;
    out += B64[a >> 2] + B64[((a & 3) << 4) | (b >> 4)];
    out += i + 1 < bytes.length ? B64[((b & 15) << 2) | (c >> 6)] : '=';
    out += i + 2 < bytes.length ? B64[c & 63] : '=';
  }
  return out;
}

/**
 * Standard base64 with padding, canonical only (no whitespace, no missing padding, zero pad
 * bits), as the ledger's decoder reads it. Null for anything else.
 */
export function b64decode(s) {
  if (typeof s !== 'string' || s.length % 4 !== 0) return null;
  const pad = s.endsWith('==') ? 2 : s.endsWith('=') ? 1 : 0;
  const body = s.length - pad;
  const out = new Uint8Array((s.length / 4) * 3 - pad);
  let o = 0;
  for (let i = 0; i < s.length; i += 4) {
    const v = [];
    for (let j = 0; j < 4; j++) {
      const k = i + j;
      if (k >= body) {
        v.push(0);
        continue;
      }
      const d = B64_INDEX.get(s[k]);
      if (d === undefined) return null;
      v.push(d);
    }
    const n = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    const bytes = [(n >> 16) & 255, (n >> 8) & 255, n & 255];
    for (const b of bytes) if (o < out.length) out[o++] = b;
  }
  // Canonical: the encoding of the bytes is the input (catches non-zero pad bits).
  return b64encode(out) === s ? out : null;
}

const HEX = '0123456789abcdef';

/** Lowercase hex. */
export function toHex(bytes) {
  let s = '';
  for (const b of bytes) s += HEX[b >> 4] + HEX[b & 15];
  return s;
}

/** Exactly 2n lowercase hex digits as n bytes, else null. */
function parseLowerHex(s, n) {
  if (typeof s !== 'string' || s.length !== 2 * n || !/^[0-9a-f]*$/.test(s)) return null;
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** A 64-digit lowercase hex hash, as the ledger reads one. */
function isHex64(s) {
  return typeof s === 'string' && /^[0-9a-f]{64}$/.test(s);
}

const UTF8 = new TextEncoder();

function bytesEqual(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function concat(...parts) {
  const n = parts.reduce((s, p) => s + p.length, 0);
  const out = new Uint8Array(n);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

// ---------------------------------------------------------------------------------- WebCrypto

function subtle() {
  const s = globalThis.crypto && globalThis.crypto.subtle;
  if (!s) {
    throw new EnvironmentError(
      'This page has no WebCrypto: browsers offer it only in a secure context (https, or http on localhost). Open the console over https to verify here.');
  }
  return s;
}

async function sha256(...parts) {
  return new Uint8Array(await subtle().digest('SHA-256', concat(...parts)));
}

// ------------------------------------------------------------------------ Ed25519 point checks
//
// WebCrypto verifies the signature equation; the ledger (ed25519-dalek, verify_strict) also
// refuses a public key that is not a point or has small order, and a signature whose R has
// small order. These checks reproduce that, so that no key or note is accepted here that
// `verify-export` refuses.

const P = (1n << 255n) - 19n;
const L = (1n << 252n) + 27742317777372353535851937790883648493n;
const mod = (a) => ((a % P) + P) % P;
function powMod(b, e) {
  let r = 1n;
  b = mod(b);
  while (e > 0n) {
    if (e & 1n) r = (r * b) % P;
    b = (b * b) % P;
    e >>= 1n;
  }
  return r;
}
const inv = (a) => powMod(a, P - 2n);
const D = mod(-121665n * inv(121666n));
const SQRT_M1 = powMod(2n, (P - 1n) / 4n);

function littleEndian(bytes) {
  let n = 0n;
  for (let i = bytes.length - 1; i >= 0; i--) n = (n << 8n) | BigInt(bytes[i]);
  return n;
}

/** The point a 32-byte encoding names (y reduced mod p, as dalek reads it), or null. */
function decompress(bytes) {
  if (bytes.length !== 32) return null;
  const b = Uint8Array.from(bytes);
  const sign = b[31] >> 7;
  b[31] &= 0x7f;
  const y = mod(littleEndian(b));
  const y2 = (y * y) % P;
  const u = mod(y2 - 1n);
  const v = mod(D * y2 + 1n);
  const x2 = (u * inv(v)) % P;
  let x = powMod(x2, (P + 3n) / 8n);
  if ((x * x) % P !== x2) {
    x = (x * SQRT_M1) % P;
    if ((x * x) % P !== x2) return null;
  }
  if (Number(x & 1n) !== sign) x = mod(-x);
  return { x, y };
}

function edAdd(p, q) {
  const xy = (p.x * q.x % P) * (p.y * q.y % P) % P;
  const x = mod((p.x * q.y + p.y * q.x) * inv(mod(1n + D * xy)));
  const y = mod((p.y * q.y + p.x * q.x) * inv(mod(1n - D * xy)));
  return { x, y };
}

/** True when 8 times the point is the identity (the point has small order). */
function smallOrder(pt) {
  let q = pt;
  for (let i = 0; i < 3; i++) q = edAdd(q, q);
  return q.x === 0n && q.y === 1n;
}

// -------------------------------------------------------------------- signed notes (C2SP)

/** Non-empty, no Unicode white space, no control character, no '+'. */
export function validKeyName(name) {
  return typeof name === 'string' && name.length > 0 && !/[\p{White_Space}\p{Cc}+]/u.test(name);
}

function utf8Length(s) {
  return UTF8.encode(s).length;
}

/** A log origin: a key name of at most 256 bytes. */
function validOrigin(origin) {
  return utf8Length(origin) <= 256 && validKeyName(origin);
}

/** An id: 1 to 256 bytes of UTF-8 with no character of category Cc. */
export function validId(s) {
  return typeof s === 'string' && s.length > 0 && utf8Length(s) <= 256 && !/\p{Cc}/u.test(s);
}

/**
 * Parses a C2SP verifier key `<name>+<key id hex>+<base64(0x01 || Ed25519 public key)>`.
 * @param {string} text
 * @returns {Promise<{name: string, keyId: Uint8Array, publicKey: Uint8Array, cryptoKey: CryptoKey, text: string}>}
 * @throws {Error} naming what is wrong; EnvironmentError when the browser has no Ed25519
 */
export async function parseVerifierKey(text) {
  return parseKey(text, 0x01);
}

/**
 * Parses a witness's C2SP `cosignature/v1` verifier key
 * `<name>+<key id hex>+<base64(0x04 || Ed25519 public key)>` (docs/protocol.md 14.1).
 * @param {string} text
 * @throws {Error} naming what is wrong; EnvironmentError when the browser has no Ed25519
 */
export async function parseWitnessKey(text) {
  return parseKey(text, 0x04);
}

async function parseKey(text, type) {
  if (typeof text !== 'string') throw new Error('the verifier key is not text');
  const a = text.indexOf('+');
  if (a < 0) throw new Error("missing '+' separators");
  const name = text.slice(0, a);
  const rest = text.slice(a + 1);
  const b = rest.indexOf('+');
  if (b < 0) throw new Error("expected three '+'-separated parts");
  const idHex = rest.slice(0, b);
  const materialB64 = rest.slice(b + 1);
  if (!validKeyName(name)) throw new Error('invalid key name');
  const keyId = parseLowerHex(idHex, 4);
  if (!keyId) throw new Error('key id is not 8 lowercase hex digits');
  const material = b64decode(materialB64);
  if (!material) throw new Error('key material is not canonical base64');
  if (material.length === 0) throw new Error('empty key material');
  if (material[0] !== type) throw new Error('unsupported signature type');
  const publicKey = material.slice(1);
  if (publicKey.length !== 32) throw new Error('Ed25519 public key is not 32 bytes');
  const id = (await sha256(UTF8.encode(name), Uint8Array.of(0x0a, type), publicKey)).slice(0, 4);
  if (!bytesEqual(id, keyId)) throw new Error('key id does not match name and key');
  const point = decompress(publicKey);
  if (!point) throw new Error('public key is not a valid Ed25519 point');
  if (smallOrder(point)) throw new Error('public key has small order');
  let cryptoKey;
  try {
    cryptoKey = await subtle().importKey('raw', publicKey, { name: 'Ed25519' }, false, ['verify']);
  } catch (e) {
    if (e instanceof EnvironmentError) throw e;
    throw new EnvironmentError(`This browser cannot verify Ed25519 signatures with WebCrypto (${e.name}).`);
  }
  return { name, keyId, publicKey, cryptoKey, text };
}

async function ed25519Verify(key, message, signature) {
  if (signature.length !== 64) return false;
  const r = decompress(signature.slice(0, 32));
  if (!r || smallOrder(r)) return false;
  if (littleEndian(signature.slice(32)) >= L) return false;
  return subtle().verify({ name: 'Ed25519' }, key.cryptoKey, signature, message);
}

class NoteError extends Error {}

/** A C2SP signed note's text (final newline included) and signature lines, structure only. */
function parseNote(note) {
  for (const ch of note) {
    if (ch < '\u0020' && ch !== '\n') throw new NoteError('malformed note: control character other than newline');
  }
  if (!note.endsWith('\n')) throw new NoteError('malformed note: no final newline');
  const split = note.lastIndexOf('\n\n');
  if (split < 0) throw new NoteError('malformed note: no empty line between text and signatures');
  const text = note.slice(0, split + 1);
  let block = note.slice(split + 2);
  if (!block.endsWith('\n')) throw new NoteError('malformed note: no signature line');
  block = block.slice(0, -1);
  const sigs = [];
  for (const line of block.split('\n')) {
    if (sigs.length === MAX_SIGNATURES) throw new NoteError('malformed note: too many signature lines');
    if (!line.startsWith(SIG_PREFIX)) throw new NoteError('malformed note: line after the empty line is not a signature line');
    const rest = line.slice(SIG_PREFIX.length);
    const sp = rest.indexOf(' ');
    if (sp < 0) throw new NoteError('malformed note: signature line has no signature');
    const name = rest.slice(0, sp);
    if (!validKeyName(name)) throw new NoteError('malformed note: invalid key name in signature line');
    const raw = b64decode(rest.slice(sp + 1));
    if (!raw) throw new NoteError('malformed note: signature is not canonical base64');
    if (raw.length < 5) throw new NoteError('malformed note: signature shorter than 5 bytes');
    sigs.push({ name, keyId: raw.slice(0, 4), signature: raw.slice(4) });
  }
  return { text, sigs };
}

/**
 * Opens a C2SP signed note against one trusted key: returns the signed text (with its final
 * newline). Signatures by other keys are ignored; a signature by the trusted key that does not
 * verify rejects the note.
 */
async function openNote(note, key) {
  const { text, sigs } = parseNote(note);
  const message = UTF8.encode(text);
  let verified = false;
  for (const s of sigs) {
    if (s.name !== key.name || !bytesEqual(s.keyId, key.keyId)) continue;
    if (!(await ed25519Verify(key, message, s.signature))) {
      throw new NoteError(`signature of trusted key ${JSON.stringify(key.name)} does not verify`);
    }
    verified = true;
  }
  if (!verified) throw new NoteError('note has no signature by a trusted key');
  return text;
}

const MAX_TIMESTAMP = (1n << 63n) - 1n;

/**
 * The named witnesses (parsed witness keys) with a valid `cosignature/v1` line in the note
 * whose signed text is `text` (docs/protocol.md 14.4): the line's name and key id are the
 * witness's, its payload is 8 bytes of timestamp (at most 2^63 - 1) and 64 of signature, and
 * the signature verifies over `cosignature/v1\ntime <t>\n` and exactly this text. Each witness
 * (each public key) counts once; other lines are ignored.
 */
async function countCosignatures(text, sigs, witnesses) {
  const found = [];
  for (const s of sigs) {
    for (const w of witnesses) {
      if (found.some((f) => bytesEqual(f.publicKey, w.publicKey))) continue;
      if (s.name !== w.name || !bytesEqual(s.keyId, w.keyId) || s.signature.length !== 72) continue;
      const ts = s.signature.slice(0, 8).reduce((n, b) => (n << 8n) | BigInt(b), 0n);
      if (ts > MAX_TIMESTAMP) continue;
      const message = UTF8.encode(`cosignature/v1\ntime ${ts}\n${text}`);
      if (await ed25519Verify(w, message, s.signature.slice(8))) found.push(w);
    }
  }
  return found;
}

function bodyLines(body) {
  if (!body.endsWith('\n')) return null;
  const inner = body.slice(0, -1);
  if (/[^\P{Cc}\n]/u.test(inner)) return null;
  return inner.split('\n');
}

/** A non-negative decimal without sign or leading zeros that fits 64 bits, as a BigInt. */
function parseDecimal(s) {
  if (typeof s !== 'string' || !/^(0|[1-9][0-9]*)$/.test(s)) return null;
  const n = BigInt(s);
  return n <= MAX_U64 ? n : null;
}

function parseCheckpoint(text) {
  const lines = bodyLines(text);
  if (!lines || lines.length < 3) throw new Error('body lines are malformed or of the wrong number');
  const [origin, size, root, ...extensions] = lines;
  if (!validOrigin(origin)) throw new Error('invalid origin line');
  const n = parseDecimal(size);
  if (n === null) throw new Error('invalid tree size line');
  const r = b64decode(root);
  if (!r || r.length !== 32) throw new Error('invalid root hash line');
  if (extensions.some((l) => l === '')) throw new Error('empty extension line');
  return { origin, size: n, root: r };
}

function parseThreadHead(text) {
  const lines = bodyLines(text);
  if (!lines || lines.length !== 6) throw new Error('body lines are malformed or of the wrong number');
  const [header, origin, thread, size, head, tree] = lines;
  if (header !== THREAD_HEAD_HEADER) throw new Error('not a thread-head v1 body');
  const field = (line, label, parse) => {
    const v = line.startsWith(label + ' ') ? parse(line.slice(label.length + 1)) : null;
    if (v === null || v === false) throw new Error(`missing or invalid ${label} line`);
    return v;
  };
  return {
    origin: field(origin, 'origin', (o) => (validOrigin(o) ? o : null)),
    thread: field(thread, 'thread', (t) => (validId(t) ? t : null)),
    size: field(size, 'size', parseDecimal),
    head: field(head, 'head', (h) => parseLowerHex(h, 32)),
    tree: field(tree, 'tree', parseDecimal),
  };
}

// --------------------------------------------------------------------------- Merkle (RFC 6962)

/** RFC 6962 leaf hash: SHA-256(0x00 || leaf). */
export function leafHash(leaf) {
  return sha256(Uint8Array.of(0), leaf);
}

async function verifyInclusion(hash, index, size, proof, root) {
  if (index >= size) return `index ${index} is not below the tree size ${size}`;
  let fn = index;
  let sn = size - 1n;
  let r = hash;
  for (const p of proof) {
    if (sn === 0n) return 'the proof is too long';
    if ((fn & 1n) === 1n || fn === sn) {
      r = await sha256(Uint8Array.of(1), p, r);
      if ((fn & 1n) === 0n) {
        while ((fn & 1n) === 0n && fn !== 0n) {
          fn >>= 1n;
          sn >>= 1n;
        }
      }
    } else {
      r = await sha256(Uint8Array.of(1), r, p);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  if (sn !== 0n) return 'the proof is too short';
  return bytesEqual(r, root) ? null : "the proof does not lead to the checkpoint's root";
}

// ---------------------------------------------------------------------------------- timestamps

const MIN_MICROS = -62135596800n * 1000000n;
const MAX_MICROS = 253402300799n * 1000000n + 999999n;

function daysFromCivil(y, m, d) {
  y -= m <= 2 ? 1 : 0;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * (m + (m > 2 ? -3 : 9)) + 2) / 5) + d - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146097 + doe - 719468;
}

/**
 * Microseconds since the epoch of a contract timestamp `YYYY-MM-DDTHH:MM:SS.ffffffZ`, as a
 * BigInt; null when the text is not one. (As the ledger reads it: a real calendar date, years
 * 0000 to 9999, clamped to the range the ledger keeps.)
 */
export function tsMicros(s) {
  if (typeof s !== 'string') return null;
  const m = /^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})\.([0-9]{6})Z$/.exec(s);
  if (!m) return null;
  const [y, mo, d, h, mi, sec, us] = m.slice(1).map(Number);
  if (mo < 1 || mo > 12 || h > 23 || mi > 59 || sec > 59) return null;
  const leap = (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
  const dim = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][mo - 1];
  if (d < 1 || d > dim) return null;
  const secs = BigInt(daysFromCivil(y, mo, d)) * 86400n + BigInt(h * 3600 + mi * 60 + sec);
  const micros = secs * 1000000n + BigInt(us);
  return micros < MIN_MICROS ? MIN_MICROS : micros > MAX_MICROS ? MAX_MICROS : micros;
}

// --------------------------------------------------------------------------- records (leaves)

class LeafError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

const has = (o, k) => Object.prototype.hasOwnProperty.call(o, k);
const isU64 = (v) => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const nonBlank = (v) => typeof v === 'string' && !/^\p{White_Space}*$/u.test(v);
const isTs = (v) => typeof v === 'string' && tsMicros(v) !== null;

const BODY_FIELDS = {
  interrupt: [['interrupt_id', 'str'], ['tool', 'str'], ['args', 'obj'], ['redacted', 'strlist'],
    ['action_digest', 'str'], ['action_schema', 'str'], ['allowed_decisions', 'strlist'],
    ['expires_at', 'ts'], ['edit_of', 'optstr']],
  // ticket_id null only on a partial approval (docs/protocol.md 7.5)
  decision: [['decision', 'str'], ['rationale', 'optstr'], ['ticket_id', 'optstr'], ['expires_at', 'optts'],
    ['edited_digest', 'optstr'], ['superseded_by', 'optstr']],
  rejection: [['rationale', 'nonempty'], ['ticket_id', 'str']],
  follow_up: [['follow_up_id', 'str'], ['follows', 'hash'], ['outcome', 'nonempty'], ['detail', 'optstrobj'],
    ['operation_id', 'optstr']],
  authorization: [['ticket_id', 'str'], ['attempt_id', 'optstr'], ['action_digest', 'str'], ['granted', 'bool'],
    ['code', 'optstr'], ['evaluated_at', 'ts'], ['expires_at', 'optts'], ['idempotency_key', 'optstr'],
    ['mode', 'str'], ['would_deny', 'optstr']],
  timeout: [['expires_at', 'ts']],
  revocation: [['reason', 'nonempty']],
  refusal: [['method', 'str'], ['path', 'str'], ['error', 'str']],
  policy: [['policy', 'obj'], ['policy_digest', 'str']],
  review: [['reviews', 'hash'], ['verdict', 'str'], ['rationale', 'nonempty']],
};

/** Body members a kind's records may carry or omit (v1 extensions, docs/protocol.md 2.3). */
const OPTIONAL_FIELDS = {
  interrupt: [['policy', 'hash']],
  decision: [['approvals', 'count'], ['approvals_required', 'count'], ['approved_as', 'str'], ['break_glass', 'true'],
    ['reason', 'nonempty']],
  // A reason code (docs/protocol.md 12): whether the policy in force lists it is rule 13.
  rejection: [['reason_code', 'str']],
  revocation: [['reason_code', 'str']],
};

const TYPE_OK = {
  str: (v) => typeof v === 'string',
  nonempty: nonBlank,
  optstr: (v) => v === null || typeof v === 'string',
  ts: isTs,
  optts: (v) => v === null || isTs(v),
  bool: (v) => typeof v === 'boolean',
  obj: isObject,
  strlist: (v) => Array.isArray(v) && v.every((x) => typeof x === 'string'),
  optstrobj: (v) => v === null || typeof v === 'string' || isObject(v),
  hash: isHex64,
  count: (v) => isU64(v) && v >= 1,
  true: (v) => v === true,
};

function envelopeError(message) {
  return new LeafError('envelope', message);
}

/** The envelope and body checks of the ledger's record reader, in its order. */
function checkRecord(rec) {
  if (!isObject(rec)) throw envelopeError('record is not an object');
  for (const k of Object.keys(rec)) {
    if (!ENVELOPE_FIELDS.includes(k)) throw envelopeError(`unknown envelope field ${JSON.stringify(k)}`);
  }
  const get = (k) => {
    if (!has(rec, k)) throw envelopeError(`missing field ${JSON.stringify(k)}`);
    return rec[k];
  };
  const u64 = (k) => {
    const v = get(k);
    if (!isU64(v)) throw envelopeError(`${k} is not a non-negative integer`);
    return v;
  };
  const str = (k, o = rec) => {
    if (!has(o, k)) throw envelopeError(`missing field ${JSON.stringify(k)}`);
    if (typeof o[k] !== 'string') throw envelopeError(`${k} is not a string`);
    return o[k];
  };
  const id = (k, o = rec) => {
    const s = str(k, o);
    if (!validId(s)) throw envelopeError(`${k} is not a valid id`);
    return s;
  };
  const optId = (k) => (get(k) === null ? null : id(k));
  const hash = (k) => {
    if (!isHex64(str(k))) throw envelopeError(`${k} is not 64 lowercase hex`);
  };
  const v = u64('v');
  if (v !== 1) throw envelopeError(`v is ${v}, expected 1`);
  if (!validOrigin(str('origin'))) throw envelopeError('origin is not a valid origin');
  u64('seq');
  hash('prev');
  if (!isTs(str('ts'))) throw envelopeError(`ts ${JSON.stringify(rec.ts)} is malformed`);
  const kind = str('kind');
  if (!KINDS.includes(kind)) throw envelopeError(`unknown kind ${JSON.stringify(kind)}`);
  id('thread_id');
  optId('run_id');
  const ns = str('checkpoint_ns');
  if (utf8Length(ns) > 256 || /\p{Cc}/u.test(ns)) throw envelopeError('checkpoint_ns is malformed');
  optId('checkpoint_id');
  const rid = optId('request_id');
  if (kind === 'policy') {
    if (rid !== null || rec.thread_id !== POLICY_THREAD) {
      throw envelopeError(`a policy record has request_id null and thread ${JSON.stringify(POLICY_THREAD)}`);
    }
  } else if (rid === null && kind !== 'refusal') {
    throw envelopeError(`request_id is null on a ${kind}`);
  }
  if (kind !== 'policy' && rec.thread_id === POLICY_THREAD) {
    throw envelopeError(`the thread ${JSON.stringify(POLICY_THREAD)} holds only policy records`);
  }
  u64('thread_seq');
  hash('thread_prev');
  const actor = get('actor');
  if (!isObject(actor)) throw envelopeError('actor is not an object');
  // {principal, role}, or {principal, role, tenant} for an agent whose tenant is not its
  // principal (docs/protocol.md 2.1): tenant an id.
  const actorKeys = Object.keys(actor);
  if (!actorKeys.every((k) => k === 'principal' || k === 'role' || k === 'tenant')
    || actorKeys.length !== (has(actor, 'tenant') ? 3 : 2)) {
    throw envelopeError('actor must have exactly principal and role, and optionally tenant');
  }
  id('principal', actor);
  const role = str('role', actor);
  if (!ROLES.includes(role)) throw envelopeError(`actor role ${JSON.stringify(role)} is unknown`);
  if (has(actor, 'tenant')) {
    id('tenant', actor);
    // Written only for an agent whose tenant is not its principal's name: any other spelling
    // would be a second encoding of one actor.
    if (role !== 'agent' || actor.tenant === actor.principal) {
      throw envelopeError('actor tenant is recorded only for an agent whose tenant is not its principal');
    }
  }
  const body = get('body');
  if (!isObject(body)) throw envelopeError('body is not an object');
  const fields = BODY_FIELDS[kind];
  const optional = OPTIONAL_FIELDS[kind] ?? [];
  for (const k of Object.keys(body)) {
    if (!fields.some(([n]) => n === k) && !optional.some(([n]) => n === k)) {
      throw envelopeError(`unknown ${kind} body field ${JSON.stringify(k)}`);
    }
  }
  for (const [name, type] of [...fields, ...optional]) {
    if (!has(body, name)) {
      if (optional.some(([n]) => n === name)) continue;
      throw envelopeError(`${kind} body lacks ${JSON.stringify(name)}`);
    }
    if (!TYPE_OK[type](body[name])) throw envelopeError(`${kind} body field ${JSON.stringify(name)} has the wrong type`);
  }
}

/** Reads a leaf as the ledger does: strict JSON, its own canonical form, a complete envelope. */
function readLeaf(leaf) {
  let value;
  try {
    const text = decodeUtf8(leaf);
    value = parseJson(text);
    if (canonicalize(value) !== text) throw new LeafError('leaf_not_canonical', 'the leaf is not its RFC 8785 canonical form');
  } catch (e) {
    if (e instanceof LeafError) throw e;
    if (e instanceof JsonError) {
      throw e.syntax
        ? new LeafError('leaf_encoding', `the leaf is not JSON: ${e.message}`)
        : new LeafError('leaf_not_canonical', `the leaf has no canonical form: ${e.message}`);
    }
    throw e;
  }
  checkRecord(value);
  return value;
}

// ----------------------------------------------------------------------- policy documents

const GROUP_PREFIX = 'group:';
const POLICY_FIELDS = ['review_window_seconds', 'approval_ttl_seconds', 'mode', 'redact', 'approvers', 'approvals_required',
  'break_glass', 'reason_codes'];
/** The reason codes where a policy document sets none (docs/protocol.md 12). */
const DEFAULT_REASON_CODES = Object.freeze(['wrong_amount', 'wrong_payee', 'not_authorized', 'duplicate', 'policy_violation',
  'other']);
/** A reason code: [a-z][a-z0-9_]{0,63}. */
const isReasonCode = (c) => typeof c === 'string' && /^[a-z][a-z0-9_]{0,63}$/.test(c);
const MODES = ['enforce', 'observe', 'paused'];
/** The empty document's resolution, in force before the first policy record. */
const EMPTY_TOOL = Object.freeze({
  review_window_seconds: 3600, approval_ttl_seconds: 600, mode: 'enforce', redact: [], approvers: null,
  approvals_required: 1, break_glass: false, reason_codes: DEFAULT_REASON_CODES,
});

/** A JSON number the ledger reads as a u64 (an integer from 0 to 2^64 - 1). */
const isU64Number = (v) => typeof v === 'number' && Number.isInteger(v) && v >= 0 && v < 2 ** 64;

/** A JSON Pointer as the ledger's redaction reads one: "/" first, "~" only as "~0" or "~1". */
function validPointer(p) {
  return p.startsWith('/') && !/~(?![01])/.test(p);
}

/** One entry of a policy document (`default` or a tool's), its fields checked. */
function policyEntry(name, p) {
  if (!isObject(p)) throw new Error(`policy ${name} is not an object`);
  const out = {};
  for (const k of Object.keys(p)) {
    if (!POLICY_FIELDS.includes(k)) throw new Error(`policy ${name}: unknown field ${q(k)}`);
    const v = p[k];
    if (v === null) continue; // read as absent, as the ledger's reader does
    const wrong = () => new Error(`policy ${name}.${k} has the wrong type`);
    if (k === 'mode') {
      if (!MODES.includes(v)) throw new Error(`policy ${name}.mode ${q(v)} is not a mode`);
    } else if (k === 'redact' || k === 'approvers') {
      if (!Array.isArray(v) || !v.every((x) => typeof x === 'string')) throw wrong();
    } else if (k === 'break_glass') {
      if (typeof v !== 'boolean') throw wrong();
    } else if (k === 'reason_codes') {
      if (!Array.isArray(v)) throw wrong();
      if (v.length === 0) throw new Error(`policy ${name}.reason_codes must name at least one code`);
      v.forEach((c, i) => {
        if (!isReasonCode(c)) throw new Error(`policy ${name}.reason_codes[${i}] is not a reason code`);
        if (v.indexOf(c) !== i) throw new Error(`policy ${name}.reason_codes names ${q(c)} twice`);
      });
    } else if (!isU64Number(v)) {
      throw wrong();
    } else if (v === 0) {
      throw new Error(`policy ${name}.${k} must be a positive integer`);
    }
    out[k] = v;
  }
  for (const ptr of out.redact ?? []) {
    if (!validPointer(ptr)) throw new Error(`policy ${name}.redact: ${q(ptr)} is not a JSON Pointer`);
  }
  if (out.approvers !== undefined) {
    if (out.approvers.length === 0) throw new Error(`policy ${name}.approvers must name at least one principal or group`);
    out.approvers.forEach((a, i) => {
      if (!validId(a.startsWith(GROUP_PREFIX) ? a.slice(GROUP_PREFIX.length) : a)) {
        throw new Error(`policy ${name}.approvers[${i}] must be a principal or "group:<name>" with a valid id`);
      }
      if (out.approvers.indexOf(a) !== i) throw new Error(`policy ${name}.approvers names ${q(a)} twice`);
    });
  }
  return out;
}

/** A tool's entry resolved over the default: field by field, `redact` added to the default's. */
function resolveEntry(base, t) {
  const r = { ...base, redact: [...base.redact] };
  for (const k of POLICY_FIELDS) {
    if (k === 'redact' || t[k] === undefined) continue;
    r[k] = t[k];
  }
  for (const ptr of t.redact ?? []) if (!r.redact.includes(ptr)) r.redact.push(ptr);
  return r;
}

/**
 * A policy document validated as the ledger validates one (docs/protocol.md 12): every tool
 * resolved, `{default, tools: Map}`. Throws an Error naming the problem for an invalid one.
 */
export function readPolicy(doc) {
  if (!isObject(doc)) throw new Error('policy: the document is not an object');
  for (const k of Object.keys(doc)) if (k !== 'default' && k !== 'tools') throw new Error(`policy: unknown field ${q(k)}`);
  const d = has(doc, 'default') ? policyEntry('default', doc.default) : {};
  if (has(doc, 'tools') && !isObject(doc.tools)) throw new Error('policy tools is not an object');
  const entries = has(doc, 'tools') ? Object.keys(doc.tools).map((t) => {
    if (!validId(t)) throw new Error('policy tools: a tool name must be a valid id (1 to 256 bytes, no control character)');
    return [t, policyEntry(`tools.${t}`, doc.tools[t])];
  }) : [];
  const resolved = resolveEntry(EMPTY_TOOL, d);
  const satisfiable = (name, p) => {
    if (p.approvers !== null && !p.approvers.some((a) => a.startsWith(GROUP_PREFIX)) && p.approvals_required > p.approvers.length) {
      throw new Error(`policy ${name}: approvals_required ${p.approvals_required} is more than the ${p.approvers.length} approvers named`);
    }
  };
  satisfiable('default', resolved);
  const tools = new Map();
  for (const [t, e] of entries) {
    const p = resolveEntry(resolved, e);
    satisfiable(`tools.${t}`, p);
    tools.set(t, p);
  }
  return { default: resolved, tools };
}

const governed = (t) => t.approvers !== null || t.approvals_required > 1;

// ---------------------------------------------------------------------------- rule replay

const q = (s) => JSON.stringify(s);
const bodyStr = (r, f) => (typeof r.body[f] === 'string' ? r.body[f] : null);
const bodyTs = (r, f) => tsMicros(bodyStr(r, f));
const CLOSED_NAMES = { approved: 'approved', edited: 'edited', rejected: 'rejected', timed_out: 'timed out', revoked_open: 'revoked while open' };

/**
 * The approval-rule replay (docs/protocol.md 6.3, rules 1 to 13): records in seq order in
 * (a bundle's thread and policy records merged), the first outcome the rules forbid out.
 * `policyDigests` maps a policy record's seq (a Number or BigInt) to the digest of its
 * document as computed here ("sha256:" + hex), for rule 8.
 */
export class RuleReplay {
  constructor(policyDigests = new Map()) {
    this.requests = new Map();
    this.tickets = new Map();
    this.records = new Map(); // leaf hash hex -> request id
    this.policyDigests = policyDigests;
    this.inForce = null; // {id, default, tools}
  }

  /** Replays one record; returns why its outcome is forbidden, or null. */
  step(r, leafHashHex) {
    if (r.kind === 'policy') return this.policyRecord(r, leafHashHex);
    const rid = r.request_id;
    if (rid === null) return null;
    const verdict = this.judge(r, rid, leafHashHex);
    if (verdict === null) this.records.set(leafHashHex, rid);
    return verdict;
  }

  /** Rule 8: a valid policy record, its digest its document's, comes into force. */
  policyRecord(r, leafHashHex) {
    const bad = (why) => `rule 8: an invalid policy record (seq ${r.seq}): ${why}`;
    if (!has(r.body, 'policy')) return bad('it has no document');
    let p;
    try {
      p = readPolicy(r.body.policy);
    } catch (e) {
      return bad(e.message);
    }
    const digest = this.policyDigests.get(BigInt(r.seq));
    if (digest === undefined || bodyStr(r, 'policy_digest') !== digest) return bad('policy_digest is not the document\'s');
    this.inForce = { id: leafHashHex, ...p };
    return null;
  }

  /** The resolved policy of a tool under the policy in force. */
  tool(name) {
    if (this.inForce === null) return EMPTY_TOOL;
    return this.inForce.tools.get(name) ?? this.inForce.default;
  }

  judge(r, rid, leafHashHex) {
    const ts = tsMicros(r.ts);
    if (r.kind === 'interrupt') {
      if (this.requests.has(rid)) return `rule 1: a second interrupt of request ${q(rid)}`;
      const named = bodyStr(r, 'policy');
      if (named !== null && (this.inForce === null || this.inForce.id !== named)) {
        return `rule 9: an interrupt naming the policy record ${named}, which is not the one in force (${this.inForce ? this.inForce.id : 'none'})`;
      }
      // An edit's new request keeps the original's opener (the editor wrote it).
      const original = bodyStr(r, 'edit_of') === null ? undefined : this.requests.get(bodyStr(r, 'edit_of'));
      this.requests.set(rid, {
        deadline: bodyTs(r, 'expires_at') ?? -(1n << 63n),
        digest: bodyStr(r, 'action_digest') ?? '',
        closed: null,
        revoked: false,
        opener: original ? original.opener : r.actor.principal,
        tool: bodyStr(r, 'tool') ?? '',
        approvals: [],
        breakGlass: null, // {hash, principal}
        reviewed: false,
      });
      return null;
    }
    const req = this.requests.get(rid);
    if (!req) return `rule 2: a ${r.kind} of request ${q(rid)}, which has no interrupt before it`;
    switch (r.kind) {
      case 'decision':
      case 'rejection': {
        if (req.closed) return `rule 3a: a second closing record of request ${q(rid)} (it was ${CLOSED_NAMES[req.closed]})`;
        if (ts >= req.deadline) return `rule 3b: a closing record of request ${q(rid)} at or after the review deadline`;
        if (r.kind === 'rejection') {
          const v = this.reasonCode(r, req, rid);
          if (v !== null) return v;
        }
        if (r.kind === 'decision') {
          const v = this.decision(r, req, rid);
          if (v !== null) return v;
          if (r.body.ticket_id === null) {
            req.approvals.push(r.actor.principal); // a partial approval: counted, closing nothing
            return null;
          }
          if (r.body.break_glass === true) req.breakGlass = { hash: leafHashHex, principal: r.actor.principal };
        }
        const ticket = bodyStr(r, 'ticket_id') ?? '';
        if (this.tickets.has(ticket)) return `rule 3: ticket ${q(ticket)} is issued a second time`;
        const issuer = r.kind === 'rejection' ? 'reject' : bodyStr(r, 'decision') === 'approve' ? 'approve' : 'edit';
        this.tickets.set(ticket, {
          request: rid,
          issuer,
          expiresAt: issuer === 'approve' ? bodyTs(r, 'expires_at') : null,
          used: false,
        });
        req.closed = { approve: 'approved', edit: 'edited', reject: 'rejected' }[issuer];
        return null;
      }
      case 'timeout':
        if (req.closed) return `rule 4a: a second closing record of request ${q(rid)} (it was ${CLOSED_NAMES[req.closed]})`;
        if (ts < req.deadline) return `rule 4b: a timeout of request ${q(rid)} before the review deadline`;
        if (bodyTs(r, 'expires_at') !== req.deadline) return `rule 4c: a timeout of request ${q(rid)} naming another deadline`;
        req.closed = 'timed_out';
        return null;
      case 'revocation': {
        if (req.closed === null) {
          if (ts >= req.deadline) return `rule 5a: a revocation of the overdue request ${q(rid)}`;
          const v = this.reasonCode(r, req, rid);
          if (v !== null) return v;
          req.closed = 'revoked_open';
          req.revoked = true;
          return null;
        }
        if (req.closed === 'approved' && !req.revoked) {
          const v = this.reasonCode(r, req, rid);
          if (v !== null) return v;
          req.revoked = true;
          return null;
        }
        return `rule 5c: a revocation of request ${q(rid)}, which is ${req.revoked ? 'already revoked' : CLOSED_NAMES[req.closed]}`;
      }
      case 'authorization':
        return this.grant(r, rid, ts, req);
      case 'follow_up': {
        const follows = bodyStr(r, 'follows');
        const owner = isHex64(follows) ? this.records.get(follows) : undefined;
        return owner === rid ? null : `rule 7: a follow-up of request ${q(rid)} that follows a record of another request`;
      }
      case 'review': {
        const v = this.review(r, req, rid);
        if (v === null) req.reviewed = true;
        return v;
      }
      default:
        return null;
    }
  }

  /** Rules 10 and 11 for a `decision` of request `req`. */
  decision(r, req, rid) {
    const t = this.tool(req.tool);
    const breakGlass = r.body.break_glass === true;
    const decision = bodyStr(r, 'decision') ?? '';
    const ticket = bodyStr(r, 'ticket_id');
    if (breakGlass || r.actor.role === 'break_glass') {
      if (!breakGlass || r.actor.role !== 'break_glass' || decision !== 'approve' || ticket === null) {
        return `rule 11a: a break-glass decision of request ${q(rid)} not by the break_glass role (or not an approval with a ticket)`;
      }
      if (t.break_glass !== true) return `rule 11b: break-glass on request ${q(rid)}, whose tool's policy does not allow it`;
      return null;
    }
    if (ticket === null && decision !== 'approve') {
      return `rule 10d: a decision of request ${q(rid)} without a ticket that is not an approval`;
    }
    const approving = decision === 'approve';
    const principal = r.actor.principal;
    if (governed(t)) {
      if (principal === req.opener) return `rule 10a: an approval of request ${q(rid)} by the principal that opened it`;
      if (t.approvers !== null) {
        const as = bodyStr(r, 'approved_as');
        const admitted = as !== null && t.approvers.includes(as) && (as.startsWith(GROUP_PREFIX) || as === principal);
        if (!admitted) return `rule 10b: a decision of request ${q(rid)} by a reviewer outside the approvers`;
      }
      if (approving && req.approvals.includes(principal)) {
        return `rule 10c: a second approval of request ${q(rid)} by the same reviewer`;
      }
    }
    if (!approving) return null;
    const n = req.approvals.length + 1;
    const need = t.approvals_required;
    if (ticket !== null && n < need) {
      return `rule 10d: a ticket for request ${q(rid)} before its ${need}th approval (this is approval ${n})`;
    }
    if (ticket === null && n >= need) {
      return `rule 10d: a partial approval of request ${q(rid)} that should have issued the ticket (approval ${n} of ${need})`;
    }
    const count = (f) => (has(r.body, f) && isU64(r.body[f]) ? r.body[f] : null);
    const expected = need > 1 ? [n, need] : [null, null];
    if (count('approvals') !== expected[0] || count('approvals_required') !== expected[1]) {
      return `rule 10d: approval counts of request ${q(rid)} that are not the replay's (${n} of ${need})`;
    }
    return null;
  }

  /** Rule 13: a rejection's or revocation's `reason_code` is one of its tool's `reason_codes` in force. */
  reasonCode(r, req, rid) {
    if (!has(r.body, 'reason_code')) return null;
    const code = bodyStr(r, 'reason_code');
    if (code !== null && this.tool(req.tool).reason_codes.includes(code)) return null;
    return `rule 13: a ${r.kind} of request ${q(rid)} whose reason_code ${q(code ?? '')} is not among its tool's reason_codes in the policy in force`;
  }

  /** Rule 12: a review names the request's break-glass use, is not by its user, and is the only one. */
  review(r, req, rid) {
    if (req.breakGlass === null) return `rule 12a: a review of request ${q(rid)}, which has no break-glass use`;
    if (r.actor.principal === req.breakGlass.principal) return `rule 12b: a review of request ${q(rid)} by its break-glass user`;
    if (req.reviewed) return `rule 12c: a second review of request ${q(rid)}`;
    if (bodyStr(r, 'reviews') !== req.breakGlass.hash) {
      return `rule 12d: a review of request ${q(rid)} naming another record than its break-glass use`;
    }
    return null;
  }

  grant(r, rid, ts, req) {
    const granted = r.body.granted === true;
    const observed = has(r.body, 'would_deny') && r.body.would_deny !== null;
    if (granted && this.tool(req.tool).mode === 'paused') return `rule 6f: a grant in request ${q(rid)}, whose tool is paused`;
    if (!granted || observed) return null;
    const ticketId = bodyStr(r, 'ticket_id') ?? '';
    const ticket = this.tickets.get(ticketId);
    if (!ticket || ticket.request !== rid || ticket.issuer !== 'approve') {
      return `rule 6a: a grant of ticket ${q(ticketId)}, which no approval of request ${q(rid)} issued`;
    }
    if (bodyStr(r, 'action_digest') !== req.digest) return `rule 6b: a grant in request ${q(rid)} whose digest is not the approved one`;
    if (ticket.expiresAt === null || ts >= ticket.expiresAt) return `rule 6c: a grant of ticket ${q(ticketId)} at or after the approval's expires_at`;
    if (req.revoked) return `rule 6d: a grant of ticket ${q(ticketId)} after request ${q(rid)} was revoked`;
    if (ticket.used) return `rule 6e: a second real grant of ticket ${q(ticketId)}`;
    ticket.used = true;
    return null;
  }
}

// ---------------------------------------------------------------------------------- bundles

const asU64 = (v) => (v instanceof JsonInt && v.value >= 0 ? BigInt(v.value) : null);

function parseBundle(bytes) {
  const bad = (m) => new Problem('bad_input', m);
  let doc;
  try {
    doc = parseJson(decodeUtf8(bytes), { taggedIntegers: true });
  } catch (e) {
    if (e instanceof JsonError) throw bad(`the bundle is not JSON that reads one way: ${e.message}`);
    throw e;
  }
  if (!isObject(doc)) throw bad('the bundle is not a JSON object');
  const s = (k) => {
    if (!has(doc, k) || typeof doc[k] !== 'string') throw bad(`the bundle's ${q(k)} is missing or not a string`);
    return doc[k];
  };
  const format = s('format');
  if (format !== FORMAT) throw bad(`unknown bundle format ${q(format)} (this page reads ${FORMAT})`);
  if (!has(doc, 'records') || !Array.isArray(doc.records)) throw bad('the bundle\'s "records" is missing or not a list');
  const entries = parseEntries(doc.records, 'records', bad);
  return {
    origin: s('origin'),
    verifierKey: s('verifier_key'),
    checkpoint: s('checkpoint'),
    threadId: s('thread_id'),
    threadHead: s('thread_head'),
    entries,
    // read at check 11, after the thread's own checks (docs/protocol.md 6.2)
    policy: has(doc, 'policy') ? doc.policy : undefined,
  };
}

/** A list of record entries ({seq, leaf, inclusion_proof}), named `name` in messages. */
function parseEntries(list, name, bad) {
  return list.map((e, i) => {
    if (!isObject(e)) throw bad(`${name}[${i}] is not an object`);
    const seq = has(e, 'seq') ? asU64(e.seq) : null;
    if (seq === null) throw bad(`${name}[${i}].seq is not a non-negative integer`);
    if (!has(e, 'leaf') || typeof e.leaf !== 'string') throw bad(`${name}[${i}].leaf is not a string`);
    if (!has(e, 'inclusion_proof') || !Array.isArray(e.inclusion_proof)) throw bad(`${name}[${i}].inclusion_proof is not a list`);
    if (!e.inclusion_proof.every((h) => typeof h === 'string')) throw bad(`${name}[${i}].inclusion_proof holds a non-string`);
    return { seq, leaf: e.leaf, proof: e.inclusion_proof };
  });
}

/**
 * Check 9 of docs/protocol.md 6.2 over one list of entries of thread `threadId` (the bundle's,
 * or hitl-ledger/policy for the policy records): each leaf read, bound to its entry, proven in
 * the checkpoint's tree and chained. `name` names the list in messages, `check` the check a
 * problem is reported under (null: the check of its code), `onRecord(r)` sees each record
 * read. Returns [[record, leaf hash hex]] and the last leaf hash.
 */
async function checkEntries(entries, threadId, origin, cp, name, check, onRecord, stop) {
  let prevSeq = null;
  let prevHash = new Uint8Array(32);
  const out = [];
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i];
    stop.at = e.seq;
    const at = (code, m) => new Problem(code, m, e.seq, check);
    const leaf = b64decode(e.leaf);
    if (!leaf) throw at('leaf_encoding', `${name}[${i}].leaf is not base64`);
    let r;
    try {
      r = readLeaf(leaf);
    } catch (err) {
      if (err instanceof LeafError) throw at(err.code, `${name}[${i}]: ${err.message}`);
      throw err;
    }
    onRecord(r);
    if (BigInt(r.seq) !== e.seq) throw at('seq_mismatch', `${name}[${i}] is listed as seq ${e.seq} but its leaf says ${r.seq}`);
    if (prevSeq !== null && e.seq <= prevSeq) throw at('seq_order', `${name}[${i}] (seq ${e.seq}) does not come after seq ${prevSeq}`);
    if (r.origin !== origin) throw at('record_origin', `record ${e.seq} has origin ${q(r.origin)}, the bundle's is ${q(origin)}`);
    if (r.thread_id !== threadId) throw at('record_thread', `record ${e.seq} is in thread ${q(r.thread_id)}, the ${name === 'records' ? 'bundle\'s' : 'list\'s'} is ${q(threadId)}`);
    const hash = await leafHash(leaf);
    const proof = e.proof.map((h) => (isHex64(h) ? parseLowerHex(h, 32) : null));
    if (proof.some((p) => p === null)) throw at('inclusion_proof', `record ${e.seq}'s proof holds a hash that is not 64 lowercase hex`);
    const why = await verifyInclusion(hash, e.seq, cp.size, proof, cp.root);
    if (why) throw at('inclusion_proof', `record ${e.seq} is not in the checkpoint's tree of ${cp.size}: ${why}`);
    if (BigInt(r.thread_seq) !== BigInt(i)) {
      throw at('thread_gap', `record ${e.seq} has thread_seq ${r.thread_seq}, expected ${i} (a record of the thread is missing)`);
    }
    if (r.thread_prev !== toHex(prevHash)) {
      throw at('thread_prev', `record ${e.seq} has thread_prev ${r.thread_prev}, the previous record's leaf hash is ${toHex(prevHash)}`);
    }
    prevSeq = e.seq;
    prevHash = hash;
    out.push([r, toHex(hash)]);
  }
  return { records: out, last: prevHash };
}

/** Check 10 (and 11's last part): a thread head covers exactly the entries. */
function checkHead(th, origin, threadId, cp, n, last, check) {
  const mismatch = (m) => new Problem('thread_head_mismatch', m, null, check);
  if (th.origin !== origin || th.thread !== threadId) throw mismatch(`the thread head is for ${q(th.thread)} in ${q(th.origin)}`);
  if (th.tree !== cp.size) throw mismatch(`the thread head accompanies a tree of ${th.tree}, the checkpoint's is ${cp.size}`);
  if (th.size !== n) throw mismatch(`the thread head says ${th.size} records, the bundle has ${n}`);
  if (!bytesEqual(th.head, last)) {
    throw mismatch(`the thread head names ${toHex(th.head)} as the last record, the bundle's last is ${toHex(last)}`);
  }
}

/** A thread-head note opened with the trusted key and parsed. */
async function openHead(note, key, what, check) {
  let text;
  try {
    text = await openNote(note, key);
  } catch (e) {
    if (e instanceof NoteError) throw new Problem('thread_head_signature', `${what}: ${e.message}`, null, check);
    throw e;
  }
  try {
    return parseThreadHead(text);
  } catch (e) {
    throw new Problem('thread_head_body', `${what} body: ${e.message}`, null, check);
  }
}

/**
 * Verifies an export bundle, trusting only `keyText` (a C2SP verifier key string).
 *
 * @param {Uint8Array} bytes the bundle file, exactly as received
 * @param {string} keyText the trusted verifier key
 * @param {{keys: string[], min: number|null}|null} witnessPolicy witness verifier keys and the
 *   quorum (null: every distinct witness named), as `verify-export --witness --min-witnesses`;
 *   null or no keys: no policy (the check is `skipped`)
 * @returns {Promise<{report: object, checks: Array<{id: string, title: string, what: string, status: string, detail: string}>, records: object[]}>}
 *   `report` is what `hitl-ledger verify-export --format json` prints: `{ok, records,
 *   decisions, rejections, first_ts, last_ts, problem}` with `problem` null or `{code,
 *   message, seq}`. `checks` gives each check's status (`pass`, `fail`, `incomplete`, `skipped` or
 *   `not_run`). `records` are the bundle's records when every check passed.
 * @throws {EnvironmentError} when the browser cannot verify at all (no WebCrypto or Ed25519)
 */
export async function verifyBundle(bytes, keyText, witnessPolicy = null) {
  const report = { ok: false, records: 0, decisions: 0, rejections: 0, first_ts: null, last_ts: null, problem: null };
  const passed = new Set();
  const skipped = new Set();
  const details = new Map();
  const records = [];
  const stop = { at: null }; // the thread record being checked when a per-record check failed
  let failedCheck = null;
  try {
    let key;
    try {
      key = await parseVerifierKey(keyText);
    } catch (e) {
      if (e instanceof EnvironmentError) throw e;
      throw new Problem('bad_input', `the trusted key is not a verifier key: ${e.message}`);
    }
    const policyKeys = witnessPolicy && witnessPolicy.keys.length > 0 ? witnessPolicy : null;
    let witnesses = [];
    let quorum = 0;
    if (policyKeys) {
      for (const k of policyKeys.keys) {
        try {
          witnesses.push(await parseWitnessKey(k));
        } catch (e) {
          if (e instanceof EnvironmentError) throw e;
          throw new Problem('bad_input', `the witness key ${q(k)} is not a cosignature/v1 verifier key: ${e.message}`);
        }
      }
      const distinct = new Set(witnesses.map((w) => toHex(w.publicKey))).size;
      quorum = policyKeys.min ?? distinct;
      if (!Number.isInteger(quorum) || quorum < 1 || quorum > distinct) {
        throw new Problem('bad_input', `the quorum must be between 1 and the ${distinct} distinct witnesses named`);
      }
    }
    const b = parseBundle(bytes);
    report.records = b.entries.length;
    passed.add('structure');
    details.set('structure', `${b.entries.length} records of thread ${q(b.threadId)}; trusted key ${key.name}+${toHex(key.keyId)}`);
    if (b.verifierKey !== keyText) {
      throw new Problem('verifier_key_mismatch', `the bundle names verifier key ${q(b.verifierKey)}, not the trusted ${q(keyText)}`);
    }
    if (b.origin !== key.name) {
      throw new Problem('origin_mismatch', `the bundle's origin ${q(b.origin)} is not the key's name ${q(key.name)}`);
    }
    passed.add('key');
    let cpText;
    try {
      cpText = await openNote(b.checkpoint, key);
    } catch (e) {
      if (e instanceof NoteError) throw new Problem('checkpoint_signature', `checkpoint: ${e.message}`);
      throw e;
    }
    let cp;
    try {
      cp = parseCheckpoint(cpText);
    } catch (e) {
      throw new Problem('checkpoint_body', `checkpoint body: ${e.message}`);
    }
    if (cp.origin !== b.origin) {
      throw new Problem('checkpoint_body', `the checkpoint's origin ${q(cp.origin)} is not the bundle's ${q(b.origin)}`);
    }
    passed.add('checkpoint');
    details.set('checkpoint', `tree of ${cp.size} records, root ${toHex(cp.root)}`);
    if (policyKeys) {
      const { sigs } = parseNote(b.checkpoint);
      const found = await countCosignatures(cpText, sigs, witnesses);
      if (found.length < quorum) {
        throw new Problem('insufficient_cosignatures',
          `checkpoint: checkpoint has valid cosignatures from ${found.length} of the ${witnesses.length} named witnesses, below the quorum of ${quorum}`);
      }
      report.witnesses = found.map((w) => w.name);
      passed.add('witnesses');
      details.set('witnesses', `cosigned by ${found.length} of ${witnesses.length} named (quorum ${quorum}): ${report.witnesses.join(', ')}`);
    } else {
      skipped.add('witnesses');
    }
    const th = await openHead(b.threadHead, key, 'thread head', null);
    passed.add('thread_head');
    details.set('thread_head', `thread ${q(th.thread)}: ${th.size} records, head ${toHex(th.head)}, tree ${th.tree}`);

    const thread = await checkEntries(b.entries, b.threadId, b.origin, cp, 'records', null, (r) => {
      if (report.first_ts === null) report.first_ts = r.ts;
      report.last_ts = r.ts;
      if (r.kind === 'decision') report.decisions++;
      if (r.kind === 'rejection') report.rejections++;
    }, stop);
    stop.at = null;
    for (const c of CHECKS) if (c.perRecord) passed.add(c.id);
    details.set('inclusion', `${b.entries.length} leaf hashes proven against the root of ${cp.size}`);
    checkHead(th, b.origin, b.threadId, cp, BigInt(b.entries.length), thread.last, null);
    passed.add('head');

    // Checks 11 and 12: the policy records the thread's records were evaluated under.
    // The policy member's structure is check 11's (docs/protocol.md 6.2): bad_input, judged
    // after the thread's own records, as the command line judges it.
    let policy = [];
    if (b.policy !== undefined) {
      const bad = (m) => new Problem('bad_input', m, null, 'policy');
      const pd = b.policy;
      if (!isObject(pd)) throw bad('the bundle\'s "policy" is not an object');
      if (!has(pd, 'thread_head') || typeof pd.thread_head !== 'string') throw bad('the bundle\'s policy.thread_head is missing or not a string');
      if (!has(pd, 'records') || !Array.isArray(pd.records)) throw bad('the bundle\'s policy.records is missing or not a list');
      const entries = parseEntries(pd.records, 'policy.records', bad);
      const pth = await openHead(pd.thread_head, key, 'policy thread head', 'policy');
      const got = await checkEntries(entries, POLICY_THREAD, b.origin, cp, 'policy.records', 'policy', () => {}, { at: null });
      checkHead(pth, b.origin, POLICY_THREAD, cp, BigInt(entries.length), got.last, 'policy');
      policy = got.records;
    }
    const policyIds = new Set(policy.map(([, h]) => h));
    for (const [r] of thread.records) {
      if (r.kind === 'interrupt' && typeof r.body.policy === 'string' && !policyIds.has(r.body.policy)) {
        throw new Problem('policy_missing', `record ${r.seq}: the interrupt names policy record ${r.body.policy}, which the bundle's policy records do not hold`, BigInt(r.seq));
      }
    }
    passed.add('policy');
    details.set('policy', b.policy === undefined
      ? 'the bundle carries no policy records (a ledger from before them): verified as before'
      : `${policy.length} policy record${policy.length === 1 ? '' : 's'}, signed thread head of ${POLICY_THREAD}`);

    // Check 13: the replay over both, in seq order, each policy document's digest computed here.
    const digests = new Map();
    for (const [r] of policy) {
      if (isObject(r.body.policy)) digests.set(BigInt(r.seq), `sha256:${toHex(await sha256(UTF8.encode(canonicalize(r.body.policy))))}`);
    }
    const merged = [...thread.records, ...policy].sort(([a], [c]) => (BigInt(a.seq) < BigInt(c.seq) ? -1 : 1));
    const rules = new RuleReplay(digests);
    for (const [r, h] of merged) {
      const m = rules.step(r, h);
      if (m !== null) throw new Problem('rule_violation', `record ${r.seq}: ${m}`, BigInt(r.seq));
    }
    passed.add('rules');
    for (const [r] of thread.records) records.push(r);
    report.ok = true;
  } catch (e) {
    if (!(e instanceof Problem)) throw e;
    const seq = e.seq === null ? null : e.seq <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(e.seq) : e.seq.toString();
    report.problem = { code: e.code, message: e.message, seq };
    failedCheck = e.check;
  }
  const failed = report.problem ? failedCheck ?? checkOf(report.problem.code).id : null;
  const failedPerRecord = failed !== null && CHECKS.find((c) => c.id === failed).perRecord === true;
  const stoppedAt = stop.at;
  const checks = CHECKS.map((c) => {
    let status;
    let detail = details.get(c.id) ?? '';
    if (c.id === failed) {
      status = 'fail';
      detail = report.problem.message;
    } else if (passed.has(c.id)) status = 'pass';
    else if (skipped.has(c.id)) {
      status = 'skipped';
      detail = 'no witness keys given';
    }
    else if (c.perRecord && stoppedAt !== null && failedPerRecord) {
      status = 'incomplete';
      // Each record goes through the per-record checks in CHECKS order: those before the
      // failing one also passed for the failing record.
      const before = CHECKS.indexOf(c) < CHECKS.findIndex((x) => x.id === failed);
      detail = before
        ? `passed up to and including record seq ${stoppedAt}; the records after it were not checked (verification stops at the first failure)`
        : `checked up to the record before seq ${stoppedAt}; verification stops at the first failure`;
    } else status = 'not_run';
    return { id: c.id, title: c.title, what: c.what, status, detail };
  });
  return { report, checks, records };
}
