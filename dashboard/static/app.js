// agl dashboard: a small single-page app over /api/dashboard/. Everything
// shown comes from harness-controlled data, so the DOM is built with
// textContent only (never innerHTML).
'use strict';

const main = document.getElementById('main');
const POLL_MS = 3000;
const STATUSES = ['queuing', 'running', 'requeuing', 'succeeded', 'failed', 'cancelled'];

// h builds an element: h('div', {class: 'x', onclick: fn}, 'text', child, [more]).
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, kids);
  return el;
}

// append adds children (nodes, strings, arrays of them; null skipped).
function append(el, ...kids) {
  for (const k of kids) {
    if (k === null || k === undefined || k === false) continue;
    if (Array.isArray(k)) append(el, ...k);
    else if (k instanceof Node) el.appendChild(k);
    else el.appendChild(document.createTextNode(String(k)));
  }
}

const SVG = 'http://www.w3.org/2000/svg';
function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const k of kids) el.appendChild(typeof k === 'string' ? document.createTextNode(k) : k);
  return el;
}

async function get(path) {
  const r = await fetch(path, {credentials: 'same-origin', headers: {Accept: 'application/json'}});
  if (r.status === 401) {
    location.href = '/login';
    throw new Error('not logged in');
  }
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error((body.error && body.error.message) || ('HTTP ' + r.status));
  return body;
}

function pill(text, cls) { return h('span', {class: 'pill ' + (cls || '')}, text); }
function statusPill(st) { return pill(st, 'st-' + st); }
function num(x, d) {
  if (x === null || x === undefined || Number.isNaN(x)) return '–';
  if (Number.isInteger(x)) return String(x);
  return Number(x).toFixed(d === undefined ? 3 : d);
}
function ago(t) {
  if (!t) return '–';
  const d = (Date.now() - new Date(t).getTime()) / 1000;
  if (d < 0) return 'now';
  if (d < 60) return Math.round(d) + 's ago';
  if (d < 3600) return Math.round(d / 60) + 'm ago';
  if (d < 86400) return Math.round(d / 3600) + 'h ago';
  return new Date(t).toISOString().slice(0, 16).replace('T', ' ');
}
function time(t) { return h('span', {title: t || ''}, ago(t)); }
function pretty(raw) {
  if (raw === undefined || raw === null) return '';
  try { return JSON.stringify(typeof raw === 'string' ? JSON.parse(raw) : raw, null, 2); } catch (e) { return String(raw); }
}

// Routing: #/name/arg?params
function route() {
  const hash = location.hash.replace(/^#\/?/, '') || 'rollouts';
  const [path, query] = hash.split('?');
  const parts = path.split('/');
  return {name: parts[0], arg: parts.slice(1).map(decodeURIComponent).join('/'), params: new URLSearchParams(query || '')};
}
function go(name, arg, params) {
  let hsh = '#/' + name + (arg ? '/' + encodeURIComponent(arg) : '');
  const q = params ? params.toString() : '';
  if (q) hsh += '?' + q;
  location.hash = hsh;
}

let view = null; // {refresh(): Promise}
let lastState = null;
let renderSeq = 0;
let lastWhere = '';

async function render() {
  const rt = route();
  const seq = ++renderSeq;
  for (const a of document.querySelectorAll('header nav a')) {
    a.classList.toggle('active', a.dataset.nav === rt.name || (rt.name === 'rollout' && a.dataset.nav === 'rollouts'));
  }
  const fn = views[rt.name] || views.rollouts;
  const where = rt.name + '/' + rt.arg;
  const moved = where !== lastWhere;
  lastWhere = where;
  const root = h('div');
  try {
    const v = await fn(rt, root);
    if (seq !== renderSeq) return; // navigated away meanwhile
    view = v;
    main.replaceChildren(root);
    if (moved) window.scrollTo(0, 0);
  } catch (e) {
    if (seq !== renderSeq) return;
    view = null;
    main.replaceChildren(h('div', {class: 'card error'}, 'Could not load: ' + e.message));
  }
}

// ---- gateway state in the header, polled ----
async function tick() {
  try {
    lastState = await get('/api/dashboard/state');
    const g = lastState.gateway;
    const c = g.rollouts || {};
    const el = document.getElementById('gw');
    el.replaceChildren(
      g.llm ? (g.paused ? pill('paused', 'paused') : pill('serving', 'serving')) : pill('no engine'),
      pill(g.in_flight + ' in flight'),
      pill((c.running || 0) + ' running'),
      pill(((c.queuing || 0) + (c.requeuing || 0)) + ' queued'));
    if (document.getElementById('live').checked && view && view.refresh) await view.refresh();
  } catch (e) { /* next tick retries */ }
}

const views = {};

// ---- rollouts list ----
const pageStack = []; // cursors of the pages before the current one

views.rollouts = async function (rt, root) {
  const p = rt.params;
  const form = h('form', {class: 'filters card'});
  const statusBoxes = STATUSES.map(st => h('label', {}, h('input', {type: 'checkbox', name: 'status', value: st,
    checked: p.getAll('status').flatMap(x => x.split(',')).includes(st)}), st));
  const field = (label, name, type, extra) => h('label', {}, label, h('input', Object.assign({type, name, value: p.get(name) || ''}, extra || {})));
  const mode = h('select', {name: 'mode'}, ['', 'train', 'val'].map(m => h('option', {value: m, selected: (p.get('mode') || '') === m}, m || 'any')));
  append(form, [
    h('label', {}, 'status', h('div', {class: 'statuses'}, statusBoxes)),
    h('label', {}, 'mode', mode),
    field('group', 'group', 'text', {placeholder: 'group id', size: 18}),
    field('step', 'step', 'number', {min: 0}),
    field('reward ≥', 'min_reward', 'number', {step: 'any'}),
    field('reward ≤', 'max_reward', 'number', {step: 'any'}),
    h('button', {type: 'submit'}, 'Filter'),
    h('button', {type: 'button', class: 'secondary', onclick: () => { pageStack.length = 0; go('rollouts'); }}, 'Clear'),
  ]);
  form.addEventListener('submit', ev => {
    ev.preventDefault();
    const q = new URLSearchParams();
    const fd = new FormData(form);
    const sts = fd.getAll('status');
    if (sts.length) q.set('status', sts.join(','));
    for (const k of ['mode', 'group', 'step', 'min_reward', 'max_reward']) {
      const v = String(fd.get(k) || '').trim();
      if (v) q.set(k, v);
    }
    pageStack.length = 0;
    go('rollouts', '', q);
  });

  const counts = h('div', {class: 'counts'});
  const body = h('tbody');
  const table = h('table', {id: 'rollouts'},
    h('thead', {}, h('tr', {}, ['rollout', 'status', 'mode', 'group', 'step', 'reward', 'attempts', 'task', 'updated']
      .map(c => h('th', {class: ['step', 'reward', 'attempts'].includes(c) ? 'num' : ''}, c)))), body);
  const newer = h('button', {class: 'secondary', disabled: !p.get('cursor'), onclick: () => {
    const q = new URLSearchParams(p);
    const prev = pageStack.pop();
    if (prev) q.set('cursor', prev); else q.delete('cursor');
    go('rollouts', '', q);
  }}, '← Newer');
  const older = h('button', {class: 'secondary', disabled: true}, 'Older →');
  const info = h('span', {class: 'muted'});
  let next = 0;
  older.addEventListener('click', () => {
    if (!next) return;
    const q = new URLSearchParams(p);
    pageStack.push(p.get('cursor') || '');
    q.set('cursor', String(next));
    go('rollouts', '', q);
  });

  const query = new URLSearchParams(p);
  query.set('limit', '50');
  async function load() {
    const t0 = performance.now();
    const page = await get('/api/dashboard/rollouts?' + query.toString());
    const ms = performance.now() - t0;
    next = page.next_cursor || 0;
    older.disabled = !next;
    body.replaceChildren(...page.rollouts.map(r => h('tr', {'data-id': r.id},
      h('td', {}, h('a', {href: '#/rollout/' + encodeURIComponent(r.id), class: 'mono rollout-link'}, r.id)),
      h('td', {}, statusPill(r.status), r.error ? h('span', {class: 'muted', title: r.error}, ' ⚠') : null),
      h('td', {}, r.mode),
      h('td', {}, r.group_id ? h('a', {href: '#/rollouts?group=' + encodeURIComponent(r.group_id)}, r.group_id) : ''),
      h('td', {class: 'num'}, r.step === undefined ? '' : h('a', {href: '#/rollouts?step=' + r.step}, String(r.step))),
      h('td', {class: 'num'}, num(r.reward)),
      h('td', {class: 'num'}, r.num_attempts),
      h('td', {class: 'task', title: r.task}, r.task),
      h('td', {}, time(r.updated_at)))));
    if (!page.rollouts.length) body.replaceChildren(h('tr', {}, h('td', {colspan: 9, class: 'muted'}, 'No rollouts match.')));
    info.textContent = page.rollouts.length + ' shown · ' + ms.toFixed(0) + ' ms';
    if (lastState) {
      const c = lastState.gateway.rollouts || {};
      counts.replaceChildren(...STATUSES.map(st => h('a', {href: '#/rollouts?status=' + st}, statusPill(st + ' ' + (c[st] || 0)))));
    }
  }
  await load();
  append(root, h('h1', {}, 'Rollouts'), form, counts, table, h('div', {class: 'pager'}, newer, older, info));
  return {refresh: () => (p.get('cursor') ? Promise.resolve() : load())};
};

// ---- one rollout ----
function msgEl(m, extraClass) {
  const role = m.role || '?';
  const about = [];
  if (role === 'tool') {
    if (m.name) about.push(m.name);
    if (m.tool_call_id) about.push(m.tool_call_id);
    if (m.is_error) about.push('error');
  }
  return h('div', {class: 'msg ' + role + (m.is_error ? ' err' : '') + (extraClass ? ' ' + extraClass : '')},
    h('div', {class: 'role'}, role === 'tool' ? 'tool result' : role, about.length ? h('span', {class: 'about mono'}, ' · ' + about.join(' · ')) : null),
    m.reasoning ? h('pre', {class: 'reasoning'}, m.reasoning) : null,
    m.text ? h('pre', {class: 'text'}, m.text) : null,
    (m.tool_calls || []).map(tc => h('div', {class: 'toolcall'},
      h('span', {class: 'name'}, tc.name), tc.id ? h('span', {class: 'muted mono'}, '  ' + tc.id) : null,
      h('pre', {class: 'args'}, pretty(tc.arguments)))),
    !m.text && !m.reasoning && !(m.tool_calls || []).length ? h('span', {class: 'muted'}, '(empty)') : null);
}

function callEl(c, k) {
  const head = h('div', {class: 'callhead'},
    h('strong', {}, 'call ' + (k + 1)), c.agent ? pill('agent: ' + c.agent, 'agent') : null, h('span', {class: 'mono'}, c.api || ''),
    h('span', {}, (c.model || '') + ' v' + c.model_version),
    c.stream ? pill('streamed') : null,
    h('span', {}, c.prompt_tokens + ' → ' + c.completion_tokens + ' tokens'),
    h('span', {}, num(c.latency_ms, 0) + ' ms'),
    c.finish_reason ? h('span', {}, 'finish: ' + c.finish_reason) : null,
    h('span', {title: 'token state'}, c.continued ? 'continued' : ('rendered: ' + (c.render_reason || '?'))),
    c.no_token_ids ? pill('no token ids', 'st-failed') : null,
    c.tools && c.tools.length ? h('span', {}, 'tools: ' + c.tools.join(', ')) : null,
    time(c.time));
  return h('div', {class: 'call', 'data-call': c.call_id},
    head,
    c.error ? h('div', {class: 'error'}, c.error) : null,
    c.http_status ? h('div', {class: 'error'}, 'refused or failed: HTTP ' + c.http_status, h('pre', {class: 'args'}, pretty(c.refusal || ''))) : null,
    c.rewritten ? h('div', {class: 'rewritten'}, 'History rewritten: this request does not extend the previous call’s conversation; shown in full.') : null,
    c.context ? h('div', {class: 'context'}, '… ' + c.context + ' earlier message' + (c.context === 1 ? '' : 's')) : null,
    (c.new || []).map(m => msgEl(m)),
    c.reply ? msgEl(c.reply, 'reply') : null);
}

views.rollout = async function (rt, root) {
  const id = rt.arg;
  const attemptQ = rt.params.get('attempt') ? '?attempt=' + encodeURIComponent(rt.params.get('attempt')) : '';
  const tokensBox = h('div', {id: 'tokens'});
  let tokensShown = false;
  const content = h('div');
  async function load() {
    const v = await get('/api/dashboard/rollouts/' + encodeURIComponent(id) + attemptQ);
    const r = v.rollout;
    const kv = h('dl', {class: 'kv'});
    const row = (k, ...val) => append(kv, [h('dt', {}, k), h('dd', {}, ...val)]);
    row('status', statusPill(r.status), r.error ? h('span', {class: 'error'}, '  ' + r.error) : null);
    row('mode', r.mode);
    if (r.group_id) row('group', h('a', {href: '#/rollouts?group=' + encodeURIComponent(r.group_id)}, r.group_id));
    if (r.step !== undefined) row('step', h('a', {href: '#/rollouts?step=' + r.step}, String(r.step)));
    row('reward', num(r.reward), r.reward_data ? h('span', {class: 'muted mono'}, '  ' + JSON.stringify(r.reward_data)) : null);
    row('attempts', r.num_attempts + ' of at most ' + (r.config.max_attempts || 1));
    row('created', time(r.created_at));
    row('updated', time(r.updated_at));
    row('task', h('pre', {}, pretty(r.task)));
    if (r.metadata) row('metadata', h('pre', {}, pretty(r.metadata)));

    const attempts = h('table', {}, h('thead', {}, h('tr', {}, ['#', 'attempt', 'worker', 'status', 'started', 'ended', 'error'].map(c => h('th', {}, c)))),
      h('tbody', {}, (r.attempts || []).map(a => h('tr', {},
        h('td', {}, a.number),
        h('td', {}, a.id === v.attempt ? h('strong', {class: 'mono'}, a.id + ' (shown)') :
          h('a', {class: 'mono', href: '#/rollout/' + encodeURIComponent(id) + '?attempt=' + encodeURIComponent(a.id)}, a.id)),
        h('td', {}, a.worker_id || ''), h('td', {}, statusPill(a.status)),
        h('td', {}, time(a.started_at)), h('td', {}, a.ended_at ? time(a.ended_at) : ''), h('td', {}, a.error || '')))));

    const events = v.events.length ? h('table', {}, h('thead', {}, h('tr', {}, ['seq', 'type', 'time', 'data'].map(c => h('th', {}, c)))),
      h('tbody', {}, v.events.map(e => h('tr', {}, h('td', {}, e.seq), h('td', {}, e.type), h('td', {}, time(e.time)),
        h('td', {}, h('pre', {}, e.data)))))) : h('p', {class: 'muted'}, 'No other events.');

    // A repository task's test-based evaluation (the controller's "tests" event).
    let tests = null;
    const te = v.events.filter(e => e.type === 'tests').pop();
    if (te) {
      let d = null;
      try { d = JSON.parse(te.data); } catch (err) { d = null; }
      if (d) {
        const rows = [['fail_to_pass', d.fail_to_pass || {}], ['pass_to_pass', d.pass_to_pass || {}]].flatMap(([kind, m]) =>
          Object.keys(m).sort().map(id => h('tr', {}, h('td', {}, kind), h('td', {class: 'mono'}, id), h('td', {class: m[id] === 'passed' ? '' : 'error'}, m[id]))));
        tests = h('div', {id: 'tests'},
          h('p', {}, (d.resolved ? 'resolved' : 'not resolved') + ', reward ' + num(d.reward) + (d.reason ? ' — ' + d.reason : '') +
            (d.hidden_files_changed ? ' (hidden files the agent changed, restored: ' + d.hidden_files_changed.join(', ') + ')' : '')),
          h('table', {}, h('thead', {}, h('tr', {}, ['set', 'test', 'status'].map(c => h('th', {}, c)))), h('tbody', {}, rows)),
          h('pre', {}, d.log || ''));
      }
    }

    content.replaceChildren(
      h('h1', {}, 'Rollout ', h('span', {class: 'mono'}, r.id)),
      h('div', {class: 'card'}, kv),
      h('h2', {}, 'Attempts'), attempts,
      h('h2', {}, 'Conversation', h('span', {class: 'muted'}, v.attempt ? '  (attempt ' + v.attempt + ', ' + v.calls.length + ' model calls)' : '')),
      v.calls.length ? h('div', {id: 'conversation'}, v.calls.map(callEl)) : h('p', {class: 'muted'}, 'No model calls yet.'),
      ...(tests ? [h('h2', {}, 'Tests'), tests] : []),
      h('h2', {}, 'Rewards, logs and other events'), events,
      h('h2', {}, 'Tokens'),
      h('button', {id: 'show-tokens', class: 'secondary', onclick: async () => { tokensShown = !tokensShown; await loadTokens(); }},
        tokensShown ? 'Hide per-token view' : 'Show per-token view'),
      tokensBox);
    return r;
  }
  async function loadTokens() {
    if (!tokensShown) { tokensBox.replaceChildren(); return; }
    const t = await get('/api/dashboard/rollouts/' + encodeURIComponent(id) + '/tokens' + attemptQ);
    tokensBox.replaceChildren(tokensEl(t));
    const b = document.getElementById('show-tokens');
    if (b) b.textContent = 'Hide per-token view';
  }
  let r = await load();
  append(root, content);
  return {refresh: async () => {
    if (r.status === 'succeeded' || r.status === 'failed' || r.status === 'cancelled') return;
    r = await load();
    if (tokensShown) await loadTokens();
  }};
};

let showIDs = false;
// fmtAdv shows an advantage with its sign.
function fmtAdv(a) { return (a >= 0 ? '+' : '') + a.toFixed(4); }
function tokensEl(t) {
  const box = h('div');
  const toggle = h('label', {}, h('input', {type: 'checkbox', checked: showIDs, onchange: e => { showIDs = e.target.checked; box.replaceWith(tokensEl(t)); }}), ' show ids');
  append(box, h('div', {class: 'legend'},
    'Samples built from attempt ', h('span', {class: 'mono'}, t.attempt), ' by the trainer’s merging: ',
    h('span', {class: 'tok m0'}, 'prompt (loss mask 0)'), ' ',
    h('span', {class: 'tok m1 lp'}, 'response (mask 1; colour = probability, green high, red low)'),
    ' · call marks give the advantage the trainer used · hover a token for id, log-prob, mask · ', t.decoded ? toggle : '(no tokenizer: showing ids)'));
  if (!t.samples.length) append(box, h('p', {class: 'muted'}, 'No trainable samples.'));
  const MAX = 20000;
  for (const smp of t.samples) {
    const sp = smp.split;
    const why = sp.reason === 'first' ? 'first sample of the attempt' :
      'split: ' + sp.reason + (sp.at >= 0 ? ' at token ' + sp.at : '') + (sp.detail ? ' — ' + sp.detail : '');
    const trained = smp.mask.reduce((a, b) => a + b, 0);
    const marks = {};
    const advOf = c => c.advantage === undefined ? '' : ' · advantage ' + fmtAdv(c.advantage);
    smp.calls.forEach((c, i) => { marks[c.prompt_start] = (marks[c.prompt_start] || []).concat('call ' + (i + 1) + ' prompt'); marks[c.response_start] = (marks[c.response_start] || []).concat('call ' + (i + 1) + ' response' + advOf(c)); });
    const callAt = i => smp.calls.find(c => i >= c.response_start && i < c.response_end);
    const toks = h('div', {class: 'tokens'});
    const n = Math.min(smp.ids.length, MAX);
    const frag = document.createDocumentFragment();
    for (let i = 0; i < n; i++) {
      if (marks[i]) for (const m of marks[i]) frag.appendChild(h('span', {class: 'callmark'}, m));
      const m = smp.mask[i], lp = smp.logprobs[i];
      const label = (!t.decoded || showIDs) ? String(smp.ids[i]) + ' ' : smp.pieces[i];
      const el = h('span', {class: 'tok m' + m + (i === sp.at ? ' at' : ''),
        title: 'pos ' + i + ' · id ' + smp.ids[i] + ' · mask ' + m + (m ? ' · logprob ' + lp.toFixed(4) + ' · p ' + Math.exp(lp).toFixed(3) + advOf(callAt(i) || {}) : '')}, label);
      if (m) el.style.backgroundColor = 'hsl(' + Math.round(120 * Math.exp(lp)) + ',70%,88%)';
      frag.appendChild(el);
    }
    toks.appendChild(frag);
    if (smp.ids.length > MAX) toks.appendChild(h('div', {class: 'muted'}, '… ' + (smp.ids.length - MAX) + ' more tokens'));
    append(box, h('div', {class: 'sample', 'data-sample': smp.index},
      h('div', {class: 'split' + (sp.reason === 'first' ? ' first' : '')},
        h('strong', {}, 'Sample ' + (smp.index + 1)), ' · ', why, ' · ', smp.ids.length + ' tokens, ' + trained + ' trained',
        ' · model v' + smp.model_versions.join(', v'), smp.truncated ? ' · truncated' : '',
        ' · calls ', smp.calls.map(c => c.call_id + (c.advantage === undefined ? '' : ' (A ' + fmtAdv(c.advantage) + ')')).join(', ')),
      toks));
  }
  if (t.excluded.length) {
    append(box, h('h3', {}, 'Calls left out of training'), h('table', {}, h('tbody', {}, t.excluded.map(x =>
      h('tr', {}, h('td', {class: 'mono'}, x.call_id || ''), h('td', {}, x.reason), h('td', {}, x.detail || ''))))));
  }
  return box;
}

// ---- training ----
function chart(title, series, opts) {
  opts = opts || {};
  const W = 430, H = 210, L = 52, R = 10, T = 10, B = 28;
  const pts = series.flatMap(se => se.points);
  const card = h('div', {class: 'card chart', 'data-chart': title}, h('h3', {}, title));
  if (!pts.length) { append(card, h('p', {class: 'muted'}, opts.empty || 'No data yet.')); return card; }
  let [x0, x1] = [Math.min(...pts.map(p => p[0])), Math.max(...pts.map(p => p[0]))];
  let [y0, y1] = [Math.min(...pts.map(p => p[1])), Math.max(...pts.map(p => p[1]))];
  if (opts.min !== undefined) y0 = Math.min(y0, opts.min);
  if (opts.max !== undefined) y1 = Math.max(y1, opts.max);
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
  const X = x => L + (x - x0) / (x1 - x0) * (W - L - R);
  const Y = y => H - B - (y - y0) / (y1 - y0) * (H - T - B);
  const svg = s('svg', {viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title});
  for (let i = 0; i <= 4; i++) {
    const y = y0 + (y1 - y0) * i / 4;
    svg.appendChild(s('line', {class: 'grid', x1: L, x2: W - R, y1: Y(y), y2: Y(y)}));
    svg.appendChild(s('text', {x: L - 6, y: Y(y) + 4, 'text-anchor': 'end'}, fmtTick(y)));
  }
  const xt = Math.min(6, Math.round(x1 - x0) || 1);
  for (let i = 0; i <= xt; i++) {
    const x = x0 + (x1 - x0) * i / xt;
    svg.appendChild(s('text', {x: X(x), y: H - B + 16, 'text-anchor': 'middle'}, fmtTick(x)));
  }
  svg.appendChild(s('line', {class: 'axis', x1: L, x2: W - R, y1: H - B, y2: H - B}));
  svg.appendChild(s('line', {class: 'axis', x1: L, x2: L, y1: T, y2: H - B}));
  svg.appendChild(s('text', {x: W - R, y: H - 2, 'text-anchor': 'end'}, 'step'));
  series.forEach((se, i) => {
    if (!se.points.length) return;
    svg.appendChild(s('polyline', {class: 's' + i, points: se.points.map(p => X(p[0]) + ',' + Y(p[1])).join(' ')}));
    for (const p of se.points) {
      svg.appendChild(s('circle', {class: 's' + i, cx: X(p[0]), cy: Y(p[1]), r: 2.5}, s('title', {}, `${se.name} step ${p[0]}: ${fmtTick(p[1])}`)));
    }
  });
  append(card, svg, h('div', {class: 'key'}, series.map((se, i) => h('span', {class: 'k' + i}, se.name + (se.points.length ? ' (last ' + fmtTick(se.points[se.points.length - 1][1]) + ')' : '')))));
  return card;
}
function fmtTick(v) {
  const a = Math.abs(v);
  if (a >= 1e4) return v.toExponential(1);
  if (a >= 100 || Number.isInteger(v)) return String(Math.round(v));
  return v.toFixed(a >= 1 ? 2 : 3);
}

views.training = async function (rt, root) {
  const box = h('div');
  let run = rt.params.get('run') || '';
  async function load() {
    const v = await get('/api/dashboard/train' + (run ? '?run=' + encodeURIComponent(run) : ''));
    const sel = h('select', {onchange: e => go('training', '', new URLSearchParams({run: e.target.value}))},
      v.runs.map(r => h('option', {value: r, selected: r === v.run}, r)));
    const series = (mode, f) => v.steps.filter(st => st.mode === mode)
      .map(st => [st.step, f(st.metrics)]).filter(p => typeof p[1] === 'number' && isFinite(p[1]));
    const key = k => m => m[k];
    const used = new Set(['step', 'mode', 'time', 'model_version']);
    const charts = [];
    const add = (title, defs, opts) => {
      for (const d of defs) if (typeof d.k === 'string') used.add(d.k);
      charts.push(chart(title, defs.map(d => ({name: d.name, points: series(d.mode, typeof d.k === 'string' ? key(d.k) : d.k)})), opts));
    };
    add('Reward (mean per step)', [{name: 'train', mode: 'train', k: 'reward_mean'}, {name: 'val', mode: 'val', k: 'reward_mean'}]);
    add('Success rate', [{name: 'train', mode: 'train', k: 'success_rate'}, {name: 'val', mode: 'val', k: 'success_rate'}], {min: 0, max: 1});
    add('Tokens/s (policy update)', [{name: 'train', mode: 'train', k: 'tokens_per_second'}]);
    used.add('rollout_seconds'); used.add('train_seconds');
    add('Step time (s)', [{name: 'rollouts', mode: 'train', k: 'rollout_seconds'}, {name: 'update', mode: 'train', k: 'train_seconds'}]);
    const staleKeys = [...new Set(v.steps.flatMap(st => Object.keys(st.metrics)).filter(k => /stale/i.test(k)))];
    add('Staleness', staleKeys.map(k => ({name: k, mode: 'train', k})), {empty: 'Not reported: the synchronous trainer runs every rollout of step s on the weights of step s (staleness 0).'});
    add('Dropped', [{name: 'dropped groups', mode: 'train', k: 'dropped_groups'}, {name: 'failed rollouts', mode: 'train', k: 'failed_rollouts'}]);
    add('Loss', [{name: 'train', mode: 'train', k: 'loss'}]);
    add('Gradient norm', [{name: 'train', mode: 'train', k: 'grad_norm'}]);
    add('Approx. KL to behaviour policy', [{name: 'train', mode: 'train', k: 'approx_kl'}]);
    add('Clip fraction', [{name: 'train', mode: 'train', k: 'clip_fraction'}], {min: 0});
    add('Entropy', [{name: 'train', mode: 'train', k: 'entropy'}]);
    const others = [...new Set(v.steps.flatMap(st => Object.keys(st.metrics).filter(k => typeof st.metrics[k] === 'number')))].filter(k => !used.has(k)).sort();
    for (const k of others) add(k, [{name: 'train', mode: 'train', k}, {name: 'val', mode: 'val', k}]);

    const recent = v.steps.slice().sort((a, b) => (b.step - a.step) || a.mode.localeCompare(b.mode)).slice(0, 20);
    const steps = h('table', {}, h('thead', {}, h('tr', {}, ['step', 'mode', 'model', 'rollouts', 'reward', 'success', 'samples', 'tokens/s', 'time'].map(c => h('th', {class: ['rollouts', 'reward', 'success', 'samples', 'tokens/s'].includes(c) ? 'num' : ''}, c)))),
      h('tbody', {}, recent.map(st => {
        const m = st.metrics;
        return h('tr', {}, h('td', {}, h('a', {href: '#/rollouts?step=' + st.step + '&mode=' + st.mode}, String(st.step))), h('td', {}, st.mode),
          h('td', {}, m.model_version !== undefined ? 'v' + m.model_version : ''), h('td', {class: 'num'}, num(m.rollouts)),
          h('td', {class: 'num'}, num(m.reward_mean)), h('td', {class: 'num'}, num(m.success_rate)), h('td', {class: 'num'}, num(m.samples)),
          h('td', {class: 'num'}, num(m.tokens_per_second, 0)), h('td', {}, time(st.time)));
      })));
    const models = h('table', {id: 'models'}, h('thead', {}, h('tr', {}, ['model', 'version', 'created', 'weights', 'endpoints', 'metadata'].map(c => h('th', {}, c)))),
      h('tbody', {}, v.models.map(m => h('tr', {}, h('td', {}, m.name), h('td', {}, 'v' + m.version), h('td', {}, time(m.created_at)),
        h('td', {class: 'mono'}, m.weights || ''), h('td', {class: 'mono'}, (m.endpoints || []).join(' ')),
        h('td', {class: 'mono'}, m.metadata ? JSON.stringify(m.metadata) : '')))));
    box.replaceChildren(
      h('h1', {}, 'Training'),
      v.runs.length ? h('p', {}, 'Run ', sel, h('span', {class: 'muted'}, '  ' + v.steps.length + ' step reports')) :
        h('p', {class: 'muted'}, 'No trainer has reported steps yet (agl train does, or POST /api/train/steps).'),
      h('div', {class: 'charts'}, charts),
      h('h2', {}, 'Latest steps'), steps,
      h('h2', {}, 'Model versions'), v.models.length ? models : h('p', {class: 'muted'}, 'No model versions registered.'));
    run = v.run;
  }
  await load();
  append(root, box);
  return {refresh: load};
};

// ---- workers & gateway ----
views.workers = async function (rt, root) {
  const box = h('div');
  async function load() {
    const [st, wk] = await Promise.all([get('/api/dashboard/state'), get('/api/dashboard/workers')]);
    lastState = st;
    const g = st.gateway;
    const c = g.rollouts || {};
    const kv = h('dl', {class: 'kv'});
    const row = (k, ...val) => append(kv, [h('dt', {}, k), h('dd', {}, ...val)]);
    row('version', g.version || '–');
    row('LLM routes', g.llm ? (g.paused ? pill('paused: new calls get 503 + Retry-After', 'paused') : pill('serving', 'serving')) : pill('no engine configured'));
    row('calls in flight', String(g.in_flight));
    row('rollouts', h('span', {class: 'counts'}, STATUSES.map(s2 => h('a', {href: '#/rollouts?status=' + s2}, statusPill(s2 + ' ' + (c[s2] || 0))))));
    const workers = wk.workers.length ? h('table', {id: 'workers'}, h('thead', {}, h('tr', {}, ['worker', 'running', 'attempts', 'failed', 'last seen'].map(x => h('th', {class: ['running', 'attempts', 'failed'].includes(x) ? 'num' : ''}, x)))),
      h('tbody', {}, wk.workers.map(w => h('tr', {}, h('td', {class: 'mono'}, w.id || '(none)'), h('td', {class: 'num'}, w.running),
        h('td', {class: 'num'}, w.attempts), h('td', {class: 'num'}, w.failed), h('td', {}, time(w.last_seen)))))) :
      h('p', {class: 'muted'}, 'No worker ran an attempt in the last ' + wk.window + '.');
    box.replaceChildren(h('h1', {}, 'Gateway'), h('div', {class: 'card'}, kv),
      h('h2', {}, 'Workers (controllers)'), h('p', {class: 'muted'}, 'Attempts running now or started in the last ' + wk.window + ', by worker id.'), workers);
  }
  await load();
  append(root, box);
  return {refresh: load};
};

window.addEventListener('hashchange', render);
tick().then(render);
setInterval(tick, POLL_MS);
