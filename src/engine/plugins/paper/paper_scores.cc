#include "engine/plugins/paper/paper_scores.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

#include "model/resources.h"

namespace tessera::paper {

int64_t NodeFree::GpuLeftTotal() const {
  int64_t t = 0;
  for (int32_t l : gpu_left) t += l;
  return t;
}

int32_t NodeFree::FullyFree() const {
  return static_cast<int32_t>(std::count(gpu_left.begin(), gpu_left.end(), 1000));
}

bool Accessible(const NodeFree& node, const PodShape& pod) {
  if (pod.gpu_type.empty()) return true;
  if (node.model.empty()) return false;
  size_t start = 0;
  while (start <= pod.gpu_type.size()) {
    size_t bar = pod.gpu_type.find('|', start);
    std::string_view m(pod.gpu_type.data() + start,
                       (bar == std::string::npos ? pod.gpu_type.size() : bar) - start);
    if (!m.empty() && tessera::GpuModelMatches(m, node.model)) return true;
    if (bar == std::string::npos) break;
    start = bar + 1;
  }
  return false;
}

bool GpuFits(const NodeFree& node, const PodShape& pod) {
  if (pod.gpus == 0) return true;
  int32_t need = pod.gpus;
  for (int32_t l : node.gpu_left)
    if (l >= pod.gpu_milli && --need == 0) return true;
  return false;
}

std::vector<TypicalPod> SelectTypicalPods(std::vector<std::pair<PodShape, int64_t>> counts,
                                          int percent, int step) {
  // Count descending; ties by the shape descending (cpu, milli, gpus, type), a total order.
  std::sort(counts.begin(), counts.end(), [](const auto& a, const auto& b) {
    if (a.second != b.second) return a.second > b.second;
    return std::tie(a.first.cpu_milli, a.first.gpu_milli, a.first.gpus, a.first.gpu_type) >
           std::tie(b.first.cpu_milli, b.first.gpu_milli, b.first.gpus, b.first.gpu_type);
  });
  double total = 0;
  for (const auto& c : counts) total += static_cast<double>(c.second);
  double expected = static_cast<double>(percent) * total / 100.0;
  double cum = 0;
  size_t i = 0, limit = 0;
  std::vector<TypicalPod> out;
  while (cum < expected && i < counts.size()) {
    limit += step > 0 ? step : 1;
    for (; i < limit && i < counts.size(); ++i) {
      cum += static_cast<double>(counts[i].second);
      out.push_back({counts[i].first, static_cast<double>(counts[i].second) / total});
    }
  }
  if (i < counts.size())
    for (auto& t : out) t.freq /= cum / total;
  return out;
}

namespace {
// The fragmented milli-GPU of `node` for one typical pod (frag.go's classification: a
// satisfiable pod only sees devices too small for it as fragments; otherwise all is).
int64_t FragFor(const NodeFree& node, const PodShape& t, int64_t left_total) {
  if (t.gpu_milli == 0) return left_total;                 // CPU-only: XL / XR
  if (!Accessible(node, t)) return left_total;             // no access
  if (node.cpu_left >= t.cpu_milli && GpuFits(node, t)) {  // Q3: satisfied
    int64_t frag = 0;
    for (int32_t l : node.gpu_left)
      if (l < t.gpu_milli) frag += l;
    return frag;
  }
  return left_total;  // Q1, Q2, Q4
}
}  // namespace

double FragAmount(const NodeFree& node, const std::vector<TypicalPod>& typical) {
  const int64_t left_total = node.GpuLeftTotal();
  double f = 0;
  for (const TypicalPod& t : typical)
    f += t.freq * static_cast<double>(FragFor(node, t.shape, left_total));
  return f;
}

NodeFree SubtractPacked(const NodeFree& node, const PodShape& pod) {
  NodeFree out = node;
  out.cpu_left -= pod.cpu_milli;
  if (pod.gpus == 0) return out;
  std::vector<int32_t> idx(node.gpu_left.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int32_t a, int32_t b) { return node.gpu_left[a] < node.gpu_left[b]; });
  int32_t need = pod.gpus;
  for (int32_t i : idx) {
    if (need == 0) break;
    if (out.gpu_left[i] >= pod.gpu_milli) {
      out.gpu_left[i] -= pod.gpu_milli;
      --need;
    }
  }
  return out;
}

std::vector<int32_t> FirstFreeDevices(const NodeFree& node, int32_t count) {
  std::vector<int32_t> out;
  for (int32_t i = 0;
       i < static_cast<int32_t>(node.gpu_left.size()) && static_cast<int32_t>(out.size()) < count;
       ++i)
    if (node.gpu_left[i] == 1000) out.push_back(i);
  return out;
}

int32_t BestFitDevice(const NodeFree& node, int32_t milli) {
  int32_t best = -1;
  for (int32_t i = 0; i < static_cast<int32_t>(node.gpu_left.size()); ++i)
    if (node.gpu_left[i] >= milli && (best < 0 || node.gpu_left[i] < node.gpu_left[best])) best = i;
  return best;
}

std::vector<int32_t> DevicesForPod(const NodeFree& node, const PodShape& pod) {
  if (pod.gpus == 0) return {};
  if (pod.IsShared()) {
    int32_t d = BestFitDevice(node, pod.gpu_milli);
    return d < 0 ? std::vector<int32_t>{} : std::vector<int32_t>{d};
  }
  return FirstFreeDevices(node, pod.gpus);
}

namespace {
int64_t SigmoidScore(double before, double after) {
  double x = (before - after) / 1000.0;
  return static_cast<int64_t>(1.0 / (1.0 + std::exp(-x)) * 100.0);
}
}  // namespace

ScoredChoice FgdScore(const NodeFree& node, const PodShape& pod,
                      const std::vector<TypicalPod>& typical) {
  const double before = FragAmount(node, typical);
  ScoredChoice best;
  if (pod.IsShared()) {
    bool found = false;
    NodeFree after = node;
    after.cpu_left -= pod.cpu_milli;
    for (int32_t i = 0; i < static_cast<int32_t>(node.gpu_left.size()); ++i) {
      if (node.gpu_left[i] < pod.gpu_milli) continue;
      after.gpu_left[i] -= pod.gpu_milli;
      int64_t s = SigmoidScore(before, FragAmount(after, typical));
      after.gpu_left[i] += pod.gpu_milli;
      if (!found || s > best.score) {
        found = true;
        best.score = s;
        best.devices = {i};
      }
    }
    return best;
  }
  best.score = SigmoidScore(before, FragAmount(SubtractPacked(node, pod), typical));
  best.devices = pod.gpus > 0 ? FirstFreeDevices(node, pod.gpus) : std::vector<int32_t>{};
  return best;
}

int64_t BestFitRawScore(const NodeFree& node, const PodShape& pod) {
  // The paper's loop: score += (free - req) / maxSpec * weight, over (cpu, gpu), then
  // (1 - score) * 100, truncated. Same operation order, so the same doubles.
  const double free_vec[2] = {static_cast<double>(node.cpu_left),
                              static_cast<double>(node.GpuLeftTotal())};
  const double req_vec[2] = {static_cast<double>(pod.cpu_milli),
                             static_cast<double>(pod.TotalMilli())};
  const double max_spec[2] = {static_cast<double>(kMaxSpecCpu), static_cast<double>(kMaxSpecGpu)};
  double score = 0;
  for (int i = 0; i < 2; ++i) score += (free_vec[i] - req_vec[i]) / max_spec[i] * 0.5;
  score = (1.0 - score) * 100.0;
  return static_cast<int64_t>(score);
}

void NormalizeMinMax(std::vector<int64_t>& scores) {
  if (scores.empty()) return;
  auto [lo, hi] = std::minmax_element(scores.begin(), scores.end());
  int64_t low = *lo, range = *hi - *lo;
  for (int64_t& s : scores) s = range == 0 ? 0 : (s - low) * 100 / range;
}

int64_t DotProductScore(const NodeFree& node, const PodShape& pod) {
  if (node.cpu_left < pod.cpu_milli) return 0;
  const double n0 = static_cast<double>(node.cpu_left) / static_cast<double>(kMaxSpecCpu);
  const double n1 = static_cast<double>(node.GpuLeftTotal()) / static_cast<double>(kMaxSpecGpu);
  const double p0 = static_cast<double>(pod.cpu_milli) / static_cast<double>(kMaxSpecCpu);
  const double p1 = static_cast<double>(pod.TotalMilli()) / static_cast<double>(kMaxSpecGpu);
  double dot = n0 * p0 + n1 * p1;
  return static_cast<int64_t>((1.0 - dot / 2.0) * 100.0);
}

int64_t GpuPackingScore(const NodeFree& node, const PodShape& pod) {
  if (pod.gpus == 0) return 0;
  const int32_t n = static_cast<int32_t>(node.gpu_left.size());
  if (node.FullyFree() == n) return std::max(33 - n, n);
  std::vector<int32_t> idx(node.gpu_left.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int32_t a, int32_t b) { return node.gpu_left[a] < node.gpu_left[b]; });
  int32_t need = pod.gpus, fully_free = 0;
  int64_t left_pct_sum = 0;
  for (int32_t i : idx) {
    if (need == 0) break;
    if (node.gpu_left[i] < pod.gpu_milli) continue;
    --need;
    if (node.gpu_left[i] == 1000) ++fully_free;
    left_pct_sum += node.gpu_left[i] * 100 / 1000;
  }
  if (fully_free > 0) return std::max<int64_t>(50 - fully_free, 33);
  return std::max<int64_t>(100 - left_pct_sum / 10, 50);
}

std::string GpuClusteringTag(const PodShape& pod) {
  if (pod.gpus == 0) return "";
  if (pod.IsShared()) return "share-gpu";
  return std::to_string(pod.gpus) + "-gpu";
}

int64_t GpuClusteringScore(const NodeFree& node, const PodShape& pod,
                           const std::vector<std::string>& node_tags) {
  const std::string tag = GpuClusteringTag(pod);
  if (tag.empty()) return 0;
  const int64_t base = 100 / 4 * (kMaxSpecGpu - node.GpuLeftTotal()) / kMaxSpecGpu;
  bool has = std::find(node_tags.begin(), node_tags.end(), tag) != node_tags.end();
  if (has) return base + (node_tags.size() == 1 ? 75 : 50);
  return base + (node_tags.empty() ? 25 : 0);
}

}  // namespace tessera::paper
