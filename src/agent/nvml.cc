#include "agent/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace tessera::agent {

// ---- the slice of nvml.h we use (NVML API v2+, stable across drivers since R450) ----
namespace {

using nvmlReturn_t = int;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8ULL;

struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlGpuInstance_st;
using nvmlGpuInstance_t = nvmlGpuInstance_st*;
struct nvmlEventSet_st;
using nvmlEventSet_t = nvmlEventSet_st*;

struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlGpuInstancePlacement_t {
  unsigned int start, size;
};
struct nvmlGpuInstanceInfo_t {
  nvmlDevice_t device;
  unsigned int id;
  unsigned int profileId;
  nvmlGpuInstancePlacement_t placement;
};
struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// XIDs caused by applications, not by the hardware (as the Kubernetes device plugin treats
// them): they do not make a device unhealthy.
bool ApplicationXid(unsigned long long xid) {
  return xid == 13 || xid == 31 || xid == 43 || xid == 45 || xid == 68 || xid == 109;
}

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::string Upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

struct NvmlGpus::Api {
  nvmlReturn_t (*Init)();
  nvmlReturn_t (*Shutdown)();
  const char* (*ErrorString)(nvmlReturn_t);
  nvmlReturn_t (*SystemGetDriverVersion)(char*, unsigned int);
  nvmlReturn_t (*DeviceGetCount)(unsigned int*);
  nvmlReturn_t (*DeviceGetHandleByIndex)(unsigned int, nvmlDevice_t*);
  nvmlReturn_t (*DeviceGetName)(nvmlDevice_t, char*, unsigned int);
  nvmlReturn_t (*DeviceGetUUID)(nvmlDevice_t, char*, unsigned int);
  nvmlReturn_t (*DeviceGetMemoryInfo)(nvmlDevice_t, nvmlMemory_t*);
  nvmlReturn_t (*DeviceGetUtilizationRates)(nvmlDevice_t, nvmlUtilization_t*);
  nvmlReturn_t (*DeviceGetPowerUsage)(nvmlDevice_t, unsigned int*);
  nvmlReturn_t (*DeviceGetRetiredPagesPendingStatus)(nvmlDevice_t, int*);
  // MIG (optional: drivers before R450 lack them).
  nvmlReturn_t (*DeviceGetMigMode)(nvmlDevice_t, unsigned int*, unsigned int*);
  nvmlReturn_t (*DeviceGetMaxMigDeviceCount)(nvmlDevice_t, unsigned int*);
  nvmlReturn_t (*DeviceGetMigDeviceHandleByIndex)(nvmlDevice_t, unsigned int, nvmlDevice_t*);
  nvmlReturn_t (*DeviceGetGpuInstanceId)(nvmlDevice_t, unsigned int*);
  nvmlReturn_t (*DeviceGetGpuInstanceById)(nvmlDevice_t, unsigned int, nvmlGpuInstance_t*);
  nvmlReturn_t (*GpuInstanceGetInfo)(nvmlGpuInstance_t, nvmlGpuInstanceInfo_t*);
  // XID events (optional).
  nvmlReturn_t (*EventSetCreate)(nvmlEventSet_t*);
  nvmlReturn_t (*DeviceRegisterEvents)(nvmlDevice_t, unsigned long long, nvmlEventSet_t);
  nvmlReturn_t (*EventSetWait)(nvmlEventSet_t, nvmlEventData_t*, unsigned int);
  nvmlReturn_t (*EventSetFree)(nvmlEventSet_t);

  std::string Error(nvmlReturn_t r) const {
    const char* s = ErrorString ? ErrorString(r) : nullptr;
    return (s ? std::string(s) : "NVML error") + " (" + std::to_string(r) + ")";
  }
};

std::string ModelKeyFromNvmlName(const std::string& name, int64_t memory_bytes) {
  const std::string u = Upper(name);
  const int64_t gib = memory_bytes >> 30;
  auto has = [&](const char* s) { return u.find(s) != std::string::npos; };
  if (has("A100")) return (has("80GB") || gib > 48) ? "A100-80GB" : "A100-40GB";
  if (has("H200")) return "H200-141GB";
  if (has("H100")) {
    if (has("NVL") || has("94GB") || (gib > 88 && gib < 120)) return "H100-94GB";
    return "H100-80GB";
  }
  std::string s = Trim(name);
  for (const char* prefix : {"NVIDIA ", "Tesla ", "Quadro "}) {
    if (s.rfind(prefix, 0) == 0) s = s.substr(std::string(prefix).size());
  }
  for (auto& c : s) {
    if (c == ' ') c = '-';
  }
  return s;
}

std::string MigProfileFromNvmlName(const std::string& name) {
  auto pos = name.find(" MIG ");
  if (pos == std::string::npos) return "";
  std::string p = Trim(name.substr(pos + 5));
  auto plus = p.find('+');  // "1g.10gb+me": media extensions do not change the slices
  if (plus != std::string::npos) p = p.substr(0, plus);
  return p;
}

StatusOr<std::unique_ptr<NvmlGpus>> NvmlGpus::Open(const std::string& library) {
  std::string path = library;
  if (path.empty()) {
    const char* env = std::getenv("TESSERA_NVML_LIBRARY");
    path = (env && *env) ? env : "libnvidia-ml.so.1";
  }
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* err = dlerror();
    return Unavailable("NVML: cannot load " + path + ": " + (err ? err : "unknown error") +
                       " (no NVIDIA driver on this machine?)");
  }
  std::unique_ptr<NvmlGpus> g(new NvmlGpus());
  g->handle_ = h;
  g->library_path_ = path;
  g->api_ = std::make_unique<Api>();
  Api& a = *g->api_;
  std::string missing;
  auto need = [&](auto& fn, const char* a1, const char* a2 = nullptr) {
    void* s = dlsym(h, a1);
    if (s == nullptr && a2 != nullptr) s = dlsym(h, a2);
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(s);
    if (s == nullptr) missing += std::string(missing.empty() ? "" : ", ") + a1;
  };
  auto want = [&](auto& fn, const char* a1, const char* a2 = nullptr) {
    void* s = dlsym(h, a1);
    if (s == nullptr && a2 != nullptr) s = dlsym(h, a2);
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(s);
  };
  need(a.Init, "nvmlInit_v2", "nvmlInit");
  need(a.Shutdown, "nvmlShutdown");
  want(a.ErrorString, "nvmlErrorString");
  want(a.SystemGetDriverVersion, "nvmlSystemGetDriverVersion");
  need(a.DeviceGetCount, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
  need(a.DeviceGetHandleByIndex, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
  need(a.DeviceGetName, "nvmlDeviceGetName");
  need(a.DeviceGetUUID, "nvmlDeviceGetUUID");
  need(a.DeviceGetMemoryInfo, "nvmlDeviceGetMemoryInfo");
  want(a.DeviceGetUtilizationRates, "nvmlDeviceGetUtilizationRates");
  want(a.DeviceGetPowerUsage, "nvmlDeviceGetPowerUsage");
  want(a.DeviceGetRetiredPagesPendingStatus, "nvmlDeviceGetRetiredPagesPendingStatus");
  want(a.DeviceGetMigMode, "nvmlDeviceGetMigMode");
  want(a.DeviceGetMaxMigDeviceCount, "nvmlDeviceGetMaxMigDeviceCount");
  want(a.DeviceGetMigDeviceHandleByIndex, "nvmlDeviceGetMigDeviceHandleByIndex");
  want(a.DeviceGetGpuInstanceId, "nvmlDeviceGetGpuInstanceId");
  want(a.DeviceGetGpuInstanceById, "nvmlDeviceGetGpuInstanceById");
  want(a.GpuInstanceGetInfo, "nvmlGpuInstanceGetInfo");
  want(a.EventSetCreate, "nvmlEventSetCreate");
  want(a.DeviceRegisterEvents, "nvmlDeviceRegisterEvents");
  want(a.EventSetWait, "nvmlEventSetWait_v2", "nvmlEventSetWait");
  want(a.EventSetFree, "nvmlEventSetFree");
  if (!missing.empty()) {
    return Unavailable("NVML: " + path + " lacks " + missing);  // destructor closes h
  }
  nvmlReturn_t r = a.Init();
  if (r != NVML_SUCCESS) {
    a.Shutdown = nullptr;  // nothing to shut down
    return Unavailable("NVML: nvmlInit failed: " + a.Error(r));
  }
  char ver[96] = {0};
  if (a.SystemGetDriverVersion && a.SystemGetDriverVersion(ver, sizeof ver) == NVML_SUCCESS)
    g->driver_version_ = ver;
  unsigned int count = 0;
  if (a.DeviceGetCount(&count) == NVML_SUCCESS) g->xid_unhealthy_.assign(count, "");
  // Critical XID events: register once, drain on every Sample().
  if (a.EventSetCreate && a.DeviceRegisterEvents && a.EventSetWait) {
    nvmlEventSet_t set = nullptr;
    if (a.EventSetCreate(&set) == NVML_SUCCESS) {
      g->event_set_ = set;
      for (unsigned int i = 0; i < count; ++i) {
        nvmlDevice_t d = nullptr;
        if (a.DeviceGetHandleByIndex(i, &d) == NVML_SUCCESS)
          (void)a.DeviceRegisterEvents(d, nvmlEventTypeXidCriticalError, set);
      }
    }
  }
  return g;
}

NvmlGpus::~NvmlGpus() {
  if (api_) {
    if (event_set_ && api_->EventSetFree)
      api_->EventSetFree(static_cast<nvmlEventSet_t>(event_set_));
    if (api_->Shutdown) api_->Shutdown();
  }
  if (handle_) dlclose(handle_);
}

StatusOr<std::vector<Device>> NvmlGpus::Discover() {
  std::lock_guard<std::mutex> lock(mu_);
  const Api& a = *api_;
  unsigned int count = 0;
  nvmlReturn_t r = a.DeviceGetCount(&count);
  if (r != NVML_SUCCESS) return Unavailable("NVML: nvmlDeviceGetCount: " + a.Error(r));
  std::vector<Device> out;
  for (unsigned int i = 0; i < count; ++i) {
    const std::string where = "NVML device " + std::to_string(i);
    nvmlDevice_t dev = nullptr;
    Device d;
    d.index = static_cast<int32_t>(i);
    r = a.DeviceGetHandleByIndex(i, &dev);
    if (r != NVML_SUCCESS) {
      // Keep the index so that CUDA_VISIBLE_DEVICES numbering stays right; mark it broken.
      d.model = "unknown";
      d.healthy = false;
      d.uuid = "GPU-unavailable-" + std::to_string(i);
      out.push_back(d);
      continue;
    }
    char buf[256] = {0};
    if ((r = a.DeviceGetName(dev, buf, sizeof buf)) != NVML_SUCCESS)
      return Unavailable(where + ": nvmlDeviceGetName: " + a.Error(r));
    const std::string name = buf;
    std::fill(std::begin(buf), std::end(buf), 0);
    if ((r = a.DeviceGetUUID(dev, buf, sizeof buf)) != NVML_SUCCESS)
      return Unavailable(where + ": nvmlDeviceGetUUID: " + a.Error(r));
    d.uuid = buf;
    nvmlMemory_t mem{};
    if ((r = a.DeviceGetMemoryInfo(dev, &mem)) != NVML_SUCCESS) {
      if (r == NVML_ERROR_GPU_IS_LOST) d.healthy = false;
    } else {
      d.memory_bytes = static_cast<int64_t>(mem.total);
      d.memory_used_bytes = static_cast<int64_t>(mem.used);
    }
    d.model = ModelKeyFromNvmlName(name, d.memory_bytes);
    int pending = 0;
    if (a.DeviceGetRetiredPagesPendingStatus &&
        a.DeviceGetRetiredPagesPendingStatus(dev, &pending) == NVML_SUCCESS && pending != 0)
      d.healthy = false;
    if (i < xid_unhealthy_.size() && !xid_unhealthy_[i].empty()) d.healthy = false;

    unsigned int mode = 0, pending_mode = 0;
    if (a.DeviceGetMigMode && a.DeviceGetMigMode(dev, &mode, &pending_mode) == NVML_SUCCESS &&
        mode == 1 && a.DeviceGetMaxMigDeviceCount && a.DeviceGetMigDeviceHandleByIndex) {
      unsigned int max = 0;
      (void)a.DeviceGetMaxMigDeviceCount(dev, &max);
      int32_t next_start = 0;
      for (unsigned int m = 0; m < max; ++m) {
        nvmlDevice_t mig = nullptr;
        r = a.DeviceGetMigDeviceHandleByIndex(dev, m, &mig);
        if (r == NVML_ERROR_NOT_FOUND) continue;  // empty slot
        if (r != NVML_SUCCESS)
          return Unavailable(where + ": MIG device " + std::to_string(m) + ": " + a.Error(r));
        MigInstance mi;
        std::fill(std::begin(buf), std::end(buf), 0);
        if (a.DeviceGetName(mig, buf, sizeof buf) == NVML_SUCCESS)
          mi.profile = MigProfileFromNvmlName(buf);
        std::fill(std::begin(buf), std::end(buf), 0);
        if (a.DeviceGetUUID(mig, buf, sizeof buf) == NVML_SUCCESS) mi.uuid = buf;
        mi.start_slice = next_start;
        unsigned int gi_id = 0;
        nvmlGpuInstance_t gi = nullptr;
        nvmlGpuInstanceInfo_t info{};
        if (a.DeviceGetGpuInstanceId && a.DeviceGetGpuInstanceById && a.GpuInstanceGetInfo &&
            a.DeviceGetGpuInstanceId(mig, &gi_id) == NVML_SUCCESS &&
            a.DeviceGetGpuInstanceById(dev, gi_id, &gi) == NVML_SUCCESS &&
            a.GpuInstanceGetInfo(gi, &info) == NVML_SUCCESS) {
          mi.start_slice = static_cast<int32_t>(info.placement.start);
        }
        const MigProfile* p = FindMigProfile(d.model, mi.profile);
        next_start = mi.start_slice + (p ? p->compute_slices : 1);
        d.mig.push_back(mi);
      }
      // Canonical order: by placement, then UUID.
      std::sort(d.mig.begin(), d.mig.end(), [](const MigInstance& x, const MigInstance& y) {
        return x.start_slice != y.start_slice ? x.start_slice < y.start_slice : x.uuid < y.uuid;
      });
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<GpuSample> NvmlGpus::Sample() {
  std::lock_guard<std::mutex> lock(mu_);
  const Api& a = *api_;
  unsigned int count = 0;
  if (a.DeviceGetCount(&count) != NVML_SUCCESS) return {};
  if (xid_unhealthy_.size() < count) xid_unhealthy_.resize(count);
  std::vector<nvmlDevice_t> handles(count, nullptr);
  for (unsigned int i = 0; i < count; ++i) (void)a.DeviceGetHandleByIndex(i, &handles[i]);
  if (event_set_) {
    nvmlEventData_t ev{};
    // Timeout 0: only what is already queued. Bounded so a flood cannot stall a heartbeat.
    for (int n = 0;
         n < 64 && a.EventSetWait(static_cast<nvmlEventSet_t>(event_set_), &ev, 0) == NVML_SUCCESS;
         ++n) {
      if (!(ev.eventType & nvmlEventTypeXidCriticalError) || ApplicationXid(ev.eventData)) continue;
      for (unsigned int i = 0; i < count; ++i) {
        if (handles[i] == ev.device) xid_unhealthy_[i] = "XID " + std::to_string(ev.eventData);
      }
    }
  }
  std::vector<GpuSample> out;
  for (unsigned int i = 0; i < count; ++i) {
    GpuSample s;
    s.index = static_cast<int32_t>(i);
    nvmlDevice_t dev = handles[i];
    if (dev == nullptr) {
      s.healthy = false;
      s.health_message = "no NVML handle";
      out.push_back(s);
      continue;
    }
    nvmlUtilization_t u{};
    nvmlReturn_t r = NVML_SUCCESS;
    if (a.DeviceGetUtilizationRates && (r = a.DeviceGetUtilizationRates(dev, &u)) == NVML_SUCCESS)
      s.util_percent = static_cast<int32_t>(std::min(u.gpu, 100u));
    bool lost = r == NVML_ERROR_GPU_IS_LOST;
    nvmlMemory_t mem{};
    if ((r = a.DeviceGetMemoryInfo(dev, &mem)) == NVML_SUCCESS)
      s.memory_used_bytes = static_cast<int64_t>(mem.used);
    lost = lost || r == NVML_ERROR_GPU_IS_LOST;
    unsigned int mw = 0;
    if (a.DeviceGetPowerUsage && a.DeviceGetPowerUsage(dev, &mw) == NVML_SUCCESS)
      s.power_milliwatts = mw;
    int pending = 0;
    if (a.DeviceGetRetiredPagesPendingStatus &&
        a.DeviceGetRetiredPagesPendingStatus(dev, &pending) == NVML_SUCCESS && pending != 0) {
      s.healthy = false;
      s.health_message = "retired pages pending";
    }
    if (!xid_unhealthy_[i].empty()) {
      s.healthy = false;
      s.health_message = xid_unhealthy_[i];
    }
    if (lost) {
      s.healthy = false;
      s.health_message = "GPU is lost";
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace tessera::agent
