// Tessera's dashboard: overview, queues, jobs with pending reasons, nodes with a GPU/MIG map.
// Plain TypeScript over the REST API; refreshes every few seconds while "live" is ticked.
import "./style.css";
import { Api, ApiError, milli } from "./api";
import type { AllocationView, JobView, NodeView, QueueView } from "./api";

// ?refresh=MS (at least 500; anything else, e.g. "5s", is the default: never a tight loop).
const REFRESH_MS = (() => {
  const v = Number(new URLSearchParams(location.search).get("refresh") ?? 3000);
  return Number.isFinite(v) && v >= 500 ? v : 3000;
})();
const TOKEN_KEY = "tessera.token";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;

function esc(s: unknown): string {
  return String(s ?? "").replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
function gpus(m: number): string {
  const v = m / 1000;
  return Number.isInteger(v) ? String(v) : v.toFixed(2);
}
function age(seconds: number): string {
  if (seconds < 0) return "-";
  if (seconds < 120) return `${seconds}s`;
  if (seconds < 7200) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 172800) return `${Math.floor(seconds / 3600)}h`;
  return `${Math.floor(seconds / 86400)}d`;
}

// The token: from #token=... once (then kept in local storage and removed from the URL).
function takeToken(): string {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    localStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return localStorage.getItem(TOKEN_KEY) ?? "";
}

function renderCards(jobs: JobView[], queues: QueueView[], nodes: NodeView[]) {
  const ready = nodes.filter((n) => n.ready).length;
  const total = nodes.reduce((s, n) => s + n.gpus, 0);
  const used = nodes.reduce((s, n) => s + n.gpuMilliInUse, 0);
  const virt = nodes.reduce((s, n) => s + n.devices.filter((d) => d.virtual).length, 0);
  const count = (st: string) => jobs.filter((j) => j.state === st).length;
  const cards: [string, string, string][] = [
    ["Nodes ready", `${ready} / ${nodes.length}`, ready < nodes.length ? "warn" : ""],
    ["GPUs allocated", `${gpus(used)} / ${total}`, ""],
    ["GPU allocation", total ? `${Math.round((used / 10 / total) * 1) / 1}%` : "-", ""],
    ["Jobs running", String(count("Running") + count("Scheduled")), ""],
    ["Jobs pending", String(count("Pending")), count("Pending") ? "warn" : ""],
    ["Queues", String(queues.length), ""],
  ];
  if (virt) cards.push(["Virtual GPUs", String(virt), "muted"]);
  $("cards").innerHTML = cards
    .map(
      ([k, v, cls]) =>
        `<div class="card ${cls}" data-card="${esc(k)}"><div class="v">${esc(v)}</div><div class="k">${esc(k)}</div></div>`,
    )
    .join("");
}

function renderQueues(queues: QueueView[], clusterGpuMilli: number) {
  const scale = Math.max(
    clusterGpuMilli,
    ...queues.map((q) => Math.max(q.gpuMilliInUse, milli(q.guarantee?.["nvidia.com/gpu"]), milli(q.limit?.["nvidia.com/gpu"]))),
    1,
  );
  const pct = (m: number) => `${((m / scale) * 100).toFixed(1)}%`;
  const rows = queues.map((q) => {
    const g = milli(q.guarantee?.["nvidia.com/gpu"]);
    // A limit of 0 GPUs caps nothing (a limit on CPUs alone), as `get queues` says <none>.
    const l = q.limit && milli(q.limit["nvidia.com/gpu"]) > 0 ? milli(q.limit["nvidia.com/gpu"]) : -1;
    const use = q.gpuMilliInUse;
    const over = l >= 0 && use > l;
    const bar =
      `<div class="share" title="in use ${gpus(use)}, guarantee ${gpus(g)}${l >= 0 ? `, limit ${gpus(l)}` : ""}">` +
      `<div class="use ${use > g ? "borrowing" : ""} ${over ? "over" : ""}" style="width:${pct(use)}"></div>` +
      `<div class="mark guarantee" style="left:${pct(g)}"></div>` +
      (l >= 0 ? `<div class="mark limit" style="left:${pct(l)}"></div>` : "") +
      `</div>`;
    return `<tr data-queue="${esc(q.name)}"><td>${esc(q.parent ? `${q.parent}/${q.name}` : q.name)}</td><td>${q.weight}</td>
      <td>${gpus(use)}</td><td>${gpus(g)}</td><td>${l >= 0 ? gpus(l) : "∞"}</td>
      <td>${q.runningJobs}</td><td>${q.pendingJobs}</td><td class="bar">${bar}</td></tr>`;
  });
  $("queue-table").innerHTML = `<table><thead><tr><th>queue</th><th>weight</th><th>GPUs in use</th>
    <th>guarantee</th><th>limit</th><th>running</th><th>pending</th>
    <th>share <span class="legend"><i class="g"></i>guarantee <i class="l"></i>limit</span></th></tr></thead>
    <tbody>${rows.join("") || `<tr><td colspan="8" class="muted">no queues</td></tr>`}</tbody></table>`;
}

// Waits the user chose: listed after the jobs the scheduler keeps waiting (a held array of
// thousands must not push running and stuck jobs out of the table).
const CHOSEN_WAITS = new Set(["Held", "Dependency", "DependencyNeverSatisfied", "JobArrayTaskLimit"]);
const MAX_ROWS = 500;

function reasonCode(j: JobView): string {
  const r = j.pendingReason;
  return r ? (r.infeasible ? "Infeasible" : r.code) : "";
}

// Running first (newest first), then stuck pending jobs (longest waiting first), then waits
// the user chose, then finished jobs.
function jobRank(j: JobView): number {
  if (j.state === "Running" || j.state === "Scheduled") return 0;
  if (j.state === "Terminating") return 1;
  if (j.state === "Pending") return CHOSEN_WAITS.has(j.pendingReason?.code ?? "") ? 3 : 2;
  return 4;
}

function renderJobs(jobs: JobView[], now: number) {
  const filter = ($<HTMLInputElement>("job-filter")?.value ?? "").trim().toLowerCase();
  const matching = filter
    ? jobs.filter((j) =>
        [j.name, j.queue, j.state, reasonCode(j), j.priorityClass].some((f) => f.toLowerCase().includes(filter)),
      )
    : jobs;
  const sorted = [...matching].sort((a, b) => {
    const ra = jobRank(a), rb = jobRank(b);
    if (ra !== rb) return ra - rb;
    const when = ra === 2 || ra === 3 ? a.createdAt - b.createdAt : b.createdAt - a.createdAt;
    return when || a.name.localeCompare(b.name);
  });
  const rows = sorted.slice(0, MAX_ROWS).map((j) => {
    const r = j.pendingReason;
    // The job's own message says what happened to it (e.g. who reclaimed it), beside why it
    // waits now.
    const note = r && j.message ? `<div class="reason-note muted">${esc(j.message)}</div>` : "";
    const reason = r
      ? `<span class="reason-code">${esc(reasonCode(j))}</span> <span class="reason-msg">${esc(r.message)}</span>${note}`
      : esc(j.message ?? "");
    return `<tr data-job="${esc(j.name)}"><td>${esc(j.name)}</td><td>${esc(j.queue)}</td>
      <td><span class="state ${esc(j.state.toLowerCase())}">${esc(j.state)}</span></td>
      <td>${esc(j.priorityClass)}</td><td>${j.runningTasks ?? 0}/${j.tasks}</td><td>${esc(j.gpus ?? "")}</td>
      <td>${esc((j.nodes ?? []).join(", "))}</td><td>${age(now - j.createdAt)}</td><td class="reason">${reason}</td></tr>`;
  });
  $("job-table").innerHTML = `<table><thead><tr><th>job</th><th>queue</th><th>state</th><th>priority</th>
    <th>tasks</th><th>GPUs</th><th>nodes</th><th>age</th><th>reason</th></tr></thead>
    <tbody>${rows.join("") || `<tr><td colspan="9" class="muted">no jobs</td></tr>`}</tbody></table>` +
    (sorted.length > MAX_ROWS
      ? `<p class="muted">showing ${MAX_ROWS} of ${sorted.length}${filter ? " matching" : ""}: type in the filter to narrow</p>`
      : "");
}

function renderNodes(nodes: NodeView[]) {
  $("node-map").innerHTML =
    nodes
      .map((n) => {
        // Who holds what on each device: milli-GPU and MIG instances, by job.
        const byDevice = new Map<number, { milli: number; jobs: Set<string>; mig: Map<number, string> }>();
        for (const a of n.allocations ?? ([] as AllocationView[])) {
          for (const d of a.placement.devices ?? []) {
            const e = byDevice.get(d.device) ?? { milli: 0, jobs: new Set<string>(), mig: new Map<number, string>() };
            e.milli += d.milli ?? 1000;
            const holder = a.job ?? "another queue's job";
            e.jobs.add(holder);
            if (d.migInstance !== undefined && d.migInstance >= 0) e.mig.set(d.migInstance, holder);
            byDevice.set(d.device, e);
          }
        }
        const devices = n.devices
          .map((d) => {
            const e = byDevice.get(d.index);
            const used = Math.min(e?.milli ?? 0, 1000);
            const jobs = [...(e?.jobs ?? [])].sort().join(", ");
            const mig = (d.mig ?? [])
              .map((m, i) => {
                const holder = e?.mig.get(i);
                const what = `${esc(m.profile)}${holder ? ` — ${esc(holder)}` : " — free"}`;
                return `<span class="mig ${holder ? "taken" : ""}" tabindex="0" role="img" aria-label="MIG ${what}" title="${what}">${esc(m.profile)}</span>`;
              })
              .join("");
            const cls = [used >= 1000 ? "full" : used > 0 ? "partial" : "free", d.healthy === false ? "unhealthy" : "", d.virtual ? "virtual" : ""].join(" ");
            // A node that does not report has no current utilisation to show.
            const util = n.ready ? `${d.utilPercent ?? 0}% util` : "not reporting";
            const said = `GPU ${d.index}, ${esc(d.model)}, ${gpus(used)} allocated${jobs ? ` to ${esc(jobs)}` : ", free"}, ${util}`;
            return `<div class="gpu ${cls}" data-gpu="${d.index}" tabindex="0" role="img" aria-label="${said}" title="${esc(d.model)} ${esc(d.uuid ?? "")}${jobs ? `\n${esc(jobs)}` : ""}">
              <div class="fill" style="height:${used / 10}%"></div>
              <div class="label">GPU ${d.index}<br><small>${esc(d.model)}</small><br><small>${util}${d.virtual ? " · virtual" : ""}</small></div>
              ${mig ? `<div class="migs">${mig}</div>` : ""}</div>`;
          })
          .join("");
        const state = !n.ready ? "NotReady" : n.unschedulable ? "Cordoned" : "Ready";
        return `<div class="node ${n.ready ? "" : "notready"}" data-node="${esc(n.name)}">
          <div class="node-head"><b>${esc(n.name)}</b> <span class="muted">${esc(n.pool)} · ${esc(n.cpu)} CPU · ${esc(n.memory)}</span>
          <span class="state ${state.toLowerCase()}">${state}</span> <span class="muted">${gpus(n.gpuMilliInUse)} / ${n.gpus} GPUs</span></div>
          <div class="gpus">${devices || `<span class="muted">no GPUs</span>`}</div></div>`;
      })
      .join("") || `<p class="muted">No nodes have registered yet (agents call POST /v1/agents/register).</p>`;
}

let timer: number | undefined;

async function refresh(api: Api) {
  try {
    const [jobs, queues, nodes] = await Promise.all([api.jobs(), api.queues(), api.nodes()]);
    const now = Math.floor(Date.now() / 1000);
    renderCards(jobs, queues, nodes);
    renderQueues(queues, nodes.reduce((s, n) => s + n.gpus * 1000, 0));
    lastJobs = jobs;
    renderJobs(jobs, now);
    renderNodes(nodes);
    $("status").textContent = `updated ${new Date().toLocaleTimeString()}`;
    $("status").className = "status ok";
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      localStorage.removeItem(TOKEN_KEY);
      showLogin("That token was not accepted.");
      return;
    }
    $("status").textContent = `error: ${(e as Error).message}`;
    $("status").className = "status error";
  }
  if ($<HTMLInputElement>("live").checked) timer = window.setTimeout(() => refresh(api), REFRESH_MS);
}

let lastJobs: JobView[] = [];

function start(token: string) {
  $("login").hidden = true;
  $("app").hidden = false;
  const api = new Api(token);
  $<HTMLInputElement>("job-filter").oninput = () => renderJobs(lastJobs, Math.floor(Date.now() / 1000));
  $<HTMLInputElement>("live").onchange = (ev) => {
    window.clearTimeout(timer);
    if ((ev.target as HTMLInputElement).checked) refresh(api);
  };
  refresh(api);
}

function showLogin(error = "") {
  window.clearTimeout(timer);
  $("app").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = error;
  $("status").textContent = "signed out";
}

$("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const t = $<HTMLInputElement>("token").value.trim();
  if (!t) return;
  localStorage.setItem(TOKEN_KEY, t);
  start(t);
});

const token = takeToken();
if (token) start(token);
else showLogin();
