// The ballot page: every button posts one step to the engine in the server process and
// redraws from the view it answers. No state lives here but the last view: which buttons
// apply, and why the others do not, comes with it.
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
  if (!res.ok) {
    const e = new Error(json.error || res.statusText);
    e.why = json.why;
    e.remedy = json.remedy;
    throw e;
  }
  return json;
}

// Says why the last step was refused, and what would make it possible; clears on success.
function refused(e) {
  $('error').textContent = e ? (e.why || e.message) : '';
  $('remedy').textContent = e && e.remedy ? `To make it possible: ${e.remedy}.` : '';
}

async function post(path, body) {
  try {
    draw(await call('POST', path, body));
    refused(null);
  } catch (e) {
    refused(e);
  }
}

const step = (text) => post('/api/step', { step: text });
const reset = (body) => post('/api/reset', body);

// A refused action's tooltip: why, and what would make it possible.
const why = (r) => `${r.why}: ${r.remedy}`;

// The share link: the cluster (size, seed, start) and the steps taken, which replay it; and
// the prepared scenario being stepped through, if any, so that the link opens it at the
// same position with the rest of its steps still to come.
function shareUrl(v) {
  const q = new URLSearchParams({ n: v.n, seed: v.seed });
  if (v.start !== 'fresh') q.set('start', v.start);
  q.set('steps', v.steps);
  if (v.scenario) q.set('scenario', v.scenario.name);
  if ($('bully-toggle').checked) q.set('bully', '1');
  return location.origin + location.pathname + '?' + q.toString();
}

function nodeCard(node) {
  const card = el('div', { class: `card ${node.role} ${node.state}`, 'data-node': node.id });
  const vote = node.vote ? `voted for ${node.vote} in term ${node.term}` : `no vote in term ${node.term}`;
  card.append(
    el('h3', {}, `node ${node.id} `, el('span', { class: 'role' }, node.state === 'up' ? node.role : `${node.role}, ${node.state}`)),
    el('div', {}, `term ${node.term} · ${vote}`),
    el('div', {}, `leader: ${node.leader ?? 'unknown'} · commit ${node.commit} · tick ${node.now_tick}`),
  );
  // Why it would refuse a vote now, and when it times out: the clocks behind every election.
  const timers = [];
  if (node.vote_lease_until_tick != null) {
    const heard = node.heard_from == null ? `started at tick ${node.heard_tick}`
      : node.heard_from === node.id ? `led until tick ${node.heard_tick}`
        : `heard leader ${node.heard_from} at tick ${node.heard_tick}`;
    timers.push(`refuses votes until tick ${node.vote_lease_until_tick} (${heard})`);
  }
  if (node.times_out_at_tick != null) timers.push(`times out at tick ${node.times_out_at_tick}`);
  if (timers.length) card.append(el('div', { class: 'timers' }, timers.join(' · ')));
  if (node.app.doing) card.append(el('div', { class: 'app' }, `app: ${node.app.doing}`));
  const log = el('ul', {});
  for (const e of node.log.slice(-6)) log.append(el('li', {}, e));
  card.append(log);
  // Every button is shown; one that does not apply now is disabled and says why.
  const actions = el('div', { class: 'actions' });
  for (const a of node.actions) {
    actions.append(el('button', {
      textContent: a.label, disabled: a.refused != null, title: a.refused ? why(a.refused) : a.does,
      'data-step': a.step,
    }));
  }
  card.append(actions);
  return card;
}

function drawPlayer(v) {
  const p = v.scenario;
  $('player').hidden = !p;
  if (!p) return;
  $('player-where').textContent = `scenario ${p.name}: step ${p.at} of ${p.total}`;
  $('player-where').title = p.title;
  const next = $('next');
  next.disabled = p.next == null;
  next.textContent = p.next == null ? 'next step' : `next step: ${p.next}`;
  next.title = p.next == null ? `all ${p.total} steps taken: load it again from the start` : p.next_does;
  $('next-does').textContent = p.next == null ? 'the scenario is over' : p.next_does;
  $('run-to-end').disabled = p.next == null;
  $('from-start').disabled = p.at === 0;
}

function draw(v) {
  view = v;
  $('n').value = String(v.n);
  $('seed').value = String(v.seed);
  $('start').value = v.start;
  drawPlayer(v);
  const leaders = v.nodes.filter((n) => n.role === 'leader' && n.state !== 'crashed');
  const newest = v.terms.length ? v.terms[v.terms.length - 1] : null;
  $('summary').textContent =
    `${v.n} nodes · a leader needs ${v.quorum} of ${v.n} votes · ` +
    (newest ? `latest term ${newest.term}: ${newest.outcome}` : 'no election yet') +
    (v.partition.length ? ` · partition {${list(v.partition)}} | rest` : '');

  const nodes = $('nodes');
  nodes.replaceChildren(...v.nodes.map(nodeCard));

  const flight = $('in-flight');
  flight.replaceChildren();
  for (const m of v.in_flight) {
    const pair = `${m.from}-${m.to}`;
    const li = el('li', { 'data-from': m.from, 'data-to': m.to, 'data-id': m.id }, `#${m.id} ${m.text} `);
    const button = (verb, r) => el('button', {
      textContent: verb, disabled: r != null, title: r ? why(r) : `${verb} #${m.id}`,
      'data-step': `${verb}-${pair}`,
    });
    li.append(button('deliver', m.deliver_refused), ' ', button('drop', m.drop_refused));
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
$('new').addEventListener('click', () =>
  reset({ n: Number($('n').value), seed: Number($('seed').value), start: $('start').value, steps: '' }));
$('next').addEventListener('click', () => post('/api/next'));
$('run-to-end').addEventListener('click', () => post('/api/run-to-end'));
$('from-start').addEventListener('click', () => view && view.scenario && reset({ scenario: view.scenario.name, steps: '' }));
$('bully-toggle').addEventListener('change', () => {
  $('bully').hidden = !$('bully-toggle').checked;
  if (view) draw(view);
});

async function start() {
  const scen = await call('GET', '/api/scenarios');
  // Each scenario plays to its end, or loads at its first step to go one step at a time.
  $('scenarios').replaceChildren(...scen.map((s) => el('span', { class: 'scenario' },
    el('button', { textContent: `play: ${s.name}`, title: s.title, 'data-scenario': s.name,
      onclick: () => reset({ scenario: s.name }) }),
    el('button', { textContent: 'step by step', title: `${s.title} (one step at a time)`,
      'data-step-through': s.name, onclick: () => reset({ scenario: s.name, steps: '' }) }))));
  const q = new URLSearchParams(location.search);
  if (q.get('bully') === '1') { $('bully-toggle').checked = true; $('bully').hidden = false; }
  const named = scen.find((s) => s.name === q.get('scenario'));
  // A scenario's link without steps plays it to the end; with them, it stops there.
  if (named) {
    await reset(q.has('steps') ? { scenario: named.name, steps: q.get('steps') } : { scenario: named.name });
  } else if (q.has('seed') || q.has('steps') || q.has('n') || q.has('start')) {
    await reset({
      n: Number(q.get('n') || 5), seed: Number(q.get('seed') || 7),
      start: q.get('start') || 'fresh', steps: q.get('steps') || '',
    });
  }
  // No link, or one refused (its reason is shown): the cluster as the server has it.
  if (!view) draw(await call('GET', '/api/state'));
}
start();
