// The ballot page: every button posts one step to the engine in the server process and
// redraws from the view it answers. No state lives here but the last view.
'use strict';

const $ = (id) => document.getElementById(id);
let view = null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('data-')) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) e.append(c);
  return e;
}

function list(ids) {
  if (ids.length === 0) return 'none';
  if (ids.length === 1) return String(ids[0]);
  return ids.slice(0, -1).join(', ') + ' and ' + ids[ids.length - 1];
}

async function call(method, path, body) {
  const res = await fetch(path, {
    method,
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await res.json();
  if (!res.ok) throw new Error(json.error || res.statusText);
  return json;
}

async function step(text) {
  try {
    draw(await call('POST', '/api/step', { step: text }));
    $('error').textContent = '';
  } catch (e) {
    $('error').textContent = e.message;
  }
}

async function reset(n, seed, steps) {
  try {
    draw(await call('POST', '/api/reset', { n, seed, steps }));
    $('error').textContent = '';
  } catch (e) {
    $('error').textContent = e.message;
  }
}

function shareUrl(v) {
  const q = new URLSearchParams({ n: v.n, seed: v.seed, steps: v.steps });
  if ($('bully-toggle').checked) q.set('bully', '1');
  return location.origin + location.pathname + '?' + q.toString();
}

function nodeCard(node) {
  const v = view;
  const card = el('div', { class: `card ${node.role} ${node.state}`, 'data-node': node.id });
  const vote = node.vote ? `voted for ${node.vote} in term ${node.term}` : `no vote in term ${node.term}`;
  card.append(
    el('h3', {}, `node ${node.id} `, el('span', { class: 'role' }, node.state === 'up' ? node.role : `${node.role}, ${node.state}`)),
    el('div', {}, `term ${node.term} · ${vote}`),
    el('div', {}, `leader: ${node.leader ?? 'unknown'} · commit ${node.commit} · tick ${node.now_tick}`),
  );
  if (node.app.doing) card.append(el('div', { class: 'app' }, `app: ${node.app.doing}`));
  const log = el('ul', {});
  for (const e of node.log.slice(-6)) log.append(el('li', {}, e));
  card.append(log);
  const actions = el('div', { class: 'actions' });
  const add = (label, s, enabled = true) => {
    const b = el('button', { textContent: label, disabled: !enabled, 'data-step': s });
    actions.append(b);
  };
  const up = node.state === 'up';
  add('time out', `timeout-${node.id}`, up && node.role !== 'leader');
  add('tick', `tick-${node.id}`, up);
  if (node.state === 'paused') add('resume', `resume-${node.id}`);
  else add(node.role === 'leader' ? 'stop heartbeats' : 'pause', `pause-${node.id}`, up);
  if (node.state === 'crashed') add('restart', `restart-${node.id}`);
  else add('crash', `crash-${node.id}`);
  add('isolate', `partition-${node.id}`, v.partition.length === 0);
  add('campaign (app)', `hold-${node.id}`, up && !node.app.doing);
  add('write (app)', `write-${node.id}`, node.app.token != null);
  card.append(actions);
  return card;
}

function draw(v) {
  view = v;
  $('n').value = String(v.n);
  $('seed').value = String(v.seed);
  const leaders = v.nodes.filter((n) => n.role === 'leader' && n.state !== 'crashed');
  const newest = v.terms.length ? v.terms[v.terms.length - 1] : null;
  $('summary').textContent =
    `${v.n} nodes · a leader needs ${v.quorum} of ${v.n} votes · ` +
    (newest ? `latest term ${newest.term}: ${newest.outcome}` : 'no election yet') +
    (v.partition.length ? ` · partition {${list(v.partition)}} | rest` : '');

  const nodes = $('nodes');
  nodes.replaceChildren(...v.nodes.map(nodeCard));

  const seen = new Set();
  const flight = $('in-flight');
  flight.replaceChildren();
  for (const m of v.in_flight) {
    const pair = `${m.from}-${m.to}`;
    const first = !seen.has(pair);
    seen.add(pair);
    const li = el('li', { 'data-from': m.from, 'data-to': m.to }, `#${m.id} ${m.text} `);
    li.append(
      el('button', { textContent: 'deliver', disabled: !first, 'data-step': `deliver-${pair}` }),
      ' ',
      el('button', { textContent: 'drop', disabled: !first, 'data-step': `drop-${pair}` }),
    );
    flight.append(li);
  }
  if (v.in_flight.length === 0) flight.append(el('li', {}, 'nothing in flight'));

  const tbody = $('terms').querySelector('tbody');
  tbody.replaceChildren();
  for (const t of v.terms) {
    const cls = t.leaders.length > 1 ? 'violation' : t.leaders.length === 1 ? 'has-leader' : 'no-leader';
    const cands = Object.entries(t.candidates)
      .map(([c, votes]) => `node ${c} (${list(votes)})`)
      .join('; ');
    tbody.append(el('tr', { class: cls, 'data-term': t.term },
      el('td', {}, String(t.term)), el('td', {}, cands || '—'),
      el('td', { class: 'outcome' }, `term ${t.term}: ${t.outcome}`)));
  }
  $('fence').textContent = v.fence
    ? `fenced key books = "${v.fence[0]}" (highest token accepted: ${v.fence[1]})`
    : 'fenced key books: not written yet';

  const coords = v.bully_coordinators;
  $('bully-coordinators').textContent =
    `bully coordinators: ${list(coords)}` + (coords.length > 1 ? ` — ${coords.length} coordinators at once` : '');
  const perTerm = v.terms.filter((t) => t.leaders.length).map((t) => `term ${t.term}: node ${list(t.leaders)}`);
  $('raft-leaders').textContent = `Raft leaders per term: ${perTerm.join(' · ') || 'none yet'} (at most one each)`;
  $('bully-nodes').replaceChildren(...Object.values(v.bully.nodes).map((b) => {
    const isCoord = b.up && b.coordinator === b.id;
    return el('div', { class: `card ${isCoord ? 'coordinator' : ''} ${b.up ? '' : 'paused'}`, 'data-bully-node': b.id },
      el('h3', {}, `node ${b.id} `, el('span', { class: 'role' }, isCoord ? 'coordinator' : b.up ? 'member' : 'down')),
      el('div', {}, `believes coordinator: ${b.coordinator ?? 'none'}`));
  }));
  $('bully-log').replaceChildren(...v.bully.log.map((l) => el('li', {}, l)));

  $('log').replaceChildren(...v.log.map((l) => el('li', {}, l)));
  $('log').scrollTop = $('log').scrollHeight;
  $('steps').textContent = v.steps || '(no steps yet)';
  const url = shareUrl(v);
  $('share').href = url;
  $('share').textContent = 'share link';
  history.replaceState(null, '', url);
}

document.addEventListener('click', (ev) => {
  const b = ev.target.closest('button[data-step]');
  if (b && !b.disabled) step(b.getAttribute('data-step'));
});
$('typed-go').addEventListener('click', () => step($('typed').value));
$('typed').addEventListener('keydown', (ev) => { if (ev.key === 'Enter') step($('typed').value); });
$('new').addEventListener('click', () => reset(Number($('n').value), Number($('seed').value), ''));
$('bully-toggle').addEventListener('change', () => {
  $('bully').hidden = !$('bully-toggle').checked;
  if (view) draw(view);
});

async function start() {
  const scen = await call('GET', '/api/scenarios');
  $('scenarios').replaceChildren(...scen.map((s) =>
    el('button', { textContent: `play: ${s.name}`, title: s.title, 'data-scenario': s.name,
      onclick: () => reset(s.n, s.seed, s.steps) })));
  const q = new URLSearchParams(location.search);
  if (q.get('bully') === '1') { $('bully-toggle').checked = true; $('bully').hidden = false; }
  const named = scen.find((s) => s.name === q.get('scenario'));
  if (named) return reset(named.n, named.seed, named.steps);
  if (q.has('seed') || q.has('steps') || q.has('n')) {
    return reset(Number(q.get('n') || 5), Number(q.get('seed') || 7), q.get('steps') || '');
  }
  draw(await call('GET', '/api/state'));
}
start();
