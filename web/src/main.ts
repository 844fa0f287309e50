// Tessera's dashboard: overview, queues, jobs with pending reasons, nodes with a GPU/MIG map.
// Plain TypeScript over the REST API; refreshes every few seconds while "live" is ticked.
import "./style.css";
import { Api, ApiError, milli } from "./api";
import type { AllocationView, JobView, NodeView, QueueView } from "./api";

const REFRESH_MS = Number(new URLSearchParams(location.search).get("refresh") ?? 3000);
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
    const l = q.limit ? milli(q.limit["nvidia.com/gpu"]) : -1;
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

function renderJobs(jobs: JobView[], now: number) {
  const order: Record<string, number> = { Pending: 0, Scheduled: 1, Running: 1, Terminating: 2 };
  const sorted = [...jobs].sort(
    (a, b) => (order[a.state] ?? 3) - (order[b.state] ?? 3) || b.createdAt - a.createdAt || a.name.localeCompare(b.name),
  );
  const rows = sorted.slice(0, 500).map((j) => {
    const r = j.pendingReason;
    const reason = r
      ? `<span class="reason-code">${esc(r.code)}</span> <span class="reason-msg">${esc(r.message)}</span>`
      : esc(j.message ?? "");
    return `<tr data-job="${esc(j.name)}"><td>${esc(j.name)}</td><td>${esc(j.queue)}</td>
      <td><span class="state ${esc(j.state.toLowerCase())}">${esc(j.state)}</span></td>
      <td>${esc(j.priorityClass)}</td><td>${j.runningTasks ?? 0}/${j.tasks}</td><td>${esc(j.gpus ?? "")}</td>
      <td>${esc((j.nodes ?? []).join(", "))}</td><td>${age(now - j.createdAt)}</td><td class="reason">${reason}</td></tr>`;
  });
  $("job-table").innerHTML = `<table><thead><tr><th>job</th><th>queue</th><th>state</th><th>priority</th>
    <th>tasks</th><th>GPUs</th><th>nodes</th><th>age</th><th>reason</th></tr></thead>
    <tbody>${rows.join("") || `<tr><td colspan="9" class="muted">no jobs</td></tr>`}</tbody></table>` +
    (sorted.length > 500 ? `<p class="muted">showing 500 of ${sorted.length}</p>` : "");
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
                return `<span class="mig ${holder ? "taken" : ""}" title="${esc(m.profile)}${holder ? ` — ${esc(holder)}` : " — free"}">${esc(m.profile)}</span>`;
              })
              .join("");
            const cls = [used >= 1000 ? "full" : used > 0 ? "partial" : "free", d.healthy === false ? "unhealthy" : "", d.virtual ? "virtual" : ""].join(" ");
            return `<div class="gpu ${cls}" data-gpu="${d.index}" title="${esc(d.model)} ${esc(d.uuid ?? "")}${jobs ? `\n${esc(jobs)}` : ""}">
              <div class="fill" style="height:${used / 10}%"></div>
              <div class="label">GPU ${d.index}<br><small>${esc(d.model)}</small><br><small>${d.utilPercent ?? 0}% util${d.virtual ? " · virtual" : ""}</small></div>
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

function start(token: string) {
  $("login").hidden = true;
  $("app").hidden = false;
  const api = new Api(token);
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
