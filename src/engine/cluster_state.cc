#include "engine/cluster_state.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <span>

#include "common/prefetch.h"
#include "engine/state_impl.h"

namespace tessera {

ResourceVector RequestVector(const TaskRequest& r) {
  ResourceVector v{r.cpu_milli, r.memory_bytes, 0};
  switch (r.gpu.kind) {
    case GpuRequestKind::kNone:
      break;
    case GpuRequestKind::kWhole:
      v.gpu_milli = 1000LL * r.gpu.count;
      break;
    case GpuRequestKind::kFraction:
      v.gpu_milli = r.gpu.milli;
      break;
    case GpuRequestKind::kMig: {
      // The profile's compute slices out of 7; the model is unknown until placement, and the
      // slice count is part of the profile name ("3g.40gb").
      int64_t g = std::max(1, std::atoi(r.gpu.mig_profile.c_str()));
      v.gpu_milli = g * 1000 / 7 * r.gpu.count;
      break;
    }
  }
  return v;
}

Job JobRec::Materialize() const {
  Job j = *spec;
  j.allocations = allocations;
  j.start_time = start_time;
  return j;
}

namespace {

// Keys are built with to_chars into one buffer: these run once per node and per job.
std::string SignatureOf(const Node& n, const std::set<std::string>& label_keys) {
  std::string s;
  s.reserve(256);
  auto add = [&](const std::string& x) {
    AppendInt(s, static_cast<int64_t>(x.size()));
    s += ':';
    s += x;
  };
  add(n.pool);
  if (!label_keys.empty())
    for (const auto& [k, v] : n.labels) {
      if (!label_keys.count(k)) continue;
      add(k);
      add(v);
    }
  s += '|';
  for (const auto& t : n.taints) {
    add(t.key);
    add(t.value);
    s += static_cast<char>('0' + static_cast<int>(t.effect));
  }
  s += '|';
  AppendInt(s, n.cpu_milli);
  s += ',';
  AppendInt(s, n.memory_bytes);
  s += ',';
  AppendInt(s, n.cost_micros_per_gpu_hour);
  s += ',';
  s += n.spot ? 's' : '-';
  s += n.ready ? 'r' : '-';
  s += n.unschedulable ? 'u' : '-';
  AppendInt(s, n.max_tasks);
  for (const auto& d : n.devices) {
    s += '|';
    add(d.model);
    add(d.domain);
    AppendInt(s, d.memory_bytes);
    s += d.healthy ? 'h' : '-';
    s += d.shareable ? 's' : '-';
    for (const auto& m : d.mig) {
      add(m.profile);
      AppendInt(s, m.start_slice);
    }
  }
  return s;
}

void ShapeKey(const TaskRequest& r, std::string& s) {
  s.clear();
  AppendRequestKey(r, s);
}

}  // namespace

bool ClusterState::Impl::HasJob(const std::string& id) const {
  // Ids usually arrive in ascending order: past the last one, no search is needed.
  if (jobs.empty() || jobs.rbegin()->first < id) return false;
  return jobs.count(id) > 0;
}

int32_t ClusterState::Impl::QueueOf(const std::string& name) const {
  auto it = queue_index.find(name);
  return it == queue_index.end() ? -1 : it->second;
}

namespace {
// Writes v at `out` as one length byte n (0-8) and the n low bytes of its zig-zag form,
// and returns the end; writes up to 9 bytes whatever n is (callers leave that slack). Keys
// are mostly small counts and whole GiB, so a key takes about half the bytes of plain
// int64s (less memory, fewer page faults), with no loop per byte; the encoding is
// prefix-free, so equal bytes mean equal values.
static_assert(std::endian::native == std::endian::little, "PutValue writes the low bytes first");
inline uint8_t* PutValue(uint8_t* out, int64_t v) {
  const uint64_t u = (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
  const int n = (64 - std::countl_zero(u) + 7) / 8;
  *out = static_cast<uint8_t>(n);
  std::memcpy(out + 1, &u, 8);  // little-endian: the low bytes first
  return out + 1 + n;
}

uint64_t KeyHash(const uint8_t* k, size_t n) {
  uint64_t h = 1469598103934665603ULL ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, k + i, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 32;
  }
  uint64_t w = 0;
  std::memcpy(&w, k + i, n - i);
  h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
  return h ^ (h >> 29);
}
}  // namespace

void ClusterState::Impl::Reclassify(int32_t i) {
  const NodeState& n = nodes[i];
  // The key is built in a reused buffer; it is copied (into class_keys) only when a new
  // class is created.
  // Grown, never shrunk: a resize up zero-fills, which cost more than building the key.
  std::vector<uint8_t>& buf = key_scratch;
  const size_t most = 9 * (5 + 4 * n.devices.size() + 2 * n.gpu_task_shapes.size()) + 8;
  if (buf.size() < most) buf.resize(most);
  uint8_t* k = buf.data();
  k = PutValue(k, node_signature[i]);
  k = PutValue(k, n.free_cpu_milli);
  k = PutValue(k, n.free_memory_bytes);
  // Whether an exclusive job holds the node rides in the task count's low bit: filters
  // depend on it (no other job goes there), and it costs no byte of the key.
  k = PutValue(k, 2 * int64_t{n.tasks} + (n.exclusive_tasks > 0));
  if (n.node->max_tasks > 0) k = PutValue(k, n.live_tasks);  // what max_tasks counts
  for (const auto& d : n.devices) {
    k = PutValue(k, d.free_milli);
    k = PutValue(k, d.free_memory_bytes);
    k = PutValue(k, d.tasks);
    k = PutValue(k, d.mig_used);
  }
  for (const auto& [shape, count] : n.gpu_task_shapes) {
    k = PutValue(k, shape);
    k = PutValue(k, count);
  }
  const std::span<const uint8_t> key(buf.data(), static_cast<size_t>(k - buf.data()));
  const uint64_t h = KeyHash(key.data(), key.size());
  if (class_table.empty()) class_table.assign(1024, -1);
  size_t mask = class_table.size() - 1;
  size_t slot = h & mask;
  int32_t cls = -1;
  for (; class_table[slot] >= 0; slot = (slot + 1) & mask) {
    const int32_t c = class_table[slot];
    const NodeClass& k = classes[c];
    if (class_hash[c] == h && k.key_size == static_cast<int32_t>(key.size()) &&
        std::memcmp(key.data(), k.key, key.size()) == 0) {
      cls = c;
      break;
    }
  }
  if (cls < 0) {
    cls = static_cast<int32_t>(classes.size());
    constexpr size_t kChunk = 1 << 18;  // bytes
    if (class_keys_free < key.size()) {
      class_keys_free = std::max(kChunk, key.size());
      class_keys.push_back(std::make_unique_for_overwrite<uint8_t[]>(class_keys_free));
      class_keys_next = class_keys.back().get();
    }
    NodeClass c;
    c.key = class_keys_next;
    c.key_size = static_cast<int32_t>(key.size());
    std::copy(key.begin(), key.end(), class_keys_next);
    class_keys_next += key.size();
    class_keys_free -= key.size();
    classes.push_back(std::move(c));
    class_hash.push_back(h);
    class_table[slot] = cls;
    if (classes.size() * 2 > class_table.size()) {  // keep the load factor under 1/2
      std::vector<int32_t> grown(class_table.size() * 2, -1);
      mask = grown.size() - 1;
      for (int32_t c2 = 0; c2 < static_cast<int32_t>(classes.size()); ++c2) {
        size_t s2 = class_hash[c2] & mask;
        while (grown[s2] >= 0) s2 = (s2 + 1) & mask;
        grown[s2] = c2;
      }
      class_table.swap(grown);
    }
  }
  int32_t old = node_class[i];
  if (old == cls) return;
  node_class[i] = cls;
  if (old >= 0) {
    NodeClass& oc = classes[old];
    if (--oc.count == 0) {
      oc.heap.clear();
      int32_t pos = oc.live_pos;
      int32_t last = live_classes.back();
      live_classes[pos] = last;
      classes[last].live_pos = pos;
      live_classes.pop_back();
      oc.live_pos = -1;
    }
  }
  NodeClass& nc = classes[cls];
  if (nc.count++ == 0) {
    nc.live_pos = static_cast<int32_t>(live_classes.size());
    live_classes.push_back(cls);
  }
  nc.heap.push_back(i);
  std::push_heap(nc.heap.begin(), nc.heap.end(), std::greater<int32_t>());
  if (nc.heap.size() > 2 * static_cast<size_t>(nc.count) + 32) SortedMembers(cls);
  if (tracking) {
    if (old >= 0) touched.push_back(old);
    touched.push_back(cls);
  }
}

int32_t ClusterState::Impl::LowestMember(int32_t cls) {
  std::vector<int32_t>& h = classes[cls].heap;
  while (node_class[h.front()] != cls) {
    std::pop_heap(h.begin(), h.end(), std::greater<int32_t>());
    h.pop_back();
  }
  return h.front();
}

const std::vector<int32_t>& ClusterState::Impl::SortedMembers(int32_t cls) {
  std::vector<int32_t>& h = classes[cls].heap;
  std::sort(h.begin(), h.end());
  h.erase(std::unique(h.begin(), h.end()), h.end());
  h.erase(std::remove_if(h.begin(), h.end(), [&](int32_t x) { return node_class[x] != cls; }),
          h.end());
  return h;
}

void ClusterState::Impl::RebuildNodeIndexes() {
  ++class_epoch;
  node_index.clear();
  signatures.clear();
  signature_rep.clear();
  classes.clear();
  class_keys.clear();
  class_keys_next = nullptr;
  class_keys_free = 0;
  class_table.clear();
  class_hash.clear();
  live_classes.clear();
  node_signature.assign(nodes.size(), -1);
  node_class.assign(nodes.size(), -1);
  capacity = {};
  for (int32_t i = 0; i < static_cast<int32_t>(nodes.size()); ++i) {
    nodes[i].index = i;
    node_index[nodes[i].name()] = i;
    auto [it, inserted] = signatures.emplace(SignatureOf(*nodes[i].node, label_keys),
                                             static_cast<int32_t>(signatures.size()));
    if (inserted) signature_rep.push_back(i);
    node_signature[i] = it->second;
    Reclassify(i);
    const Node& n = *nodes[i].node;
    if (n.ready && !n.unschedulable) {
      capacity.cpu_milli += n.cpu_milli;
      capacity.memory_bytes += n.memory_bytes;
      for (const auto& d : n.devices)
        if (d.healthy) capacity.gpu_milli += 1000;
    }
  }
}

bool ClusterState::Impl::NoteLabelKeys(const Job& j) {
  bool added = false;
  auto note = [&](const NodeSelectorTerm& t) {
    for (const auto& e : t.match_expressions) added |= label_keys.insert(e.key).second;
  };
  auto note_all = [&](const Placement& p) {
    for (const auto& [k, v] : p.node_selector) added |= label_keys.insert(k).second;
    for (const auto& t : p.affinity.required) note(t);
    for (const auto& pt : p.affinity.preferred) note(pt.term);
  };
  note_all(j.placement);
  for (const TaskGroup& g : j.groups)
    if (g.placement) note_all(*g.placement);
  return added;
}

void ClusterState::Impl::RebuildQueues() {
  for (auto& q : queues) {
    q.parent = q.q.parent.empty() ? -1 : QueueOf(q.q.parent);
    q.allocated = {};
  }
  // Parents that loop (a -> b -> a: hosts reject them, but a state may be given one) would
  // make every walk up the tree endless: the loop is cut at its first queue (by index),
  // which becomes a root.
  const int32_t n = static_cast<int32_t>(queues.size());
  for (int32_t q = 0; q < n; ++q) {
    int32_t p = queues[q].parent;
    for (int32_t steps = 0; p >= 0 && p != q && steps < n; ++steps) p = queues[p].parent;
    if (p == q) queues[q].parent = -1;
  }
  for (auto& q : queues) q.leaf = true;
  for (auto& q : queues) {
    q.depth = 0;
    for (int32_t p = q.parent; p >= 0; p = queues[p].parent) ++q.depth;
    if (q.parent >= 0) queues[q.parent].leaf = false;
  }
  for (auto& [id, j] : jobs) {
    j.queue = QueueOf(j.spec->queue);
    for (int32_t p = j.queue; p >= 0; p = queues[p].parent) queues[p].allocated += j.allocated;
  }
}

void ClusterState::Impl::CountShapes(const Job& j, int64_t sign) {
  std::string& key = shape_key_scratch;
  for (const auto& g : j.groups) {
    // Workloads have few distinct requests: find recent ones by value, not by key string.
    auto it = shape_counts.end();
    for (const auto& [req, at] : recent_shapes)
      if (req == g.request) {
        it = at;
        break;
      }
    if (it == shape_counts.end()) {
      ShapeKey(g.request, key);
      it = shape_counts.find(key);
      if (it == shape_counts.end()) it = shape_counts.try_emplace(key).first;
      if (recent_shapes.size() < 16) recent_shapes.push_back({g.request, it});
    }
    if (it->second.second == 0) it->second.first = g.request;
    it->second.second += sign * g.replicas;
    if (it->second.second <= 0) {
      recent_shapes.clear();  // it may be cached there
      shape_counts.erase(it);
    }
  }
}

Status ClusterState::Impl::BindTask(JobRec& j, int32_t task, const TaskAllocation& a, int64_t now) {
  if (task < 0 || task >= static_cast<int32_t>(j.allocations.size()))
    return InvalidArgument("job " + j.id() + ": no task " + std::to_string(task));
  if (j.allocations[task])
    return FailedPrecondition("job " + j.id() + " task " + std::to_string(task) +
                              ": already bound");
  auto it = node_index.find(a.node);
  if (it == node_index.end())
    return NotFound("job " + j.id() + " task " + std::to_string(task) + ": unknown node \"" +
                    a.node + "\"");
  const NodeState& n = nodes[it->second];
  for (const auto& d : a.devices) {
    if (d.device < 0 || d.device >= static_cast<int32_t>(n.devices.size()))
      return InvalidArgument("job " + j.id() + " task " + std::to_string(task) + ": node " +
                             a.node + " has no device " + std::to_string(d.device));
    const Device& dev = n.node->devices[d.device];
    if (d.mig_instance >= static_cast<int32_t>(dev.mig.size()) || d.mig_instance >= 32)
      return InvalidArgument("job " + j.id() + " task " + std::to_string(task) + ": device " +
                             std::to_string(d.device) + " on " + a.node + " has no MIG instance " +
                             std::to_string(d.mig_instance));
  }
  return BindAt(j, task, a, it->second, now);
}

Status ClusterState::Impl::BindAt(JobRec& j, int32_t task, TaskAllocation a, int32_t node,
                                  int64_t now) {
  NodeState& n = nodes[node];
  int64_t old_start = j.start_time;
  TakeAllocation(n, a);
  if (j.exclusive) ++n.exclusive_tasks;
  Reclassify(node);
  ResourceVector v = ChargeOf(a, *n.node, j.exclusive, n.exclusive_tasks == 1);
  j.allocations[task] = std::move(a);
  j.running += 1;
  j.allocated += v;
  for (int32_t p = j.queue; p >= 0; p = queues[p].parent) queues[p].allocated += v;
  if (j.start_time < 0) j.start_time = now;
  if (logging) undo.push_back({UndoOp::kBind, task, &j, old_start});
  return Status::Ok();
}

Status ClusterState::Impl::ReleaseTask(JobRec& j, int32_t task) {
  if (task < 0 || task >= static_cast<int32_t>(j.allocations.size()) || !j.allocations[task])
    return FailedPrecondition("job " + j.id() + " task " + std::to_string(task) + ": not running");
  TaskAllocation a = std::move(*j.allocations[task]);
  j.allocations[task].reset();
  auto it = node_index.find(a.node);
  ResourceVector v = AllocationVector(a);
  if (it != node_index.end()) {
    NodeState& n = nodes[it->second];
    GiveBackAllocation(n, a);
    // What BindAt charged (a fraction's memory share, an exclusive job's whole node).
    v = ChargeOf(a, *n.node, j.exclusive, j.exclusive && --n.exclusive_tasks == 0);
    Reclassify(it->second);
  }
  j.running -= 1;
  j.allocated -= v;
  for (int32_t p = j.queue; p >= 0; p = queues[p].parent) queues[p].allocated -= v;
  int64_t old_start = j.start_time;
  if (j.running == 0) j.start_time = -1;
  if (!freeze_pending && !borrowed) ListPending(j);
  if (logging) {
    undo.push_back({UndoOp::kRelease, task, &j, old_start});
    released.push_back(std::move(a));
  }
  return Status::Ok();
}

void ClusterState::Impl::ListPending(JobRec& j) {
  if (j.listed_at >= 0) return;
  j.listed_at = static_cast<int32_t>(pending.size());
  pending.push_back({&j.id(), &j});
}

void ClusterState::Impl::UnlistPending(JobRec& j) {
  if (j.listed_at < 0) return;
  pending[j.listed_at] = {nullptr, nullptr};
  j.listed_at = -1;
}

void ClusterState::Impl::SortPending() {
  using Entry = std::pair<const std::string*, JobRec*>;
  auto by_id = [](const Entry& x, const Entry& y) { return *x.first < *y.first; };
  // Moves the entries in [from, to) of jobs with a waiting task down to `w` on, dropping
  // the others; returns the new end.
  auto keep = [&](size_t from, size_t to, size_t w) {
    for (size_t i = from; i < to; ++i) {
      if (i + 8 < to && pending[i + 8].second != nullptr) Prefetch(pending[i + 8].second);
      const Entry e = pending[i];
      if (e.second == nullptr) continue;
      if (e.second->pending()) {
        e.second->listed_at = static_cast<int32_t>(w);
        pending[w++] = e;
      } else {
        e.second->listed_at = -1;
      }
    }
    return w;
  };
  const size_t sorted = keep(0, pending_sorted, 0);
  pending.resize(keep(pending_sorted, pending.size(), sorted));
  pending_sorted = pending.size();
  const auto mid = pending.begin() + static_cast<ptrdiff_t>(sorted);
  if (mid == pending.end()) return;
  // The additions, sorted (a snapshot's jobs arrive by id: then they are already), merged
  // from the first sorted entry that goes after them.
  if (!std::is_sorted(mid, pending.end(), by_id)) std::sort(mid, pending.end(), by_id);
  const auto from = std::upper_bound(pending.begin(), mid, *mid, by_id);
  std::inplace_merge(from, mid, pending.end(), by_id);
  for (auto it = from; it != pending.end(); ++it)
    it->second->listed_at = static_cast<int32_t>(it - pending.begin());
}

void ClusterState::Impl::Rollback(size_t mark) {
  bool was = logging;
  logging = false;
  while (undo.size() > mark) {
    UndoOp op = undo.back();
    undo.pop_back();
    if (op.kind == UndoOp::kBind) {
      (void)ReleaseTask(*op.job, op.task);
    } else {
      TaskAllocation a = std::move(released.back());
      released.pop_back();
      int32_t node = node_index.at(a.node);
      (void)BindAt(*op.job, op.task, std::move(a), node, 0);
    }
    op.job->start_time = op.old_start_time;
  }
  logging = was;
}

// ---- public API ----

ClusterState::ClusterState() : impl_(new Impl) {
  Queue def;
  def.name = "default";
  impl_->queues.push_back({def, -1, 0, true, {}});
  impl_->queue_index["default"] = 0;
}
ClusterState::~ClusterState() = default;

StatusOr<std::unique_ptr<ClusterState>> ClusterState::FromSnapshot(
    const Snapshot& snapshot, std::vector<std::pair<std::string, Status>>* rejected) {
  return Build(snapshot, rejected, /*borrow=*/false);
}

StatusOr<std::unique_ptr<ClusterState>> ClusterState::Borrowing(
    const Snapshot& snapshot, std::vector<std::pair<std::string, Status>>* rejected) {
  return Build(snapshot, rejected, /*borrow=*/true);
}

StatusOr<std::unique_ptr<ClusterState>> ClusterState::Build(
    const Snapshot& snapshot, std::vector<std::pair<std::string, Status>>* rejected, bool borrow) {
  auto st = std::make_unique<ClusterState>();
  Impl& m = *st->impl_;
  m.borrowed = borrow;
  // Nodes in one go (sorted once), then queues, then jobs.
  std::vector<const Node*> sorted;
  for (const Node& n : snapshot.nodes) sorted.push_back(&n);
  std::sort(sorted.begin(), sorted.end(),
            [](const Node* a, const Node* b) { return a->name < b->name; });
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (i > 0 && sorted[i]->name == sorted[i - 1]->name)
      return InvalidArgument("nodes: duplicate name \"" + sorted[i]->name + "\"");
    const Node* node = sorted[i];
    if (!borrow) {
      m.statics.push_back(std::make_unique<Node>(*node));
      node = m.statics.back().get();
    }
    m.nodes.push_back(EmptyNodeState(node, static_cast<int32_t>(i)));
  }
  // The jobs' label keys first: adding them one job at a time would rebuild the node
  // indexes at each new key.
  for (const Job& j : snapshot.jobs) m.NoteLabelKeys(j);
  m.RebuildNodeIndexes();
  for (const Queue& q : snapshot.queues) TESSERA_RETURN_IF_ERROR(st->UpsertQueue(q));
  for (const PriorityClass& pc : snapshot.priority_classes)
    TESSERA_RETURN_IF_ERROR(st->UpsertPriorityClass(pc));
  for (const Job& j : snapshot.jobs) {
    if (m.HasJob(j.id)) return InvalidArgument("jobs: duplicate id \"" + j.id + "\"");
    // (Not the public AddJob: the checks above and the label keys are done already.)
    std::unique_ptr<Job> owned = borrow ? nullptr : std::make_unique<Job>(j);
    const Job* spec = borrow ? &j : owned.get();
    Status s = m.AddJob(spec, std::move(owned));
    if (!s.ok()) {
      if (rejected == nullptr) return s;
      rejected->push_back({j.id, s});
    }
  }
  return st;
}

Status ClusterState::AddNode(const Node& node) {
  Impl& m = *impl_;
  if (m.borrowed) return FailedPrecondition("node: a borrowed state takes no new nodes");
  if (node.name.empty()) return InvalidArgument("node: name is required");
  if (m.node_index.count(node.name))
    return AlreadyExists("node \"" + node.name + "\" already exists");
  auto pos =
      std::lower_bound(m.nodes.begin(), m.nodes.end(), node.name,
                       [](const NodeState& n, const std::string& name) { return n.name() < name; });
  size_t at = pos - m.nodes.begin();
  m.statics.insert(m.statics.begin() + at, std::make_unique<Node>(node));
  m.nodes.insert(m.nodes.begin() + at,
                 EmptyNodeState(m.statics[at].get(), static_cast<int32_t>(at)));
  m.RebuildNodeIndexes();
  return Status::Ok();
}

Status ClusterState::RemoveNode(const std::string& name) {
  Impl& m = *impl_;
  if (m.borrowed) return FailedPrecondition("node: a borrowed state loses no nodes");
  auto it = m.node_index.find(name);
  if (it == m.node_index.end()) return NotFound("node \"" + name + "\" not found");
  for (auto& [id, j] : m.jobs)
    for (int32_t t = 0; t < static_cast<int32_t>(j.allocations.size()); ++t)
      if (j.allocations[t] && j.allocations[t]->node == name)
        TESSERA_RETURN_IF_ERROR(m.ReleaseTask(j, t));
  size_t at = it->second;
  m.nodes.erase(m.nodes.begin() + at);
  m.statics.erase(m.statics.begin() + at);
  m.RebuildNodeIndexes();
  return Status::Ok();
}

Status ClusterState::UpsertQueue(const Queue& queue) {
  Impl& m = *impl_;
  if (queue.name.empty()) return InvalidArgument("queue: name is required");
  auto it = m.queue_index.find(queue.name);
  if (it == m.queue_index.end()) {
    m.queue_index[queue.name] = static_cast<int32_t>(m.queues.size());
    m.queues.push_back({queue, -1, 0, true, {}});
  } else {
    m.queues[it->second].q = queue;
  }
  // Parents may arrive after children; an unknown parent is an error only at cycle time.
  m.RebuildQueues();
  return Status::Ok();
}

Status ClusterState::UpsertPriorityClass(const PriorityClass& pc) {
  impl_->priority_classes[pc.name] = pc;
  return Status::Ok();
}

Status ClusterState::AddJob(const Job& job) {
  // Checked before the copy: a rejected job costs none.
  if (job.id.empty()) return InvalidArgument("job: id is required");
  if (impl_->HasJob(job.id)) return AlreadyExists("job \"" + job.id + "\" already exists");
  if (impl_->NoteLabelKeys(job)) impl_->RebuildNodeIndexes();
  auto owned = std::make_unique<Job>(job);
  const Job* spec = owned.get();
  return impl_->AddJob(spec, std::move(owned));
}

Status ClusterState::Impl::AddJob(const Job* spec, std::unique_ptr<Job> owned) {
  const Job& job = *spec;
  if (job.id.empty()) return InvalidArgument("job: id is required");
  if (HasJob(job.id)) return AlreadyExists("job \"" + job.id + "\" already exists");
  int32_t q = QueueOf(job.queue);
  if (q < 0) return NotFound("job " + job.id + ": queue: unknown queue \"" + job.queue + "\"");
  if (job.TaskCount() <= 0)
    return InvalidArgument("job " + job.id + ": tasks: a job needs at least one task");
  // Hints at the end: snapshots list jobs by id, so each insertion is O(1) there.
  JobRec& j = jobs.emplace_hint(jobs.end(), job.id, JobRec{})->second;
  j.spec = spec;
  j.owned = std::move(owned);
  j.allocations.resize(job.TaskCount());
  j.queue = q;
  j.gang_min = job.GangMinimum();
  j.one_task_per_node = job.one_task_per_node;
  j.exclusive = job.exclusive;
  j.spread = TopologySpread::Applies(job);
  // (An exclusive job's shape differs from the same request's without: not plain.)
  j.plain = job.Unconstrained() && !job.exclusive;
  for (int32_t t = 0; t < static_cast<int32_t>(job.allocations.size()) && t < job.TaskCount();
       ++t) {
    if (!job.allocations[t]) continue;
    Status s = BindTask(j, t, *job.allocations[t], job.start_time);
    if (!s.ok()) {
      for (int32_t u = 0; u < t; ++u)
        if (j.allocations[u]) (void)ReleaseTask(j, u);
      UnlistPending(j);
      jobs.erase(job.id);
      return s;
    }
  }
  j.start_time = job.start_time >= 0 || j.running == 0 ? job.start_time : 0;
  if (j.pending() && !borrowed) ListPending(j);
  CountShapes(job, +1);
  return Status::Ok();
}

Status ClusterState::RemoveJob(const std::string& id) {
  Impl& m = *impl_;
  auto it = m.jobs.find(id);
  if (it == m.jobs.end()) return NotFound("job \"" + id + "\" not found");
  JobRec& j = it->second;
  for (int32_t t = 0; t < static_cast<int32_t>(j.allocations.size()); ++t)
    if (j.allocations[t]) TESSERA_RETURN_IF_ERROR(m.ReleaseTask(j, t));
  m.CountShapes(*j.spec, -1);
  m.UnlistPending(j);
  m.jobs.erase(it);
  return Status::Ok();
}

Status ClusterState::Bind(const std::string& job, int32_t task, const TaskAllocation& alloc,
                          int64_t now) {
  auto it = impl_->jobs.find(job);
  if (it == impl_->jobs.end()) return NotFound("job \"" + job + "\" not found");
  return impl_->BindTask(it->second, task, alloc, now);
}

Status ClusterState::Release(const std::string& job, int32_t task) {
  auto it = impl_->jobs.find(job);
  if (it == impl_->jobs.end()) return NotFound("job \"" + job + "\" not found");
  return impl_->ReleaseTask(it->second, task);
}

Status ClusterState::ApplyPlan(const Plan& plan) {
  for (const Eviction& e : plan.evictions) TESSERA_RETURN_IF_ERROR(Release(e.job, e.task));
  for (const Binding& b : plan.bindings)
    TESSERA_RETURN_IF_ERROR(Bind(b.job, b.task, b.allocation, plan.now));
  return Status::Ok();
}

std::optional<Job> ClusterState::FindJob(const std::string& id) const {
  auto it = impl_->jobs.find(id);
  if (it == impl_->jobs.end()) return std::nullopt;
  return it->second.Materialize();
}

const NodeState* ClusterState::FindNode(const std::string& name) const {
  auto it = impl_->node_index.find(name);
  return it == impl_->node_index.end() ? nullptr : &impl_->nodes[it->second];
}

size_t ClusterState::node_count() const { return impl_->nodes.size(); }
size_t ClusterState::job_count() const { return impl_->jobs.size(); }
size_t ClusterState::pending_count() const {
  size_t n = 0;
  for (const auto& [id, j] : impl_->jobs) n += j.pending();
  return n;
}

Snapshot ClusterState::ToSnapshot() const {
  Snapshot s;
  for (const auto& n : impl_->nodes) s.nodes.push_back(*n.node);
  for (const auto& q : impl_->queues) s.queues.push_back(q.q);
  for (const auto& [name, pc] : impl_->priority_classes) s.priority_classes.push_back(pc);
  for (const auto& [id, j] : impl_->jobs) s.jobs.push_back(j.Materialize());
  s.Canonicalize();
  return s;
}

}  // namespace tessera
