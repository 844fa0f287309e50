// Integer resource quantities and the request a single task makes.
//
// No floating point anywhere in placement or accounting: CPU is milli-cores, memory and
// GPU memory are bytes, GPU compute is milli-GPU (1000 = one whole device; a MIG instance
// counts its compute slices, e.g. 3g on a 7-slice device = 3000/7 = 428). Plain values;
// thread-compatible.
#pragma once

#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tessera {

// The vector that queues, fair share and quotas account in.
struct ResourceVector {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int64_t gpu_milli = 0;

  ResourceVector& operator+=(const ResourceVector& o) {
    cpu_milli += o.cpu_milli;
    memory_bytes += o.memory_bytes;
    gpu_milli += o.gpu_milli;
    return *this;
  }
  ResourceVector& operator-=(const ResourceVector& o) {
    cpu_milli -= o.cpu_milli;
    memory_bytes -= o.memory_bytes;
    gpu_milli -= o.gpu_milli;
    return *this;
  }
  friend ResourceVector operator+(ResourceVector a, const ResourceVector& b) { return a += b; }
  friend ResourceVector operator-(ResourceVector a, const ResourceVector& b) { return a -= b; }
  friend bool operator==(const ResourceVector&, const ResourceVector&) = default;
  // Every component of *this is <= the one of o.
  bool FitsIn(const ResourceVector& o) const {
    return cpu_milli <= o.cpu_milli && memory_bytes <= o.memory_bytes && gpu_milli <= o.gpu_milli;
  }
  bool IsZero() const { return cpu_milli == 0 && memory_bytes == 0 && gpu_milli == 0; }
};

// How a task asks for GPUs. Exactly one kind per task.
enum class GpuRequestKind {
  kNone,      // CPU-only
  kWhole,     // `nvidia.com/gpu: N`: N whole, exclusive devices
  kFraction,  // a share of ONE device: milli-GPU of compute plus device memory
  kMig,       // `nvidia.com/mig-<profile>: N`: N MIG instances of one profile
};

struct GpuRequest {
  GpuRequestKind kind = GpuRequestKind::kNone;
  int32_t count = 0;         // kWhole: devices; kMig: instances; kFraction: always 1
  int32_t milli = 0;         // kFraction: 1..999 thousandths of one device's compute
  int64_t memory_bytes = 0;  // kFraction: device memory wanted; kWhole: min memory per device
  std::string mig_profile;   // kMig: "1g.10gb", "3g.40gb", ...
  // Allowed GPU models ("A100-80GB", ...; "H100-*": a family, GpuModelMatches); empty = any.
  std::vector<std::string> models;

  friend bool operator==(const GpuRequest&, const GpuRequest&) = default;
};

// Whether a device of model `model` is one that `allowed` (an entry of GpuRequest::models)
// names: the same model, or, for an entry ending in `*`, any model that starts with the rest,
// ignoring case ("H100-*" takes H100-80GB and H100-94GB, as sbatch's --gres=gpu:h100 means
// any H100). (Inline: placement asks it per device.)
inline bool GpuModelMatches(std::string_view allowed, std::string_view model) {
  if (allowed == model) return true;
  if (allowed.empty() || allowed.back() != '*' || model.size() < allowed.size() - 1) return false;
  for (size_t i = 0; i + 1 < allowed.size(); ++i) {
    const auto a = static_cast<unsigned char>(allowed[i]), m = static_cast<unsigned char>(model[i]);
    if (a != m && std::tolower(a) != std::tolower(m)) return false;
  }
  return true;
}

// What one task of a job needs on one node.
struct TaskRequest {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  GpuRequest gpu;

  friend bool operator==(const TaskRequest&, const TaskRequest&) = default;
};

// Parses a Kubernetes quantity ("500m", "4", "64Gi", "1.5", "10G") into an integer in the
// given unit scale: ParseMilli("1.5") = 1500; ParseBytes("64Gi") = 68719476736. Rejects
// negative values, fractions of a byte and garbage with a message that quotes the input.
StatusOr<int64_t> ParseMilliQuantity(const std::string& text);
// "4.096575" -> 4096575: millionths (prices per GPU-hour, kept in micro-currency).
StatusOr<int64_t> ParseMicroQuantity(const std::string& text);
StatusOr<int64_t> ParseByteQuantity(const std::string& text);
std::string FormatBytes(int64_t bytes);   // "64Gi", "512Mi", "1000"
std::string FormatMilli(int64_t milli);   // "4", "500m"
std::string FormatMicro(int64_t micros);  // "2.5", "4.096575" (a decimal, for prices)

}  // namespace tessera
