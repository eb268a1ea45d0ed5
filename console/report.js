// The report page of the console (docs/console.md "Report"): the ledger's report of its own
// records (GET /v1/report, auditor and admin tokens; docs/protocol.md), drawn here in the
// browser as plain SVG: approval rate over time per group, denials and rejection reasons by
// code, time to decision, the queue, the shifts the ledger flagged, and a table of the totals.
//
// Every group key is attacker-chosen text (a tool name an agent sent, a principal): the DOM is
// built with createElement / createElementNS and textContent only, never parsed as HTML, and
// characters that would not show as themselves are shown as their code point (⟦U+202E⟧).

import { HIDDEN_CHARS, isObject } from './jcs.js';

const SVG = 'http://www.w3.org/2000/svg';
/** How many series colours style.css defines (.series-0 … .series-7); keys beyond reuse them. */
const SERIES = 8;
/** The counts of a window (and of a group's totals), in the table's order, with their labels. */
const COUNTS = [
  ['opened', 'Opened'], ['approved', 'Approved'], ['edited', 'Edited'], ['rejected', 'Rejected'],
  ['timed_out', 'Timed out'], ['revoked', 'Revoked'], ['pending', 'Pending'], ['granted', 'Granted'],
];
/** The windows offered (any other duration can be typed), and the presets of the range. */
const WINDOWS = ['1h', '1d', '7d'];
const PRESETS = ['24h', '7d', '30d'];
/** A duration as the route takes it: a positive whole number without a leading zero, then s, m, h, d or w. */
const DURATION = /^[1-9][0-9]{0,8}[smhdw]$/;
const BYS = ['tool', 'reviewer', 'agent'];

// ------------------------------------------------------------------------------- DOM

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  return fill(e, attrs, children);
}

function svg(tag, attrs = {}, ...children) {
  const e = document.createElementNS(SVG, tag);
  return fill(e, attrs, children);
}

function fill(e, attrs, children) {
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') e.setAttribute('class', v);
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    e.append(typeof c === 'string' ? document.createTextNode(c) : c);
  }
  return e;
}

function clear(node) {
  while (node.firstChild) node.firstChild.remove();
}

const codePoint = (c) => `U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}`;

/**
 * Text for an SVG label or title: characters that would not show as themselves (jcs.js
 * HIDDEN_CHARS: bidirectional overrides, zero-width characters, controls, unusual spaces) are
 * written as ⟦U+XXXX⟧, so a key cannot reorder or hide what is around it.
 */
export function plainText(s) {
  return String(s).replace(HIDDEN_CHARS, (c) => `\u27e6${codePoint(c)}\u27e7`);
}

/** The page's own marker function for HTML text (app.js passes its `vis`, which also styles). */
let visHtml = (s) => document.createTextNode(plainText(s));
/** The ledger call app.js passes: `get(path)` answers the JSON or throws its ApiError. */
let getJson = null;

// ---------------------------------------------------------------------------- formatting

/** "2026-12-01 14:00 UTC" of an RFC 3339 timestamp. */
function fmtTime(ts) {
  const m = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2})(:\d{2})?/.exec(ts ?? '');
  return m ? `${m[1]} ${m[2]}${m[3] && m[3] !== ':00' ? m[3] : ''} UTC` : String(ts);
}

/** "12-01 14:00" (an axis label). */
function fmtShort(ms, windowSeconds) {
  const iso = new Date(ms).toISOString();
  return windowSeconds >= 86400 ? iso.slice(5, 10) : `${iso.slice(5, 10)} ${iso.slice(11, 16)}`;
}

/** A window's length as people read it: "1 hour", "1 day", "7 days", else as fmtSeconds. */
function fmtWindow(s) {
  const units = [[604800, 'week'], [86400, 'day'], [3600, 'hour'], [60, 'minute'], [1, 'second']];
  for (const [n, name] of units) {
    if (s % n === 0) {
      const k = s / n;
      return name === 'week' ? `${k * 7} days` : `${k} ${name}${k === 1 ? '' : 's'}`;
    }
  }
  return fmtSeconds(s);
}

/** A duration in seconds as people read it: "42 s", "3 min 05 s", "2 h 10 min", "3 d 4 h". */
export function fmtSeconds(s) {
  if (typeof s !== 'number' || !Number.isFinite(s)) return '—';
  if (s < 60) return `${Number.isInteger(s) ? s : s.toFixed(1)} s`;
  const t = Math.round(s);
  const two = (n) => String(n).padStart(2, '0');
  if (t < 3600) return `${Math.floor(t / 60)} min ${two(t % 60)} s`;
  if (t < 86400) return `${Math.floor(t / 3600)} h ${two(Math.floor((t % 3600) / 60))} min`;
  return `${Math.floor(t / 86400)} d ${Math.floor((t % 86400) / 3600)} h`;
}

/** An approval rate (0 to 1) as "66.7%"; null (no decision to count) as "—". */
export function fmtRate(r) {
  return typeof r === 'number' && Number.isFinite(r) ? `${(r * 100).toFixed(1)}%` : '—';
}

/** A p-value as "0.0012" (three significant digits), very small ones as "1.2e-9". */
export function fmtP(p) {
  if (typeof p !== 'number' || !Number.isFinite(p)) return String(p);
  return p !== 0 && p < 1e-4 ? p.toExponential(1) : String(Number(p.toPrecision(3)));
}

/** A baseline or observed figure of a shift: a rate, a count, or a distribution (code → n). */
function fmtFigure(v, metric) {
  if (typeof v === 'number') return /rate/.test(metric) && v >= 0 && v <= 1 ? fmtRate(v) : String(v);
  if (isObject(v)) {
    const parts = Object.entries(v).map(([k, n]) => `${plainText(k)}: ${typeof n === 'number' ? n : JSON.stringify(n)}`);
    return parts.length ? parts.join(', ') : 'none';
  }
  return v === null || v === undefined ? '—' : plainText(JSON.stringify(v));
}

/** A code → count map's total (0 for anything else). */
function sum(map) {
  return isObject(map) ? Object.values(map).reduce((a, n) => a + (typeof n === 'number' ? n : 0), 0) : 0;
}

/** The refusals of a window or totals: a count, or counts by principal. */
function refusalCount(v) {
  return typeof v === 'number' ? v : sum(v);
}

/** "tool", "reviewer", "agent" keys: a null key is a record with no such name. */
function keyLabel(key, by) {
  if (key !== null && key !== undefined) return null;
  return by === 'reviewer' ? '(no reviewer: not decided by one)' : by === 'agent' ? '(no agent principal)' : '(none)';
}

/** A group's key as HTML: marked characters, tool names with their non-ASCII flagged. */
function keyHtml(key, by) {
  const none = keyLabel(key, by);
  if (none) return el('em', { class: 'no-key' }, none);
  return el('code', { class: 'group-key' }, visHtml(key, { lookalikes: by === 'tool' }));
}

function keySvg(key, by) {
  return keyLabel(key, by) ?? plainText(key);
}

// ---------------------------------------------------------------------------- the JSON

/** A report the page cannot read: names what is wrong. */
export class ReportShapeError extends Error {}

const isCount = (n) => Number.isSafeInteger(n) && n >= 0;
const isNumOrNull = (n) => n === null || (typeof n === 'number' && Number.isFinite(n));

function checkWindow(w, where, dated) {
  if (!isObject(w)) throw new ReportShapeError(`${where} is not an object`);
  if (dated) {
    for (const f of ['start', 'end']) {
      if (typeof w[f] !== 'string' || Number.isNaN(Date.parse(w[f]))) {
        throw new ReportShapeError(`${where}.${f} is not a timestamp`);
      }
    }
  }
  for (const [f] of COUNTS) {
    if (f in w && !isCount(w[f])) throw new ReportShapeError(`${where}.${f} is not a count`);
  }
  if ('approval_rate' in w && !isNumOrNull(w.approval_rate)) throw new ReportShapeError(`${where}.approval_rate is not a rate`);
  if ('oldest_pending_seconds' in w && !isNumOrNull(w.oldest_pending_seconds)) {
    throw new ReportShapeError(`${where}.oldest_pending_seconds is not a number of seconds`);
  }
  for (const f of ['rejection_reasons', 'revocation_reasons', 'denials', 'denial_classes', 'observe_denials']) {
    if (f in w && w[f] !== null && !isObject(w[f])) throw new ReportShapeError(`${where}.${f} is not a code → count map`);
    if (isObject(w[f]) && !Object.values(w[f]).every(isCount)) throw new ReportShapeError(`${where}.${f} holds a non-count`);
  }
  if ('decision_seconds' in w && w.decision_seconds !== null) {
    const d = w.decision_seconds;
    if (!isObject(d) || !['p50', 'p90', 'p99'].every((p) => isNumOrNull(d[p] ?? null))) {
      throw new ReportShapeError(`${where}.decision_seconds is not {p50, p90, p99}`);
    }
  }
}

/**
 * Checks that `r` has the report's shape (docs/protocol.md): `checkpoint {size, root}`,
 * `window_seconds`, `by`, `groups [{key, totals, windows}]`, `shifts [{key, window_start,
 * metric, baseline, observed, p_value}]`. Unknown extra members are fine.
 * @throws {ReportShapeError}
 */
export function checkReport(r) {
  if (!isObject(r)) throw new ReportShapeError('the report is not a JSON object');
  if (!isObject(r.checkpoint) || !isCount(r.checkpoint.size) || typeof r.checkpoint.root !== 'string') {
    throw new ReportShapeError('checkpoint is not {size, root}');
  }
  if (!Number.isSafeInteger(r.window_seconds) || r.window_seconds <= 0) throw new ReportShapeError('window_seconds is not a positive integer');
  if (typeof r.by !== 'string') throw new ReportShapeError('by is not a string');
  if (!Array.isArray(r.groups)) throw new ReportShapeError('groups is not a list');
  r.groups.forEach((g, i) => {
    if (!isObject(g)) throw new ReportShapeError(`groups[${i}] is not an object`);
    if (g.key !== null && typeof g.key !== 'string') throw new ReportShapeError(`groups[${i}].key is neither a string nor null`);
    checkWindow(g.totals, `groups[${i}].totals`, false);
    if (!Array.isArray(g.windows)) throw new ReportShapeError(`groups[${i}].windows is not a list`);
    g.windows.forEach((w, j) => checkWindow(w, `groups[${i}].windows[${j}]`, true));
  });
  if (!Array.isArray(r.shifts)) throw new ReportShapeError('shifts is not a list');
  r.shifts.forEach((s, i) => {
    if (!isObject(s) || (s.key !== null && typeof s.key !== 'string') || typeof s.metric !== 'string'
      || typeof s.window_start !== 'string' || !isNumOrNull(s.p_value)) {
      throw new ReportShapeError(`shifts[${i}] is not {key, window_start, metric, baseline, observed, p_value}`);
    }
  });
  return r;
}

// ---------------------------------------------------------------------------- the charts

/** The chart box: viewBox units (the SVG scales to the page's width). */
const W = 760;
const PAD = { left: 56, right: 16, top: 16, bottom: 40 };

function chart(id, title, desc, height) {
  const s = svg('svg', {
    id, class: 'chart', viewBox: `0 0 ${W} ${height}`, role: 'img', 'aria-labelledby': `${id}-title ${id}-desc`,
    preserveAspectRatio: 'xMinYMin meet',
  });
  s.append(svg('title', { id: `${id}-title` }, title), svg('desc', { id: `${id}-desc` }, desc));
  return s;
}

function figure(title, svgNode, ...after) {
  return el('figure', { class: 'report-figure' }, el('figcaption', {}, title), svgNode, ...after);
}

function legend(groups, by) {
  const ul = el('ul', { class: 'legend', 'aria-label': 'Groups' });
  groups.forEach((g, i) => {
    ul.append(el('li', { 'data-key': g.key ?? '' },
      el('span', { class: `swatch series-${i % SERIES}`, 'aria-hidden': 'true' }), ' ', keyHtml(g.key, by)));
  });
  return ul;
}

/** Approval rate over time: a line per group, gaps where a window had no decision. */
function approvalChart(r, shifts) {
  // Room above the plot for a label per shift (at most four rows; more overlap).
  const TOP = PAD.top + 14 * Math.min(4, shifts.length);
  const H = 300 + TOP - PAD.top;
  const s = chart('chart-approval', 'Approval rate over time',
    `Approvals over decisions in each window of ${fmtWindow(r.window_seconds)}, a line per ${r.by}.`, H);
  const starts = r.groups.flatMap((g) => g.windows.map((w) => Date.parse(w.start)));
  const ends = r.groups.flatMap((g) => g.windows.map((w) => Date.parse(w.end)));
  if (starts.length === 0) {
    s.append(svg('text', { x: W / 2, y: H / 2, class: 'chart-empty', 'text-anchor': 'middle' }, 'No window to draw'));
    return s;
  }
  const t0 = Math.min(...starts);
  const t1 = Math.max(...ends);
  const span = Math.max(1, t1 - t0);
  const x = (t) => PAD.left + ((t - t0) / span) * (W - PAD.left - PAD.right);
  const y = (v) => TOP + (1 - v) * (H - TOP - PAD.bottom);
  const grid = svg('g', { class: 'grid' });
  for (const v of [0, 0.25, 0.5, 0.75, 1]) {
    grid.append(svg('line', { x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v) }),
      svg('text', { x: PAD.left - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'axis' }, `${v * 100}%`));
  }
  const windows = [...new Set(starts)].sort((a, b) => a - b);
  const every = Math.max(1, Math.ceil(windows.length / 7));
  windows.forEach((t, i) => {
    if (i % every === 0) {
      grid.append(svg('line', { x1: x(t), x2: x(t), y1: TOP, y2: H - PAD.bottom, class: 'tick' }),
        svg('text', { x: x(t), y: H - PAD.bottom + 18, 'text-anchor': 'start', class: 'axis' },
          fmtShort(t, r.window_seconds)));
    }
  });
  s.append(grid);
  // Shifts first, under the lines: the window's band, its metric and p-value.
  const bands = svg('g', { class: 'shift-bands' });
  let labelRow = 0;
  for (const sh of shifts) {
    const t = Date.parse(sh.window_start);
    if (Number.isNaN(t)) continue;
    const te = t + r.window_seconds * 1000;
    const bx = x(Math.max(t0, t));
    const bw = Math.max(4, x(Math.min(t1, te)) - bx);
    const label = `shift: ${plainText(sh.metric)}, p = ${fmtP(sh.p_value)}`;
    const right = bx + bw / 2 > W / 2;
    bands.append(svg('g', { class: 'shift-band', 'data-key': sh.key ?? '', 'data-metric': sh.metric, 'data-window-start': sh.window_start },
      svg('title', {}, `${keySvg(sh.key, r.by)}: ${label} (window from ${fmtTime(sh.window_start)})`),
      svg('rect', { x: bx, y: TOP, width: bw, height: H - TOP - PAD.bottom }),
      svg('text', { x: right ? bx + bw : bx, y: TOP - 6 - 14 * labelRow++, 'text-anchor': right ? 'end' : 'start' },
        `${keySvg(sh.key, r.by).slice(0, 40)}: ${label}`)));
  }
  s.append(bands);
  r.groups.forEach((g, i) => {
    const series = svg('g', { class: `series series-${i % SERIES}`, 'data-key': g.key ?? '' });
    const pts = g.windows
      .map((w) => ({ t: (Date.parse(w.start) + Date.parse(w.end)) / 2, rate: w.approval_rate ?? null, w }))
      .sort((a, b) => a.t - b.t);
    let run = [];
    const flush = () => {
      if (run.length > 1) series.append(svg('polyline', { points: run.map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join(' ') }));
      run = [];
    };
    for (const p of pts) {
      if (p.rate === null) {
        flush();
        continue;
      }
      run.push([x(p.t), y(p.rate)]);
    }
    flush();
    for (const p of pts) {
      if (p.rate === null) continue;
      const decided = (p.w.approved ?? 0) + (p.w.edited ?? 0) + (p.w.rejected ?? 0);
      series.append(svg('circle', {
        cx: x(p.t).toFixed(1), cy: y(p.rate).toFixed(1), r: 4, class: 'point', 'data-start': p.w.start, 'data-rate': p.rate,
      }, svg('title', {}, `${keySvg(g.key, r.by)}, window from ${fmtTime(p.w.start)}: ${fmtRate(p.rate)} (${decided} decided)`)));
    }
    s.append(series);
  });
  return s;
}

/**
 * Horizontal bars: `rows` of {label, value, text, cls, attrs}; the longest bar is the
 * chart's width.
 */
function barChart(id, title, desc, rows, empty) {
  const rowH = 24;
  const H = PAD.top + Math.max(1, rows.length) * rowH + 8;
  const s = chart(id, title, desc, H);
  if (rows.length === 0) {
    s.append(svg('text', { x: 12, y: PAD.top + 14, class: 'chart-empty' }, empty));
    return s;
  }
  const labelW = 250;
  const max = Math.max(...rows.map((r) => r.value ?? 0), 1);
  const barMax = W - labelW - 200;
  rows.forEach((row, i) => {
    const top = PAD.top + i * rowH;
    const w = row.value === null ? 0 : Math.max(row.value > 0 ? 2 : 0, (row.value / max) * barMax);
    const label = row.label.length > 34 ? `${row.label.slice(0, 33)}…` : row.label;
    s.append(svg('g', { class: `bar ${row.cls ?? ''}`, ...row.attrs },
      svg('title', {}, `${row.label}: ${row.text}`),
      svg('text', { x: labelW - 8, y: top + 16, 'text-anchor': 'end', class: 'bar-label' }, label),
      svg('rect', { x: labelW, y: top + 4, width: w.toFixed(1), height: rowH - 8 }),
      svg('text', { x: labelW + w + 6, y: top + 16, class: 'bar-value' }, row.text)));
  });
  return s;
}

/** Code → count summed over every group's totals, largest first. */
function byCode(groups, field) {
  const m = new Map();
  for (const g of groups) {
    if (!isObject(g.totals[field])) continue;
    for (const [code, n] of Object.entries(g.totals[field])) m.set(code, (m.get(code) ?? 0) + n);
  }
  return [...m.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
}

/**
 * Denials by the classes the design separates (`denial_classes`: expired, rejected, replayed,
 * missing, mismatched, revoked, superseded, pending, …) when the report has them, else by code;
 * observe-mode would-be denials apart. The table has every code.
 */
function denialsChart(r) {
  const classes = r.groups.some((g) => isObject(g.totals.denial_classes));
  const kind = classes ? 'denial_classes' : 'denials';
  const rows = [
    ...byCode(r.groups, kind).filter(([, n]) => n > 0).map(([code, n]) => ({
      label: plainText(code), value: n, text: String(n), cls: 'denied', attrs: { 'data-code': code, 'data-kind': kind, 'data-count': n },
    })),
    ...byCode(r.groups, 'observe_denials').map(([code, n]) => ({
      label: `${plainText(code)} (observe mode)`, value: n, text: `${n} would-be`, cls: 'observe', attrs: { 'data-code': code, 'data-kind': 'observe_denials', 'data-count': n },
    })),
  ];
  return barChart('chart-denials', 'Denials by reason',
    `Authorizations denied, by ${classes ? 'class (expired, rejected, replayed, missing, mismatched, revoked, superseded, pending, paused)' : 'the ledger\'s code'}, `
    + 'over every group; observe-mode would-be denials apart.', rows,
    'No authorization was denied in this range');
}

function reasonsChart(r) {
  const rows = byCode(r.groups, 'rejection_reasons').map(([code, n]) => ({
    label: plainText(code), value: n, text: String(n), cls: 'rejected', attrs: { 'data-code': code, 'data-count': n },
  }));
  return barChart('chart-reasons', 'Rejection reasons',
    'Rejections by reason_code, over every group.', rows, 'No rejection in this range');
}

function decisionChart(r) {
  const rows = [];
  r.groups.forEach((g, i) => {
    const d = isObject(g.totals.decision_seconds) ? g.totals.decision_seconds : {};
    for (const p of ['p50', 'p90', 'p99']) {
      const v = d[p] ?? null;
      rows.push({
        label: `${keySvg(g.key, r.by)} ${p}`, value: v, text: v === null ? 'no decision' : fmtSeconds(v),
        cls: `series-${i % SERIES} ${p}`, attrs: { 'data-key': g.key ?? '', 'data-percentile': p, 'data-seconds': v ?? '' },
      });
    }
  });
  return barChart('chart-decision', 'Time to decision',
    `From a request to its decision: p50, p90 and p99 per ${r.by}.`, rows, 'No group');
}

function queueChart(r) {
  const rows = r.groups.map((g, i) => {
    const t = g.totals;
    const pending = t.pending ?? 0;
    const oldest = t.oldest_pending_seconds ?? null;
    return {
      label: keySvg(g.key, r.by), value: oldest ?? 0,
      text: `${pending} pending${oldest === null ? '' : `, oldest ${fmtSeconds(oldest)}`}`,
      cls: `series-${i % SERIES}`, attrs: { 'data-key': g.key ?? '', 'data-pending': pending, 'data-oldest': oldest ?? '' },
    };
  });
  return barChart('chart-queue', 'The queue',
    `Requests still pending at the end of the range and the oldest one's age, per ${r.by}.`, rows, 'No group');
}

// ---------------------------------------------------------------------------- the table

function codesCell(map) {
  if (!isObject(map) || Object.keys(map).length === 0) return '0';
  const f = document.createDocumentFragment();
  f.append(`${sum(map)}: `);
  Object.entries(map).forEach(([code, n], i) => f.append(i ? ', ' : '', el('code', {}, visHtml(code)), ` ${n}`));
  return f;
}

function totalsTable(r, shiftKeys) {
  const head = ['Key', ...COUNTS.map(([, l]) => l), 'Approval rate', 'p50', 'p90', 'p99', 'Oldest pending',
    'Rejection reasons', 'Revocation reasons', 'Denials', 'Observe-mode denials', 'Refusals'];
  const table = el('table', { class: 'records report-totals', id: 'report-totals' },
    el('caption', {}, `Totals per ${r.by} over the whole range`),
    el('thead', {}, el('tr', {}, ...head.map((h) => el('th', { scope: 'col' }, h)))));
  const body = el('tbody');
  for (const g of r.groups) {
    const t = g.totals;
    const d = isObject(t.decision_seconds) ? t.decision_seconds : {};
    const tr = el('tr', { 'data-key': g.key ?? '', class: shiftKeys.has(g.key) ? 'has-shift' : null });
    tr.append(el('th', { scope: 'row' }, keyHtml(g.key, r.by), shiftKeys.has(g.key) ? el('span', { class: 'badge shift-badge' }, 'shift') : null));
    for (const [f] of COUNTS) tr.append(el('td', { 'data-field': f, 'data-value': t[f] ?? '' }, t[f] === undefined ? '—' : String(t[f])));
    tr.append(el('td', { 'data-field': 'approval_rate', 'data-value': t.approval_rate ?? '' }, fmtRate(t.approval_rate)));
    for (const p of ['p50', 'p90', 'p99']) tr.append(el('td', { 'data-field': p, 'data-value': d[p] ?? '' }, fmtSeconds(d[p] ?? null)));
    tr.append(el('td', { 'data-field': 'oldest_pending_seconds', 'data-value': t.oldest_pending_seconds ?? '' },
      fmtSeconds(t.oldest_pending_seconds ?? null)));
    for (const f of ['rejection_reasons', 'revocation_reasons', 'denials', 'observe_denials']) {
      tr.append(el('td', { 'data-field': f, 'data-value': sum(t[f]) }, codesCell(t[f])));
    }
    const ref = t.refusals;
    tr.append(el('td', { 'data-field': 'refusals', 'data-value': refusalCount(ref) },
      isObject(ref) ? codesCell(ref) : ref === undefined ? '—' : String(ref)));
    body.append(tr);
  }
  table.append(body);
  return el('div', { class: 'table-wrap' }, table);
}

/** ", z = −4.47; 10 decisions in the baseline, 10 in the window" (what the report gives). */
function shiftDetail(sh) {
  const parts = [];
  if (typeof sh.statistic === 'number') parts.push(`${sh.metric === 'approval_rate' ? 'z' : sh.metric === 'rejection_reasons' ? 'chi-square' : 'statistic'} = ${Number(sh.statistic.toPrecision(3))}`);
  if (Number.isSafeInteger(sh.baseline_count) && Number.isSafeInteger(sh.observed_count)) {
    const what = sh.metric === 'rejection_reasons' ? 'rejections' : 'decisions';
    parts.push(`${sh.baseline_count} ${what} in the baseline, ${sh.observed_count} in the window`);
  }
  const test = sh.metric === 'approval_rate' ? 'two-proportion z-test' : sh.metric === 'rejection_reasons' ? 'chi-square test of homogeneity' : null;
  if (test) parts.unshift(test);
  return parts.length ? ` (${parts.join('; ')})` : null;
}

function shiftList(r) {
  const box = el('section', { class: 'shifts', id: 'report-shifts', 'aria-labelledby': 'report-shifts-title' },
    el('h3', { id: 'report-shifts-title' }, 'Shifts'));
  if (r.shifts.length === 0) {
    box.append(el('p', { class: 'no-shift', id: 'no-shift' },
      'No shift flagged: in every group the last window\'s approval rate and reason distribution stay within the '
      + 'ledger\'s test of the windows before it.'));
    return box;
  }
  const ul = el('ul', { class: 'shift-list' });
  for (const sh of r.shifts) {
    ul.append(el('li', { class: 'shift', 'data-key': sh.key ?? '', 'data-metric': sh.metric, 'data-window-start': sh.window_start, 'data-p-value': sh.p_value ?? '' },
      el('strong', {}, 'Shift'), ' in ', keyHtml(sh.key, r.by), ': ', el('code', {}, visHtml(sh.metric)),
      ` in the window from ${fmtTime(sh.window_start)}: baseline ${fmtFigure(sh.baseline, sh.metric)}, `
      + `observed ${fmtFigure(sh.observed, sh.metric)}, `, el('strong', { class: 'p-value' }, `p = ${fmtP(sh.p_value)}`),
      shiftDetail(sh)));
  }
  box.append(el('p', { class: 'lead' }, `The ledger flagged ${r.shifts.length} shift${r.shifts.length === 1 ? '' : 's'}: the last window against the windows before it. `
    + 'Each is marked on the approval-rate chart.'), ul);
  return box;
}

/**
 * Draws the report `r` (checked with checkReport) into `out`: what it was computed at, the
 * shifts, the charts and the totals table. `source` says where it came from.
 */
export function renderReport(out, r, source) {
  checkReport(r);
  clear(out);
  const shiftKeys = new Set(r.shifts.map((s) => s.key));
  out.append(
    el('dl', { class: 'facts', id: 'report-facts' },
      el('dt', {}, 'From'), el('dd', {}, source),
      el('dt', {}, 'Computed at'), el('dd', {}, `checkpoint of size ${r.checkpoint.size}, root `,
        el('code', { class: 'digest', id: 'report-root' }, plainText(r.checkpoint.root))),
      el('dt', {}, 'Range'), el('dd', { id: 'report-range' }, r.since ? fmtTime(r.since) : 'the log\'s start', ' to ',
        r.until ? fmtTime(r.until) : 'now'),
      el('dt', {}, 'Windows'), el('dd', { id: 'report-windows' }, `${fmtWindow(r.window_seconds)} each, grouped by ${r.by}: `
        + `${r.groups.length} group${r.groups.length === 1 ? '' : 's'}`)),
    shiftList(r),
  );
  if (r.groups.length === 0) {
    out.append(el('p', { class: 'empty', id: 'report-empty' }, 'Nothing was recorded in this range.'));
    return;
  }
  out.append(
    figure('Approval rate over time', approvalChart(r, r.shifts), legend(r.groups, r.by)),
    figure('Denials by reason', denialsChart(r)),
    figure('Rejection reasons', reasonsChart(r)),
    figure('Time to decision (p50, p90, p99)', decisionChart(r)),
    figure('Queue: pending and oldest pending', queueChart(r)),
    el('h3', {}, 'Totals'),
    totalsTable(r, shiftKeys),
  );
}

// ---------------------------------------------------------------------------- the place

/** The query of the controls: `since`, `until`, `window`, `by` (docs/protocol.md). */
export function reportQuery(form) {
  const v = (name) => form.elements[name].value;
  const q = new URLSearchParams();
  const range = v('report-range');
  if (PRESETS.includes(range)) {
    q.set('since', range);
  } else if (range === 'custom') {
    // RFC 3339 or a duration back from now, as the ledger reads them: it judges them (a
    // malformed one, or a start not before the end, is its 400 with a stable code).
    const since = v('report-since').trim();
    const until = v('report-until').trim();
    if (since === '' && until === '') return { problem: 'Give the range\'s start, its end or both, or choose a preset.' };
    if (since !== '') q.set('since', since);
    if (until !== '') q.set('until', until);
  } else if (range !== 'all') {
    return { problem: 'Choose a range.' };
  }
  let window = v('report-window');
  if (window === 'other') window = v('report-window-other').trim();
  else if (!WINDOWS.includes(window)) return { problem: 'Choose a window: 1 hour, 1 day or 7 days.' };
  if (!DURATION.test(window)) {
    return { problem: 'The window is a duration: a whole number and a unit, s, m, h, d or w (for example 30m, 12h, 2d).' };
  }
  const by = v('report-by');
  if (!BYS.includes(by)) return { problem: 'Choose what to group by: tool, reviewer or agent.' };
  q.set('window', window);
  q.set('by', by);
  const alpha = v('report-alpha').trim();
  if (alpha !== '') q.set('alpha', alpha);
  return { query: q.toString() };
}

let turn = 0;

/** Reads the report the controls ask for and draws it; a refusal shows what it means. */
export async function showReport() {
  const form = document.getElementById('report-form');
  const out = document.getElementById('report-result');
  const status = document.getElementById('report-status');
  const me = ++turn;
  const q = reportQuery(form);
  clear(status);
  if (q.problem) {
    status.append(el('p', { class: 'error', role: 'alert', id: 'report-error' }, q.problem));
    return;
  }
  status.append(el('p', { class: 'note' }, 'Reading the report…'));
  let r;
  try {
    r = await getJson(`/v1/report?${q.query}`);
    checkReport(r);
  } catch (e) {
    if (me !== turn) return;
    clear(status);
    clear(out);
    status.append(problem(e));
    return;
  }
  if (me !== turn) return; // a later request shows a later answer
  clear(status);
  renderReport(out, r, `GET /v1/report?${q.query}`);
}

function problem(e) {
  if (e instanceof ReportShapeError) {
    return el('p', { class: 'error', role: 'alert', id: 'report-error', 'data-code': 'report_shape' },
      `The ledger answered a report this page cannot read: ${e.message}.`);
  }
  const code = typeof e.code === 'string' ? e.code : 'error';
  const p = el('p', { class: 'error', role: 'alert', id: 'report-error', 'data-code': code, 'data-status': e.status ?? '' });
  if (e.status === 403) {
    p.append('The report is for auditors and admins: this token (a reviewer\'s or an agent\'s) may not read it. '
      + 'Sign in with an auditor token. ');
  } else if (e.status === 401) {
    p.append('The ledger does not know this token. ');
  } else {
    p.append('The ledger refused the report: ');
  }
  p.append(visHtml(`${e.message ?? String(e)} `), '(', el('code', { class: 'error-code' }, `${e.status ?? ''} ${code}`.trim()), ').');
  return p;
}

/** Forgets what the place shows (on sign-out). */
export function clearReport() {
  turn++;
  clear(document.getElementById('report-result'));
  clear(document.getElementById('report-status'));
}

/**
 * Wires the place's controls: `get(path)` is the console's ledger call (the token in the
 * Authorization header), `vis(text, {lookalikes})` its marker of hidden characters.
 */
export function setupReport({ get, vis }) {
  getJson = get;
  if (vis) visHtml = vis;
  const form = document.getElementById('report-form');
  const custom = document.getElementById('report-custom');
  const otherWindow = document.getElementById('report-window-other-row');
  const sync = () => {
    custom.hidden = form.elements['report-range'].value !== 'custom';
    otherWindow.hidden = form.elements['report-window'].value !== 'other';
  };
  form.elements['report-range'].addEventListener('change', sync);
  form.elements['report-window'].addEventListener('change', sync);
  sync();
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    showReport();
  });
  document.getElementById('report-file').addEventListener('change', async (e) => {
    const f = e.target.files[0];
    if (!f) return;
    const out = document.getElementById('report-result');
    const status = document.getElementById('report-status');
    turn++;
    clear(status);
    try {
      const r = JSON.parse(await f.text());
      renderReport(out, r, `the file ${plainText(f.name)} (a saved report: not read from this ledger now)`);
    } catch (err) {
      clear(out);
      const why = err instanceof ReportShapeError ? err.message : `it is not JSON (${err.message})`;
      status.append(el('p', { class: 'error', role: 'alert', id: 'report-error', 'data-code': 'report_shape' },
        `The file is not a report this page can read: ${why}.`));
    }
  });
}
