// The dashboard's script: reads /api/cluster (every second), /api/series (every two) and
// the event stream /api/events, and draws everything itself (no library, no external
// asset). Every value from the server is set as text, never as markup.
'use strict';

const CLUSTER_EVERY_MS = 1000;
const SERIES_EVERY_MS = 2000;
const EVENTS_SHOWN_MAX = 500;

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const show = (v) => (v === null || v === undefined || v === 0 ? '–' : String(v));

let viewerIsAdmin = false;

async function getJson(path) {
  const r = await fetch(path, { cache: 'no-store', credentials: 'same-origin' });
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}: ${(await r.text()).trim()}`);
  return r.json();
}

// ---------------------------------------------------------------------------------------
// Members.

function renderCluster(c) {
  $('#cluster').textContent = `cluster ${c.cluster_id} · this page is node ${c.node} (v${c.version})`;
  const leader = $('#leader');
  leader.dataset.leader = String(c.leader);
  leader.dataset.term = String(c.term);
  leader.textContent = c.leader ? `leader: node ${c.leader} (term ${c.term})`
    : `leader: none known (term ${c.term})`;
  leader.className = c.leader ? 'good' : 'bad';
  viewerIsAdmin = !!c.viewer.admin;
  document.body.classList.toggle('admin', viewerIsAdmin);
  $('#viewer').textContent = (c.viewer.principal ? `viewer: ${c.viewer.principal}` : 'viewer: anyone')
    + (viewerIsAdmin ? ' (admin)' : ' (read-only)');

  const body = $('#members tbody');
  body.replaceChildren(...c.members.map((m) => memberRow(c, m)));
}

function memberRow(c, m) {
  const s = m.status;
  const kind = m.voter ? (m.outgoing ? 'voter (joint)' : 'voter')
    : m.outgoing ? 'outgoing voter' : m.learner ? 'learner' : 'member';
  const role = s ? s.role : 'unreachable';
  const tr = el('tr', {
    'data-member': String(m.id),
    'data-role': role,
    class: [`role-${role}`, m.reachable ? '' : 'unreachable', m.this_node ? 'this-node' : ''].join(' '),
  },
  el('td', {}, `node ${m.id}`),
  el('td', {}, kind),
  el('td', { class: 'role' }, role),
  el('td', {}, s ? s.term : '–'),
  el('td', {}, s && s.vote ? s.vote : '–'),
  el('td', {}, s ? show(s.leader) : '–'),
  el('td', {}, s ? s.commit_index : '–'),
  el('td', {}, s ? s.applied_index : '–'),
  el('td', {}, s ? s.last_index : '–'),
  el('td', {}, m.lag === null || m.lag === undefined ? '–' : m.lag),
  el('td', {}, m.match_index === null || m.match_index === undefined ? '–' : m.match_index),
  el('td', {}, s && s.version ? s.version : '–'),
  el('td', {}, m.http_addr || '–'),
  el('td', { class: 'state' }, m.reachable ? 'ok' : `unreachable: ${m.error || 'no answer'}`),
  el('td', { class: 'admin-only' }, ...memberActions(c, m)));
  return tr;
}

function memberActions(c, m) {
  if (!viewerIsAdmin) return [];
  const out = [];
  if (m.voter && m.id !== c.leader) {
    out.push(el('button', { 'data-action': 'transfer', 'data-id': String(m.id) }, 'make leader'));
  }
  out.push(el('button', { 'data-action': 'remove', 'data-id': String(m.id) }, 'remove'));
  return out;
}

async function act(action, id) {
  const [path, body, question] = action === 'transfer'
    ? ['/api/transfer-leadership', { to: id }, `Move Raft leadership to node ${id}?`]
    : ['/api/remove-member', { id }, `Remove node ${id} from the cluster?`];
  if (!window.confirm(question)) return;
  const result = $('#action-result');
  try {
    const r = await fetch(path, {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'content-type': 'application/json', 'x-tenure-dashboard': '1' },
      body: JSON.stringify(body),
    });
    const text = await r.text();
    let said = text;
    try { const j = JSON.parse(text); said = j.ok || j.error || text; } catch (_) { /* text */ }
    result.textContent = r.ok ? said : `refused (HTTP ${r.status}): ${said}`;
    result.className = r.ok ? 'good' : 'bad';
  } catch (e) {
    result.textContent = `failed: ${e.message}`;
    result.className = 'bad';
  }
  refreshCluster();
}

document.addEventListener('click', (e) => {
  const b = e.target.closest('button[data-action]');
  if (b) act(b.dataset.action, Number(b.dataset.id));
});

// ---------------------------------------------------------------------------------------
// Elections and sessions (from /api/cluster when the server lists them).

function renderLists(c) {
  const elections = c.elections;
  const ebody = $('#elections tbody');
  if (elections && !elections.error) {
    $('#elections-note').textContent = `${elections.items.length}${elections.more ? '+' : ''} shown, as applied at index ${elections.applied_index}`;
    ebody.replaceChildren(...elections.items.map((e) => el('tr', { 'data-election': e.name },
      el('td', {}, e.name),
      el('td', {}, e.holder ? `session ${e.holder}` : 'nobody'),
      el('td', {}, e.token),
      el('td', {}, e.candidates.length ? e.candidates.map((s) => `session ${s}`).join(', ') : 'empty'),
      el('td', {}, e.since_index))));
  } else {
    $('#elections-note').textContent = elections && elections.error ? elections.error : '';
    ebody.replaceChildren();
  }
  const sessions = c.sessions;
  const sbody = $('#sessions tbody');
  if (sessions && !sessions.error) {
    $('#sessions-note').textContent = `${sessions.items.length}${sessions.more ? '+' : ''} shown, as applied at index ${sessions.applied_index}`;
    sbody.replaceChildren(...sessions.items.map((s) => el('tr', { 'data-session': String(s.id) },
      el('td', {}, s.id),
      el('td', {}, `${(s.ttl_ms / 1000).toFixed(1)} s`),
      el('td', {}, `${(s.remaining_ms / 1000).toFixed(1)} s`),
      el('td', {}, s.elections.join(', ') || '–'))));
  } else {
    $('#sessions-note').textContent = sessions && sessions.error ? sessions.error : '';
    sbody.replaceChildren();
  }
  const schedules = c.schedules;
  const jbody = $('#schedules tbody');
  if (schedules && !schedules.error) {
    $('#schedules-note').textContent = schedules.items.length
      ? `${schedules.items.length}${schedules.more ? '+' : ''} shown, as applied at index ${schedules.applied_index}`
      : 'none: no tenure cron has led an election yet';
    const run = (r) => `${r.slot} ${r.state}${r.attempt > 1 ? ` (attempt ${r.attempt})` : ''}`;
    jbody.replaceChildren(...schedules.items.map((j) => el('tr', { 'data-schedule': j.election },
      el('td', {}, j.election),
      el('td', {}, j.error || j.through || '–'),
      el('td', {}, j.open ? `${run(j.open)} by ${j.open.holder}, token ${j.open.token}` : '–'),
      el('td', {}, j.recent.map(run).join('; ') || '–'),
      el('td', {}, j.counts
        ? Object.entries(j.counts).filter(([, n]) => n).map(([k, n]) => `${k} ${n}`).join(', ') || '–'
        : '–'))));
  } else {
    $('#schedules-note').textContent = schedules && schedules.error ? schedules.error : '';
    jbody.replaceChildren();
  }
}

async function refreshCluster() {
  try {
    const c = await getJson('/api/cluster');
    renderCluster(c);
    renderLists(c);
  } catch (e) {
    $('#cluster').textContent = `cannot read this node: ${e.message}`;
    $('#leader').textContent = 'leader: unknown';
    $('#leader').dataset.leader = '0';
  }
}

// ---------------------------------------------------------------------------------------
// Charts: inline SVG, drawn here.

const SVG = 'http://www.w3.org/2000/svg';
const CHARTS = [
  { key: 'leader_changes', title: 'Leader changes', unit: '', bars: true },
  { key: 'commit_ms', title: 'Commit latency (mean)', unit: 'ms' },
  { key: 'fsync_ms', title: 'Fsync latency (mean)', unit: 'ms' },
  { key: 'keepalives_per_s', title: 'Keepalives acknowledged', unit: '/s' },
];

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

function chart(def, samples, intervalMs) {
  const W = 400, H = 120, L = 46, B = 16;
  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, 'data-chart': def.key, role: 'img' });
  const values = samples.map((s) => s[def.key]);
  const known = values.filter((v) => v !== null && v !== undefined);
  const max = Math.max(known.length ? Math.max(...known) : 0, def.bars ? 1 : 0) || 1;
  const n = Math.max(samples.length, 60);
  const x = (i) => L + (i + (n - samples.length)) * ((W - L - 4) / (n - 1 || 1));
  const y = (v) => H - B - (v / max) * (H - B - 8);
  root.append(svg('line', { class: 'axis', x1: L, y1: H - B, x2: W - 4, y2: H - B }));
  root.append(svg('line', { class: 'axis', x1: L, y1: 8, x2: L, y2: H - B }));
  const label = (text, at, yAt, anchor) => {
    const t = svg('text', { x: at, y: yAt, 'text-anchor': anchor });
    t.textContent = text;
    root.append(t);
  };
  const fmt = (v) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2));
  label(`${fmt(max)}${def.unit}`, L - 3, 12, 'end');
  label('0', L - 3, H - B, 'end');
  const minutes = ((n - 1) * intervalMs) / 60000;
  label(`−${minutes.toFixed(minutes < 2 ? 1 : 0)} min`, L, H - 3, 'start');
  label('now', W - 4, H - 3, 'end');
  if (def.bars) {
    values.forEach((v, i) => {
      if (v) root.append(svg('rect', { class: 'bar', x: x(i) - 1.5, y: y(v), width: 3, height: H - B - y(v) }));
    });
  } else {
    // Gaps (no sample) break the line.
    let path = '';
    let pen = false;
    values.forEach((v, i) => {
      if (v === null || v === undefined) { pen = false; return; }
      path += `${pen ? 'L' : 'M'}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
      pen = true;
    });
    if (path) root.append(svg('path', { class: 'series', d: path }));
  }
  const last = known.length ? known[known.length - 1] : null;
  const total = def.bars ? known.reduce((a, b) => a + b, 0) : null;
  const caption = def.bars ? `${def.title}: ${total} in the last ${minutes.toFixed(1)} min`
    : `${def.title}: ${last === null ? 'no samples' : `${fmt(last)}${def.unit} now`}`;
  return el('figure', {}, el('figcaption', {}, caption), root);
}

async function refreshSeries() {
  try {
    const s = await getJson('/api/series');
    $('#charts').replaceChildren(...CHARTS.map((def) => chart(def, s.samples, s.interval_ms)));
  } catch (e) {
    $('#charts').textContent = `cannot read the samples: ${e.message}`;
  }
}

// ---------------------------------------------------------------------------------------
// The event log, streamed.

function addEvent(r) {
  const list = $('#events');
  const when = new Date(r.time_ms);
  const li = el('li', { 'data-kind': r.kind, 'data-seq': String(r.seq), 'data-term': String(r.fields.term ?? '') },
    el('time', { datetime: when.toISOString() }, when.toLocaleTimeString()),
    el('span', { class: 'kind' }, r.kind.replaceAll('_', ' ')),
    el('span', { class: 'text' }, r.text));
  list.prepend(li);
  while (list.children.length > EVENTS_SHOWN_MAX) list.lastElementChild.remove();
}

function connectEvents() {
  // EventSource reconnects by itself and sends Last-Event-ID, so nothing is shown twice.
  const source = new EventSource('/api/events');
  const state = $('#stream');
  source.onopen = () => { state.textContent = 'event stream: live'; state.className = 'good'; };
  source.onerror = () => { state.textContent = 'event stream: reconnecting'; state.className = 'bad'; };
  source.onmessage = (m) => {
    try { addEvent(JSON.parse(m.data)); } catch (_) { /* a record the page cannot read */ }
  };
  source.addEventListener('lagged', (m) => {
    addEvent({ seq: 0, time_ms: Date.now(), kind: 'lagged', fields: {},
      text: `this page fell behind and missed ${m.data} events` });
  });
}

refreshCluster();
refreshSeries();
connectEvents();
setInterval(refreshCluster, CLUSTER_EVERY_MS);
setInterval(refreshSeries, SERIES_EVERY_MS);
