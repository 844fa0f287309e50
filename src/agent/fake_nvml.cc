// A fake libnvidia-ml for tests: canned answers for exactly the entry points nvml.cc uses.
//
// GPU 0: "NVIDIA A100-SXM4-80GB", MIG enabled, two 3g.40gb instances (placements 4 and 0,
// listed in that order so the reader must sort). GPU 1: "NVIDIA H200", 35% busy, 250 W.
// FAKE_NVML_XID=<n> queues one XID <n> event on GPU 1; FAKE_NVML_INIT_FAILS=1 fails init.
#include <cstdlib>
#include <cstring>

extern "C" {

struct nvmlDevice_st {
  const char* name;
  const char* uuid;
  unsigned long long total, used;
  unsigned int util, power_mw;
  int mig_mode;
  int gi_id;     // for MIG devices
  int gi_start;  // placement
};
struct nvmlGpuInstance_st {
  int id;
  int start;
};
struct nvmlEventSet_st {
  int pending;
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlGpuInstanceInfo_t {
  nvmlDevice_st* device;
  unsigned int id, profileId, start, size;
};
struct nvmlEventData_t {
  nvmlDevice_st* device;
  unsigned long long eventType, eventData;
  unsigned int gpuInstanceId, computeInstanceId;
};

static const unsigned long long kGiB = 1ULL << 30;
static nvmlDevice_st g_gpus[2] = {
    {"NVIDIA A100-SXM4-80GB", "GPU-fake-a100-0000", 80 * kGiB, 0, 0, 90000, 1, 0, 0},
    {"NVIDIA H200", "GPU-fake-h200-0001", 143771ULL << 20, 1234ULL << 20, 35, 250000, 0, 0, 0}};
static nvmlDevice_st g_migs[2] = {
    {"NVIDIA A100-SXM4-80GB MIG 3g.40gb", "MIG-fake-a100-0000-gi2", 40 * kGiB, 0, 0, 0, 0, 2, 4},
    {"NVIDIA A100-SXM4-80GB MIG 3g.40gb", "MIG-fake-a100-0000-gi1", 40 * kGiB, 0, 0, 0, 0, 1, 0}};
static nvmlGpuInstance_st g_gis[3] = {{0, 0}, {1, 0}, {2, 4}};
static nvmlEventSet_st g_set;

int nvmlInit_v2() {
  const char* f = std::getenv("FAKE_NVML_INIT_FAILS");
  if (f && *f == '1') return 9;  // NVML_ERROR_DRIVER_NOT_LOADED
  const char* x = std::getenv("FAKE_NVML_XID");
  g_set.pending = x ? std::atoi(x) : 0;
  return 0;
}
int nvmlShutdown() { return 0; }
const char* nvmlErrorString(int r) { return r == 9 ? "Driver Not Loaded" : "fake error"; }
int nvmlSystemGetDriverVersion(char* v, unsigned int n) {
  std::strncpy(v, "999.99-fake", n);
  return 0;
}
int nvmlDeviceGetCount_v2(unsigned int* c) {
  *c = 2;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_st** d) {
  if (i >= 2) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *d = &g_gpus[i];
  return 0;
}
int nvmlDeviceGetName(nvmlDevice_st* d, char* out, unsigned int n) {
  std::strncpy(out, d->name, n);
  return 0;
}
int nvmlDeviceGetUUID(nvmlDevice_st* d, char* out, unsigned int n) {
  std::strncpy(out, d->uuid, n);
  return 0;
}
int nvmlDeviceGetMemoryInfo(nvmlDevice_st* d, nvmlMemory_t* m) {
  m->total = d->total;
  m->used = d->used;
  m->free = d->total - d->used;
  return 0;
}
int nvmlDeviceGetUtilizationRates(nvmlDevice_st* d, nvmlUtilization_t* u) {
  if (d->mig_mode) return 3;  // NVML_ERROR_NOT_SUPPORTED, as real drivers do in MIG mode
  u->gpu = d->util;
  u->memory = 0;
  return 0;
}
int nvmlDeviceGetPowerUsage(nvmlDevice_st* d, unsigned int* mw) {
  *mw = d->power_mw;
  return 0;
}
int nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_st*, int* pending) {
  *pending = 0;
  return 0;
}
int nvmlDeviceGetMigMode(nvmlDevice_st* d, unsigned int* cur, unsigned int* pend) {
  *cur = *pend = static_cast<unsigned int>(d->mig_mode);
  return 0;
}
int nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_st* d, unsigned int* c) {
  *c = d->mig_mode ? 7 : 0;
  return 0;
}
int nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_st* d, unsigned int i, nvmlDevice_st** m) {
  if (d != &g_gpus[0] || i >= 2) return 6;  // NVML_ERROR_NOT_FOUND
  *m = &g_migs[i];
  return 0;
}
int nvmlDeviceGetGpuInstanceId(nvmlDevice_st* m, unsigned int* id) {
  *id = static_cast<unsigned int>(m->gi_id);
  return 0;
}
int nvmlDeviceGetGpuInstanceById(nvmlDevice_st*, unsigned int id, nvmlGpuInstance_st** gi) {
  if (id == 0 || id > 2) return 6;
  *gi = &g_gis[id];
  return 0;
}
int nvmlGpuInstanceGetInfo(nvmlGpuInstance_st* gi, nvmlGpuInstanceInfo_t* info) {
  info->device = &g_gpus[0];
  info->id = static_cast<unsigned int>(gi->id);
  info->profileId = 2;
  info->start = static_cast<unsigned int>(gi->start);
  info->size = 4;
  return 0;
}
int nvmlEventSetCreate(nvmlEventSet_st** s) {
  *s = &g_set;
  return 0;
}
int nvmlDeviceRegisterEvents(nvmlDevice_st*, unsigned long long, nvmlEventSet_st*) { return 0; }
int nvmlEventSetWait_v2(nvmlEventSet_st* s, nvmlEventData_t* ev, unsigned int) {
  if (s->pending == 0) return 10;  // NVML_ERROR_TIMEOUT
  ev->device = &g_gpus[1];
  ev->eventType = 0x8;
  ev->eventData = static_cast<unsigned long long>(s->pending);
  s->pending = 0;
  return 0;
}
int nvmlEventSetFree(nvmlEventSet_st*) { return 0; }

}  // extern "C"
