// The REST API (docs/api.md) as the dashboard reads it. Every call carries the bearer token.

export interface PendingReason {
  code: string;
  message: string;
  resource?: string;
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

  async jobs(): Promise<JobView[]> {
    const out: JobView[] = [];
    let cont = "";
    // Pages of 1000; the dashboard shows at most 5000 jobs.
    for (let page = 0; page < 5; page++) {
      const q = `/v1/jobs?limit=1000${cont ? `&continue=${encodeURIComponent(cont)}` : ""}`;
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
