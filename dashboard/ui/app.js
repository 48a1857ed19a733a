// raftps dashboard: three views over the node's JSON API and one job's
// server-sent event stream (see the dashboard package's doc.go). Charts are
// uPlot's (vendored); this file only feeds them data.
"use strict";

// window.raftps is the page's state, read by the browser test: the charts,
// the job events received, and when each job event (by seq) arrived and
// was drawn (Date.now(), ms).
const raftps = (window.raftps = {
  view: "",
  charts: {},
  events: [],
  cluster: null,
  job: null,
  arrived: {},
  rendered: {},
  clusterEvents: [],
  // identity is GET api/identity: the client certificate's name and role
  // and which writes (cancel, delete, verify) the page offers.
  identity: { tls: false, can: {} },
});

const $ = (sel, root) => (root || document).querySelector(sel);
const esc = (s) =>
  String(s === undefined || s === null ? "" : s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const pct = (x) => (x === undefined || x === null ? "–" : (100 * x).toFixed(2) + "%");
const pill = (s) => `<span class="pill ${esc(s)}">${esc(s)}</span>`;
const fmtTime = (ms) => (ms ? new Date(ms).toLocaleTimeString() : "–");
// fmtVersion shows a checkpoint version as the CLI's tables do: e1/s3842
// for epoch 1 (after a rollback), step 3842 (version = epoch * 1e9 + step).
const fmtVersion = (v) => (v >= 1e9 ? `<span title="${v}">e${Math.floor(v / 1e9)}/s${v % 1e9}</span>` : String(v));

async function api(path, opts) {
  const r = await fetch(path, opts);
  const body = await r.json().catch(() => ({ error: r.statusText }));
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function post(path) {
  return api(path, { method: "POST", headers: { "X-Raftps-Request": "1" } });
}

// ---- routing ----

let stopView = () => {};

function route() {
  stopView();
  stopView = () => {};
  const h = location.hash || "#/cluster";
  document.querySelectorAll("header nav a").forEach((a) => a.classList.toggle("active", h.startsWith(a.getAttribute("href"))));
  const m = h.match(/^#\/jobs\/(.+)$/);
  if (m) return jobView(decodeURIComponent(m[1]));
  if (h.startsWith("#/jobs")) return jobsView();
  return clusterView();
}
window.addEventListener("hashchange", route);

// poll runs fn now and again interval ms after each run ends, until stopped.
function poll(fn, interval) {
  let stopped = false, timer = null;
  const run = async () => {
    try { await fn(); } catch (e) { setConn("error: " + e.message); }
    if (!stopped) timer = setTimeout(run, interval);
  };
  run();
  return () => { stopped = true; clearTimeout(timer); };
}

function setConn(text) { $("#conn").textContent = text; }

// ---- cluster ----

function clusterView() {
  raftps.view = "cluster";
  $("#main").innerHTML = `<h1>Cluster</h1>
    <div class="cards" id="cl-cards"></div>
    <section><h2>Members</h2><table id="members"></table></section>
    <section><h2>pserver slots</h2><table id="slots"></table></section>
    <section><h2>Recent changes seen by this node</h2><table id="cl-events"></table></section>`;
  let pushed = null; // the newest leader event pushed by the server
  const stopPoll = poll(async () => {
    const c = await api("api/cluster");
    // A snapshot taken before the newest pushed leader change is stale on that point.
    if (pushed && pushed.time > c.time) { c.leader = pushed.node; c.term = pushed.term; }
    raftps.cluster = c;
    renderCluster(c);
    setConn(`answered by ${c.node} at ${fmtTime(c.time)}`);
  }, 250);
  // A leader change is pushed as soon as this node sees it: show it at once.
  const es = new EventSource("api/cluster/events");
  es.addEventListener("cluster", (m) => {
    const e = JSON.parse(m.data);
    if (e.kind !== "leader") return;
    pushed = e;
    // The cards (leader, term) at once; the members' own views at the next poll.
    if (raftps.cluster) { raftps.cluster.leader = e.node; raftps.cluster.term = e.term; renderCluster(raftps.cluster); }
  });
  stopView = () => { stopPoll(); es.close(); };
}

function renderCluster(c) {
  const alive = c.members.filter((m) => m.status === "alive").length;
  $("#cl-cards").innerHTML = `
    <div class="card"><div class="k">leader</div><div class="v" id="leader" data-leader="${esc(c.leader)}">${esc(c.leader || "none")}</div></div>
    <div class="card"><div class="k">term</div><div class="v">${c.term}</div></div>
    <div class="card"><div class="k">members alive</div><div class="v">${alive} / ${c.members.length}</div></div>
    <div class="card"><div class="k">slots</div><div class="v">${c.slots.length}</div></div>`;
  $("#members").innerHTML =
    `<tr><th>node</th><th>roles</th><th>gossip</th><th>suffrage</th><th>raft state</th><th>term</th><th>leader (its view)</th><th>commit</th><th>applied</th><th>last log</th><th>health</th><th>http</th></tr>` +
    c.members.map((m) => {
      const r = m.raft;
      const health = !r ? pill("down") : r.leader && r.applied_index >= r.commit_index ? pill("ok") : pill("pending");
      return `<tr data-node="${esc(m.id)}"><td>${esc(m.id)}</td><td>${esc((m.roles || []).join(","))}</td><td>${pill(m.status)}</td><td>${esc(m.suffrage)}</td>
        <td>${r ? pill(r.state.toLowerCase()) : `<span class="err" title="${esc(m.error)}">no answer</span>`}</td>
        <td>${r ? r.term : "–"}</td><td>${r ? esc(r.leader) : "–"}</td><td>${r ? r.commit_index : "–"}</td><td>${r ? r.applied_index : "–"}</td>
        <td>${r ? r.last_log_index : "–"}</td><td>${health}</td><td>${m.http_addr ? `<a href="${esc(location.protocol + "//" + m.http_addr + "/")}">${esc(m.http_addr)}</a>` : ""}</td></tr>`;
    }).join("");
  $("#slots").innerHTML =
    `<tr><th>job</th><th>slot</th><th>node</th><th>address</th><th>incarnation</th><th>lease</th><th>TTL (s)</th></tr>` +
    c.slots.map((s) => `<tr><td><a href="#/jobs/${encodeURIComponent(s.job)}">${esc(s.job)}</a></td><td>${s.slot}</td><td>${esc(s.node)}</td><td>${esc(s.addr)}</td>
      <td>${s.incarnation}</td><td>${s.lease ? s.lease.toString(16) : "–"}</td><td>${s.ttl >= 0 ? s.ttl : "expired"}</td></tr>`).join("");
  $("#cl-events").innerHTML =
    `<tr><th>time</th><th>change</th></tr>` +
    c.events.slice(-15).reverse().map((e) => `<tr><td>${fmtTime(e.time)}</td><td>${esc(e.message)}</td></tr>`).join("");
}

// ---- jobs ----

function jobsView() {
  raftps.view = "jobs";
  $("#main").innerHTML = `<h1>Jobs</h1><section><table id="jobs"></table><p id="jobs-msg" class="err"></p></section>`;
  stopView = poll(async () => {
    const jobs = await api("api/jobs");
    renderJobs(jobs);
    setConn(`${jobs.length} jobs at ${new Date().toLocaleTimeString()}`);
  }, 2000);
}

// actionButton is a job's cancel (running or pending) or delete button,
// offered only when the user's role may (raftps.identity.can).
function actionButton(j) {
  const act = j.state === "running" || j.state === "pending" ? "cancel" : "delete";
  return raftps.identity.can[act] ? `<button class="danger" data-act="${act}">${act}</button>` : "";
}

function renderJobs(jobs) {
  $("#jobs").innerHTML =
    `<tr><th>job</th><th>state</th><th>pass</th><th>progress</th><th>accuracy</th><th>model</th><th>trainers</th><th>submitted</th><th></th></tr>` +
    jobs.map((j) => `<tr data-job="${esc(j.name)}"><td><a href="#/jobs/${encodeURIComponent(j.name)}">${esc(j.name)}</a></td><td>${pill(j.state)}</td>
      <td>${Math.min(j.pass + 1, j.passes)} / ${j.passes}</td><td><span class="bar"><span style="width:${(100 * j.progress).toFixed(1)}%"></span></span> ${(100 * j.progress).toFixed(0)}%</td>
      <td>${pct(j.accuracy)}</td><td>${esc(j.model)}</td><td>${j.trainers.length}</td><td>${fmtTime(j.submitted)}</td>
      <td>${actionButton(j)}</td></tr>`).join("");
  $("#jobs").querySelectorAll("button[data-act]").forEach((b) => {
    b.onclick = async () => {
      const name = b.closest("tr").dataset.job, act = b.dataset.act;
      if (!confirm(`${act} job ${name}?`)) return;
      try { await post(`api/jobs/${encodeURIComponent(name)}/${act}`); $("#jobs-msg").textContent = ""; }
      catch (e) { $("#jobs-msg").textContent = `${act} ${name}: ${e.message}`; }
    };
  });
}

// ---- one job ----

// Timeline categories (y values of the timeline chart).
const TL = [
  { name: "node down/up", color: "#c0392b" },
  { name: "leader change", color: "#8e44ad" },
  { name: "requeue / task failed", color: "#d35400" },
  { name: "pserver restore", color: "#2b6cb0" },
  { name: "rollback", color: "#16a085" },
  { name: "checkpoint", color: "#7f8c8d" },
];

function newJobState(name) {
  return {
    name,
    t0: 0, t1: 0, // x range (Unix s)
    loss: [[], []],
    acc: [[], []],
    rate: [[], []],
    queue: [[], [], [], [], []],
    // trainerRate: examples/s of each trainer (its own 5 s window), one
    // series per trainer (trainers: their names, in order of appearance)
    // on the x of every task_done.
    trainers: [],
    trainerRate: [[]],
    trainerRecent: {}, // trainer -> examples in its rate window: [{t, n}]
    // One clock on the page: wall time. Job events carry their proposer's
    // wall clock (fsm/jobq: not the replicated clock, which lags by every
    // leaderless period), node and leader changes this node's.
    timeline: [], // job events: {t (s), cat, label}
    clusterTL: [], // node and leader changes: {wall (ms), cat, label}
    recent: [], // examples in the rate window: {t, n}
    log: [], // notable events, newest last
    promotions: {}, // slot -> its latest pserver_promoted: {t (s), node, took, message}
    status: null,
    pending: [], // live events waiting for a render, for latency
    dirty: false,
    opened: Date.now(),
  };
}

function jobView(name) {
  raftps.view = "job";
  const st = newJobState(name);
  raftps.job = st;
  raftps.events = [];
  $("#main").innerHTML = `<h1>Job <span id="job-name">${esc(name)}</span> <span id="job-state"></span></h1>
    <div class="cards" id="job-cards"></div>
    <div class="grid charts">
      <section><h2>Training loss (per task)</h2><div id="ch-loss"></div></section>
      <section><h2>Test accuracy (per pass)</h2><div id="ch-acc"></div></section>
      <section><h2>Examples / s</h2><div id="ch-rate"></div></section>
      <section><h2>Task queue</h2><div id="ch-queue"></div></section>
      <section><h2>Examples / s per trainer</h2><div id="ch-trainers"></div></section>
    </div>
    <section><h2>Faults and recovery (same time axis)</h2><div id="ch-timeline"></div></section>
    <div class="grid">
      <section><h2>pservers</h2><table id="pservers"></table><h2 style="margin-top:10px">trainers</h2><div id="trainers"></div></section>
      <section><h2>Restores</h2><table id="restores"></table></section>
    </div>
    <section><h2>Replicas</h2><div id="replicas-note"></div><table id="replicas"></table></section>
    <section><h2>Checkpoints</h2><table id="checkpoints"></table></section>
    <section><h2>Events</h2><table id="log"></table></section>`;
  makeJobCharts(st);
  const es = new EventSource(`api/jobs/${encodeURIComponent(name)}/events`);
  es.addEventListener("status", (m) => { st.status = JSON.parse(m.data); onStatus(st); schedule(st); });
  es.addEventListener("job", (m) => { onJobEvent(st, JSON.parse(m.data)); schedule(st); });
  es.addEventListener("cluster", (m) => { onClusterEvent(st, JSON.parse(m.data)); schedule(st); });
  es.addEventListener("gone", () => { setConn("job deleted"); es.close(); });
  es.onopen = () => setConn("live");
  es.onerror = () => setConn("reconnecting…");
  const tick = setInterval(() => { st.dirty = true; schedule(st); }, 1000); // the x range follows the clock
  const onResize = () => sizeCharts();
  window.addEventListener("resize", onResize);
  stopView = () => {
    es.close();
    clearInterval(tick);
    window.removeEventListener("resize", onResize);
    for (const k in raftps.charts) raftps.charts[k].destroy();
    raftps.charts = {};
  };
}

function chartWidth(id) {
  const el = document.getElementById(id);
  return Math.max(300, (el && el.clientWidth) || 600);
}

function sizeCharts() {
  for (const [id, u] of Object.entries(raftps.charts)) u.setSize({ width: chartWidth("ch-" + id), height: u.height });
}

function makeJobCharts(st) {
  const xr = () => [st.t0 || null, st.t1 || null];
  const sync = { key: "job", setSeries: false };
  const base = (id, height, extra) =>
    Object.assign({ width: chartWidth(id), height, cursor: { sync }, scales: { x: { time: true, range: (u, min, max) => (st.t0 ? xr() : [min, max]) } }, legend: { live: true } }, extra);
  const mk = (key, opts, data) => (raftps.charts[key] = new uPlot(opts, data, document.getElementById("ch-" + key)));
  mk("loss", base("ch-loss", 220, { series: [{}, { label: "loss", stroke: "#2b6cb0", width: 1, points: { show: false } }] }), st.loss);
  // Accuracy: the y axis fits the points (83-86% fills the chart), a
  // 2-point margin, within 0-100%.
  const accRange = (u, min, max) => (min === null ? [0, 1] : [Math.max(0, min - 0.02), Math.min(1, max + 0.02)]);
  mk("acc", base("ch-acc", 220, {
    scales: { x: { time: true, range: () => xr() }, y: { range: accRange } },
    series: [{}, { label: "test accuracy", stroke: "#1f8a4c", width: 2, points: { show: true, size: 8 }, value: (u, v) => pct(v) }],
    axes: [{}, { values: (u, vals) => vals.map((v) => (100 * v).toFixed(0) + "%") }],
  }), st.acc);
  mk("rate", base("ch-rate", 180, { series: [{}, { label: "examples/s", stroke: "#b7791f", width: 1, points: { show: false } }] }), st.rate);
  mk("queue", base("ch-queue", 180, {
    series: [{}, { label: "todo", stroke: "#7f8c8d", width: 2 }, { label: "pending", stroke: "#d35400", width: 2 }, { label: "done", stroke: "#1f8a4c", width: 2 }, { label: "failed", stroke: "#c0392b", width: 2 }],
  }), st.queue);
  makeTrainerChart(st);
  const tlSeries = [{}].concat(TL.map((c) => ({ label: c.name, stroke: c.color, fill: c.color, width: 0, paths: () => null, points: { show: true, size: 10, fill: c.color } })));
  mk("timeline", base("ch-timeline", 200, {
    scales: { x: { time: true, range: () => xr() }, y: { range: [0.5, TL.length + 0.5] } },
    series: tlSeries,
    axes: [{}, { size: 140, splits: () => TL.map((_, i) => i + 1), values: (u, vals) => vals.map((v) => (TL[v - 1] ? TL[v - 1].name : "")) }],
  }), timelineData(st));
}

// trainerColors are the per-trainer series' strokes, in turn.
const trainerColors = ["#2b6cb0", "#b7791f", "#1f8a4c", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d", "#d35400"];

// makeTrainerChart (re)creates the per-trainer throughput chart with one
// series per trainer known so far (uPlot's series are fixed at creation
// in this layout; a new trainer recreates the chart).
function makeTrainerChart(st) {
  if (raftps.charts.trainers) raftps.charts.trainers.destroy();
  const el = document.getElementById("ch-trainers");
  el.innerHTML = "";
  const xr = () => [st.t0 || null, st.t1 || null];
  const series = [{}].concat(st.trainers.map((name, i) => ({ label: name, stroke: trainerColors[i % trainerColors.length], width: 1, spanGaps: true, points: { show: false } })));
  raftps.charts.trainers = new uPlot({ width: chartWidth("ch-trainers"), height: 180, cursor: { sync: { key: "job", setSeries: false } },
    scales: { x: { time: true, range: (u, min, max) => (st.t0 ? xr() : [min, max]) } }, legend: { live: true }, series }, st.trainerRate, el);
  st.trainerSeries = st.trainers.length;
}

// addTrainerRate adds a task_done of trainer (n examples at t, s) to its
// 5 s window and a point to the per-trainer chart's data.
function addTrainerRate(st, trainer, t, n) {
  if (!trainer) return;
  let i = st.trainers.indexOf(trainer);
  if (i < 0) {
    st.trainers.push(trainer);
    st.trainerRate.push(st.trainerRate[0].map(() => null));
    i = st.trainers.length - 1;
  }
  const w = (st.trainerRecent[trainer] = st.trainerRecent[trainer] || []);
  w.push({ t, n });
  while (w.length && w[0].t < t - 5) w.shift();
  if (w.length < 2) return;
  const span = Math.max(t - w[0].t, 1);
  st.trainerRate[0].push(t);
  st.trainers.forEach((_, k) => st.trainerRate[k + 1].push(k === i ? w.reduce((a, r) => a + r.n, 0) / span : null));
}

// timelineData aligns the timeline's events on one x array (uPlot's data
// layout), one series per category.
function timelineData(st) {
  const evs = st.timeline.concat(st.clusterTL.map((c) => ({ t: c.wall / 1000, cat: c.cat, label: c.label }))).sort((a, b) => a.t - b.t);
  const xs = [], ys = TL.map(() => []);
  for (const e of evs) {
    xs.push(e.t);
    TL.forEach((_, i) => ys[i].push(i === e.cat ? i + 1 : null));
  }
  return [xs].concat(ys);
}

function addTimeline(st, t, cat, label) { // t: s
  st.timeline.push({ t, cat, label });
  st.log.push({ t, label, cat });
}

function onStatus(st) {
  const s = st.status;
  if (!st.t0 && s.submitted) st.t0 = s.submitted / 1000;
  const q = st.queue;
  // The queue as submitted (every task todo) starts the lines; after the
  // end, the queue as it ended, at the end.
  if (!q[0].length && s.submitted) {
    q[0].push(s.submitted / 1000); q[1].push(s.total_tasks); q[2].push(0); q[3].push(0); q[4].push(0);
  }
  if (st.queueEnded) return; // an ended job's repeated status
  st.queueEnded = !!s.finished;
  const last = q[0][q[0].length - 1] || 0;
  q[0].push(Math.max(s.finished ? s.finished / 1000 : Date.now() / 1000, last + 0.001)); q[1].push(s.todo); q[2].push(s.pending); q[3].push(s.done); q[4].push(s.failed);
  st.dirty = true;
}

function onJobEvent(st, e) {
  raftps.events.push(e);
  const now = Date.now();
  raftps.arrived[e.seq] = now;
  st.pending.push(e);
  const t = e.time / 1000;
  switch (e.type) {
    case "job_submitted":
      if (!st.t0) st.t0 = t;
      break;
    case "task_done":
      if (e.loss || e.loss === 0) { st.loss[0].push(t); st.loss[1].push(e.loss); }
      st.recent.push({ t, n: e.examples || 0 });
      while (st.recent.length && st.recent[0].t < t - 5) st.recent.shift();
      if (st.recent.length > 1) {
        const span = Math.max(t - st.recent[0].t, 1);
        st.rate[0].push(t); st.rate[1].push(st.recent.reduce((a, r) => a + r.n, 0) / span);
      }
      addTrainerRate(st, e.trainer, t, e.examples || 0);
      break;
    case "eval_reported":
      st.acc[0].push(t); st.acc[1].push(e.accuracy);
      st.log.push({ t, label: `pass ${e.pass} test accuracy ${pct(e.accuracy)}` });
      break;
    case "task_requeued":
    case "task_failed":
      addTimeline(st, t, 2, `${e.type.replace("_", " ")}: task ${e.task}${e.trainer ? " (" + e.trainer + ")" : ""} ${e.message || ""}`);
      break;
    case "pserver_restored":
      if (/rolled back/.test(e.message)) addTimeline(st, t, 4, `rollback: ${e.message}`);
      else addTimeline(st, t, 3, `restore: ${e.message}`);
      break;
    case "pserver_promoted": {
      // "slot 0 on n2: backup promoted at epoch 9, version 120, step 60, in 35ms (no restore, no rollback)"
      const m = /^slot (\d+) on ([^:]+):.* in (\S+) \(/.exec(e.message || "");
      if (m) st.promotions[m[1]] = { t, node: m[2], took: m[3], message: e.message };
      st.log.push({ t, label: `promotion: ${e.message}` });
      break;
    }
    case "checkpoint_committed":
      st.timeline.push({ t, cat: 5, label: e.message });
      break;
    case "trainer_left":
      st.log.push({ t, label: `trainer ${e.trainer} left ${e.message || ""}` });
      break;
    case "trainer_joined":
      st.log.push({ t, label: `trainer ${e.trainer} joined` });
      break;
    case "pass_ended":
      st.log.push({ t, label: `pass ${e.pass} ended` });
      break;
    case "job_ended":
      st.log.push({ t, label: `job ended ${e.message || ""}` });
      break;
  }
  st.dirty = true;
}

function onClusterEvent(st, e) {
  raftps.clusterEvents.push(e);
  if (st.status && e.time < st.status.submitted) return; // before the job
  const cat = e.kind === "member" ? 0 : 1;
  st.clusterTL.push({ wall: e.time, cat, label: e.message });
  st.log.push({ wall: e.time, label: e.message });
  st.dirty = true;
}

// schedule coalesces renders into one per animation frame.
function schedule(st) {
  if (st.frame) return;
  st.frame = requestAnimationFrame(() => {
    st.frame = 0;
    renderJob(st);
  });
}

function renderJob(st) {
  if (raftps.job !== st || !raftps.charts.loss) return;
  const s = st.status;
  const ended = s && s.finished;
  st.t1 = ended ? Math.max(s.finished / 1000, lastX(st)) : Math.max(Date.now() / 1000, lastX(st));
  if (st.dirty) {
    if (st.trainerSeries !== st.trainers.length) makeTrainerChart(st);
    raftps.charts.loss.setData(st.loss);
    raftps.charts.acc.setData(st.acc);
    raftps.charts.rate.setData(st.rate);
    raftps.charts.queue.setData(st.queue);
    raftps.charts.trainers.setData(st.trainerRate);
    raftps.charts.timeline.setData(timelineData(st));
    st.dirty = false;
  }
  for (const u of Object.values(raftps.charts)) showLatest(u);
  if (s) renderJobTables(st);
  const now = Date.now();
  for (const e of st.pending) raftps.rendered[e.seq] = now;
  st.pending = [];
}

// showLatest makes a chart's legend show its newest point (time and
// values) while the cursor is off the chart: uPlot's live legend shows
// "--" then, which read "Time: --" on every chart.
function showLatest(u) {
  if (u.cursor.left >= 0) return; // the user is pointing at a time
  const xs = u.data[0] || [];
  if (xs.length) u.setLegend({ idx: xs.length - 1 });
}

// logTime is a log entry's time (wall clock, ms).
function logTime(st, l) {
  return l.wall ? l.wall : l.t * 1000;
}

function lastX(st) {
  const last = (a) => (a.length ? a[a.length - 1] : 0);
  return Math.max(last(st.loss[0]), last(st.queue[0]), last(st.trainerRate[0]), st.timeline.length ? last(st.timeline).t : 0,
    st.clusterTL.length ? last(st.clusterTL).wall / 1000 : 0);
}

function renderJobTables(st) {
  const s = st.status;
  $("#job-state").innerHTML = pill(s.state);
  $("#job-cards").innerHTML = `
    <div class="card"><div class="k">pass</div><div class="v">${Math.min(s.pass + 1, s.passes)} / ${s.passes}</div></div>
    <div class="card"><div class="k">progress</div><div class="v">${(100 * s.progress).toFixed(0)}%</div></div>
    <div class="card"><div class="k">test accuracy</div><div class="v" id="job-acc">${pct(s.accuracy)}</div></div>
    <div class="card"><div class="k">tasks todo / pending / done / failed</div><div class="v">${s.todo} / ${s.pending} / ${s.done} / ${s.failed}</div></div>
    <div class="card"><div class="k">requeued / timeouts</div><div class="v">${s.requeued} / ${s.timeouts}</div></div>
    <div class="card"><div class="k">model</div><div class="v" style="font-size:14px">${esc(s.model)}<br>${esc(s.mode)}, ${s.num_pservers} pservers</div></div>` +
    (s.message ? `<div class="card"><div class="k">message</div><div class="v" style="font-size:13px">${esc(s.message)}</div></div>` : "");
  $("#pservers").innerHTML = `<tr><th>slot</th><th>node</th><th>address</th><th>incarnation</th></tr>` +
    s.pservers.map((p) => `<tr><td>${p.slot}</td><td>${esc(p.node)}</td><td>${esc(p.addr)}</td><td>${p.incarnation}</td></tr>`).join("");
  renderReplicas(st);
  $("#trainers").textContent = s.trainers.length ? s.trainers.join(", ") : "none";
  $("#restores").innerHTML = `<tr><th>time</th><th>slot</th><th>version</th><th>md5</th><th>source</th><th>reason</th></tr>` +
    s.restores.map((r) => `<tr><td>${fmtTime(r.time)}</td><td>${r.slot}</td><td>${fmtVersion(r.version)}</td><td class="md5">${esc(r.md5)}</td><td>${esc(r.source)}</td><td class="wrap">${esc(r.reason)}</td></tr>`).join("");
  const table = $("#checkpoints");
  const keep = {};
  table.querySelectorAll("td[data-verify]").forEach((td) => (keep[td.dataset.verify] = td.innerHTML));
  table.innerHTML = `<tr><th>version</th><th>step</th><th>time</th><th>slots</th><th>md5 (per slot)</th><th>replicas</th><th>bytes</th><th>accuracy</th><th>best</th><th></th></tr>` +
    s.checkpoints.map((c) => `<tr><td>${fmtVersion(c.version)}</td><td>${c.step}</td><td>${c.time ? fmtTime(c.time) : "kept"}</td><td>${c.slots}</td>
      <td class="md5 wrap">${c.md5s.map(esc).join("<br>")}</td><td>${esc(c.replicas.join(","))}</td><td>${c.bytes || "–"}</td><td>${pct(c.accuracy)}</td>
      <td>${c.best ? "★" : ""}</td><td data-verify="${c.version}">${keep[c.version] || (raftps.identity.can.verify ? `<button data-v="${c.version}">verify</button>` : "")}</td></tr>`).join("");
  table.querySelectorAll("button[data-v]").forEach((b) => {
    b.onclick = async () => {
      const td = b.parentElement;
      td.textContent = "verifying…";
      try {
        const r = await post(`api/jobs/${encodeURIComponent(st.name)}/checkpoints/${b.dataset.v}/verify`);
        td.innerHTML = r.ok ? pill("ok") + ` ${r.took_ms} ms` : `<span class="err">${r.mismatches.length} mismatches: ${esc(r.mismatches.map((m) => `${m.node} slot ${m.slot} ${m.problem}`).join("; "))}</span>`;
      } catch (e) { td.innerHTML = `<span class="err">${esc(e.message)}</span>`; }
    };
  });
  $("#log").innerHTML = `<tr><th>time</th><th>event</th></tr>` +
    st.log.slice().sort((a, b) => logTime(st, a) - logTime(st, b)).slice(-40).reverse().map((l) => `<tr><td>${fmtTime(logTime(st, l))}</td><td class="wrap">${esc(l.label)}</td></tr>`).join("");
}

// renderReplicas shows each replicated slot's primary, in-sync backups,
// epoch and replication lag (from the status), and its latest promotion
// with how long it took (from the job's events).
function renderReplicas(st) {
  const s = st.status;
  $("#replicas-note").textContent = `${s.replicas || 1} per pserver slot` + (s.replicas_default ? ` (default: ${s.replicas_default})` : "");
  $("#replicas").innerHTML = `<tr><th>slot</th><th>primary</th><th>backups (in sync)</th><th>epoch</th><th>lag (updates)</th><th>latest promotion</th></tr>` +
    s.replica_slots.map((r) => {
      const p = st.promotions[r.slot];
      const promo = p ? `${fmtTime(p.t * 1000)} to ${esc(p.node)}, took ${esc(p.took)}` : "none";
      return `<tr data-slot="${r.slot}"><td>${r.slot}</td><td class="primary">${esc(r.primary)}</td><td class="backups">${esc(r.backups.join(", ") || "none")}</td>` +
        `<td class="epoch">${r.epoch}</td><td class="lag">${r.lag === null || r.lag === undefined ? "?" : r.lag}</td><td class="promotion">${promo}</td></tr>`;
    }).join("");
}

// The identity is asked once: a certificate does not change within a page.
(async () => {
  try {
    raftps.identity = await api("api/identity");
    if (raftps.identity.tls) $("#who").textContent = `${raftps.identity.name} (${raftps.identity.role || "no role"})`;
  } catch (e) { setConn("error: " + e.message); }
  route();
})();
