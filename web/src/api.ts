// The REST API (docs/api.md) as the dashboard reads it. Every call carries the bearer token.

export interface PendingReason {
  code: string;
  message: string;
  resource?: string;
  infeasible?: boolean; // it can never fit the cluster as it is (shown as Infeasible)
}
export interface JobView {
  name: string;
  queue: string;
  priorityClass: string;
  state: string;
  tasks: number;
  gpus?: number | string;
  runningTasks?: number;
  nodes?: string[];
  createdAt: number;
  startedAt: number;
  message?: string;
  pendingReason?: PendingReason;
}
export type Resources = { cpu?: string; memory?: string; "nvidia.com/gpu"?: string };
export interface QueueView {
  name: string;
  parent?: string;
  weight: number;
  guarantee?: Resources;
  limit?: Resources;
  pendingJobs: number;
  runningJobs: number;
  gpuMilliInUse: number;
  jobs: number;
}
export interface MigInstance {
  profile: string;
  start?: number;
}
export interface DeviceView {
  index: number;
  uuid?: string;
  model: string;
  memory?: string;
  healthy?: boolean;
  virtual?: boolean;
  mig?: MigInstance[];
  utilPercent?: number;
}
export interface DevicePlacement {
  device: number;
  milli?: number;
  migInstance?: number;
}
export interface AllocationView {
  // Absent for another queue's allocation: the server shows it as capacity in use only.
  id?: string;
  job?: string;
  task: number;
  state: string;
  placement: { node: string; devices?: DevicePlacement[] };
}
export interface NodeView {
  name: string;
  pool: string;
  ready: boolean;
  unschedulable?: boolean;
  cpu: string;
  memory: string;
  devices: DeviceView[];
  gpus: number;
  gpuMilliInUse: number;
  allocations?: AllocationView[];
}

export class ApiError extends Error {
  constructor(
    public status: number,
    message: string,
  ) {
    super(message);
  }
}

export class Api {
  constructor(private token: string) {}

  private async get<T>(path: string): Promise<T> {
    const res = await fetch(path, { headers: { Authorization: `Bearer ${this.token}` } });
    const text = await res.text();
    if (!res.ok) {
      let message = text;
      try {
        message = JSON.parse(text).error?.message ?? text;
      } catch {
        /* not JSON: keep the text */
      }
      throw new ApiError(res.status, `${path}: ${res.status} ${message}`);
    }
    return JSON.parse(text) as T;
  }

  // Every unfinished job (what the cards count and the table leads with), then at most 1000
  // finished ones of each end state: the server keeps finished jobs for days, and a cap over
  // all jobs in name order would drop live ones from the view.
  async jobs(): Promise<JobView[]> {
    const live = ["Pending", "Scheduled", "Running", "Terminating"];
    const done = ["Succeeded", "Failed", "Cancelled"];
    const lists = await Promise.all([
      ...live.map((s) => this.pages(`/v1/jobs?state=${s}`, 100)),
      ...done.map((s) => this.pages(`/v1/jobs?state=${s}`, 1)),
    ]);
    return lists.flat();
  }
  private async pages(path: string, maxPages: number): Promise<JobView[]> {
    const out: JobView[] = [];
    let cont = "";
    for (let page = 0; page < maxPages; page++) {
      const q = `${path}&limit=1000${cont ? `&continue=${encodeURIComponent(cont)}` : ""}`;
      const r = await this.get<{ items: JobView[]; continue?: string }>(q);
      out.push(...r.items);
      if (!r.continue) break;
      cont = r.continue;
    }
    return out;
  }
  async queues(): Promise<QueueView[]> {
    return (await this.get<{ items: QueueView[] }>("/v1/queues")).items;
  }
  async nodes(): Promise<NodeView[]> {
    return (await this.get<{ items: NodeView[] }>("/v1/nodes?allocations=true")).items;
  }
}

// "4", "500m", "1.5" -> milli-units.
export function milli(q: string | number | undefined): number {
  if (q === undefined || q === "") return 0;
  if (typeof q === "number") return q * 1000;
  if (q.endsWith("m")) return Number(q.slice(0, -1));
  return Math.round(Number(q) * 1000);
}
