// Strict JSON reading and RFC 8785 (JCS) canonical writing, as the ledger does them
// (src/format/jcs.rs): one reading of the bytes only, so the browser and the ledger can never
// see "the same" JSON differently.
//
// parseJson refuses, as the ledger's parser does:
//   - grammar violations (comments, trailing commas, leading zeros, a byte order mark, trailing
//     characters, empty input, whitespace other than space, tab, LF and CR, raw control
//     characters in strings), nesting deeper than maxDepth: JsonError with syntax = true;
//   - duplicate member names, lone surrogates in \u escapes, numbers that overflow a double, the
//     bare tokens NaN / Infinity / -Infinity, and (when asked) integers beyond +-(2^53-1):
//     JsonError with syntax = false (valid grammar, but no single canonical reading).
//
// Objects are built with a null prototype, so a member named "__proto__" is an ordinary member.

/** The deepest nesting the ledger's leaf and bundle reader accepts (the outer value is 1). */
export const MAX_DEPTH = 128;

/** 2^53 - 1, the largest integer a double holds together with all its neighbours. */
export const MAX_SAFE_INTEGER = 9007199254740991;

/** Why text is not JSON the ledger reads one way. */
export class JsonError extends Error {
  /**
   * @param {string} message what is wrong, with the offset
   * @param {boolean} syntax true for grammar, UTF-8 and depth errors; false for JSON that has
   *   no canonical form (duplicate key, lone surrogate, overflow, NaN, unsafe integer)
   */
  constructor(message, syntax) {
    super(message);
    this.name = 'JsonError';
    this.syntax = syntax;
  }
}

/**
 * An integer literal (no fraction, no exponent) of magnitude at most 2^53 - 1, as the ledger's
 * parser keeps it apart from a double. Only produced when parseJson is asked for tagged
 * integers (the bundle reader needs to tell `0` from `0.0`).
 */
export class JsonInt {
  /** @param {number} value */
  constructor(value) {
    this.value = value;
  }
}

const WS = new Set([0x20, 0x09, 0x0a, 0x0d]);

/**
 * Decodes UTF-8 bytes strictly (no replacement characters, a byte order mark kept so that the
 * grammar refuses it).
 * @param {Uint8Array} bytes
 * @returns {string}
 * @throws {JsonError} (syntax) when the bytes are not UTF-8
 */
export function decodeUtf8(bytes) {
  try {
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    throw new JsonError('the text is not UTF-8', true);
  }
}

/**
 * Parses JSON text strictly.
 * @param {string} text
 * @param {{maxDepth?: number, taggedIntegers?: boolean, rejectUnsafeIntegers?: boolean}} [opts]
 * @returns {*} the value (objects with a null prototype)
 * @throws {JsonError}
 */
export function parseJson(text, opts = {}) {
  const maxDepth = opts.maxDepth ?? MAX_DEPTH;
  const tagged = opts.taggedIntegers === true;
  const rejectUnsafe = opts.rejectUnsafeIntegers === true;
  let pos = 0;
  const n = text.length;

  const syntax = (at, what) => new JsonError(`${what} (at character ${at})`, true);
  const skipWs = () => {
    while (pos < n && WS.has(text.charCodeAt(pos))) pos++;
  };

  // An explicit stack instead of recursion: deep input cannot overflow the call stack.
  // Each frame: {kind: 'a'|'o', value, key, first}
  const stack = [];
  let result;
  let haveResult = false;

  skipWs();
  if (pos >= n) throw syntax(pos, 'empty input: expected a JSON value');

  // Reads one scalar or opens a container; returns [true, value] for a complete value or
  // [false] when a container was opened (pushed on the stack).
  const readValue = () => {
    const c = text.charCodeAt(pos);
    if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (stack.length + 1 > maxDepth) {
        throw syntax(pos, `nesting deeper than ${maxDepth} levels`);
      }
      pos++;
      const frame = c === 0x7b
        ? { kind: 'o', value: Object.create(null), key: null, first: true }
        : { kind: 'a', value: [], first: true };
      stack.push(frame);
      return [false];
    }
    if (c === 0x22 /* " */) return [true, readString()];
    if (c === 0x2d /* - */ || (c >= 0x30 && c <= 0x39)) {
      if (text.startsWith('-Infinity', pos)) {
        throw new JsonError(`NaN and Infinity are not JSON (at character ${pos})`, false);
      }
      return [true, readNumber()];
    }
    if (text.startsWith('true', pos)) { pos += 4; return [true, true]; }
    if (text.startsWith('false', pos)) { pos += 5; return [true, false]; }
    if (text.startsWith('null', pos)) { pos += 4; return [true, null]; }
    if (text.startsWith('NaN', pos) || text.startsWith('Infinity', pos)) {
      throw new JsonError(`NaN and Infinity are not JSON (at character ${pos})`, false);
    }
    throw syntax(pos, 'expected a JSON value');
  };

  const hex4 = (at) => {
    let v = 0;
    for (let i = 0; i < 4; i++) {
      const c = text.charCodeAt(at + i);
      let d;
      if (c >= 0x30 && c <= 0x39) d = c - 0x30;
      else if (c >= 0x61 && c <= 0x66) d = c - 0x61 + 10;
      else if (c >= 0x41 && c <= 0x46) d = c - 0x41 + 10;
      else throw syntax(at - 2, '\\u escape needs four hexadecimal digits');
      v = (v << 4) | d;
    }
    return v;
  };

  const readString = () => {
    const open = pos;
    pos++;
    let out = '';
    let run = pos;
    for (;;) {
      if (pos >= n) throw syntax(open, 'unterminated string');
      const c = text.charCodeAt(pos);
      if (c === 0x22) {
        out += text.slice(run, pos);
        pos++;
        return out;
      }
      if (c < 0x20) throw syntax(pos, 'unescaped control character in a string');
      if (c !== 0x5c) {
        pos++;
        continue;
      }
      out += text.slice(run, pos);
      const start = pos;
      const k = text.charCodeAt(pos + 1);
      const simple = { 0x22: '"', 0x5c: '\\', 0x2f: '/', 0x62: '\b', 0x66: '\f', 0x6e: '\n', 0x72: '\r', 0x74: '\t' }[k];
      if (simple !== undefined) {
        out += simple;
        pos += 2;
      } else if (k === 0x75 /* u */) {
        const unit = hex4(pos + 2);
        pos += 6;
        if (unit >= 0xd800 && unit <= 0xdbff) {
          if (text.charCodeAt(pos) === 0x5c && text.charCodeAt(pos + 1) === 0x75) {
            const low = hex4(pos + 2);
            if (low < 0xdc00 || low > 0xdfff) {
              throw new JsonError(`a lone surrogate in a \\u escape (at character ${start})`, false);
            }
            pos += 6;
            out += String.fromCharCode(unit, low);
          } else {
            throw new JsonError(`a lone surrogate in a \\u escape (at character ${start})`, false);
          }
        } else if (unit >= 0xdc00 && unit <= 0xdfff) {
          throw new JsonError(`a lone surrogate in a \\u escape (at character ${start})`, false);
        } else {
          out += String.fromCharCode(unit);
        }
      } else {
        throw syntax(start, pos + 1 >= n ? 'unterminated escape sequence' : 'invalid escape sequence');
      }
      run = pos;
    }
  };

  const isDigit = (c) => c >= 0x30 && c <= 0x39;
  const readNumber = () => {
    const start = pos;
    if (text.charCodeAt(pos) === 0x2d) pos++;
    const intStart = pos;
    const c0 = text.charCodeAt(pos);
    if (c0 === 0x30) {
      pos++;
      if (isDigit(text.charCodeAt(pos))) throw syntax(start, 'leading zeros are not allowed in numbers');
    } else if (c0 >= 0x31 && c0 <= 0x39) {
      while (isDigit(text.charCodeAt(pos))) pos++;
    } else {
      throw syntax(pos, 'expected a digit in a number');
    }
    const intEnd = pos;
    let integer = true;
    if (text.charCodeAt(pos) === 0x2e) {
      integer = false;
      pos++;
      if (!isDigit(text.charCodeAt(pos))) throw syntax(pos, 'expected a digit after the decimal point');
      while (isDigit(text.charCodeAt(pos))) pos++;
    }
    const e = text.charCodeAt(pos);
    if (e === 0x65 || e === 0x45) {
      integer = false;
      pos++;
      const s = text.charCodeAt(pos);
      if (s === 0x2b || s === 0x2d) pos++;
      if (!isDigit(text.charCodeAt(pos))) throw syntax(pos, 'expected a digit in the exponent');
      while (isDigit(text.charCodeAt(pos))) pos++;
    }
    const literal = text.slice(start, pos);
    if (integer) {
      const digits = text.slice(intStart, intEnd);
      // At most 16 digits can be <= 2^53 - 1; compare exactly.
      if (digits.length <= 16 && Number(digits) <= MAX_SAFE_INTEGER) {
        const v = Number(literal);
        const value = v === 0 ? 0 : v; // -0 reads as the integer 0, as the ledger's does
        return tagged ? new JsonInt(value) : value;
      }
      if (rejectUnsafe) {
        throw new JsonError(`the integer ${literal} is beyond +-(2^53-1) (at character ${start})`, false);
      }
    }
    const f = Number(literal);
    if (!Number.isFinite(f)) {
      throw new JsonError(`the number ${literal} overflows a double (at character ${start})`, false);
    }
    return f;
  };

  // Places a completed value into the innermost container, or as the result.
  const place = (value) => {
    const top = stack[stack.length - 1];
    if (!top) {
      result = value;
      haveResult = true;
      return;
    }
    if (top.kind === 'a') {
      top.value.push(value);
    } else {
      if (Object.prototype.hasOwnProperty.call(top.value, top.key)) {
        throw new JsonError(`a duplicate member name ${JSON.stringify(top.key)}`, false);
      }
      top.value[top.key] = value;
    }
  };

  let [done, v] = readValue();
  if (done) place(v);
  while (stack.length > 0) {
    const top = stack[stack.length - 1];
    skipWs();
    const c = text.charCodeAt(pos);
    if (top.kind === 'a') {
      if (c === 0x5d /* ] */) {
        if (!top.first && top.expectValue) throw syntax(pos, 'trailing comma in an array');
        pos++;
        stack.pop();
        place(top.value);
        continue;
      }
      if (!top.first && !top.expectValue) {
        if (c === 0x2c) {
          pos++;
          top.expectValue = true;
          continue;
        }
        throw syntax(pos, pos >= n ? 'unterminated array' : "expected ',' or ']' in an array");
      }
      if (pos >= n) throw syntax(pos, 'unterminated array');
      top.first = false;
      top.expectValue = false;
      [done, v] = readValue();
      if (done) place(v);
      continue;
    }
    // object
    if (c === 0x7d /* } */) {
      if (!top.first && top.expectKey) throw syntax(pos, 'trailing comma in an object');
      pos++;
      stack.pop();
      place(top.value);
      continue;
    }
    if (!top.first && !top.expectKey) {
      if (c === 0x2c) {
        pos++;
        top.expectKey = true;
        continue;
      }
      throw syntax(pos, pos >= n ? 'unterminated object' : "expected ',' or '}' in an object");
    }
    if (c !== 0x22) throw syntax(pos, pos >= n ? 'unterminated object' : 'expected a string member name');
    top.key = readString();
    skipWs();
    if (text.charCodeAt(pos) !== 0x3a) throw syntax(pos, "expected ':' after a member name");
    pos++;
    skipWs();
    if (pos >= n) throw syntax(pos, 'unterminated object');
    top.first = false;
    top.expectKey = false;
    [done, v] = readValue();
    if (done) place(v);
  }
  if (!haveResult) throw syntax(pos, 'expected a JSON value');
  skipWs();
  if (pos < n) throw syntax(pos, 'trailing characters after the JSON value');
  return result;
}

/**
 * True for a JSON object as parseJson or JSON.parse builds it (not an array, not null).
 * @param {*} v
 */
export function isObject(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v) && !(v instanceof JsonInt);
}

function writeString(s, out) {
  let r = '"';
  let run = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    let esc = null;
    if (c === 0x22) esc = '\\"';
    else if (c === 0x5c) esc = '\\\\';
    else if (c < 0x20) {
      esc = { 8: '\\b', 9: '\\t', 10: '\\n', 12: '\\f', 13: '\\r' }[c] ?? '\\u' + c.toString(16).padStart(4, '0');
    }
    if (esc !== null) {
      r += s.slice(run, i) + esc;
      run = i + 1;
    }
  }
  out.push(r + s.slice(run) + '"');
}

/** Text the canonical writer emits verbatim (punctuation between the parts of a container). */
class Raw {
  /** @param {string} text */
  constructor(text) {
    this.text = text;
  }
}

/**
 * The RFC 8785 canonical text of a value: members sorted by the UTF-16 code units of their
 * names, no whitespace, minimal escaping, numbers as ECMAScript prints them.
 * @param {*} value
 * @returns {string}
 * @throws {JsonError} (not syntax) for a non-finite number or a value JSON cannot hold
 */
export function canonicalize(value) {
  const out = [];
  // An explicit stack of what is still to be written (values, or Raw punctuation).
  const todo = [value];
  while (todo.length > 0) {
    const v = todo.pop();
    if (v instanceof Raw) out.push(v.text);
    else if (v === null) out.push('null');
    else if (v === true) out.push('true');
    else if (v === false) out.push('false');
    else if (v instanceof JsonInt) out.push(String(v.value));
    else if (v instanceof ExponentNumber) out.push(v.value.toExponential());
    else if (typeof v === 'number') {
      if (!Number.isFinite(v)) throw new JsonError('NaN and Infinity have no JSON form', false);
      out.push(String(v)); // ECMAScript Number::toString, which RFC 8785 adopts; -0 prints "0"
    } else if (typeof v === 'string') writeString(v, out);
    else if (Array.isArray(v)) {
      out.push('[');
      todo.push(new Raw(']'));
      for (let i = v.length - 1; i >= 0; i--) {
        todo.push(v[i]);
        if (i > 0) todo.push(new Raw(','));
      }
    } else if (typeof v === 'object') {
      out.push('{');
      todo.push(new Raw('}'));
      const keys = Object.keys(v).sort();
      for (let i = keys.length - 1; i >= 0; i--) {
        todo.push(v[keys[i]]);
        const key = [];
        writeString(keys[i], key);
        todo.push(new Raw((i > 0 ? ',' : '') + key[0] + ':'));
      }
    } else {
      throw new JsonError(`a ${typeof v} has no JSON form`, false);
    }
  }
  return out.join('');
}

/**
 * A value as JSON text for a request body the ledger reads strictly (docs/protocol.md 2.4):
 * the canonical text, except that an integral number beyond +-(2^53-1) is written in exponent
 * form (`1e+20`, the shortest that reads back as the same double). JCS writes such a double
 * as an integer literal (`100000000000000000000`), which a leaf may hold but a request body
 * may not: the ledger refuses integer literals beyond 2^53 as ambiguous. The exponent form is
 * a double literal, so the ledger reads the same double and its canonical form is unchanged.
 * Object members whose value is undefined are left out (as JSON.stringify does).
 * @param {*} value
 * @returns {string}
 * @throws {JsonError} as canonicalize
 */
export function requestJson(value) {
  const wide = (v) => typeof v === 'number' && Number.isInteger(v) && Math.abs(v) > MAX_SAFE_INTEGER;
  const walk = (v) => {
    if (wide(v)) return new ExponentNumber(v);
    if (Array.isArray(v)) return v.map(walk);
    if (v !== null && typeof v === 'object' && !(v instanceof JsonInt)) {
      const o = Object.create(null);
      // A member whose value is undefined is left out, as JSON.stringify leaves it out.
      for (const k of Object.keys(v)) if (v[k] !== undefined) o[k] = walk(v[k]);
      return o;
    }
    return v;
  };
  return canonicalize(walk(value));
}

/** A number canonicalize writes in exponent form (requestJson's large doubles). */
class ExponentNumber {
  /** @param {number} value */
  constructor(value) {
    this.value = value;
  }
}

/**
 * Indented JSON text for people to read and edit: as JSON.stringify(v, null, 2), except that
 * a large integral double is written in exponent form (as requestJson does, so that the text
 * is accepted back unchanged) and every character that would not show as itself (controls,
 * format and bidirectional characters such as U+202E, zero-width and other invisible
 * characters, separators other than the space) is written as its \u escape: the same JSON
 * value, but nothing in the text can hide or reorder what is around it.
 * @param {*} value
 * @returns {string}
 */
export function readableJson(value) {
  const marks = [];
  // A nonce, so that no string of the value can pass for a marker.
  const nonce = Math.random().toString(36).slice(2) + Date.now().toString(36);
  const text = JSON.stringify(value, (k, v) => {
    if (typeof v === 'number' && Number.isInteger(v) && Math.abs(v) > MAX_SAFE_INTEGER) {
      marks.push(v.toExponential());
      return `\u0000${nonce}-${marks.length - 1}\u0000`;
    }
    return v;
  }, 2);
  return text
    .replace(new RegExp(`"\\\\u0000${nonce}-(\\d+)\\\\u0000"`, 'g'), (m, i) => marks[Number(i)])
    // (The only raw control left in JSON.stringify's text is the indentation's line feed:
    // it escapes U+0000-U+001F inside strings.)
    .replace(HIDDEN_CHARS, (c) => {
      if (c === '\n') return c;
      let out = '';
      for (let i = 0; i < c.length; i++) out += '\\u' + c.charCodeAt(i).toString(16).padStart(4, '0');
      return out;
    });
}

/**
 * Characters that do not show as themselves, or change how what surrounds them shows: controls
 * (Cc), format characters (Cf: bidirectional embeddings, overrides and isolates such as
 * U+202A-U+202E and U+2066-U+2069, zero-width characters such as U+200B), private-use,
 * surrogate and unassigned code points, line and paragraph separators, every space separator
 * but U+0020, and Unicode's default-ignorable characters (variation selectors, fillers, tags).
 */
export const HIDDEN_CHARS = /[\p{Cc}\p{Cf}\p{Co}\p{Cs}\p{Cn}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}]|[^\P{Zs} ]/gu;
