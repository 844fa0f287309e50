// ctest web_dashboard: the dashboard in a real headless Chromium (Debian's chromium driven by
// playwright-core) against a running `tessera server`. Two fake agents register nodes (one
// with a MIG layout) and heartbeat; jobs are submitted; the page must show the cluster, the
// queues, the running jobs, and the pending job with the engine's reason, and must pick up
// a job submitted after it loaded (live refresh) without a reload. A screenshot goes to
// $TESSERA_SCREENSHOT (docs/dashboard.png is made this way) or the temp folder.
// Exit 77 (skipped) when node modules, chromium, the server binary or web/dist are missing.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(HERE, "../..");
const SKIP = 77;
const skip = (why) => {
  console.log(`SKIP: ${why}`);
  process.exit(SKIP);
};

const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const BINARY = process.env.TESSERA_BINARY;
const DIST = join(ROOT, "web/dist");
if (!existsSync(CHROMIUM)) skip(`${CHROMIUM} not found (apt-get install chromium; scripts/deps.d/obs.list)`);
if (!BINARY || !existsSync(BINARY)) skip("TESSERA_BINARY is not set to a built tessera binary");
if (!existsSync(join(DIST, "index.html"))) skip("web/dist is not built (make web)");
let chromium;
try {
  ({ chromium } = await import("playwright-core"));
} catch {
  skip("playwright-core is not installed (make web runs npm ci in web/)");
}

const failures = [];
const check = (ok, what) => {
  console.log(`${ok ? "ok" : "FAIL"}: ${what}`);
  if (!ok) failures.push(what);
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const freePort = () =>
  new Promise((res) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });

const dataDir = mkdtempSync(join(tmpdir(), "tessera-web-"));
const port = await freePort();
const url = `http://127.0.0.1:${port}`;
const server = spawn(BINARY, ["server", "--data-dir", dataDir, "--listen", `127.0.0.1:${port}`], {
  cwd: ROOT,
  env: { ...process.env, TESSERA_WEB_DIR: DIST },
  stdio: ["ignore", "pipe", "pipe"],
});
let serverLog = "";
server.stdout.on("data", (d) => (serverLog += d));
server.stderr.on("data", (d) => (serverLog += d));
let browser;
let heartbeats;

async function cleanup() {
  clearInterval(heartbeats);
  if (browser) await browser.close().catch(() => {});
  server.kill("SIGTERM");
  for (let i = 0; i < 50 && server.exitCode === null && server.signalCode === null; i++) await sleep(100);
  if (server.exitCode === null && server.signalCode === null) server.kill("SIGKILL");
  rmSync(dataDir, { recursive: true, force: true });
}

async function api(method, path, token, body, type = "application/json") {
  const res = await fetch(url + path, {
    method,
    headers: { Authorization: `Bearer ${token}`, ...(body ? { "Content-Type": type } : {}) },
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : {};
}

try {
  let up = false;
  for (let i = 0; i < 300 && !up; i++) {
    up = await fetch(`${url}/healthz`).then((r) => r.ok, () => false);
    if (!up) await sleep(100);
  }
  if (!up) throw new Error(`server did not start:\n${serverLog}`);
  const admin = readFileSync(join(dataDir, "admin.token"), "utf8").trim();
  const agent = readFileSync(join(dataDir, "agent.token"), "utf8").trim();

  // Two nodes through the agent protocol: 8 virtual A100s, and 2 with a MIG layout on GPU 0.
  const a100 = (i, extra = {}) => ({ index: i, uuid: `GPU-${i}`, model: "A100-80GB", memory: "80Gi", virtual: true, ...extra });
  const nodes = [
    { name: "gpu-node-1", pool: "own", cpu: "64", memory: "512Gi", devices: [...Array(8).keys()].map((i) => a100(i, { uuid: `GPU-n1-${i}` })) },
    {
      name: "gpu-node-2", pool: "own", cpu: "32", memory: "256Gi",
      devices: [
        a100(0, { uuid: "GPU-n2-0", mig: [{ profile: "3g.40gb", start: 0 }, { profile: "2g.20gb", start: 4 }, { profile: "1g.10gb", start: 6 }] }),
        a100(1, { uuid: "GPU-n2-1" }),
      ],
    },
  ];
  const epochs = {};
  for (const node of nodes) {
    const r = await api("POST", "/v1/agents/register", agent, { node, agentVersion: "test", bootId: `boot-${node.name}` });
    epochs[node.name] = r.epoch;
  }
  // Heartbeats: every allocation the server wants is reported running; its devices are busy.
  const running = {};
  const busy = {};
  const beat = async () => {
    for (const node of nodes) {
      const tasks = (running[node.name] ?? []).map((a) => ({ allocation: a, state: "running", pid: 4242, startedAt: Math.floor(Date.now() / 1000) }));
      const devices = node.devices.map((d) => {
        const b = busy[node.name]?.has(d.index);
        return { index: d.index, utilPercent: b ? 87 : 0, memoryUsed: b ? 40 * 2 ** 30 : 0, powerMilliwatts: b ? 310000 : 60000, healthy: true };
      });
      try {
        const r = await api("POST", `/v1/agents/${node.name}/heartbeat`, agent, { epoch: epochs[node.name], devices, tasks });
        running[node.name] = (r.allocations ?? []).map((a) => a.allocation);
        busy[node.name] = new Set((r.allocations ?? []).flatMap((a) => (a.devices ?? []).map((d) => d.device)));
      } catch (e) {
        console.log(`heartbeat ${node.name}: ${e.message}`);
      }
    }
  };
  await beat();
  heartbeats = setInterval(beat, 1000);

  // Jobs: a gang that fits, a MIG pod, and one that can never fit (16 GPUs on one node).
  await api("POST", "/v1/jobs", admin, readFileSync(join(ROOT, "examples/seed/mig-pod.yaml"), "utf8"), "application/yaml");
  await api("POST", "/v1/jobs", admin, {
    apiVersion: "tessera.io/v1", kind: "Job", metadata: { name: "train-small" },
    spec: { queue: "training", tasks: [{ name: "worker", replicas: 2, resources: { cpu: 4, memory: "32Gi", "nvidia.com/gpu": 2 }, command: ["sleep", "3600"] }] },
  });
  await api("POST", "/v1/jobs", admin, {
    apiVersion: "tessera.io/v1", kind: "Job", metadata: { name: "too-big" },
    spec: { queue: "training", tasks: [{ name: "worker", replicas: 1, resources: { cpu: 8, memory: "64Gi", "nvidia.com/gpu": 16 }, command: ["sleep", "1"] }] },
  });
  let reason;
  for (let i = 0; i < 100 && !reason; i++) {
    reason = (await api("GET", "/v1/jobs/too-big", admin)).pendingReason;
    if (!reason) await sleep(200);
  }
  check(reason && reason.code, `the engine gave too-big a pending reason (${reason?.code}: ${reason?.message})`);
  for (let i = 0; i < 50; i++) {
    const j = await api("GET", "/v1/jobs/train-small", admin);
    if (j.state === "Running") break;
    await sleep(200);
  }

  // A fresh profile in the test's temp folder (Playwright passes it as --user-data-dir).
  browser = await chromium.launchPersistentContext(join(dataDir, "chromium"), {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1400, height: 1000 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = browser.pages()[0] ?? (await browser.newPage());
  const consoleErrors = [];
  page.on("console", (m) => m.type() === "error" && consoleErrors.push(m.text()));
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  await page.goto(`${url}/ui/?refresh=500#token=${encodeURIComponent(admin)}`);

  const row = page.locator('tr[data-job="too-big"]');
  await row.waitFor({ timeout: 15000 });
  const rowText = await row.innerText();
  check(rowText.includes("Pending"), `too-big shows state Pending: "${rowText.replace(/\s+/g, " ")}"`);
  // A job that can never fit says so, as `get jobs` and the metrics do.
  const code = reason?.infeasible ? "Infeasible" : reason?.code;
  check(reason && rowText.includes(code), `too-big shows its reason code ${code}`);
  check(reason && rowText.includes(reason.message.slice(0, 20)), "too-big shows its reason message");
  const train = await page.locator('tr[data-job="train-small"]').innerText();
  check(/Running|Scheduled/.test(train), `train-small is shown running: "${train.replace(/\s+/g, " ")}"`);
  check((await page.locator('tr[data-queue="training"]').count()) === 1, "the training queue is listed");
  check((await page.locator('[data-node="gpu-node-1"] .gpu').count()) === 8, "gpu-node-1 shows 8 GPUs");
  check((await page.locator('[data-node="gpu-node-2"] .mig').count()) === 3, "gpu-node-2 shows its 3 MIG instances");
  // Who holds a device is there for keyboards and screen readers too, not only on hover.
  const label = await page.locator('[data-node="gpu-node-1"] .gpu').first().getAttribute("aria-label");
  check(/^GPU 0, .*allocated/.test(label ?? ""), `a GPU says what holds it: "${label}"`);
  // The filter narrows the table.
  await page.locator("#job-filter").fill("too-big");
  const shown = await page.locator("#job-table tbody tr").count();
  check(shown === 1, `the filter "too-big" leaves one row (${shown})`);
  await page.locator("#job-filter").fill("");
  const cards = await page.locator("#cards").innerText();
  check(/10/.test(cards) && cards.includes("Nodes ready"), `the overview shows the cluster: "${cards.replace(/\s+/g, " ")}"`);
  const status = await page.locator("#status").innerText();
  check(status.startsWith("updated"), `the status line shows a successful refresh ("${status}")`);

  // Live refresh: a job submitted now appears without a reload.
  await api("POST", "/v1/jobs", admin, {
    apiVersion: "tessera.io/v1", kind: "Job", metadata: { name: "late-arrival" },
    spec: { queue: "debug", tasks: [{ name: "main", replicas: 1, resources: { cpu: 1, memory: "1Gi" }, command: ["true"] }] },
  });
  const late = await page.locator('tr[data-job="late-arrival"]').waitFor({ timeout: 10000 }).then(() => true, () => false);
  check(late, "a job submitted after load appears by live refresh");
  check(consoleErrors.length === 0, `no console errors (${consoleErrors.join(" | ")})`);

  await page.waitForTimeout(700);
  const shot = process.env.TESSERA_SCREENSHOT ?? join(tmpdir(), "tessera-dashboard.png");
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`screenshot: ${shot}`);
} catch (e) {
  failures.push(String(e.stack ?? e));
  console.log(`FAIL: ${e.stack ?? e}\n--- server log ---\n${serverLog}`);
} finally {
  await cleanup();
}
console.log(failures.length ? `${failures.length} check(s) failed` : "PASS");
process.exit(failures.length ? 1 : 0);
