// ClusterState internals shared by cluster_state.cc and the cycle (scheduler.cc).
// Not part of the engine's public API. Thread-compatible.
#pragma once

#include <charconv>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/cluster_state.h"
#include "engine/node_state.h"
#include "engine/plugin.h"
#include "model/snapshot.h"

namespace tessera {

// Key building (engine-internal hash keys, never output): decimal integers without a
// temporary string, and a request's placement-relevant fields.
inline void AppendInt(std::string& s, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  s.append(buf, static_cast<size_t>(r.ptr - buf));  // (ptr, ptr) would go through replace()
}

inline void AppendRequestKey(const TaskRequest& r, std::string& s) {
  AppendInt(s, r.cpu_milli);
  s += ',';
  AppendInt(s, r.memory_bytes);
  s += ',';
  AppendInt(s, static_cast<int>(r.gpu.kind));
  s += ',';
  AppendInt(s, r.gpu.count);
  s += ',';
  AppendInt(s, r.gpu.milli);
  s += ',';
  AppendInt(s, r.gpu.memory_bytes);
  s += ',';
  s += r.gpu.mig_profile;
  for (const auto& m : r.gpu.models) {
    s += ',';
    s += m;
  }
}

// A job in the state: its definition, read-only and not copied when the state borrows a
// snapshot (Engine::Cycle(snapshot) builds a state that dies with the cycle), and its
// running state, which only the state keeps (the definition's own `allocations` and
// `start_time` are never read).
struct JobRec {
  const Job* spec = nullptr;   // the definition: `owned`, or a job of a borrowed snapshot
  std::unique_ptr<Job> owned;  // null when borrowed
  std::vector<std::optional<TaskAllocation>> allocations;  // per task; nullopt: waiting
  int64_t start_time = -1;                                 // when the gang started; -1 never
  int32_t queue = -1;  // index into Impl::queues; -1 if the queue is unknown
  int32_t running = 0;
  int32_t listed_at = -1;  // its entry in Impl::pending, or -1 when it has none
  ResourceVector allocated;
  // Copies of the definition's fields that every cycle reads for every pending job (the
  // definition spans six cache lines; these sit with the rest of the record).
  int32_t gang_min = 0;  // spec->GangMinimum()
  bool one_task_per_node = false;
  bool exclusive = false;
  bool spread = false;  // TopologySpread::Applies(*spec)
  bool plain = false;   // no node selector, affinity or tolerations: placed by its requests alone
  const std::string& id() const { return spec->id; }
  bool pending() const { return running < static_cast<int32_t>(allocations.size()); }
  JobProgress progress() const { return {start_time, allocated.gpu_milli, running}; }
  Job Materialize() const;  // the definition with the state's running state
};

struct QueueRec {
  Queue q;
  int32_t parent = -1;
  int32_t depth = 0;
  bool leaf = true;          // no queue has it as parent
  ResourceVector allocated;  // this queue and its descendants
};

// An equivalence class: nodes with equal static signature and equal free state. Scores
// and filters that do not depend on node identity are computed once per class.
//
// Members are kept in a lazily cleaned min-heap of node indices: a node that leaves the
// class stays in `heap` until it surfaces (node_class[i] != class) or the heap is compacted.
// Nodes move between classes at every bind and release, and a heap push/pop costs no
// allocation, where a std::set node did (the cycle's hottest allocation).
struct NodeClass {
  const uint8_t* key = nullptr;  // key_size bytes in Impl::class_keys (stable storage)
  int32_t key_size = 0;
  int32_t count = 0;          // live members
  std::vector<int32_t> heap;  // min-heap of node indices, possibly with stale entries
  int32_t live_pos = -1;      // position in Impl::live_classes, -1 when empty
};

// One undone-able change. A bind's allocation is read from the job (it holds it while
// bound); a release's allocation is kept in Impl::released (LIFO, like the log).
struct UndoOp {
  enum Kind { kBind, kRelease } kind;
  int32_t task;
  JobRec* job;
  int64_t old_start_time;
};

// Filter verdicts and scores per (task shape, node class), kept across cycles: a class id
// always names the same node state (until the classes are rebuilt: class_epoch), and a
// shape's filters and node-class scores depend on nothing else but the engine's plugins
// and the typical workload (see plugin.h). The simulators place one task per cycle on a
// kept state; without this every cycle re-scored every class.
struct PlacementMemo {
  struct Shape {
    std::vector<int8_t> pass;     // per class: 0 unknown, 1 pass, 2 fail
    std::vector<int64_t> scores;  // per class and score plugin
    // Per class, a score plugin's one-device choice made with its score (ScoreChoosing),
    // and which plugin made it (-1: none kept); grown only when one is made.
    struct Choice {
      int32_t plugin = -1;
      DeviceAssignment device;
    };
    std::vector<Choice> choices;
  };
  uint64_t engine = 0;  // the EngineImpl::id that computed them; 0 none
  uint64_t class_epoch = 0;
  bool configured_typical = false;  // the engine's own typical workload, else `typical`
  std::vector<TypicalRequest> typical;
  std::unordered_map<std::string, Shape> shapes;         // by shape key
  size_t bytes = 0;                                      // what the shapes hold, roughly
  static constexpr size_t kMaxBytes = size_t{64} << 20;  // then it starts over
};

struct ClusterState::Impl {
  // Parallel to nodes (stable pointers), except in a borrowed state, whose nodes point
  // into the snapshot and which takes no node deltas.
  std::vector<std::unique_ptr<Node>> statics;
  std::vector<NodeState> nodes;                         // by name
  std::unordered_map<std::string, int32_t> node_index;  // lookups only, never iterated
  std::vector<int32_t> node_signature;                  // static signature id per node
  std::vector<int32_t> node_class;                      // class id per node

  // The label keys a node's signature includes: those some job in the state names (node
  // selector, affinity). Other labels (a hostname, a rack) decide no filter or class-level
  // score (plugin.h), and would split identical nodes into classes of one. Grows only.
  std::set<std::string> label_keys;
  std::map<std::string, int32_t> signatures;  // serialized static signature -> id
  std::vector<int32_t> signature_rep;         // a node index per signature (for capacity views)

  std::vector<NodeClass> classes;
  // Every class's key, back to back in fixed-size chunks: they never move, and growing
  // does not copy (a doubling vector here cost a memcpy and fresh page faults per doubling).
  std::vector<std::unique_ptr<uint8_t[]>> class_keys;
  uint8_t* class_keys_next = nullptr;  // the unused end of the last chunk
  size_t class_keys_free = 0;          // and its size
  // Open-addressing table of class ids (-1 = empty slot), hashed by key; power-of-two size.
  std::vector<int32_t> class_table;
  std::vector<uint64_t> class_hash;   // per class, its key's hash
  std::vector<int32_t> live_classes;  // non-empty classes, in no particular order
  uint64_t class_epoch = 0;           // bumped when class ids are reused (RebuildNodeIndexes)
  PlacementMemo memo;

  std::map<std::string, JobRec> jobs;
  // The jobs with a waiting task, for the cycle, which reads them from this array with the
  // records fetched ahead (a tree walk cannot fetch ahead: it was a third of a replay's
  // time). Kept lazily, as no bind changes it: entries by id up to `pending_sorted`, then
  // the jobs that got a waiting task since, unsorted; SortPending drops the entries of
  // jobs without one and merges. A removed job's entry is emptied ({nullptr, nullptr}).
  std::vector<std::pair<const std::string*, JobRec*>> pending;
  size_t pending_sorted = 0;
  void ListPending(JobRec& j);    // j has a waiting task: an entry, if it has none
  void UnlistPending(JobRec& j);  // j goes away: empty its entry
  void SortPending();             // then `pending` is exactly the pending jobs, by id
  // Built by ClusterState::Borrowing for one cycle: its nodes' statics and its jobs are the
  // snapshot's, and it keeps no `pending` list (the cycle walks every job instead).
  bool borrowed = false;
  std::vector<QueueRec> queues;
  std::map<std::string, int32_t> queue_index;
  std::map<std::string, PriorityClass> priority_classes;

  // Learnt typical workload: request shape -> task count over all jobs.
  std::map<std::string, std::pair<TaskRequest, int64_t>> shape_counts;

  ResourceVector capacity;  // of schedulable nodes
  std::vector<UndoOp> undo;
  std::vector<TaskAllocation> released;  // one per kRelease entry of `undo`, in order
  bool logging = false;                  // record undo ops (during a cycle)
  // During a cycle the pending list is left alone: every change is rolled back at the end
  // (or the state is thrown away).
  bool freeze_pending = false;
  // Classes whose membership changed, for the cycle's per-shape indexes (drained by it).
  std::vector<int32_t> touched;
  bool tracking = false;
  std::vector<uint8_t> key_scratch;  // Reclassify's buffer (varint-encoded key)
  std::string shape_key_scratch;     // CountShapes' buffer
  // CountShapes' cache of recently counted requests (cleared when an entry is erased).
  std::vector<
      std::pair<TaskRequest, std::map<std::string, std::pair<TaskRequest, int64_t>>::iterator>>
      recent_shapes;

  // ---- mutation primitives (keep every index consistent) ----
  Status BindTask(JobRec& j, int32_t task, const TaskAllocation& a, int64_t now);
  Status ReleaseTask(JobRec& j, int32_t task);
  void Rollback(size_t mark);
  void RebuildNodeIndexes();  // after node add/remove
  void Reclassify(int32_t node);
  // The lowest member of a non-empty class (drops stale heap entries on the way).
  int32_t LowestMember(int32_t cls);
  // The members of a class in ascending order (compacts its heap; a sorted array is a heap).
  const std::vector<int32_t>& SortedMembers(int32_t cls);
  // Binds with the node given by index (the cycle knows it); `a.node` must name it.
  Status BindAt(JobRec& j, int32_t task, TaskAllocation a, int32_t node, int64_t now);
  void RebuildQueues();
  // Adds the label keys `j` names to label_keys; true if there were new ones (the
  // signatures must then be rebuilt).
  bool NoteLabelKeys(const Job& j);
  void CountShapes(const Job& j, int64_t sign);
  // Adds a job defined by `*spec` (owned by the caller when `owned` is null). The caller
  // has noted its label keys (NoteLabelKeys) and rebuilt the node indexes if they were new.
  Status AddJob(const Job* spec, std::unique_ptr<Job> owned);
  int32_t QueueOf(const std::string& name) const;
  bool HasJob(const std::string& id) const;
};

// (AllocationVector and ChargeOf, what binding or releasing an allocation counts against its
// job and queues, are in model/job.h: the server and the metrics charge the same.
// RequestVector is in engine/plugin.h, for plugins too.)

}  // namespace tessera
