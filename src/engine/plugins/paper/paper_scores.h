// The FGD paper's (Weng et al., USENIX ATC'23) placement policies, as pure functions.
//
// Random, DotProd, GpuClustering, GpuPacking, BestFit and FGD exactly as the paper's
// simulator computes them (../shared/traces/FGD-PROTOCOL.md, section 4): the same score
// formulas, the same integer truncations, the same per-device GPU choice for fractional
// pods. They exist to compare Tessera's own policy against the published numbers, so they
// follow the paper's arithmetic, which is IEEE-754 double for BestFit, DotProd and FGD
// (deterministic: no fast-math, and every sum runs in a fixed order). The engine adapters
// (paper_plugins.h) wrap these in score plugins. Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessera::paper {

// The paper's "PodResource": memory is ignored by every policy.
struct PodShape {
  int64_t cpu_milli = 0;
  int32_t gpu_milli = 0;  // per GPU: 1..1000 when gpus > 0; 0 for CPU-only pods
  int32_t gpus = 0;       // 0 (CPU-only), 1 (shared or whole), k (k whole GPUs)
  std::string gpu_type;   // allowed models joined by '|'; "" = any
  bool IsShared() const { return gpus == 1 && gpu_milli < 1000; }
  int64_t TotalMilli() const { return static_cast<int64_t>(gpu_milli) * gpus; }
  friend bool operator==(const PodShape&, const PodShape&) = default;
};

// The paper's "NodeResource": free CPU and free milli-GPU per device, in device-index order.
struct NodeFree {
  int64_t cpu_left = 0;
  std::vector<int32_t> gpu_left;
  std::string model;
  int64_t GpuLeftTotal() const;
  int32_t FullyFree() const;
};

// Constants of the paper's code: the largest node (128 cores, 8 GPUs) normalises scores.
inline constexpr int64_t kMaxSpecCpu = 128000;
inline constexpr int64_t kMaxSpecGpu = 8000;

// Whether the node's GPU model is one the pod allows (always true for CPU-only pods).
bool Accessible(const NodeFree& node, const PodShape& pod);
// The Open-Gpu-Share filter's GPU half: enough devices with left >= milli.
bool GpuFits(const NodeFree& node, const PodShape& pod);

struct TypicalPod {
  PodShape shape;
  double freq = 0;  // renormalised share among the chosen typical pods
};
// From the workload's spec counts: sort by count descending (ties: shape descending by cpu,
// milli, gpus, type), take the top specs until the cumulative share is >= percent (in steps
// of `step` specs as the paper does), renormalise to sum to 1.
std::vector<TypicalPod> SelectTypicalPods(std::vector<std::pair<PodShape, int64_t>> counts,
                                          int percent = 95, int step = 1);

// F(n): expected fragmented milli-GPU of a node against the typical pods.
double FragAmount(const NodeFree& node, const std::vector<TypicalPod>& typical);

// The node after placing the pod the paper's way (NodeResource.Sub): CPU, then for GPU pods
// the least-left devices that fit, ascending (stable by index).
NodeFree SubtractPacked(const NodeFree& node, const PodShape& pod);

// Device choices of the paper's Open-Gpu-Share Reserve step.
std::vector<int32_t> FirstFreeDevices(const NodeFree& node, int32_t count);  // whole GPUs
int32_t BestFitDevice(const NodeFree& node, int32_t milli);  // least left that fits; -1 none

struct ScoredChoice {
  int64_t score = 0;
  std::vector<int32_t> devices;  // the devices the policy would take on this node
};

// FGD: sigmoid of the fragmentation decrease; for shared pods the best device.
ScoredChoice FgdScore(const NodeFree& node, const PodShape& pod,
                      const std::vector<TypicalPod>& typical);
// BestFit raw score (before the min-max normalisation over feasible nodes).
int64_t BestFitRawScore(const NodeFree& node, const PodShape& pod);
// k8s-style min-max normalisation to 0..100 in integers; all 0 when every score is equal.
void NormalizeMinMax(std::vector<int64_t>& scores);
int64_t DotProductScore(const NodeFree& node, const PodShape& pod);
int64_t GpuPackingScore(const NodeFree& node, const PodShape& pod);
// GpuClustering: `node_tags` = the tags ("share-gpu", "<k>-gpu") of GPU pods already on the node,
// as a sorted, de-duplicated list.
std::string GpuClusteringTag(const PodShape& pod);  // "" for CPU-only pods
int64_t GpuClusteringScore(const NodeFree& node, const PodShape& pod,
                           const std::vector<std::string>& node_tags);

// Devices a policy takes on the chosen node: whole GPUs take the first free ones by index;
// shared pods take BestFitDevice (or, for Random, a uniform pick among fitting devices with
// `draw` in [0, #fitting)).
std::vector<int32_t> DevicesForPod(const NodeFree& node, const PodShape& pod);

}  // namespace tessera::paper
