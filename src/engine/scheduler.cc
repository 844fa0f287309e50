// One scheduling cycle over a ClusterState: the configured actions in order.
//
// Every tentative change goes through ClusterState::Impl's undo log: a gang transaction is
// a mark plus a rollback, a preemption trial is the same, and the whole cycle is rolled
// back at the end so the host's state is unchanged. Ordering (who goes next) lives in
// SortJobs and Allocate's queue tree; placement (where) in PlaceTask. See docs/engine.md.
#include <algorithm>
#include <climits>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <tuple>
#include <unordered_set>
#include <utility>

#include "common/prefetch.h"
#include "common/sort_rows.h"
#include "engine/engine_impl.h"
#include "engine/state_impl.h"

namespace tessera {
namespace {

constexpr int64_t kUnknown = INT64_MIN;
// How long an EASY head whose start is unknown (running jobs without estimates) waits
// before backfill fences nodes for it (CycleRun::Backfill).
constexpr int64_t kUnknownStartFenceAfter = 1800;

// A time for people: UTC wall-clock time for the server's clock; a virtual clock (the
// simulator's seconds from the trace's start, below 2001) prints as t=N.
std::string TimeText(int64_t t) {
  if (t < 1'000'000'000) return "t=" + std::to_string(t);
  std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Reclaim's test, for the queue taking back and for its victims alike. GPUs always count (a
// queue not guaranteed GPUs is above its guarantee with any); CPU and memory only where the
// queue is guaranteed them (a GPU guarantee says nothing of the CPU and memory every GPU task
// also uses); a queue with no guarantee is above it with anything.
bool AboveGuarantee(const ResourceVector& used, const ResourceVector& g) {
  if (g.IsZero()) return !used.IsZero();
  return used.gpu_milli > g.gpu_milli || (g.cpu_milli && used.cpu_milli > g.cpu_milli) ||
         (g.memory_bytes && used.memory_bytes > g.memory_bytes);
}

// `proportion`'s test (QueueKey): a queue is served before those that are not while some
// guaranteed component is under its guarantee, unless it is above its guarantee by reclaim's
// test. A queue guaranteed {2 GPUs, 64 CPUs} running 6 GPUs on 6 CPUs is above (reclaim
// takes from it), so it is not below too: else it would be served first, take what reclaim
// frees, and be reclaimed from again.
bool BelowGuarantee(const ResourceVector& used, const ResourceVector& g) {
  if (AboveGuarantee(used, g)) return false;
  return (g.cpu_milli > 0 && used.cpu_milli < g.cpu_milli) ||
         (g.memory_bytes > 0 && used.memory_bytes < g.memory_bytes) ||
         (g.gpu_milli > 0 && used.gpu_milli < g.gpu_milli);
}

// Whether reclaim may take `unit` from a queue that uses `used`: the queue is above its
// guarantee and the eviction leaves it at or above every guaranteed component it is not
// already below (Volcano's proportion: deserved <= allocated - reclaimee). Reclaim takes
// back what a queue borrowed, never part of its guarantee: a queue pushed below it would,
// under `proportion`, be served before the reclaiming queue in the next cycle, take the
// freed capacity straight back, and be reclaimed from again, cycle after cycle.
bool MayReclaim(const ResourceVector& used, const ResourceVector& unit, const ResourceVector& g) {
  if (!AboveGuarantee(used, g)) return false;
  const ResourceVector after = used - unit;
  auto keeps = [](int64_t before, int64_t left, int64_t guaranteed) {
    return guaranteed == 0 || before < guaranteed || left >= guaranteed;
  };
  return keeps(used.cpu_milli, after.cpu_milli, g.cpu_milli) &&
         keeps(used.memory_bytes, after.memory_bytes, g.memory_bytes) &&
         keeps(used.gpu_milli, after.gpu_milli, g.gpu_milli);
}

enum class JState { kAdmitted, kPlaced, kFailed, kWaiting, kError, kInfeasible };

// Why a placement failed, gathered for the pending reason.
struct Failure {
  std::string code;
  std::string message;
  std::string resource;
  std::map<std::string, int32_t> rejected;
  bool infeasible = false;
  // Node counts are gathered once per (shape, fenced) at the end of the cycle, against the
  // cluster as the plan leaves it: counting at every failure would cost a pass over all
  // node classes per unplaced job.
  bool deferred = false;
  int32_t task = -1;
  int32_t shape = -1;
  bool fenced = false;
  bool gang = false;  // a gang that only partly fit
  // One task per node: the nodes that could ever hold one of the job's tasks (-1 unknown).
  int32_t ever_nodes = -1;
  int32_t gang_fit = 0;
  // A gang that needs more than the whole cluster has: what it needs (the message).
  std::string exceeds_cluster;
};

// Small on purpose: the cycle walks 100k of these several times; its decision lives in
// the plan (CycleRun::Decision) and the job itself is touched only where needed.
struct PendingJob {
  JobRec* rec = nullptr;
  const TaskGroup* groups = nullptr;  // rec->spec->groups.data(): one pointer less per task
  JState state = JState::kAdmitted;
  bool tried = false;
  int32_t task_count = 0;  // rec->spec->TaskCount()
  int32_t gang_min = 0;    // rec->spec->GangMinimum()
  int32_t queue = -1;      // rec->queue
  int32_t shapes_at = 0;   // its task groups' shape ids: CycleRun::group_shapes_[shapes_at + g]
  int32_t failure = -1;    // index into CycleRun::failures_ of the last failed attempt
  bool one_task_per_node = false;  // rec->spec->one_task_per_node
  bool exclusive = false;          // rec->spec->exclusive
  bool spread = false;             // rec->spread: topology spread constraints, own or default
  bool over_limit = false;         // waits on its queue's limit (it may preempt within it)
  // Waits for tasks to exit that were evicted for it (PreemptionInProgress): backfill holds
  // the capacity it counted on for it (CycleRun::Backfill).
  bool awaits_eviction = false;

  // The task group of `task`, and its index.
  int32_t GroupOf(int32_t task) const {
    int32_t g = 0;
    for (; task >= groups[g].replicas; task -= groups[g].replicas) ++g;
    return g;
  }
};

// Geometric growth for the per-class caches (classes appear throughout a cycle).
size_t Grow(size_t have, size_t need) { return std::max(need + 64, have * 2); }

int64_t Ppm(int64_t used, int64_t total) {
  if (total <= 0) return used > 0 ? 1000000 : 0;
  return static_cast<int64_t>((static_cast<__int128>(used) * 1000000) / total);
}

// What a queue may use: its limit, and where it may not borrow, its guarantee. `capped`
// says which components `max` holds: a limit names only what it caps (its 0 components cap
// nothing), but a queue that may not borrow is capped at 0 GPUs when it is guaranteed none.
struct QueueCap {
  ResourceVector max;
  bool cpu = false, memory = false, gpu = false;
};

bool WithinLimit(const ResourceVector& use, const QueueCap& cap) {
  return (!cap.cpu || use.cpu_milli <= cap.max.cpu_milli) &&
         (!cap.memory || use.memory_bytes <= cap.max.memory_bytes) &&
         (!cap.gpu || use.gpu_milli <= cap.max.gpu_milli);
}

// `borrowing: false` caps the queue at its guarantee as reclaim counts it (AboveGuarantee):
// GPUs always, at 0 if none are guaranteed (else a queue guaranteed only CPU could take every
// GPU, and reclaim would then take them back); CPU and memory where they are guaranteed. A
// parent guaranteed no GPUs is not capped at 0: its children's guarantees are what it holds.
std::optional<QueueCap> EffectiveLimit(const QueueRec& r) {
  const Queue& q = r.q;
  if (q.borrowing && !q.limit) return std::nullopt;
  QueueCap c;
  if (q.limit) {
    c.max = *q.limit;
    c.cpu = c.max.cpu_milli > 0;
    c.memory = c.max.memory_bytes > 0;
    c.gpu = c.max.gpu_milli > 0;
  }
  if (!q.borrowing) {
    auto cap = [](int64_t& max, bool& capped, int64_t g) {
      if (!capped || g < max) max = g;
      capped = true;
    };
    const ResourceVector& g = q.guarantee;
    if (g.cpu_milli > 0) cap(c.max.cpu_milli, c.cpu, g.cpu_milli);
    if (g.memory_bytes > 0) cap(c.max.memory_bytes, c.memory, g.memory_bytes);
    if (g.gpu_milli > 0 || r.leaf) cap(c.max.gpu_milli, c.gpu, g.gpu_milli);
  }
  return c;
}

// "nvidia.com/gpu 4, cpu 8, memory 16Gi": the components of `v` that gpu, cpu and memory
// say to show, 0 included.
std::string ResourceWords(const ResourceVector& v, bool gpu, bool cpu, bool memory) {
  std::string s;
  auto add = [&](const char* name, const std::string& x) {
    if (!s.empty()) s += ", ";
    s += name;
    s += " ";
    s += x;
  };
  if (gpu) add("nvidia.com/gpu", FormatMilli(v.gpu_milli));
  if (cpu) add("cpu", FormatMilli(v.cpu_milli));
  if (memory) add("memory", FormatBytes(v.memory_bytes));
  return s.empty() ? "nothing" : s;
}

std::string ResourceWords(const ResourceVector& v) {
  return ResourceWords(v, v.gpu_milli != 0, v.cpu_milli != 0, v.memory_bytes != 0);
}

// A cap's words: the components it holds, 0 included ("nvidia.com/gpu 0").
std::string ResourceWords(const QueueCap& c) {
  return ResourceWords(c.max, c.gpu, c.cpu, c.memory);
}

std::string KubeMessage(int32_t total, const std::map<std::string, int32_t>& rejected,
                        int32_t available = 0) {
  std::vector<std::string> parts;
  for (const auto& [reason, count] : rejected)
    parts.push_back(std::to_string(count) + " " + reason);
  std::sort(parts.begin(), parts.end());
  std::string msg =
      std::to_string(available) + "/" + std::to_string(total) + " nodes are available";
  for (size_t i = 0; i < parts.size(); ++i) msg += (i == 0 ? ": " : ", ") + parts[i];
  return msg + ".";
}

void AppendTermKey(std::string& s, const NodeSelectorTerm& t) {
  for (const auto& e : t.match_expressions) {
    s += e.key;
    s += '#';
    AppendInt(s, static_cast<int>(e.op));
    for (const auto& v : e.values) {
      s += ',';
      s += v;
    }
    s += ';';
  }
  s += '|';
}

// Writes the placement-relevant shape of a job's task group (its request and placement)
// into `s` (cleared first). Built in a reused buffer: it runs once per pending job and task
// group.
void ShapeString(const Job& j, const TaskGroup& g, std::string& s) {
  const Placement& p = j.PlacementOf(g);
  s.clear();
  AppendRequestKey(g.request, s);
  s += '#';
  for (const auto& [k, v] : p.node_selector) {
    s += k;
    s += '=';
    s += v;
    s += ';';
  }
  s += '#';
  for (const auto& t : p.affinity.required) AppendTermKey(s, t);
  s += '#';
  for (const auto& pt : p.affinity.preferred) {
    AppendInt(s, pt.weight);
    AppendTermKey(s, pt.term);
  }
  s += '#';
  for (const auto& t : p.tolerations) {
    s += t.key;
    s += '=';
    s += t.value;
    s += '/';
    AppendInt(s, static_cast<int>(t.op));
    s += '/';
    if (t.effect)
      AppendInt(s, static_cast<int>(*t.effect));
    else
      s += '*';
    s += ';';
  }
  if (j.exclusive) s += "#x";  // its filters differ (Exclusion)
  // DoNotSchedule constraints refuse nodes (the missing key alone, for a first task).
  for (const TopologySpreadConstraint& c : g.spread) {
    s += "#s";
    AppendInt(s, c.max_skew);
    s += c.topology_key;
    s += c.schedule_anyway ? 'a' : 'd';
    AppendInt(s, c.min_domains);
    s += c.honor_node_affinity ? 'h' : 'i';
    s += c.honor_taints ? 'h' : 'i';
  }
}

// Pending reasons of exclusivity, in kube-scheduler words.
constexpr char kSharedNodes[] = "node(s) were shared with other jobs";
constexpr char kHeldExclusively[] = "node(s) were held exclusively by another job";

// Node exclusivity (Job::exclusive), beside the filter plugins: an exclusive job goes only to
// nodes without tasks, and no other job to a node an exclusive job holds; null when `n`
// passes. It reads only the node's task count and whether an exclusive job holds it, both in
// the node's class key, so verdicts per (shape, class) stay valid (an exclusive job's shape
// is its own). An exclusive job's own nodes (holding only its tasks) pass too: `own`, which
// callers work out per node (PlaceTask, CountRejections).
const char* Exclusion(const Job& job, const NodeState& n, bool own) {
  if (job.exclusive) return n.tasks > 0 && !own ? kSharedNodes : nullptr;
  return n.exclusive_tasks > 0 ? kHeldExclusively : nullptr;
}

class CycleRun {
 public:
  // `restore`: leave the state as it was (undo every change at the end); false when the
  // state is thrown away after the cycle (Cycle(Snapshot)), which saves the undo pass.
  CycleRun(const EngineImpl& e, ClusterState::Impl& m, int64_t now, Rng& rng, bool restore)
      : e_(e), m_(m), now_(now), rng_(rng), restore_(restore) {}

  Plan Run();

 private:
  // ---- ordering ----
  void SortJobs();                       // order_: by the order plugins' keys, submit time, id
  void AppendSortKeys(const JobRec& j);  // to sort_keys_, K per job in jobs_ order
  std::vector<int64_t> sort_keys_;
  // The job's entry in the plan (plan_.decisions is parallel to jobs_).
  JobDecision& Decision(const PendingJob& pj) { return plan_.decisions[&pj - jobs_.data()]; }
  void SetReason(const PendingJob& pj, PendingReason r) {
    Decision(pj).reason = std::make_shared<const PendingReason>(std::move(r));
  }
  // Siblings go in the order of (below guarantee first, weighted dominant share), then name.
  std::pair<int64_t, int64_t> QueueKey(int32_t q) const;

  // ---- placement ----
  int32_t ShapeId(const JobRec& j, int32_t group);
  int32_t ShapeIdByKey(const Job& j, int32_t group);
  // `own`: n holds only tasks of t's exclusive job, which may add more there (Exclusion).
  bool Passes(const TaskContext& t, const NodeState& n, bool own = false) const;
  FilterVerdict Verdict(const TaskContext& t, const NodeState& n, bool own = false) const;
  // Whether node i holds tasks of the exclusive job j and no others.
  bool OwnsWhole(const JobRec& j, int32_t i) const;
  // What evicting `tasks` of j gives back to its queue (ChargeOf, task by task).
  ResourceVector EvictionCharge(const JobRec& j, const std::vector<int32_t>& tasks) const;
  // What decides whether a job none of whose tasks is placed fits, and what it may evict:
  // its queue, priority, rank, state, gang and task shapes; empty for a job partly placed.
  std::vector<int64_t> AlikeKey(const PendingJob& pj);
  // The lowest member of `cls` that is not fenced, not in `taken` (sorted) and not refused
  // to `task` by `spread`, or -1.
  int32_t RepOf(int32_t cls, const std::vector<int32_t>* taken = nullptr,
                const TopologySpread* spread = nullptr, int32_t task = 0) const;
  // Places one task and binds it (undo-logged); -1 and a filled Failure if it fits nowhere.
  // `spread`: the job's topology spread constraints (null: it has none).
  int32_t PlaceTask(PendingJob& pj, int32_t task, const std::vector<int32_t>& gang_nodes,
                    const TopologySpread* spread, Failure* why);
  // The job's topology spread constraints with its tasks in the state counted (pj.spread).
  TopologySpread SpreadOf(const PendingJob& pj);
  std::map<const Job*, TopologySpread> spread_base_;  // none counted; per job, for the cycle
  // The gang transaction: all of the required tasks or nothing. True if committed.
  bool TryPlaceJob(PendingJob& pj, Failure* why);
  bool QueueAdmits(const JobRec& j, const ResourceVector& extra, std::string* why) const;
  // The deepest queue from `queue` up whose limit `extra` more would exceed, or -1.
  int32_t BlockingQueue(int32_t queue, const ResourceVector& extra) const;
  // Whether `queue` is `ancestor` or below it.
  bool Within(int32_t queue, int32_t ancestor) const;
  // What the job's unplaced gang minimum asks for (its smallest start).
  ResourceVector MinimumNeed(const PendingJob& pj) const;
  // Why the job can never start under its queues' limits (its minimum alone exceeds one),
  // or "" when it could.
  std::string ExceedsQueueLimit(const PendingJob& pj, const ResourceVector& need) const;
  bool Infeasible(PendingJob& pj, int32_t task);
  bool NeverFits(PendingJob& pj, int32_t task);  // Infeasible, cached per shape (infeasible_)
  Failure CountRejections(PendingJob& pj, int32_t task);
  Failure CountNeverFits(PendingJob& pj, int32_t task);
  void BuildCapacityNodes();
  int32_t NodesEverHolding(const Job& job);
  // Why the gang can never start on the cluster as it is, "" when it could; asked by enqueue
  // and by allocate, computed once per job and cycle (it walks every node).
  std::string GangExceedsCluster(const Job& job);
  std::string GangExceedsClusterUncached(const Job& job);
  std::map<const Job*, std::string> gang_exceeds_;
  std::vector<int64_t> cluster_totals_;  // GPU milli, CPU milli, memory of all nodes (lazy)
  void DistinctNodesReason(PendingJob& pj, const Failure& f, const Failure& counted,
                           std::string& msg, std::map<std::string, int32_t>& rejected);
  void Finalize();
  std::map<int32_t, bool> infeasible_;  // per shape
  void FillFailure(PendingJob& pj, int32_t task, const std::vector<int32_t>& gang_nodes,
                   Failure* why);

  // ---- actions ----
  void Enqueue();
  void Allocate();
  // Serves `jobs` (in job order, each in a queue) one by one in hierarchical queue order
  // (drf / proportion, QueueKey), calling serve(job) on each; stops when it returns false.
  // Keys are read as the jobs are served, so each job goes to the queue that is then the
  // least served. Allocate's pass, and backfill's after its reservation.
  template <typename Serve>
  void WalkQueues(const std::vector<PendingJob*>& jobs, Serve serve);
  void Attempt(PendingJob& pj);
  // For the attempt at seq[i] (seq: the order allocate visits).
  void PrefetchAhead(const std::vector<PendingJob*>& seq, size_t i);
  void EvictFor(bool reclaim);
  std::optional<int64_t> PreemptionRank(const JobRec& j) const;
  std::string RankReason(const JobRec& pre, const JobRec& victim) const;
  void Backfill();
  void RecordBindings(size_t mark, const PendingJob& pj);

  const EngineImpl& e_;
  ClusterState::Impl& m_;
  int64_t now_;
  Rng& rng_;
  bool restore_;
  CycleContext ctx_;
  std::vector<TypicalRequest> typical_;          // when learnt (else ctx_.typical is the engine's)
  std::vector<TypicalGpuGroup> typical_by_gpu_;  // likewise
  Plan plan_;
  std::vector<PendingJob> jobs_;  // by id
  std::vector<char> limited_;     // per queue: it or an ancestor has a limit
  // The blocked head backfill reserved for, or whose reason says why it did not yet.
  const PendingJob* reserved_head_ = nullptr;
  std::string reservation_note_;       // appended to its reason message
  std::vector<int32_t> group_shapes_;  // shape id per (job, task group); see PendingJob
  std::vector<Failure> failures_;      // why attempts failed; see PendingJob
  std::vector<PendingJob*> order_;     // job order (static keys)
  std::vector<PendingJob*> visit_;     // the order allocate visited them
  bool any_over_limit_ = false;        // a job waits on its queue's limit
  // During a pass that only binds (allocate's, backfill's after its reservation): per
  // fence mode (none, backfill's fence, the preemptors' nodes only) and shape id, the failure
  // (index into failures_) of a single-task job of that shape that found no node in this pass, or
  // -1. See Attempt.
  std::vector<int32_t> shape_failed_[3];
  bool binding_pass_ = false;
  void StartBindingPass();
  bool strict_ = false;           // backfill configured: allocate stops at the blocked head
  bool stopped_at_head_ = false;  // it did: jobs behind the head were not visited
  // Placement caches, valid for this cycle: per shape, per class.
  std::unordered_map<std::string, int32_t> shape_ids_;
  std::string shape_scratch_;
  // Shapes of jobs without constraints, by request (see ShapeId).
  std::vector<std::pair<TaskRequest, int32_t>> plain_shapes_;
  // Per shape, its entries in the state's PlacementMemo (kept across cycles).
  std::vector<std::vector<int8_t>*> pass_cache_;    // [shape][class]: 0 unknown, 1 pass, 2 fail
  std::vector<std::vector<int64_t>*> score_cache_;  // [shape][class * P + p]
  std::vector<std::vector<PlacementMemo::Shape::Choice>*> choice_cache_;  // [shape][class]
  std::vector<DeviceAssignment> choice_scratch_;
  // Score plugin k's score of class `cls` (node: one of its members) for the task, keeping
  // a one-device choice it makes along (ScoreChoosing) for PlaceTask.
  int64_t ClassScore(int32_t shape, size_t k, const TaskContext& t, const NodeState& node,
                     int32_t cls);
  void BindMemo();  // at the start of the cycle: keep the state's memo or start it over
  // Sizes the shape's memo entries for `classes` classes (verdicts; scores too if asked).
  void GrowMemo(int32_t shape, size_t classes, bool scores);
  // Resizes one of the memo's vectors to `size`, keeping PlacementMemo::bytes.
  template <typename T>
  void ResizeMemo(std::vector<T>& v, size_t size, const T& fill) {
    m_.memo.bytes -= v.size() * sizeof(T);
    v.resize(size, fill);
    m_.memo.bytes += v.size() * sizeof(T);
  }
  std::vector<bool> fenced_;  // nodes held by the reservation
  const PendingJob* fence_owner_ = nullptr;
  // How a pending reason names `other` to the owners of a job in queue `viewer`: by name in
  // the same queue, else by its queue only (a team does not see other queues' jobs).
  std::string JobSeenFrom(int32_t viewer, const JobRec& other) const {
    return other.queue == viewer ? "job " + other.spec->id
                                 : "a job of queue " + m_.queues[other.queue].q.name;
  }
  std::set<std::pair<const JobRec*, int32_t>> victims_;  // tasks already being evicted
  std::unordered_set<const JobRec*> victim_jobs_;        // their jobs
  // Per queue, what this cycle's evictions give back once their tasks exit, and what the
  // preemptors waiting for them will then take. Reclaim judges a queue by its use as these
  // leave it (Settled): two preemptors of one cycle must not together take a queue below its
  // guarantee, nor take their own queue above theirs. Sized when EvictFor first runs.
  std::vector<ResourceVector> evicting_, claimed_;
  ResourceVector Settled(int32_t q) const {
    return m_.queues[q].allocated - evicting_[q] + claimed_[q];
  }
  // While preempt and reclaim run, each preemptor's victims are released and the preemptor
  // is bound where it will go (from undo mark hold_mark_, -1 when none), so that the later
  // searches of the cycle see only what is left: two preemptors must not count on the same
  // free capacity. The holds bind no one for real; they are undone before any action that
  // binds (DropHolds), their charges then moved into evicting_ and claimed_, and backfill
  // fences the nodes each preemptor was bound to (held_).
  struct Hold {
    PendingJob* preemptor;
    std::vector<int32_t> nodes;                                // sorted, distinct
    std::vector<std::pair<int32_t, ResourceVector>> evicting;  // victims' queue, charge
    ResourceVector claimed;                                    // the preemptor's charge
  };
  std::vector<Hold> held_;
  // The preemptors held (their jobs): no victims for the rest of the cycle, since a hold binds
  // their unplaced tasks, which a later search would take for running ones.
  std::unordered_set<const JobRec*> held_jobs_;
  int64_t hold_mark_ = -1;
  size_t holds_settled_ = 0;  // held_[0, this) are undone, their charges in evicting_/claimed_
  void DropHolds();
  bool fence_held_only_ = false;  // fenced_ holds only the preemptors' nodes (backfill)
  int64_t CountedGpuMilli(const JobRec& j) const;
  bool all_counted_ = true;  // every node is ready and uncordoned (counted in the capacity)
  ResourceVector StartNeed(const PendingJob& pj) const;
  std::vector<int64_t> scratch_;
  // Per-shape index of feasible classes ordered by (-total score, lowest member): the best
  // node for a task is its first entry. Kept current from ClusterState's touched classes.
  struct ShapeIndex {
    bool built = false;
    size_t seen = 0;           // touched_log_ entries already applied
    const Job* job = nullptr;  // a job with this shape (for filters), its group
    int32_t group = 0;
    int32_t first_task = 0;  // and that group's first task
    // Min-heap of (-total, first member, class); an element is live while entry[class]
    // still names its first member (stale ones are dropped when they surface: no allocation
    // per update). A class's total is fixed for the cycle (ClassTotal caches it), so the
    // member alone tells a live element, and an entry takes 4 bytes per class and shape.
    std::vector<std::tuple<int64_t, int32_t, int32_t>> best;
    std::vector<int32_t> entry;  // per class: its first member in `best`, or -1
    int32_t live = 0;            // live elements in `best`
    bool Live(const std::tuple<int64_t, int32_t, int32_t>& b) const {
      return entry[std::get<2>(b)] == std::get<1>(b);
    }
  };
  std::vector<ShapeIndex> index_;
  // Classes touched this cycle, in order; each shape's index catches up with it only when
  // that shape is placed next (most binds change classes that few shapes will ask about).
  std::vector<int32_t> touched_log_;
  // Per class, the last CatchUp that updated it (dedupes the touched log).
  std::vector<uint32_t> caught_up_;
  uint32_t catch_up_ = 0;
  std::vector<std::tuple<int64_t, int32_t, int32_t>> fence_scratch_;  // see PlaceTask
  bool normalizes_ = false;
  bool ClassTotal(int32_t shape, int32_t cls, const TaskContext& t, int64_t* total);
  void UpdateIndex(int32_t shape, int32_t cls);
  void CatchUp(int32_t shape);
  std::vector<std::unique_ptr<Node>> capacity_nodes_;  // per signature, ready and uncordoned
};

// ---------------------------------------------------------------------------------------

void CycleRun::AppendSortKeys(const JobRec& j) {
  const JobProgress progress = j.progress();
  for (const auto& o : e_.orders) sort_keys_.push_back(o->Key(*j.spec, progress, ctx_));
  sort_keys_.push_back(j.spec->submit_time);
  sort_keys_.push_back(j.spec->submit_seq);
}

void CycleRun::SortJobs() {
  // A sort over integers (the keys were taken while setting each job up, when it was in
  // cache): (plugin keys..., submit time, submission order), then job id, which is unique: a
  // total order. jobs_ is in id order, so a job's index stands for its id. (Traces leave the
  // submission order 0: a constant column costs the radix sort nothing.)
  const size_t K = e_.orders.size() + 2;
  order_.clear();
  std::vector<uint32_t> rows;
  if (RadixSortRows(sort_keys_, K, jobs_.size(), rows)) {
    for (uint32_t r : rows) order_.push_back(&jobs_[r]);
    return;
  }
  const std::vector<int64_t>& keys = sort_keys_;
  const PendingJob* base = jobs_.data();
  for (auto& pj : jobs_) order_.push_back(&pj);
  std::sort(order_.begin(), order_.end(), [&](const PendingJob* a, const PendingJob* b) {
    const int64_t* x = &keys[(a - base) * K];
    const int64_t* y = &keys[(b - base) * K];
    for (size_t k = 0; k < K; ++k)
      if (x[k] != y[k]) return x[k] < y[k];
    return a < b;
  });
}

// (below guarantee ? 0 : 1 [proportion], weighted dominant share ppm [drf/proportion], name)
std::pair<int64_t, int64_t> CycleRun::QueueKey(int32_t q) const {
  const QueueRec& r = m_.queues[q];
  int64_t below = 1;
  if (e_.queue_proportion && BelowGuarantee(r.allocated, r.q.guarantee)) below = 0;
  int64_t share = std::max({Ppm(r.allocated.cpu_milli, m_.capacity.cpu_milli),
                            Ppm(r.allocated.memory_bytes, m_.capacity.memory_bytes),
                            Ppm(r.allocated.gpu_milli, m_.capacity.gpu_milli)});
  return {below, share * 1000 / std::max(1, r.q.weight)};
}

int32_t CycleRun::ShapeId(const JobRec& j, int32_t group) {
  const TaskRequest& r = j.spec->groups[group].request;
  // Most jobs carry no selector, affinity or tolerations, and workloads have few distinct
  // requests: look those up by request first (no key string to build).
  if (j.plain)
    for (const auto& [req, id] : plain_shapes_)
      if (req == r) return id;
  const int32_t id = ShapeIdByKey(*j.spec, group);
  if (j.plain && plain_shapes_.size() < 16) plain_shapes_.push_back({r, id});
  return id;
}

int32_t CycleRun::ShapeIdByKey(const Job& j, int32_t group) {
  ShapeString(j, j.groups[group], shape_scratch_);
  auto it = shape_ids_.find(shape_scratch_);
  if (it != shape_ids_.end()) return it->second;
  it = shape_ids_.emplace(shape_scratch_, static_cast<int32_t>(shape_ids_.size())).first;
  PlacementMemo::Shape& memo = m_.memo.shapes[shape_scratch_];
  pass_cache_.push_back(&memo.pass);
  score_cache_.push_back(&memo.scores);
  choice_cache_.push_back(&memo.choices);
  index_.emplace_back();
  index_.back().job = &j;
  index_.back().group = group;
  for (int32_t g = 0; g < group; ++g) index_.back().first_task += j.groups[g].replicas;
  return it->second;
}

FilterVerdict CycleRun::Verdict(const TaskContext& t, const NodeState& n, bool own) const {
  if (!n.node->ready) return FilterVerdict::Fail("node(s) were not ready");
  if (n.node->unschedulable) return FilterVerdict::Fail("node(s) were unschedulable");
  for (const auto& f : e_.filters) {
    FilterVerdict v = f->Filter(t, n);
    if (!v.ok()) return v;
  }
  if (const char* why = Exclusion(*t.job, n, own)) return FilterVerdict::Fail(why);
  return CheckFit(*t.request, n);
}

// Verdict(t, n).ok() without building a failure's words (asked for every new node class).
bool CycleRun::Passes(const TaskContext& t, const NodeState& n, bool own) const {
  if (!n.node->ready || n.node->unschedulable) return false;
  for (const auto& f : e_.filters)
    if (!f->Filter(t, n).ok()) return false;
  return Exclusion(*t.job, n, own) == nullptr && Fits(*t.request, n);
}

bool CycleRun::OwnsWhole(const JobRec& j, int32_t i) const {
  if (!j.exclusive || m_.nodes[i].tasks == 0) return false;
  int32_t here = 0;
  for (const auto& a : j.allocations) here += a && a->node == m_.nodes[i].name();
  return here == m_.nodes[i].tasks;
}

std::vector<int64_t> CycleRun::AlikeKey(const PendingJob& pj) {
  const JobRec& r = *pj.rec;
  for (const auto& a : r.allocations)
    if (a) return {};
  std::vector<int64_t> key{pj.queue,
                           r.spec->priority,
                           PreemptionRank(r).value_or(INT64_MIN),
                           static_cast<int64_t>(pj.state),
                           pj.over_limit,
                           pj.gang_min,
                           pj.one_task_per_node,
                           pj.exclusive};
  for (size_t g = 0; g < r.spec->groups.size(); ++g) {
    key.push_back(group_shapes_[pj.shapes_at + g]);
    key.push_back(r.spec->groups[g].replicas);
  }
  return key;
}

// The GPU milli a job's tasks occupy on their devices, for the bounds on free GPUs (preempt,
// backfill): its charge, except that a fraction charged by its memory share (DeviceCharge)
// counts its compute. Charges of fractions may add up to more than a device, so free GPUs
// counted from charges could rule out a placement that fits; an exclusive job's whole-node
// charge stays (nobody else can use that node).
namespace {
int64_t OccupiedGpuMilli(const JobRec& j) {
  if (j.exclusive) return j.allocated.gpu_milli;
  int64_t milli = 0;
  for (const auto& a : j.allocations)
    if (a) milli += a->GpuMilli();
  return milli;
}
}  // namespace

// OccupiedGpuMilli on the nodes counted in the capacity (ready and not cordoned) only: the
// bounds on free GPUs start from that capacity, and work still running on a drained node
// holds none of it.
int64_t CycleRun::CountedGpuMilli(const JobRec& j) const {
  if (all_counted_) return OccupiedGpuMilli(j);
  int64_t milli = 0;
  std::vector<int32_t> whole;  // an exclusive job's nodes, charged once each
  for (const auto& a : j.allocations) {
    if (!a) continue;
    const auto at = m_.node_index.find(a->node);
    if (at == m_.node_index.end()) continue;
    const Node& n = *m_.nodes[at->second].node;
    if (!n.ready || n.unschedulable) continue;
    if (!j.exclusive) {
      milli += a->GpuMilli();
    } else if (std::find(whole.begin(), whole.end(), at->second) == whole.end()) {
      whole.push_back(at->second);
      for (const auto& d : n.devices) milli += d.healthy ? 1000 : 0;
    }
  }
  return milli;
}

// What a job's start takes: its unplaced gang minimum, the first tasks in task order as
// TryPlaceJob requires them (MinimumNeed), or, with its minimum running, its next task. Bounds
// that rule a job out use it rather than every unplaced task: an elastic job (minAvailable
// below its task count) starts with its minimum.
ResourceVector CycleRun::StartNeed(const PendingJob& pj) const {
  if (pj.gang_min > pj.rec->running) return MinimumNeed(pj);
  for (int32_t t = 0; t < pj.task_count; ++t)
    if (!pj.rec->allocations[t]) return RequestVector(pj.groups[pj.GroupOf(t)].request);
  return {};
}

ResourceVector CycleRun::EvictionCharge(const JobRec& j, const std::vector<int32_t>& tasks) const {
  ResourceVector v;
  std::map<int32_t, int32_t> left;  // node -> the job's tasks still there
  for (int32_t t : tasks) {
    const TaskAllocation& a = *j.allocations[t];
    auto at = m_.node_index.find(a.node);
    if (at == m_.node_index.end()) {
      v += AllocationVector(a);
      continue;
    }
    const NodeState& n = m_.nodes[at->second];
    auto it = left.try_emplace(at->second, n.exclusive_tasks).first;
    v += ChargeOf(a, *n.node, j.exclusive, --it->second == 0);
  }
  return v;
}

int32_t CycleRun::RepOf(int32_t cls, const std::vector<int32_t>* taken,
                        const TopologySpread* spread, int32_t task) const {
  auto usable = [&](int32_t i) {
    return (fenced_.empty() || !fenced_[i]) &&
           (taken == nullptr || !std::binary_search(taken->begin(), taken->end(), i)) &&
           (spread == nullptr || spread->Refusal(task, i) == nullptr);
  };
  if (fenced_.empty()) {
    // The lowest member is usually free: a node the job took has left the class.
    const int32_t low = m_.LowestMember(cls);
    if ((taken == nullptr && spread == nullptr) || usable(low)) return low;
  }
  for (int32_t i : m_.SortedMembers(cls))
    if (usable(i)) return i;
  return -1;
}

bool CycleRun::QueueAdmits(const JobRec& j, const ResourceVector& extra, std::string* why) const {
  for (int32_t q = j.queue; q >= 0; q = m_.queues[q].parent) {
    const QueueRec& r = m_.queues[q];
    auto lim = EffectiveLimit(r);
    if (!lim) continue;
    if (!WithinLimit(r.allocated + extra, *lim)) {
      if (why)
        *why = "queue " + r.q.name + " would exceed its limit (" + ResourceWords(*lim) +
               "): in use " + ResourceWords(r.allocated) + ", this job needs " +
               ResourceWords(extra);
      return false;
    }
  }
  return true;
}

int32_t CycleRun::BlockingQueue(int32_t queue, const ResourceVector& extra) const {
  for (int32_t q = queue; q >= 0; q = m_.queues[q].parent) {
    const auto lim = EffectiveLimit(m_.queues[q]);
    if (lim && !WithinLimit(m_.queues[q].allocated + extra, *lim)) return q;
  }
  return -1;
}

bool CycleRun::Within(int32_t queue, int32_t ancestor) const {
  for (int32_t q = queue; q >= 0; q = m_.queues[q].parent)
    if (q == ancestor) return true;
  return false;
}

ResourceVector CycleRun::MinimumNeed(const PendingJob& pj) const {
  const JobRec& j = *pj.rec;
  ResourceVector need;
  const int32_t required = std::max(0, pj.gang_min - j.running);
  for (int32_t t = 0, k = 0; t < pj.task_count && k < required; ++t)
    if (!j.allocations[t]) {
      need += RequestVector(j.spec->GroupOfTask(t).request);
      ++k;
    }
  return need;
}

std::string CycleRun::ExceedsQueueLimit(const PendingJob& pj, const ResourceVector& need) const {
  if (pj.rec->running > 0) return "";  // it started under these limits
  for (int32_t q = pj.queue; q >= 0; q = m_.queues[q].parent) {
    auto lim = EffectiveLimit(m_.queues[q]);
    if (lim && !WithinLimit(need, *lim))
      return "can never start under queue " + m_.queues[q].q.name + "'s limit (" +
             ResourceWords(*lim) + "): this job needs at least " + ResourceWords(need);
  }
  return "";
}

void CycleRun::GrowMemo(int32_t shape, size_t classes, bool scores) {
  const size_t P = e_.scores.size();
  auto& pass = *pass_cache_[shape];
  auto& cache = *score_cache_[shape];
  if (pass.size() < classes) ResizeMemo<int8_t>(pass, Grow(pass.size(), m_.classes.size()), 0);
  if (scores && cache.size() < classes * P)
    ResizeMemo(cache, Grow(cache.size() / std::max<size_t>(P, 1), m_.classes.size()) * P, kUnknown);
}

bool CycleRun::ClassTotal(int32_t shape, int32_t cls, const TaskContext& t, int64_t* total) {
  const size_t P = e_.scores.size();
  GrowMemo(shape, static_cast<size_t>(cls) + 1, /*scores=*/true);
  auto& pass = *pass_cache_[shape];
  auto& cache = *score_cache_[shape];
  const NodeState& rep = m_.nodes[m_.LowestMember(cls)];
  int8_t& p = pass[cls];
  if (p == 0) p = Passes(t, rep) ? 1 : 2;
  if (p != 1) return false;
  int64_t sum = 0;
  for (size_t k = 0; k < P; ++k) {
    int64_t& slot = cache[cls * P + k];
    if (slot == kUnknown) slot = ClassScore(shape, k, t, rep, cls);
    sum += e_.scores[k].weight * slot;
  }
  *total = sum;
  return true;
}

int64_t CycleRun::ClassScore(int32_t shape, size_t k, const TaskContext& t, const NodeState& node,
                             int32_t cls) {
  choice_scratch_.clear();
  const int64_t score = e_.scores[k].plugin->ScoreChoosing(t, node, choice_scratch_);
  if (choice_scratch_.size() == 1) {
    auto& choices = *choice_cache_[shape];
    if (choices.size() <= static_cast<size_t>(cls))
      ResizeMemo(choices, Grow(choices.size(), m_.classes.size()), {});
    choices[cls] = {static_cast<int32_t>(k), choice_scratch_[0]};
  }
  return score;
}

void CycleRun::UpdateIndex(int32_t shape, int32_t cls) {
  ShapeIndex& ix = index_[shape];
  if (ix.entry.size() <= static_cast<size_t>(cls))
    ix.entry.resize(Grow(ix.entry.size(), m_.classes.size()), -1);
  int32_t& e = ix.entry[cls];
  if (e >= 0) {  // its heap entry goes stale
    e = -1;
    --ix.live;
  }
  if (m_.classes[cls].count == 0) return;
  const Job& job = *ix.job;
  std::vector<int32_t> none;
  TaskContext t{&job, ix.first_task, &job.groups[ix.group].request, &ctx_, &none, &m_.nodes, shape};
  int64_t total;
  if (!ClassTotal(shape, cls, t, &total)) return;
  e = m_.LowestMember(cls);
  ++ix.live;
  ix.best.push_back({-total, e, cls});
  std::push_heap(ix.best.begin(), ix.best.end(), std::greater<>());
  if (ix.best.size() > 2 * static_cast<size_t>(ix.live) + 64) {
    // Compact: keep one copy of each live entry (a sorted array is a heap).
    std::sort(ix.best.begin(), ix.best.end());
    ix.best.erase(std::unique(ix.best.begin(), ix.best.end()), ix.best.end());
    ix.best.erase(
        std::remove_if(ix.best.begin(), ix.best.end(), [&](const auto& b) { return !ix.Live(b); }),
        ix.best.end());
  }
}

void CycleRun::CatchUp(int32_t shape) {
  touched_log_.insert(touched_log_.end(), m_.touched.begin(), m_.touched.end());
  m_.touched.clear();
  ShapeIndex& ix = index_[shape];
  if (!ix.built) {
    ix.built = true;
    ix.seen = touched_log_.size();
    for (int32_t cls : m_.live_classes) UpdateIndex(shape, cls);
    return;
  }
  if (ix.seen == touched_log_.size()) return;
  // Each class once (the order does not matter: the index's first entry is its least).
  if (++catch_up_ == 0) {  // wrapped
    std::fill(caught_up_.begin(), caught_up_.end(), 0);
    catch_up_ = 1;
  }
  if (caught_up_.size() < m_.classes.size())
    caught_up_.resize(Grow(caught_up_.size(), m_.classes.size()), 0);
  for (size_t k = ix.seen; k < touched_log_.size(); ++k) {
    const int32_t cls = touched_log_[k];
    if (caught_up_[cls] == catch_up_) continue;
    caught_up_[cls] = catch_up_;
    UpdateIndex(shape, cls);
  }
  ix.seen = touched_log_.size();
}

int32_t CycleRun::PlaceTask(PendingJob& pj, int32_t task, const std::vector<int32_t>& gang_nodes,
                            const TopologySpread* spread, Failure* why) {
  const Job& job = *pj.rec->spec;  // only plugins read it, and only for new node classes
  const int32_t group = pj.GroupOf(task);
  const TaskRequest& req = pj.groups[group].request;
  TaskContext t{
      &job, task, &req, &ctx_, &gang_nodes, &m_.nodes, group_shapes_[pj.shapes_at + group]};
  const int32_t shape = t.shape_id;
  if (spread != nullptr && spread->HasSoft(task)) t.spread = spread;
  // DoNotSchedule topology spread: not a filter plugin either (it depends on where the job's
  // tasks are, and on a label that does not split classes): nodes it refuses are skipped on
  // the per-class path, as one task per node's are.
  const TopologySpread* refuses = spread != nullptr && spread->HasHard(task) ? spread : nullptr;

  bool node_specific = false;
  for (const auto& s : e_.scores) node_specific |= s.plugin->NodeSpecific(t);
  const size_t P = e_.scores.size();

  int32_t best = -1;
  // One task per node: the nodes holding the job's tasks are out. Not a filter (verdicts are
  // cached per node class, and the shape index offers a class's lowest member), so such a
  // job takes the per-class path below, which offers each class's lowest member it lacks.
  const bool distinct = pj.one_task_per_node && !gang_nodes.empty();
  // An exclusive job's own nodes (holding its tasks and no others) may take more of them;
  // their classes fail its shape's verdict (tasks > 0), so they are offered one by one.
  const bool own = pj.exclusive && !pj.one_task_per_node && !gang_nodes.empty();
  const bool indexed =
      !distinct && !own && refuses == nullptr && !node_specific && !normalizes_ && P > 0;
  if (indexed) {
    ShapeIndex& ix = index_[shape];
    CatchUp(shape);
    auto drop_stale = [&] {
      while (!ix.best.empty() && !ix.Live(ix.best.front())) {
        std::pop_heap(ix.best.begin(), ix.best.end(), std::greater<>());
        ix.best.pop_back();
      }
    };
    drop_stale();
    if (fenced_.empty()) {
      if (!ix.best.empty()) best = std::get<1>(ix.best.front());
    } else {
      // Backfill's fence: a class counts with its lowest unfenced member (RepOf). Entries
      // come off the heap by (-total, lowest member); the first class with an unfenced
      // member sets the best total, and among classes of that total the lowest unfenced
      // member wins, which no class whose lowest member is above it can beat. The entries
      // taken off go back. (The fence holds a few nodes: few entries are taken.)
      int64_t best_total = 0;
      std::vector<std::tuple<int64_t, int32_t, int32_t>>& taken = fence_scratch_;
      taken.clear();
      while (!ix.best.empty()) {
        const auto top = ix.best.front();
        if (best >= 0 && (std::get<0>(top) != best_total || std::get<1>(top) > best)) break;
        std::pop_heap(ix.best.begin(), ix.best.end(), std::greater<>());
        ix.best.pop_back();
        taken.push_back(top);
        const int32_t rep = RepOf(std::get<2>(top));
        if (rep >= 0 && (best < 0 || rep < best)) {
          best = rep;
          best_total = std::get<0>(top);
        }
        drop_stale();
      }
      for (const auto& e : taken) {
        ix.best.push_back(e);
        std::push_heap(ix.best.begin(), ix.best.end(), std::greater<>());
      }
    }
    if (best < 0) {
      if (why) FillFailure(pj, task, gang_nodes, why);
      return -1;
    }
  } else {
    GrowMemo(shape, m_.classes.size(), /*scores=*/!node_specific);
    auto& pass = *pass_cache_[shape];
    auto& cache = *score_cache_[shape];

    // Candidates: (node index) of feasible classes' representatives, or every member when
    // scores are node-specific.
    std::vector<int32_t> cand;
    std::vector<int32_t> cand_cls;
    for (int32_t cls : m_.live_classes) {
      int8_t& p = pass[cls];
      if (p == 0) p = Passes(t, m_.nodes[m_.LowestMember(cls)]) ? 1 : 2;
      if (p != 1) continue;
      if (node_specific) {
        for (int32_t i : m_.SortedMembers(cls))
          if ((fenced_.empty() || !fenced_[i]) &&
              !(distinct && std::binary_search(gang_nodes.begin(), gang_nodes.end(), i)) &&
              (refuses == nullptr || refuses->Refusal(task, i) == nullptr)) {
            cand.push_back(i);
            cand_cls.push_back(cls);
          }
      } else {
        int32_t rep = RepOf(cls, distinct ? &gang_nodes : nullptr, refuses, task);
        if (rep < 0) continue;
        cand.push_back(rep);
        cand_cls.push_back(cls);
      }
    }
    for (size_t k = 0; own && k < gang_nodes.size();) {
      const int32_t i = gang_nodes[k];
      size_t end = k;
      while (end < gang_nodes.size() && gang_nodes[end] == i) ++end;  // sorted: its tasks
      const NodeState& n = m_.nodes[i];
      if (n.tasks == static_cast<int32_t>(end - k) && (fenced_.empty() || !fenced_[i]) &&
          (refuses == nullptr || refuses->Refusal(task, i) == nullptr) &&
          Passes(t, n, /*own=*/true)) {
        cand.push_back(i);
        cand_cls.push_back(m_.node_class[i]);
      }
      k = end;
    }
    if (cand.empty()) {
      if (why) FillFailure(pj, task, gang_nodes, why);
      return -1;
    }
    if (P == 0) {
      best = *std::min_element(cand.begin(), cand.end());
    } else {
      const size_t C = cand.size();
      std::vector<int64_t> total(C, 0);
      std::vector<int64_t> raw(C);
      for (size_t p = 0; p < P; ++p) {
        const ScorePlugin& sp = *e_.scores[p].plugin;
        for (size_t c = 0; c < C; ++c) {
          if (node_specific) {
            raw[c] = sp.Score(t, m_.nodes[cand[c]]);
          } else {
            int64_t& slot = cache[cand_cls[c] * P + p];
            if (slot == kUnknown) slot = ClassScore(shape, p, t, m_.nodes[cand[c]], cand_cls[c]);
            raw[c] = slot;
          }
        }
        sp.Normalize(t, raw);
        for (size_t c = 0; c < C; ++c) total[c] += e_.scores[p].weight * raw[c];
      }
      for (size_t c = 0; c < C; ++c)
        if (best < 0 || total[c] > total[best] || (total[c] == total[best] && cand[c] < cand[best]))
          best = static_cast<int32_t>(c);
      best = cand[best];
    }
  }
  NodeState& node = m_.nodes[best];
  TaskAllocation a;
  a.node = node.name();
  a.cpu_milli = req.cpu_milli;
  a.memory_bytes = req.memory_bytes;
  bool chosen = false;
  // A class-level choice kept with the score is the one ChooseDevices would make here.
  const PlacementMemo::Shape::Choice* kept = nullptr;
  if (!node_specific) {
    const auto& choices = *choice_cache_[shape];
    const size_t cls = static_cast<size_t>(m_.node_class[best]);
    if (cls < choices.size() && choices[cls].plugin >= 0) kept = &choices[cls];
  }
  for (size_t idx : e_.device_choosers) {
    std::vector<DeviceAssignment> devs;
    bool chooses;
    if (kept != nullptr && kept->plugin == static_cast<int32_t>(idx)) {
      devs.push_back(kept->device);
      chooses = true;
    } else {
      chooses = e_.scores[idx].plugin->ChooseDevices(t, node, devs);
    }
    if (chooses && ValidDevices(req, node, devs)) {
      a.devices = std::move(devs);
      chosen = true;
      break;
    }
  }
  if (!chosen && !DefaultDevices(req, node, a.devices)) {
    if (why) FillFailure(pj, task, gang_nodes, why);
    return -1;  // unreachable when filters and CheckFit agree
  }
  Status s = m_.BindAt(*pj.rec, task, std::move(a), best, now_);
  if (!s.ok()) {
    if (why) {
      why->code = "Error";
      why->message = s.message();
    }
    return -1;
  }
  return best;
}

void CycleRun::FillFailure(PendingJob& pj, int32_t task, const std::vector<int32_t>& gang_nodes,
                           Failure* why) {
  const Job& job = *pj.rec->spec;
  const int32_t group = pj.GroupOf(task);
  why->deferred = true;
  why->code = "Unschedulable";
  why->task = task;
  why->shape = group_shapes_[pj.shapes_at + group];
  why->fenced = !fenced_.empty() && !fence_held_only_;
  why->infeasible = NeverFits(pj, task);
  if (job.one_task_per_node) {
    why->ever_nodes = NodesEverHolding(job);
    why->infeasible |= why->ever_nodes < job.GangMinimum();
  }
}

// A gang whose cheapest start (its gang minimum of its smallest tasks) asks for more GPUs,
// CPU or memory than all nodes together have can never start, though each task may fit a
// node; "" when it could. (Without this it would wait forever as merely busy, and as a
// backfill head it would hold its reservation for nothing.)
std::string CycleRun::GangExceedsCluster(const Job& job) {
  auto [it, fresh] = gang_exceeds_.try_emplace(&job);
  if (fresh) it->second = GangExceedsClusterUncached(job);
  return it->second;
}

std::string CycleRun::GangExceedsClusterUncached(const Job& job) {
  struct Dim {
    const char* name;
    std::vector<int64_t> asks;
    int64_t have = 0;
  };
  if (cluster_totals_.empty()) {
    cluster_totals_.assign(3, 0);
    for (const NodeState& n : m_.nodes) {
      cluster_totals_[0] += static_cast<int64_t>(n.node->devices.size()) * 1000;
      cluster_totals_[1] += n.node->cpu_milli;
      cluster_totals_[2] += n.node->memory_bytes;
    }
  }
  Dim dims[] = {{"nvidia.com/gpu", {}, cluster_totals_[0]},
                {"cpu", {}, cluster_totals_[1]},
                {"memory", {}, cluster_totals_[2]}};
  for (const TaskGroup& g : job.groups)
    for (int32_t r = 0; r < g.replicas; ++r) {
      const GpuRequest& gpu = g.request.gpu;
      dims[0].asks.push_back(gpu.kind == GpuRequestKind::kWhole      ? gpu.count * 1000LL
                             : gpu.kind == GpuRequestKind::kFraction ? gpu.milli
                                                                     : 0);
      dims[1].asks.push_back(g.request.cpu_milli);
      dims[2].asks.push_back(g.request.memory_bytes);
    }
  const size_t need = static_cast<size_t>(job.GangMinimum());
  for (Dim& d : dims) {
    if (d.asks.size() < need) return "";
    std::partial_sort(d.asks.begin(), d.asks.begin() + need, d.asks.end());
    int64_t sum = 0;
    for (size_t i = 0; i < need; ++i) sum += d.asks[i];
    if (sum <= d.have) continue;
    auto amount = [&](int64_t v) {
      return d.name == dims[2].name ? FormatBytes(v) : FormatMilli(v);
    };
    return "its gang minimum of " + std::to_string(need) + " tasks needs " + amount(sum) + " " +
           d.name + ", all " + std::to_string(m_.nodes.size()) + " node(s) together have " +
           amount(d.have);
  }
  // Nor can it start when, even empty, the nodes hold fewer such tasks than its minimum:
  // each task asks at least the smallest ask in every dimension, so a node holds at most
  // its capacity over that in each (three 5-GPU tasks on two 8-GPU nodes: one per node).
  int64_t least[3];
  for (int k = 0; k < 3; ++k)
    least[k] = *std::min_element(dims[k].asks.begin(), dims[k].asks.end());
  int64_t fit = 0;
  for (const NodeState& n : m_.nodes) {
    const int64_t cap[3] = {static_cast<int64_t>(n.node->devices.size()) * 1000, n.node->cpu_milli,
                            n.node->memory_bytes};
    int64_t here = static_cast<int64_t>(need);
    for (int k = 0; k < 3; ++k)
      if (least[k] > 0) here = std::min(here, cap[k] / least[k]);
    fit += here;
    if (fit >= static_cast<int64_t>(need)) return "";
  }
  return "its gang minimum of " + std::to_string(need) +
         " tasks cannot be placed together: even empty, all " + std::to_string(m_.nodes.size()) +
         " node(s) hold at most " + std::to_string(fit) + " of its tasks (each asks for at least " +
         FormatMilli(least[0]) + " nvidia.com/gpu, " + FormatMilli(least[1]) + " cpu, " +
         FormatBytes(least[2]) + " memory)";
}

// The rejections' summary: the Kubernetes-style message, the code, the resource most
// nodes lacked, over a cluster of `nodes` nodes.
Failure SummariseRejections(Failure f, const std::map<std::string, int32_t>& by_resource,
                            int32_t nodes, int32_t available = 0) {
  f.message = KubeMessage(nodes, f.rejected, available);
  f.code = by_resource.empty() ? "NoMatchingNode" : "Insufficient";
  int32_t most = 0;
  for (const auto& [res, n] : by_resource)
    if (n > most) {
      most = n;
      f.resource = res;
    }
  return f;
}

Failure CycleRun::CountRejections(PendingJob& pj, int32_t task) {
  const Job& job = *pj.rec->spec;
  const TaskRequest& req = job.GroupOfTask(task).request;
  std::vector<int32_t> none;
  TaskContext t{&job, task, &req, &ctx_, &none, &m_.nodes, -1};
  Failure f;
  std::map<std::string, int32_t> by_resource;
  // Nodes that would take this task alone (the job failed on the rest of its gang, or on
  // one task per node): "available", so that the counts add up to the cluster.
  int32_t available = 0;
  auto count = [&](const FilterVerdict& v, std::span<const int32_t> members) {
    if (v.ok()) {
      int32_t fenced = 0;
      for (int32_t i : members) fenced += !fenced_.empty() && fenced_[i];
      if (fenced > 0)
        f.rejected["node(s) were reserved for " + JobSeenFrom(pj.queue, *fence_owner_->rec)] +=
            fenced;
      available += static_cast<int32_t>(members.size()) - fenced;
      return;
    }
    f.rejected[v.reason] += static_cast<int32_t>(members.size());
    if (!v.resource.empty()) by_resource[v.resource] += static_cast<int32_t>(members.size());
  };
  // An exclusive job with running tasks may add tasks to its own nodes: nodes with tasks
  // are judged one by one (Finalize does not share such a job's counts).
  const bool own = pj.exclusive && pj.rec->running > 0;
  // DoNotSchedule topology spread refuses nodes one by one, among those the rest passes.
  std::optional<TopologySpread> spread;
  if (pj.spread) spread = SpreadOf(pj);
  const bool refuses = spread && spread->HasHard(task);
  auto judge = [&](const FilterVerdict& v, const int32_t& i) {
    const char* r = refuses && v.ok() ? spread->Refusal(task, i) : nullptr;
    count(r != nullptr ? FilterVerdict::Fail(r) : v, {&i, 1});
  };
  for (int32_t cls : m_.live_classes) {
    const auto& members = m_.SortedMembers(cls);
    if (own && m_.nodes[members.front()].tasks > 0) {
      for (const int32_t& i : members) judge(Verdict(t, m_.nodes[i], OwnsWhole(*pj.rec, i)), i);
      continue;
    }
    FilterVerdict v = Verdict(t, m_.nodes[members.front()]);
    if (refuses && v.ok()) {
      for (const int32_t& i : members) judge(v, i);
      continue;
    }
    count(v, members);
  }
  return SummariseRejections(std::move(f), by_resource, static_cast<int32_t>(m_.nodes.size()),
                             available);
}

// Why a task can never fit: the verdicts against every node as it would be empty, ready and
// uncordoned (as Infeasible decides). The busy cluster's verdicts would name what is short
// at the moment (GPUs in use) rather than what no node has (the CPU asked for).
Failure CycleRun::CountNeverFits(PendingJob& pj, int32_t task) {
  const Job& job = *pj.rec->spec;
  const TaskRequest& req = job.GroupOfTask(task).request;
  std::vector<int32_t> none;
  TaskContext t{&job, task, &req, &ctx_, &none, &m_.nodes, -1};
  BuildCapacityNodes();
  std::vector<int32_t> per_signature(capacity_nodes_.size(), 0);
  for (int32_t s : m_.node_signature) ++per_signature[s];
  Failure f;
  std::map<std::string, int32_t> by_resource;
  for (size_t s = 0; s < capacity_nodes_.size(); ++s) {
    FilterVerdict v = Verdict(t, EmptyNodeState(capacity_nodes_[s].get(), 0));
    if (v.ok()) continue;
    f.rejected[v.reason] += per_signature[s];
    if (!v.resource.empty()) by_resource[v.resource] += per_signature[s];
  }
  const int32_t nodes = static_cast<int32_t>(m_.nodes.size());
  f = SummariseRejections(std::move(f), by_resource, nodes);
  // Every node short of one resource: how much a task asks beside the most any node has,
  // which says what to change (sbatch refuses such a job at once, naming no figure).
  if (!f.resource.empty() && by_resource[f.resource] == nodes && f.message.ends_with(".")) {
    std::string ask, most;
    if (f.resource == "cpu" || f.resource == "memory") {
      const bool cpu = f.resource == "cpu";
      int64_t has = 0;
      for (const auto& n : capacity_nodes_)
        has = std::max(has, cpu ? n->cpu_milli : n->memory_bytes);
      ask = cpu ? FormatMilli(req.cpu_milli) : FormatBytes(req.memory_bytes);
      most = cpu ? FormatMilli(has) : FormatBytes(has);
    } else if (f.resource == "nvidia.com/gpu" || f.resource.starts_with("nvidia.com/mig-")) {
      // Whole GPUs: devices without MIG; a MIG profile: its instances.
      const std::string profile = f.resource == "nvidia.com/gpu" ? "" : f.resource.substr(15);
      int64_t has = 0;
      for (const auto& n : capacity_nodes_) {
        // Only devices the task could use: healthy, of a model it allows, MIG as it asks.
        const NodeState empty = EmptyNodeState(n.get(), 0);
        int64_t here = 0;
        for (int32_t d = 0; d < static_cast<int32_t>(n->devices.size()); ++d) {
          if (!DeviceMatches(req, empty, d)) continue;
          if (profile.empty()) ++here;
          for (const MigInstance& m : n->devices[d].mig)
            here += !profile.empty() && m.profile == profile;
        }
        has = std::max(has, here);
      }
      ask = std::to_string(req.gpu.count);
      most = std::to_string(has);
    }
    if (!ask.empty()) {
      f.message.pop_back();
      f.message +=
          " (a task asks " + ask + " " + f.resource +
          (most == "0" ? "; no node has any)." : "; the most any node has is " + most + ").");
    }
  }
  return f;
}

void CycleRun::Finalize() {
  // Per (shape, fenced): the rejections counted, and the reason of a single-task job without
  // gang or one-task-per-node terms, which depends on nothing else (its `infeasible` is the
  // shape's): such jobs, most of those not placed in a busy cycle, share it. The fence's
  // words depend on the viewer too: the fence owner's queue sees its job by name, the others
  // only its queue (JobSeenFrom), so whether the job shares the owner's queue is in the key.
  struct Counted {
    Failure failure;
    std::shared_ptr<const PendingReason> plain;
  };
  // (shape, fenced, infeasible, in the fence owner's queue)
  std::map<std::tuple<int32_t, bool, bool, bool>, Counted> cache;
  std::vector<bool> saved;
  for (auto& pj : jobs_) {
    if (pj.failure < 0) continue;
    Failure& f = failures_[pj.failure];
    if (!f.exceeds_cluster.empty() && pj.state == JState::kInfeasible) {
      SetReason(pj, {"Unschedulable",
                     "can never fit on this cluster as it is: " + f.exceeds_cluster,
                     "",
                     {}});
      continue;
    }
    if (f.deferred && pj.state != JState::kPlaced && pj.state != JState::kWaiting) {
      const bool owners = f.fenced && fence_owner_ != nullptr && fence_owner_->queue == pj.queue;
      auto key = std::make_tuple(f.shape, f.fenced, f.infeasible, owners);
      // An exclusive job's own nodes make its counts its own (CountRejections): not shared;
      // so do where a job's tasks are under topology spread constraints.
      const bool own =
          ((pj.exclusive && pj.rec->running > 0) || (pj.spread && pj.task_count > 1)) &&
          !f.infeasible;
      auto it = own ? cache.end() : cache.find(key);
      Counted mine;
      if (it == cache.end()) {
        if (!f.fenced) saved.swap(fenced_);
        Counted counted{f.infeasible ? CountNeverFits(pj, f.task) : CountRejections(pj, f.task),
                        nullptr};
        if (!f.fenced) saved.swap(fenced_);
        if (own)
          mine = std::move(counted);
        else
          it = cache.emplace(key, std::move(counted)).first;
      }
      const Failure& c = own ? mine.failure : it->second.failure;
      // pj's copies: the job's definition is long out of cache by now.
      const bool plain = pj.task_count == 1 && !pj.one_task_per_node && !f.gang && !own;
      if (plain && it->second.plain != nullptr) {
        Decision(pj).reason = it->second.plain;
        continue;
      }
      std::string msg = c.message;
      if (pj.task_count > 1) msg = "task " + std::to_string(f.task) + ": " + msg;
      std::map<std::string, int32_t> rejected = c.rejected;
      if (pj.one_task_per_node) DistinctNodesReason(pj, f, c, msg, rejected);
      std::string code = c.code;
      if (f.gang && !f.infeasible) {
        code = "GangUnsatisfied";
        msg = "gang minimum " + std::to_string(pj.gang_min) + " of " +
              std::to_string(pj.task_count) + " tasks: only " + std::to_string(f.gang_fit) +
              " fit together; " + msg;
      }
      if (f.infeasible) msg = "can never fit on this cluster as it is: " + msg;
      SetReason(pj, {std::move(code), std::move(msg), c.resource, std::move(rejected)});
      if (plain) it->second.plain = Decision(pj).reason;
    }
  }
  if (reserved_head_ != nullptr && Decision(*reserved_head_).reason != nullptr) {
    PendingReason r = *Decision(*reserved_head_).reason;
    r.message += reservation_note_;
    SetReason(*reserved_head_, std::move(r));
  }
}

bool CycleRun::NeverFits(PendingJob& pj, int32_t task) {
  const int32_t shape = group_shapes_[pj.shapes_at + pj.GroupOf(task)];
  auto it = infeasible_.find(shape);
  if (it == infeasible_.end()) it = infeasible_.emplace(shape, Infeasible(pj, task)).first;
  return it->second;
}

bool CycleRun::Infeasible(PendingJob& pj, int32_t task) {
  const Job& job = *pj.rec->spec;
  const TaskRequest& req = job.GroupOfTask(task).request;
  std::vector<int32_t> none;
  TaskContext t{&job, task, &req, &ctx_, &none, &m_.nodes, -1};
  BuildCapacityNodes();
  for (const auto& n : capacity_nodes_)
    if (Passes(t, EmptyNodeState(n.get(), 0))) return false;
  return true;
}

// One node per static signature, empty, ready and uncordoned: the cluster "as it is".
void CycleRun::BuildCapacityNodes() {
  if (!capacity_nodes_.empty()) return;
  for (int32_t rep : m_.signature_rep) {
    auto n = std::make_unique<Node>(*m_.nodes[rep].node);
    n->ready = true;
    n->unschedulable = false;
    capacity_nodes_.push_back(std::move(n));
  }
}

// How many nodes could ever hold one of the job's tasks (empty, ready and uncordoned): a
// one-task-per-node gang needs that many.
int32_t CycleRun::NodesEverHolding(const Job& job) {
  BuildCapacityNodes();
  std::vector<int32_t> none;
  std::vector<bool> can(capacity_nodes_.size(), false);
  for (size_t s = 0; s < capacity_nodes_.size(); ++s)
    for (int32_t g = 0, first = 0; g < static_cast<int32_t>(job.groups.size()) && !can[s];
         first += job.groups[g].replicas, ++g) {
      TaskContext t{&job, first, &job.groups[g].request, &ctx_, &none, &m_.nodes, -1};
      can[s] = Passes(t, EmptyNodeState(capacity_nodes_[s].get(), 0));
    }
  int32_t count = 0;
  for (int32_t sig : m_.node_signature) count += can[sig];
  return count;
}

// The reason of a one-task-per-node job that lacks distinct nodes; `counted` is the failed
// task's CountRejections (the cluster as the plan leaves it, the job's new tasks undone).
void CycleRun::DistinctNodesReason(PendingJob& pj, const Failure& f, const Failure& counted,
                                   std::string& msg, std::map<std::string, int32_t>& rejected_out) {
  const Job& job = *pj.rec->spec;
  const int32_t need = job.GangMinimum();
  if (f.ever_nodes == 0) return;  // no node could ever hold it: the filters' words say why
  const std::string head = "needs " + std::to_string(need) + " distinct nodes (oneTaskPerNode)";
  if (f.ever_nodes >= 0 && f.ever_nodes < need) {
    msg = head + ", the cluster has " + std::to_string(f.ever_nodes) + " that could hold a task";
    return;
  }
  // Nodes holding its running tasks take no other: counted apart from the available ones.
  std::map<std::string, int32_t> rejected = counted.rejected;
  int32_t available = static_cast<int32_t>(m_.nodes.size());
  for (const auto& [reason, n] : rejected) available -= n;
  std::set<int32_t> held;
  for (const auto& a : pj.rec->allocations)
    if (a) held.insert(m_.node_index.at(a->node));
  const TaskRequest& req = job.GroupOfTask(f.task).request;
  std::vector<int32_t> none;
  TaskContext t{&job, f.task, &req, &ctx_, &none, &m_.nodes, -1};
  for (int32_t i : held)
    if (!(f.fenced && !fenced_.empty() && fenced_[i]) &&
        Passes(t, m_.nodes[i], OwnsWhole(*pj.rec, i))) {
      --available;
      ++rejected["node(s) already held a task of this job"];
    }
  if (available + static_cast<int32_t>(held.size()) >= need) return;  // not for lack of nodes
  msg = head;
  if (!held.empty()) msg += ", " + std::to_string(held.size()) + " held by its running tasks";
  msg += ": " + KubeMessage(static_cast<int32_t>(m_.nodes.size()), rejected, available);
  rejected_out = std::move(rejected);
}

TopologySpread CycleRun::SpreadOf(const PendingJob& pj) {
  const Job& job = *pj.rec->spec;
  auto it = spread_base_.find(&job);
  if (it == spread_base_.end())
    it = spread_base_.emplace(&job, TopologySpread(job, m_.nodes)).first;
  TopologySpread spread = it->second;
  for (int32_t t = 0; t < pj.task_count; ++t)
    if (const auto& a = pj.rec->allocations[t]) spread.Add(t, m_.node_index.at(a->node));
  return spread;
}

bool CycleRun::TryPlaceJob(PendingJob& pj, Failure* why) {
  JobRec& j = *pj.rec;
  const int32_t n = pj.task_count;
  const int32_t required = std::max(0, pj.gang_min - j.running);
  const bool limited = pj.queue >= 0 && limited_[pj.queue];
  size_t mark = m_.undo.size();
  std::vector<int32_t> gang_nodes;
  for (const auto& a : j.allocations)
    if (a) gang_nodes.push_back(m_.node_index.at(a->node));
  std::sort(gang_nodes.begin(), gang_nodes.end());  // TaskContext::gang_nodes is sorted
  std::optional<TopologySpread> spread;
  if (pj.spread) spread = SpreadOf(pj);
  int32_t placed = 0;
  Failure first;
  bool failed = false;
  bool over_by_request = false;  // `first` is a limit its tasks' requests exceeded
  for (int32_t t = 0; t < n; ++t) {
    if (j.allocations[t]) continue;
    std::string limit_why;
    const TaskRequest& req = pj.groups[pj.GroupOf(t)].request;
    // (A task that can never fit is not held back by the limit: placing it fails and says
    // why, as a limit that frees up would not help it.)
    // (An exclusive job's charge is known once its node is: checked after placing, below.)
    if (limited && !pj.exclusive && !QueueAdmits(j, RequestVector(req), &limit_why) &&
        !NeverFits(pj, t)) {
      if (!failed) {
        first.code = "QueueOverLimit";
        first.message = limit_why;
        first.resource.clear();
        first.rejected.clear();
        failed = over_by_request = true;
      }
      if (placed < required) break;
      continue;
    }
    // An exclusive job is charged its new node whole, and a fraction of a device at least
    // its share of the device's memory (DeviceCharge), which the request did not show: the
    // limit is checked once the node and device are chosen.
    const bool by_memory = req.gpu.kind == GpuRequestKind::kFraction && req.gpu.memory_bytes > 0;
    const bool charge_check = limited && (pj.exclusive || by_memory);
    const size_t before = m_.undo.size();
    const ResourceVector charged = charge_check ? j.allocated : ResourceVector{};
    int32_t node = PlaceTask(pj, t, gang_nodes, spread ? &*spread : nullptr,
                             failed || why == nullptr ? nullptr : &first);
    if (node >= 0 && charge_check && !QueueAdmits(j, {}, nullptr)) {
      const ResourceVector charge = j.allocated - charged;
      m_.Rollback(before);
      if (!failed) {
        (void)QueueAdmits(j, charge, &limit_why);
        first.code = "QueueOverLimit";
        first.message = limit_why + (pj.exclusive ? " (node " + m_.nodes[node].name() +
                                                        " whole: the job is exclusive)"
                                                  : " (a fraction of a GPU is charged at least "
                                                    "its share of the device's memory)");
        first.resource.clear();
        first.rejected.clear();
        first.deferred = false;
        failed = true;
      }
      if (placed < required) break;
      continue;
    }
    if (node < 0) {
      failed = true;
      if (placed < required) break;
      continue;
    }
    gang_nodes.insert(std::upper_bound(gang_nodes.begin(), gang_nodes.end(), node), node);
    if (spread) spread->Add(t, node);
    ++placed;
  }
  if (placed < required || placed == 0) {
    m_.Rollback(mark);
    if (why != nullptr) {
      *why = first;
      if (first.code == "QueueOverLimit") {
        const ResourceVector need = MinimumNeed(pj);
        why->message = ExceedsQueueLimit(pj, need);
        why->infeasible = !why->message.empty();
        if (!why->infeasible) {
          why->message = first.message;
          // Worded as enqueue words it: the queue's use without the tasks just rolled back,
          // and what the job's start needs, not the one task that hit the limit.
          std::string words;
          if (over_by_request && !need.IsZero() && !QueueAdmits(j, need, &words))
            why->message = std::move(words);
        }
      }
      if (!why->infeasible && pj.gang_min > 1 && j.running == 0 && first.code != "QueueOverLimit") {
        why->exceeds_cluster = GangExceedsCluster(*j.spec);
        why->infeasible = !why->exceeds_cluster.empty();
      }
      if (required > 1 && placed > 0 && first.code != "QueueOverLimit" && !why->infeasible) {
        why->gang = true;
        why->gang_fit = placed + j.running;
      }
    }
    return false;
  }
  return true;
}

void CycleRun::RecordBindings(size_t mark, const PendingJob& pj) {
  const std::string& id = Decision(pj).job;  // a line the attempt touches anyway
  for (size_t i = mark; i < m_.undo.size(); ++i)
    if (m_.undo[i].kind == UndoOp::kBind)
      plan_.bindings.push_back({id, m_.undo[i].task, *pj.rec->allocations[m_.undo[i].task]});
}

void CycleRun::Attempt(PendingJob& pj) {
  pj.tried = true;
  // Allocate's and backfill's passes only bind (a gang attempt that fails undoes only its
  // own binds), so no node gains free capacity while one runs: a single-task job whose
  // shape found no node earlier in the pass, under the same fence, finds none now, and
  // shares that failure instead of searching again. (A replay's backlog is thousands of
  // such jobs in every cycle.) Filters see only the shape and the node, and a failed search
  // draws and scores nothing that a later one would not, so the outcome is the same. Not on
  // a path with queue limits, which depend on the job.
  int32_t* repeat = nullptr;
  if (binding_pass_ && pj.task_count == 1 && !pj.one_task_per_node &&
      !(pj.queue >= 0 && limited_[pj.queue])) {
    const int32_t shape = group_shapes_[pj.shapes_at];
    std::vector<int32_t>& failed = shape_failed_[fenced_.empty() ? 0 : fence_held_only_ ? 2 : 1];
    if (failed.size() <= static_cast<size_t>(shape))
      failed.resize(static_cast<size_t>(shape) + 1, -1);
    repeat = &failed[shape];
    if (*repeat >= 0) {
      const bool infeasible = failures_[*repeat].infeasible;
      pj.state = infeasible ? JState::kInfeasible : JState::kFailed;
      JobDecision& d = Decision(pj);
      d.outcome = infeasible ? Outcome::kInfeasible : Outcome::kUnschedulable;
      d.reason.reset();  // Finalize words it
      pj.failure = *repeat;
      return;
    }
  }
  Failure why;
  size_t mark = m_.undo.size();
  if (TryPlaceJob(pj, &why)) {
    RecordBindings(mark, pj);
    pj.state = JState::kPlaced;
    JobDecision& d = Decision(pj);
    d.outcome = Outcome::kPlaced;
    d.reason.reset();  // an earlier attempt's (backfill tries again)
    return;
  }
  if (why.infeasible) {
    pj.state = JState::kInfeasible;
    Decision(pj).outcome = Outcome::kInfeasible;
  } else if (why.code == "QueueOverLimit") {
    pj.state = JState::kWaiting;
    pj.over_limit = any_over_limit_ = true;
    Decision(pj).outcome = Outcome::kWaiting;
  } else if (why.code == "Error") {
    pj.state = JState::kError;
    Decision(pj).outcome = Outcome::kError;
  } else {
    pj.state = JState::kFailed;
    Decision(pj).outcome = Outcome::kUnschedulable;
  }
  if (why.deferred)
    Decision(pj).reason.reset();  // Finalize words it, once per failure kind
  else
    SetReason(pj, {why.code, why.message, why.resource, why.rejected});
  pj.failure = static_cast<int32_t>(failures_.size());
  if (repeat != nullptr && why.deferred && why.code == "Unschedulable") *repeat = pj.failure;
  failures_.push_back(std::move(why));
}

// ---- enqueue: admission against queue limits ----
void CycleRun::Enqueue() {
  std::map<int32_t, ResourceVector> admitted;
  // Guarantees first: jobs whose own queue stays within its guarantee counting them (and
  // what was admitted ahead in it) are admitted before the others, each in job order. Under
  // a capped parent, quota that reclaim freed for a child below its guarantee would else go
  // to the sibling it was taken from, whose jobs may come first in job order, and reclaim
  // would take it again, cycle after cycle.
  std::vector<char> seen(jobs_.size(), 0);
  for (int pass = 0; pass < 2; ++pass)
    for (PendingJob* pj : order_) {
      if (pj->state != JState::kAdmitted || pj->tried || seen[pj - jobs_.data()]) continue;
      if (pj->queue < 0 || !limited_[pj->queue]) continue;  // no limit on its path: admitted
      const JobRec& j = *pj->rec;
      const ResourceVector need = MinimumNeed(*pj);
      if (pass == 0) {
        const ResourceVector& g = m_.queues[j.queue].q.guarantee;
        if (g.IsZero() ||
            AboveGuarantee(m_.queues[j.queue].allocated + admitted[j.queue] + need, g))
          continue;
      }
      seen[pj - jobs_.data()] = 1;
      if (std::string never = ExceedsQueueLimit(*pj, need); !never.empty()) {
        pj->state = JState::kInfeasible;
        Decision(*pj).outcome = Outcome::kInfeasible;
        SetReason(*pj, {"QueueOverLimit", std::move(never), "", {}});
        continue;
      }
      // A job that can never fit on the cluster is neither held back by the limit (a limit
      // that frees up would not help it: the reason must say it can never fit) nor holds
      // admission quota (it would block feasible jobs of its queue for ever). Allocate
      // reports it Infeasible.
      bool never = false;
      for (int32_t t = 0; !never && t < pj->task_count; ++t)
        never = !j.allocations[t] && NeverFits(*pj, t);
      if (!never && pj->gang_min > 1 && j.running == 0 && !GangExceedsCluster(*j.spec).empty())
        never = true;
      if (never) continue;
      // Admission counts what earlier admitted jobs of the same queues will take.
      for (int32_t q = j.queue; q >= 0; q = m_.queues[q].parent) {
        auto lim = EffectiveLimit(m_.queues[q]);
        if (!lim) continue;
        if (!WithinLimit(m_.queues[q].allocated + admitted[q] + need, *lim)) {
          pj->state = JState::kWaiting;
          pj->over_limit = any_over_limit_ = true;
          Decision(*pj).outcome = Outcome::kWaiting;
          // What runs and what was admitted ahead of it this cycle, apart: the latter is not
          // in use yet, and the user looking at the queue would not find it.
          std::string words = "queue " + m_.queues[q].q.name + " would exceed its limit (" +
                              ResourceWords(*lim) + "): in use " +
                              ResourceWords(m_.queues[q].allocated) + "; ";
          if (!admitted[q].IsZero())
            words += "admitted ahead of it " + ResourceWords(admitted[q]) + "; ";
          SetReason(*pj,
                    {"QueueOverLimit", words + "this job needs " + ResourceWords(need), "", {}});
          break;
        }
      }
      if (pj->state != JState::kAdmitted) continue;
      for (int32_t q = j.queue; q >= 0; q = m_.queues[q].parent) admitted[q] += need;
    }
}

void CycleRun::BindMemo() {
  PlacementMemo& memo = m_.memo;
  const bool configured = ctx_.typical == &e_.typical;
  const bool same = memo.engine == e_.id && memo.class_epoch == m_.class_epoch &&
                    memo.configured_typical == configured &&
                    (configured || memo.typical == *ctx_.typical) &&
                    memo.bytes <= PlacementMemo::kMaxBytes;
  if (same) return;
  memo.shapes.clear();
  memo.bytes = 0;
  memo.engine = e_.id;
  memo.class_epoch = m_.class_epoch;
  memo.configured_typical = configured;
  memo.typical = configured ? std::vector<TypicalRequest>{} : *ctx_.typical;
}

// Allocate walks the jobs in job order, and each job's first touches (its cycle record,
// JobRec and task allocations, task groups, shape ids, plan entry) land on memory laid
// out by job id: with jobs of mixed priorities every one was a cache miss. Fetched a few
// jobs ahead, one level of pointers per step: 100k jobs, binpack, about -20 ms per cycle
// (the jobs visited in id order, with nothing to fetch, take ~50 ms less than unfetched).
void CycleRun::PrefetchAhead(const std::vector<PendingJob*>& seq, size_t i) {
  const size_t n = seq.size();
  if (i + 16 < n) Prefetch(seq[i + 16]);
  if (i + 8 < n) {
    const PendingJob* pj = seq[i + 8];
    Prefetch(pj->rec);
    Prefetch(&pj->rec->running);  // a JobRec spans two lines: `running` is in the second
    Prefetch(pj->groups);
    Prefetch(&Decision(*pj));
    Prefetch(&group_shapes_[pj->shapes_at]);
  }
  if (i + 4 < n) Prefetch(seq[i + 4]->rec->allocations.data());
}

// ---- allocate: queue order, then job order; gang transactions ----
void CycleRun::StartBindingPass() {
  binding_pass_ = true;
  for (auto& failed : shape_failed_) failed.assign(failed.size(), -1);
}

// Queue order, hierarchical: from the root down, a queue with jobs of its own goes before
// its children, and among siblings whose subtrees hold jobs the least (QueueKey, name) goes
// first. Each queue with jobs left in its subtree sits in its parent's ordered set (index
// Q: the roots' set); serving a job changes the keys of its queue and ancestors only, which
// move in their parents' sets. Per job: O(depth x log(siblings)).
template <typename Serve>
void CycleRun::WalkQueues(const std::vector<PendingJob*>& jobs, Serve serve) {
  const int32_t Q = static_cast<int32_t>(m_.queues.size());
  std::vector<std::vector<PendingJob*>> lists(Q);
  for (PendingJob* pj : jobs) lists[pj->queue].push_back(pj);
  std::vector<size_t> cursor(Q, 0);
  std::vector<int64_t> left(Q, 0);  // jobs left in the queue's subtree
  for (int32_t q = 0; q < Q; ++q)
    for (int32_t p = q; p >= 0 && !lists[q].empty(); p = m_.queues[p].parent)
      left[p] += static_cast<int64_t>(lists[q].size());
  std::vector<int32_t> by_name(Q), name_rank(Q);
  for (int32_t q = 0; q < Q; ++q) by_name[q] = q;
  std::sort(by_name.begin(), by_name.end(),
            [&](int32_t a, int32_t b) { return m_.queues[a].q.name < m_.queues[b].q.name; });
  for (int32_t r = 0; r < Q; ++r) name_rank[by_name[r]] = r;
  using Entry = std::tuple<int64_t, int64_t, int32_t, int32_t>;  // key, name rank, queue
  std::vector<std::set<Entry>> children(Q + 1);
  std::vector<Entry> entry(Q);
  auto parent_set = [&](int32_t q) -> std::set<Entry>& {
    const int32_t p = m_.queues[q].parent;
    return children[p < 0 ? Q : p];
  };
  auto enter = [&](int32_t q) {
    const auto key = QueueKey(q);
    entry[q] = {key.first, key.second, name_rank[q], q};
    parent_set(q).insert(entry[q]);
  };
  for (int32_t q = 0; q < Q; ++q)
    if (left[q] > 0) enter(q);
  while (true) {
    int32_t best = -1;
    for (int32_t at = Q; best < 0 && !children[at].empty();) {
      at = std::get<3>(*children[at].begin());
      if (cursor[at] < lists[at].size()) best = at;
    }
    if (best < 0) return;
    const std::vector<PendingJob*>& list = lists[best];
    PrefetchAhead(list, cursor[best]);  // the queue served is likely served again next
    PendingJob* pj = list[cursor[best]++];
    if (!serve(pj)) return;
    for (int32_t p = best; p >= 0; p = m_.queues[p].parent) {
      parent_set(p).erase(entry[p]);
      if (--left[p] > 0) enter(p);
    }
  }
}

void CycleRun::Allocate() {
  StartBindingPass();
  struct Done {
    bool& flag;
    ~Done() { flag = false; }
  } done{binding_pass_};
  auto eligible = [](const PendingJob* pj) { return pj->state == JState::kAdmitted && !pj->tried; };
  if (!e_.queue_drf && !e_.queue_proportion) {
    for (size_t i = 0; i < order_.size(); ++i) {
      PrefetchAhead(order_, i);
      PendingJob* pj = order_[i];
      if (!eligible(pj)) continue;
      Attempt(*pj);
      visit_.push_back(pj);
      if (strict_ && pj->state == JState::kFailed) {
        stopped_at_head_ = true;
        return;
      }
    }
    return;
  }
  std::vector<PendingJob*> jobs;
  for (PendingJob* pj : order_)
    if (eligible(pj) && pj->queue >= 0) jobs.push_back(pj);
  WalkQueues(jobs, [&](PendingJob* pj) {
    Attempt(*pj);
    visit_.push_back(pj);
    if (strict_ && pj->state == JState::kFailed) {
      stopped_at_head_ = true;
      return false;
    }
    return true;
  });
}

// ---- preempt / reclaim: minimal victim sets by a deterministic greedy ----
std::optional<int64_t> CycleRun::PreemptionRank(const JobRec& j) const {
  const JobProgress progress = j.progress();
  for (const auto& o : e_.orders)
    if (auto r = o->PreemptionRank(*j.spec, progress, ctx_)) return r;
  return std::nullopt;
}

// Why a job of equal priority is evicted, in the words of the order that ranks them.
std::string CycleRun::RankReason(const JobRec& pre, const JobRec& victim) const {
  const JobProgress progress = pre.progress();
  for (const auto& o : e_.orders)
    if (auto r = o->PreemptionRank(*pre.spec, progress, ctx_))
      return "equal priority, " + o->OrderWords() + ": its " +
             o->RankWords(PreemptionRank(victim).value_or(0)) + ", the preemptor's " +
             o->RankWords(*r);
  return "equal priority";
}

void CycleRun::EvictFor(bool reclaim) {
  // Nothing failed to place: nothing to evict for, and no pass over every job (most cycles
  // of a busy server or a replay).
  // (Jobs that wait on their queue's limit were not visited: all jobs then.)
  // With backfill, allocate stopped at the first job it could not place (the EASY head):
  // the jobs behind it are candidates too, after those it visited, in job order (Backfill's
  // sequence). Else one unplaceable job would keep every job behind it, in every queue, from
  // preempting or reclaiming.
  std::vector<PendingJob*> behind;
  if (stopped_at_head_ && !any_over_limit_) {
    behind = visit_;
    std::vector<char> seen(jobs_.size(), 0);
    for (const PendingJob* pj : visit_) seen[pj - jobs_.data()] = 1;
    for (PendingJob* pj : order_)
      if (!seen[pj - jobs_.data()]) behind.push_back(pj);
  }
  const std::vector<PendingJob*>& tried = visit_.empty() || any_over_limit_ ? order_
                                          : stopped_at_head_                ? behind
                                                                            : visit_;
  if (evicting_.size() != m_.queues.size()) {
    evicting_.assign(m_.queues.size(), {});
    claimed_.assign(m_.queues.size(), {});
  }
  // What a failed job would need, if it may evict at all: its priority class allows it;
  // for reclaim, its queue has a guarantee that this job keeps it within.
  // A job waiting on a queue limit may evict too, if a victim frees the quota it needs:
  // preempt, lower-priority work of its own queue; reclaim, when the limit is an ancestor's
  // (e.g. org capped at its guarantee, a child within its own guarantee while a sibling
  // borrowed it): work of queues under that ancestor above their guarantees. The job's own
  // queue's limit no other queue's eviction frees.
  // A job behind the blocked head (not tried yet) may evict too if it does not fit as the
  // cluster is; that is checked below, after the cheap checks.
  // `preemptionPolicy: Never` rules out reclaim as well: such a job evicts nobody
  // (Kubernetes), whichever queue the victim is in.
  auto may_evict = [&](const PendingJob* pj) -> std::optional<ResourceVector> {
    const bool untried = stopped_at_head_ && pj->state == JState::kAdmitted && !pj->tried;
    if (pj->state != JState::kFailed && !(pj->state == JState::kWaiting && pj->over_limit) &&
        !untried)
      return std::nullopt;
    const JobRec& pre = *pj->rec;
    const Job& pjob = *pre.spec;
    auto pc = m_.priority_classes.find(pjob.priority_class);
    if (pc != m_.priority_classes.end() && !pc->second.preempt_lower) return std::nullopt;
    const ResourceVector need = StartNeed(*pj);
    if (reclaim) {
      // Only a queue within its guarantee (counting this job, and what this cycle's earlier
      // reclaimers of it will take) may take capacity back.
      const ResourceVector& g = m_.queues[pre.queue].q.guarantee;
      if (g.IsZero()) return std::nullopt;
      if (AboveGuarantee(Settled(pre.queue) + need, g)) return std::nullopt;
      if (pj->over_limit && BlockingQueue(pre.queue, need) == pre.queue) return std::nullopt;
    }
    return need;
  };
  // No job that may evict failed to place: no pass over every job (most cycles of a busy
  // server or a replay).
  if (std::none_of(tried.begin(), tried.end(),
                   [&](const PendingJob* pj) { return may_evict(pj).has_value(); }))
    return;
  std::vector<PendingJob*> candidates = tried;
  // Possible victims: jobs running when the cycle began. A job this cycle bound is not
  // running yet (its eviction would be stale); a job already chosen is skipped below.
  std::set<const JobRec*> fresh;
  // (Nor is a preemptor bound where it will go by an earlier eviction action's hold.)
  for (const PendingJob& pj : jobs_)
    if (pj.state == JState::kPlaced || pj.awaits_eviction) fresh.insert(pj.rec);
  struct Running {
    JobRec* job;
    std::optional<int64_t> rank;
  };
  std::vector<Running> running;
  // Tasks being stopped (docs/model.md: never evicted again) are no victims; their capacity
  // counts as soon free.
  std::vector<JobRec*> terminating;
  for (auto& [id, j] : m_.jobs) {
    if (j.running > 0 && j.spec->terminating) terminating.push_back(&j);
    if (j.running == 0 || !j.spec->preemptible || j.spec->terminating || fresh.count(&j)) continue;
    if (e_.preempt_exempt_seconds > 0 && j.start_time >= 0 &&
        now_ - j.start_time < e_.preempt_exempt_seconds)
      continue;  // exempt: its current run is too young (preemptExemptSeconds)
    running.push_back({&j, reclaim ? std::nullopt : PreemptionRank(j)});
  }
  // Victims are taken in this order (vjobs keeps it): lowest priority, highest rank (least
  // urgent), youngest start, job id. Sorted when a search first needs it.
  bool running_sorted = false;
  auto sort_running = [&] {
    if (running_sorted) return;
    running_sorted = true;
    std::sort(running.begin(), running.end(), [](const Running& x, const Running& y) {
      const Job& a = *x.job->spec;
      const Job& b = *y.job->spec;
      if (a.priority != b.priority) return a.priority < b.priority;
      int64_t ra = x.rank.value_or(INT64_MIN), rb = y.rank.value_or(INT64_MIN);
      if (ra != rb) return ra > rb;
      const int64_t sa = x.job->start_time, sb = y.job->start_time;
      if (sa != sb) return sa > sb;
      return a.id < b.id;
    });
  };
  // Free GPUs, and those of tasks being stopped, as the holds so far leave them.
  int64_t free_gpu = 0, stopping_gpu = 0;
  auto count_free = [&] {
    int64_t used = 0;
    stopping_gpu = 0;
    for (const auto& [id, j] : m_.jobs) {
      const int64_t g = CountedGpuMilli(j);
      used += g;
      if (j.spec->terminating) stopping_gpu += g;
    }
    free_gpu = std::max<int64_t>(0, m_.capacity.gpu_milli - used);
  };
  count_free();
  const bool cross_queue_rank = !e_.queue_drf && !e_.queue_proportion;
  // Bounds that rule most preemptors out without a pass over the running jobs: a victim
  // has a lower priority or a higher rank than its preemptor.
  int32_t min_priority = INT32_MAX;
  int64_t max_rank = INT64_MIN;
  for (const Running& r : running) {
    min_priority = std::min(min_priority, r.job->spec->priority);
    if (r.rank) max_rank = std::max(max_rank, *r.rank);
  }
  // Bound the work: after this many searches that found no victim set, stop (documented).
  int32_t failed_searches = 0;
  constexpr int32_t kMaxFailedSearches = 64;
  // And after this many jobs behind the blocked head were tried as the cluster is (a full
  // placement attempt each; backfill tries them all again): on a long queue the cycle
  // would spend its time there, and the next cycle goes on from the head.
  int32_t behind_probes = 0;
  constexpr int32_t kMaxBehindProbes = 64;
  std::set<std::vector<int64_t>> evicts_nobody;  // AlikeKey of jobs that evicted nobody
  for (PendingJob* pj : candidates) {
    if (failed_searches >= kMaxFailedSearches) break;
    // A job chosen as a victim this cycle preempts nobody: its tasks are going.
    if (victim_jobs_.count(pj->rec)) continue;
    const std::optional<ResourceVector> may = may_evict(pj);
    if (!may) continue;
    const ResourceVector& need = *may;
    const JobRec& pre = *pj->rec;
    const Job& pjob = *pre.spec;
    // A job alike one that evicted nobody this call evicts nobody either: this call's
    // evictions only take victims away and change no placement (a long queue behind the
    // head is mostly jobs alike: a failed search releases every candidate victim).
    const std::vector<int64_t> key = AlikeKey(*pj);
    if (!key.empty() && evicts_nobody.count(key)) continue;
    auto nobody = [&] {
      if (!key.empty()) evicts_nobody.insert(key);
    };
    // Victims by priority (lower, same queue) or by preemption rank (same priority, strictly
    // higher rank, e.g. more attained service; any queue when no queue policy is on): none
    // runs when no running job has a lower priority or a higher rank.
    const std::optional<int64_t> pre_rank = reclaim ? std::nullopt : PreemptionRank(pre);
    const bool outranks_nobody =
        !reclaim && min_priority >= pjob.priority && !(pre_rank && max_rank > *pre_rank);
    if (pj->state == JState::kAdmitted) {
      // Behind the blocked head, not tried yet: a job that could not evict anyone by
      // priority or rank, that can never fit, or that fits as the cluster is (backfill's
      // to place, around the head's reservation) evicts nobody.
      if (outranks_nobody) continue;
      bool never = false;
      for (int32_t t = 0; !never && t < pj->task_count; ++t)
        never = !pre.allocations[t] && NeverFits(*pj, t);
      if (never) continue;
      if (++behind_probes > kMaxBehindProbes) continue;  // (jobs it visited may follow)
      const size_t mark = m_.undo.size();
      const bool fits = TryPlaceJob(*pj, nullptr);
      m_.Rollback(mark);
      if (fits) {
        nobody();
        continue;
      }
    }
    // Would it fit once the tasks being stopped are gone? Then it waits for them: evicting
    // more now would take a victim per cycle for as long as their grace period runs.
    if (!terminating.empty()) {
      size_t mark = m_.undo.size();
      int32_t stopping = 0;
      for (JobRec* j : terminating)
        for (int32_t t = 0; t < static_cast<int32_t>(j->allocations.size()); ++t)
          if (j->allocations[t] && m_.ReleaseTask(*j, t).ok()) ++stopping;
      const bool soon = TryPlaceJob(*pj, nullptr);
      m_.Rollback(mark);
      if (soon) {
        pj->state = JState::kWaiting;
        pj->over_limit = false;
        pj->awaits_eviction = true;
        Decision(*pj).outcome = Outcome::kWaiting;
        SetReason(*pj, {"PreemptionInProgress",
                        "waiting for " + std::to_string(stopping) +
                            " task(s) being stopped to exit (their grace period)",
                        "",
                        {}});
        continue;
      }
    }
    // Victim units: a job's tasks above its gang minimum one by one, then the rest whole.
    struct Unit {
      JobRec* job;
      std::vector<int32_t> tasks;
      bool whole;
      ResourceVector charge;  // what its eviction gives back to its queue, as it was added
    };
    if (outranks_nobody) {
      nobody();
      continue;
    }
    sort_running();
    std::vector<const Running*> vjobs;
    int64_t victim_gpu = 0;
    std::map<int32_t, int64_t> reclaim_gpu;  // reclaim: candidates' GPUs per queue
    for (const Running& r : running) {
      JobRec& j = *r.job;
      if (&j == &pre) continue;
      if (reclaim) {
        const QueueRec& q = m_.queues[j.queue];
        if (j.queue == pre.queue || !q.q.reclaimable) continue;
        // Only from queues above their guarantee (checked again per unit below).
        if (!AboveGuarantee(Settled(j.queue), q.q.guarantee)) continue;
        reclaim_gpu[j.queue] += j.allocated.gpu_milli;
      } else {
        bool by_priority = j.queue == pre.queue && j.spec->priority < pjob.priority;
        bool by_rank = pre_rank && r.rank && *r.rank > *pre_rank &&
                       j.spec->priority == pjob.priority &&
                       (j.queue == pre.queue || cross_queue_rank);
        if (!by_priority && !by_rank) continue;
      }
      if (victim_jobs_.count(&j) || held_jobs_.count(&j)) continue;  // evicted, or held
      vjobs.push_back(&r);
      victim_gpu += j.allocated.gpu_milli;
    }
    // The deepest queue on the preemptor's path whose limit it would exceed, or -1: only
    // victims under it free the quota it waits for.
    const int32_t blocking = reclaim && pj->over_limit ? BlockingQueue(pre.queue, need) : -1;
    // Reclaim takes no more GPUs from a queue than it holds above its guarantee (MayReclaim).
    if (reclaim) {
      victim_gpu = 0;
      for (auto& [queue, gpu] : reclaim_gpu) {
        const int64_t used = Settled(queue).gpu_milli, g = m_.queues[queue].q.guarantee.gpu_milli;
        gpu = std::min(gpu, g == 0 || used < g ? used : used - g);
        victim_gpu += gpu;
      }
      // Cheap check per GPU limit on its path that it would exceed: the room left there plus
      // what the candidates under that queue hold above their guarantees.
      bool short_of_quota = false;
      for (int32_t a = blocking; a >= 0 && !short_of_quota; a = m_.queues[a].parent) {
        const auto lim = EffectiveLimit(m_.queues[a]);
        if (!lim || !lim->gpu) continue;
        int64_t room = lim->max.gpu_milli - m_.queues[a].allocated.gpu_milli;
        if (need.gpu_milli <= room) continue;
        for (const auto& [queue, gpu] : reclaim_gpu)
          if (Within(queue, a)) room += gpu;
        short_of_quota = need.gpu_milli > room;
      }
      if (short_of_quota) {
        nobody();
        continue;
      }
    }
    // Cheap check: not even every candidate's GPUs plus the free ones would hold it.
    if (need.gpu_milli > free_gpu + stopping_gpu + victim_gpu) {
      nobody();
      continue;
    }
    // Waiting on a limit: victims under the queue that sets it first (in the same order),
    // others after, for capacity they may also need (minimising drops them if not).
    if (blocking >= 0)
      std::stable_partition(vjobs.begin(), vjobs.end(),
                            [&](const Running* r) { return Within(r->job->queue, blocking); });
    // Checked against the queue as the units chosen so far leave it (which only lowers it: a
    // unit that may not go alone may not go after others either, and is left out at once).
    // (An exclusive job's charge depends on which of its tasks are still on each node.)
    auto charge_now = [&](const Unit& unit) {
      return unit.job->exclusive ? EvictionCharge(*unit.job, unit.tasks) : unit.charge;
    };
    auto reclaimable = [&](const Unit& unit) {
      const QueueRec& q = m_.queues[unit.job->queue];
      return MayReclaim(Settled(unit.job->queue), charge_now(unit), q.q.guarantee);
    };
    std::vector<Unit> units;
    auto add_unit = [&](Unit u) {
      u.charge = EvictionCharge(*u.job, u.tasks);
      if (!reclaim || reclaimable(u)) units.push_back(std::move(u));
    };
    for (const Running* r : vjobs) {
      JobRec* j = r->job;
      std::vector<int32_t> run;
      for (int32_t t = 0; t < static_cast<int32_t>(j->allocations.size()); ++t)
        if (j->allocations[t]) run.push_back(t);
      int32_t extra = static_cast<int32_t>(run.size()) - j->spec->GangMinimum();
      for (int32_t k = 0; k < extra; ++k) {
        add_unit({j, {run.back()}, false, {}});
        run.pop_back();
      }
      if (!run.empty()) add_unit({j, run, true, {}});
      if (units.size() > 512) break;  // bound the search; documented
    }
    if (units.empty()) {
      nobody();
      continue;
    }
    // The search counts the tasks being stopped as gone (they are no victims).
    const size_t search_mark = m_.undo.size();
    for (JobRec* j : terminating)
      for (int32_t t = 0; t < static_cast<int32_t>(j->allocations.size()); ++t)
        if (j->allocations[t]) (void)m_.ReleaseTask(*j, t);
    // Fits(S): would the preemptor fit with the units in S gone?
    auto fits = [&](const std::vector<size_t>& set) {
      size_t mark = m_.undo.size();
      for (size_t u : set)
        for (int32_t t : units[u].tasks) (void)m_.ReleaseTask(*units[u].job, t);
      bool ok = TryPlaceJob(*pj, nullptr);
      m_.Rollback(mark);
      return ok;
    };
    // Greedy: release units in order until the preemptor fits; `chosen` the units taken.
    // Tried first with one placement attempt after every unit is gone: where the preemptor
    // does not fit even then (most searches: a job behind the head needing a whole node), no
    // set does, and the attempt after each unit (most of a search's cost) is saved.
    std::vector<size_t> chosen;
    auto greedy = [&](bool try_each) {
      chosen.clear();
      const size_t mark = m_.undo.size();
      int64_t freed_gpu = 0;
      auto attempt = [&] {
        // Too few GPUs free yet, wherever they are: no placement attempt.
        if (need.gpu_milli > free_gpu + stopping_gpu + freed_gpu) return false;
        const size_t inner = m_.undo.size();
        const bool ok = TryPlaceJob(*pj, nullptr);
        m_.Rollback(inner);
        return ok;
      };
      bool ok = false;
      for (size_t u = 0; u < units.size() && !ok; ++u) {
        if (!units[u].job->allocations[units[u].tasks[0]]) continue;
        if (reclaim && !reclaimable(units[u])) continue;
        freed_gpu += charge_now(units[u]).gpu_milli;
        for (int32_t t : units[u].tasks) (void)m_.ReleaseTask(*units[u].job, t);
        chosen.push_back(u);
        if (try_each) ok = attempt();
      }
      if (!try_each) ok = attempt();
      m_.Rollback(mark);
      return ok;
    };
    const bool found = greedy(/*try_each=*/false) && greedy(/*try_each=*/true);
    if (!found) {
      m_.Rollback(search_mark);
      nobody();
      ++failed_searches;
      continue;
    }
    // Minimise: drop units (most valuable first) whose eviction is not needed. A task above
    // a job's gang minimum stays in the set while the job's minimum (its whole unit) does:
    // it cannot run on alone.
    auto whole_in = [&](const std::vector<size_t>& set, const JobRec* job) {
      for (size_t u : set)
        if (units[u].whole && units[u].job == job) return true;
      return false;
    };
    for (size_t k = chosen.size(); k-- > 0;) {
      if (!units[chosen[k]].whole && whole_in(chosen, units[chosen[k]].job)) continue;
      std::vector<size_t> without;  // chosen less its k-th unit
      for (size_t i = 0; i < chosen.size(); ++i)
        if (i != k) without.push_back(chosen[i]);
      if (!without.empty() && fits(without)) chosen = std::move(without);
    }
    m_.Rollback(search_mark);
    std::sort(chosen.begin(), chosen.end());
    // A job whose minimum goes loses every task it runs: its whole unit takes the tasks above
    // the minimum that the search did not choose (not reclaimable alone, or past the bound
    // on units).
    for (size_t u : chosen) {
      Unit& w = units[u];
      if (!w.whole) continue;
      std::set<int32_t> going;
      for (size_t v : chosen)
        if (units[v].job == w.job) going.insert(units[v].tasks.begin(), units[v].tasks.end());
      for (int32_t t = 0; t < static_cast<int32_t>(w.job->allocations.size()); ++t)
        if (w.job->allocations[t] && !going.count(t)) w.tasks.push_back(t);
      std::sort(w.tasks.begin(), w.tasks.end());
    }
    // What the victims give back to their queues, job by job (an exclusive job's node charge
    // depends on all of its tasks leaving a node; a job's units are adjacent); kept with the
    // hold below until DropHolds.
    Hold hold{pj, {}, {}, {}};
    for (size_t k = 0; k < chosen.size();) {
      JobRec& vj = *units[chosen[k]].job;
      std::vector<int32_t> tasks;
      for (; k < chosen.size() && units[chosen[k]].job == &vj; ++k)
        tasks.insert(tasks.end(), units[chosen[k]].tasks.begin(), units[chosen[k]].tasks.end());
      hold.evicting.push_back({vj.queue, EvictionCharge(vj, tasks)});
    }
    int32_t count = 0;
    // The preemptor's owners see its victims of their own queue by name, of another queue
    // (reclaim) by how many there are.
    std::set<std::string> own_victims;
    std::map<std::string, std::set<const JobRec*>> other_victims;  // by queue name
    for (size_t u : chosen) {
      JobRec& vj = *units[u].job;
      if (vj.queue == pre.queue)
        own_victims.insert(vj.spec->id);
      else
        other_victims[m_.queues[vj.queue].q.name].insert(&vj);
      for (int32_t t : units[u].tasks) {
        victims_.insert({&vj, t});
        victim_jobs_.insert(&vj);
        ++count;
        std::string msg =
            reclaim ? "queue " + m_.queues[pre.queue].q.name + " is below its guarantee; queue " +
                          m_.queues[vj.queue].q.name + " is above its own"
            : vj.spec->priority < pjob.priority
                ? "priority " + std::to_string(pjob.priority) + " > " +
                      std::to_string(vj.spec->priority) + " in queue " + m_.queues[vj.queue].q.name
                : RankReason(pre, vj);
        plan_.evictions.push_back({vj.spec->id, t, vj.allocations[t]->node,
                                   reclaim ? "Reclaimed" : "Preempted", pjob.id, msg,
                                   vj.spec->grace_period_seconds});
      }
    }
    // The hold: the victims go and the preemptor is bound where it fits then (counting the
    // tasks being stopped as gone, as the search did, only if it must), for the rest of the
    // eviction actions.
    if (hold_mark_ < 0) hold_mark_ = static_cast<int64_t>(m_.undo.size());
    for (size_t u : chosen)
      for (int32_t t : units[u].tasks) (void)m_.ReleaseTask(*units[u].job, t);
    const ResourceVector before = pre.allocated;
    size_t bound_at = m_.undo.size();
    if (!TryPlaceJob(*pj, nullptr)) {
      m_.Rollback(bound_at);
      for (JobRec* j : terminating)
        for (int32_t t = 0; t < static_cast<int32_t>(j->allocations.size()); ++t)
          if (j->allocations[t]) (void)m_.ReleaseTask(*j, t);
      bound_at = m_.undo.size();
      (void)TryPlaceJob(*pj, nullptr);  // fits: the search's last trial was this state
    }
    for (size_t i = bound_at; i < m_.undo.size(); ++i)
      if (m_.undo[i].kind == UndoOp::kBind)
        hold.nodes.push_back(m_.node_index.at(m_.undo[i].job->allocations[m_.undo[i].task]->node));
    std::sort(hold.nodes.begin(), hold.nodes.end());
    hold.nodes.erase(std::unique(hold.nodes.begin(), hold.nodes.end()), hold.nodes.end());
    hold.claimed = pre.allocated - before;
    held_.push_back(std::move(hold));
    held_jobs_.insert(&pre);
    count_free();
    std::string names;
    for (const auto& v : own_victims) names += (names.empty() ? "" : ", ") + v;
    for (const auto& [queue, jobs] : other_victims)
      names += (names.empty() ? "" : ", ") + std::to_string(jobs.size()) +
               (jobs.size() == 1 ? " job" : " jobs") + " of queue " + queue;
    pj->state = JState::kWaiting;
    pj->over_limit = false;
    pj->awaits_eviction = true;
    Decision(*pj).outcome = Outcome::kWaiting;
    SetReason(*pj, {"PreemptionInProgress",
                    "waiting for " + std::to_string(count) + " task(s) of " + names + " to exit (" +
                        (reclaim ? "reclaimed" : "preempted") + ")",
                    "",
                    {}});
  }
}

void CycleRun::DropHolds() {
  if (hold_mark_ < 0) return;
  m_.Rollback(static_cast<size_t>(hold_mark_));
  hold_mark_ = -1;
  for (; holds_settled_ < held_.size(); ++holds_settled_) {
    const Hold& h = held_[holds_settled_];
    for (const auto& [q, charge] : h.evicting) evicting_[q] += charge;
    claimed_[h.preemptor->queue] += h.claimed;
  }
}

// ---- backfill (EASY): a reservation for the blocked head; others only if they do not delay it
// ----
void CycleRun::Backfill() {
  // The jobs allocate visited, in its order, then the others in job order. (A std::find
  // per job here made this quadratic: ~1 s of a 100k-job cycle.)
  std::vector<PendingJob*> seq = visit_;
  std::vector<char> in_seq(jobs_.size(), 0);
  for (const PendingJob* pj : seq) in_seq[pj - jobs_.data()] = 1;
  for (PendingJob* pj : order_)
    if (!in_seq[pj - jobs_.data()]) seq.push_back(pj);
  // The head: the first job that could not be placed, or that waits for the tasks evicted
  // for it. The latter's victims end now, and the reservation keeps what its eviction search
  // counted on (free capacity beside the victims) from the jobs backfilled after it, as
  // kube-scheduler's nominated node does; else it would find the free part taken once its
  // victims are gone, and evict again, cycle after cycle.
  PendingJob* head = nullptr;
  for (PendingJob* pj : seq)
    if (pj->state == JState::kFailed || (pj->state == JState::kWaiting && pj->awaits_eviction)) {
      head = pj;
      break;
    }
  int64_t earliest = -1;
  std::vector<int32_t> reserved;
  if (head != nullptr) {
    size_t mark = m_.undo.size();
    struct Ending {
      int64_t end;
      JobRec* job;
    };
    std::vector<Ending> ends, unknown;
    for (auto& [id, j] : m_.jobs) {
      if (j.running == 0) continue;
      // A job past its estimate (estimates are hints, not limits) ends at an unknown time:
      // taking "now" instead would move the head's earliest start with every cycle.
      if (j.spec->runtime_estimate_seconds && j.start_time >= 0 &&
          j.start_time + *j.spec->runtime_estimate_seconds > now_)
        ends.push_back({j.start_time + *j.spec->runtime_estimate_seconds, &j});
      else
        unknown.push_back({INT64_MAX, &j});
    }
    // Stable: ties stay in id order (the jobs map's), without comparing id strings.
    std::stable_sort(ends.begin(), ends.end(),
                     [](const Ending& a, const Ending& b) { return a.end < b.end; });
    auto try_head = [&](int64_t at) {
      size_t inner = m_.undo.size();
      if (TryPlaceJob(*head, nullptr)) {
        for (size_t i = inner; i < m_.undo.size(); ++i)
          if (m_.undo[i].kind == UndoOp::kBind)
            reserved.push_back(
                m_.node_index.at(m_.undo[i].job->allocations[m_.undo[i].task]->node));
        earliest = at;
        m_.Rollback(inner);
        return true;
      }
      return false;
    };
    // Cheap check before each trial: the head's GPUs (its gang minimum) must not exceed the
    // free ones plus those released so far (a trial costs a gang placement).
    const int64_t head_gpu = StartNeed(*head).gpu_milli;
    int64_t avail_gpu = m_.capacity.gpu_milli;
    for (const auto& [id, j] : m_.jobs) avail_gpu -= CountedGpuMilli(j);
    auto release = [&](JobRec* j) {
      avail_gpu += j->allocated.gpu_milli - (OccupiedGpuMilli(*j) - CountedGpuMilli(*j));
      for (int32_t t = 0; t < static_cast<int32_t>(j->allocations.size()); ++t)
        if (j->allocations[t]) (void)m_.ReleaseTask(*j, t);
    };
    bool ok = false;
    // A preemptor's hold (EvictFor) says where it goes once its victims are gone.
    const auto hold = std::find_if(held_.begin(), held_.end(),
                                   [&](const Hold& h) { return h.preemptor == head; });
    if (hold != held_.end()) {
      reserved = hold->nodes;
      earliest = now_;
      ok = true;
    } else if (head->awaits_eviction) {
      for (auto& [id, j] : m_.jobs)
        for (int32_t t = 0; t < static_cast<int32_t>(j.allocations.size()); ++t)
          if (j.allocations[t] && (j.spec->terminating || victims_.count({&j, t}))) {
            const int64_t held = j.allocated.gpu_milli;  // (an exclusive job's node charge)
            (void)m_.ReleaseTask(j, t);
            avail_gpu += held - j.allocated.gpu_milli;
          }
      ok = try_head(now_);
    }
    for (size_t e = 0; !ok && e < ends.size(); ++e) {
      release(ends[e].job);
      if (avail_gpu >= head_gpu && (ok = try_head(std::max(now_, ends[e].end)))) break;
    }
    // Unknown ends: the start is unknown, and a fence would hold capacity idle for an
    // unknown time. None until the head has waited kUnknownStartFenceAfter (Volcano's sla
    // idea): a job that fits soon by chance costs nobody idle GPUs.
    const bool fence_unknown =
        head->awaits_eviction || now_ - head->rec->spec->submit_time >= kUnknownStartFenceAfter;
    if (!ok && fence_unknown) {
      // Release node by node, the node expected to drain first first, trying after each
      // release once enough GPUs are free, at most kTrials times; then release all the rest
      // and try once more. (Releasing every running job for each unplaceable job made the
      // default configuration quadratic on arrival-only workloads.) Deep-learning runtimes
      // are heavy-tailed: the longer a job has run, the longer it is likely to run on
      // (Tiresias), so a node drains when its oldest job ends; nodes whose oldest job
      // started last come first. Oldest jobs first put the fence behind the longest runs
      // (a 16-GPU head fenced 13 of 32 GPUs for 18 h behind a 58-hour job). The order is
      // sticky without state across cycles: a fenced node only loses jobs.
      constexpr int kTrials = 8;
      std::vector<int64_t> oldest(m_.nodes.size(), INT64_MAX);
      for (const Ending& u : unknown)
        for (const auto& a : u.job->allocations)
          if (a && !a->idle) {
            int64_t& o = oldest[m_.node_index.at(a->node)];
            o = std::min(o, u.job->start_time);
          }
      std::vector<int32_t> by_drain(m_.nodes.size());
      for (size_t i = 0; i < by_drain.size(); ++i) by_drain[i] = static_cast<int32_t>(i);
      std::stable_sort(by_drain.begin(), by_drain.end(),
                       [&](int32_t a, int32_t b) { return oldest[a] > oldest[b]; });
      std::vector<int32_t> rank(m_.nodes.size());
      for (size_t r = 0; r < by_drain.size(); ++r) rank[by_drain[r]] = static_cast<int32_t>(r);
      for (Ending& u : unknown) {  // a job goes with the first of its nodes to be released
        int32_t first = INT32_MAX;
        for (const auto& a : u.job->allocations)
          if (a && !a->idle) first = std::min(first, rank[m_.node_index.at(a->node)]);
        u.end = first;
      }
      std::stable_sort(unknown.begin(), unknown.end(),
                       [](const Ending& a, const Ending& b) { return a.end < b.end; });
      size_t k = 0;
      for (int trials = 0; !ok && k < unknown.size() && trials < kTrials;) {
        release(unknown[k++].job);
        if (avail_gpu >= head_gpu) {
          ++trials;
          ok = try_head(-1);
        }
      }
      if (!ok && k < unknown.size()) {
        while (k < unknown.size()) release(unknown[k++].job);
        ok = try_head(-1);
      }
    }
    m_.Rollback(mark);
    if (ok) {
      std::sort(reserved.begin(), reserved.end());
      reserved.erase(std::unique(reserved.begin(), reserved.end()), reserved.end());
      Reservation r;
      r.job = head->rec->spec->id;
      for (int32_t i : reserved) r.nodes.push_back(m_.nodes[i].name());
      r.earliest_start = earliest;
      plan_.reservations.push_back(r);
      reserved_head_ = head;
      reservation_note_ =
          head->awaits_eviction
              ? "; " + std::to_string(reserved.size()) + " node(s) held for it meanwhile"
              : " Reserved " + std::to_string(reserved.size()) + " node(s) for this job" +
                    (earliest >= 0 ? "; earliest start at " + TimeText(earliest) + "."
                                   : "; start time unknown.");
      fenced_.assign(m_.nodes.size(), false);
      for (int32_t i : reserved) fenced_[i] = true;
      fence_owner_ = head;
    } else if (!fence_unknown && !unknown.empty()) {
      reserved_head_ = head;
      reservation_note_ =
          " No node reserved yet: start time unknown (nodes are reserved once it has waited " +
          std::to_string(kUnknownStartFenceAfter) + " s).";
    }
  }
  // Every other preemptor's nodes are fenced too, for everyone: what it counted on beside its
  // victims must still be there once they have gone. (Whole nodes, as the head's.)
  std::vector<bool> held_fence;
  for (const Hold& h : held_) {
    if (h.nodes.empty()) continue;
    if (held_fence.empty()) held_fence.assign(m_.nodes.size(), false);
    for (int32_t i : h.nodes) held_fence[i] = true;
    if (fence_owner_ == nullptr) fence_owner_ = h.preemptor;
  }
  if (!held_fence.empty()) {
    if (fenced_.empty()) fenced_.assign(m_.nodes.size(), false);
    for (size_t i = 0; i < fenced_.size(); ++i) fenced_[i] = fenced_[i] || held_fence[i];
  }
  StartBindingPass();  // the reservation's trials are undone: from here on it only binds
  auto backfill = [&](PendingJob* pj) {
    const auto& est = pj->rec->spec->runtime_estimate_seconds;
    bool ends_before = est && earliest >= 0 && now_ + *est <= earliest;
    // (A job that ends before the head's start passes the head's fence, not the holds'.)
    std::vector<bool> saved = held_fence;
    if (ends_before) {
      saved.swap(fenced_);
      fence_held_only_ = !fenced_.empty();
    }
    Attempt(*pj);
    if (ends_before) {
      saved.swap(fenced_);
      fence_held_only_ = false;
    }
    return true;
  };
  auto eligible = [&](const PendingJob* pj) {
    return pj != head && (pj->state == JState::kAdmitted || pj->state == JState::kFailed);
  };
  if (e_.queue_drf || e_.queue_proportion) {
    // The jobs behind the head in allocate's queue order, continued from where it stopped
    // (the keys count what allocate placed): in job order alone, the team that submitted
    // first would take every GPU the head leaves, whatever its share.
    std::vector<PendingJob*> jobs, queueless;
    for (PendingJob* pj : order_)
      if (eligible(pj)) (pj->queue >= 0 ? jobs : queueless).push_back(pj);
    WalkQueues(jobs, backfill);
    for (PendingJob* pj : queueless) backfill(pj);
  } else {
    for (size_t i = 0; i < seq.size(); ++i) {
      PrefetchAhead(seq, i);
      if (eligible(seq[i])) backfill(seq[i]);
    }
  }
  binding_pass_ = false;
}

Plan CycleRun::Run() {
  plan_.now = now_;
  // The typical workload: configured, or learnt from the jobs in the state (heaviest first,
  // ties by shape key, at most 32 shapes).
  ctx_.typical = &typical_;
  ctx_.typical_by_gpu = &typical_by_gpu_;
  if (!e_.typical.empty()) {
    ctx_.typical = &e_.typical;
    ctx_.typical_by_gpu = &e_.typical_by_gpu;
  } else {
    std::vector<std::pair<int64_t, const std::pair<TaskRequest, int64_t>*>> v;
    for (const auto& [key, slot] : m_.shape_counts) v.push_back({slot.second, &slot});
    std::stable_sort(v.begin(), v.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (size_t i = 0; i < v.size() && i < 32; ++i)
      typical_.push_back({v[i].second->first, v[i].first});
    typical_by_gpu_ = GroupTypicalByGpu(typical_);
  }
  ctx_.now = now_;
  ctx_.rng = &rng_;
  for (const NodeState& n : m_.nodes) all_counted_ &= n.node->ready && !n.node->unschedulable;
  for (const auto& t : *ctx_.typical) ctx_.typical_total_weight += t.weight;
  BindMemo();

  limited_.assign(m_.queues.size(), 0);
  for (size_t q = 0; q < m_.queues.size(); ++q)
    for (int32_t a = static_cast<int32_t>(q); a >= 0 && !limited_[q]; a = m_.queues[a].parent)
      limited_[q] = EffectiveLimit(m_.queues[a]).has_value();
  // By id: a borrowed state's are found by walking its jobs (it keeps no pending list).
  if (!m_.borrowed) m_.SortPending();
  const size_t most = m_.borrowed ? m_.jobs.size() : m_.pending.size();
  jobs_.reserve(most);
  sort_keys_.reserve(most * (e_.orders.size() + 2));
  plan_.decisions.reserve(most);
  size_t tasks = 0;
  auto add = [&](const std::string& id, JobRec& rec) {
    PendingJob& pj = jobs_.emplace_back();
    plan_.decisions.emplace_back().job = id;
    pj.rec = &rec;
    const Job& job = *rec.spec;
    pj.task_count = static_cast<int32_t>(rec.allocations.size());  // job.TaskCount()
    pj.gang_min = rec.gang_min;
    pj.queue = rec.queue;
    pj.groups = job.groups.data();
    pj.one_task_per_node = rec.one_task_per_node;
    pj.exclusive = rec.exclusive;
    pj.spread = rec.spread;
    pj.shapes_at = static_cast<int32_t>(group_shapes_.size());
    for (int32_t g = 0; g < static_cast<int32_t>(job.groups.size()); ++g)
      group_shapes_.push_back(ShapeId(rec, g));
    tasks += pj.task_count - rec.running;
    AppendSortKeys(rec);
  };
  // Each job set up with its definition and task groups fetched a few jobs ahead: in a
  // backlog of thousands both are cache misses, and setting them up one after the other
  // was most of a replay's cycle.
  std::vector<std::pair<const std::string*, JobRec*>> walked;
  if (m_.borrowed)
    for (auto& [id, rec] : m_.jobs)
      if (rec.pending()) walked.push_back({&id, &rec});
  const auto& pending = m_.borrowed ? walked : m_.pending;
  for (size_t i = 0; i < pending.size(); ++i) {
    if (i + 16 < pending.size()) Prefetch(pending[i + 16].second);
    if (i + 8 < pending.size()) {
      const Job* spec = pending[i + 8].second->spec;
      Prefetch(&spec->priority);  // the order keys and the groups (96 bytes on)
      Prefetch(&spec->min_available);
      Prefetch(&spec->attained_gpu_milli_seconds);  // and the progress some orders read
    }
    if (i + 4 < pending.size()) Prefetch(pending[i + 4].second->spec->groups.data());
    add(*pending[i].first, *pending[i].second);
  }
  // Upper bounds, so that these never grow by copying (untouched capacity costs no pages).
  plan_.bindings.reserve(tasks);
  m_.undo.reserve(m_.undo.size() + tasks);
  SortJobs();
  strict_ = std::find(e_.actions.begin(), e_.actions.end(), Action::kBackfill) != e_.actions.end();

  for (const auto& sc : e_.scores) normalizes_ |= sc.plugin->Normalizes();
  m_.logging = true;
  m_.tracking = true;
  m_.freeze_pending = true;
  m_.touched.clear();
  for (Action a : e_.actions) {
    switch (a) {
      case Action::kEnqueue:
        DropHolds();
        Enqueue();
        break;
      case Action::kAllocate:
        DropHolds();
        Allocate();
        break;
      case Action::kPreempt:
        EvictFor(false);
        break;
      case Action::kReclaim:
        EvictFor(true);
        break;
      case Action::kBackfill:
        DropHolds();
        Backfill();
        break;
    }
  }
  DropHolds();
  Finalize();
  if (restore_) m_.Rollback(0);
  m_.undo.clear();
  m_.released.clear();
  m_.logging = false;
  m_.tracking = false;
  m_.freeze_pending = false;
  m_.touched.clear();

  for (auto& pj : jobs_) {
    if (!pj.tried && pj.state == JState::kAdmitted) {
      Decision(pj).outcome = Outcome::kWaiting;
      SetReason(pj, {"NotConsidered",
                     "not considered this cycle (behind a blocked job; no backfill ran)",
                     "",
                     {}});
    }
  }
  return std::move(plan_);
}

}  // namespace

Plan EngineImpl::Cycle(ClusterState& state, int64_t now, Rng& rng) const {
  CycleRun run(*this, state.impl(), now, rng, /*restore=*/true);
  return run.Run();
}

Plan EngineImpl::Cycle(const Snapshot& snapshot, int64_t now, Rng& rng) const {
  std::vector<std::pair<std::string, Status>> rejected;
  // The state lives for this call only: it refers to the snapshot's jobs, no copies.
  auto state = ClusterState::Borrowing(snapshot, &rejected);
  if (!state.ok()) {
    Plan plan;
    plan.now = now;
    for (const Job& j : snapshot.jobs)
      if (j.RunningTasks() < j.TaskCount())
        plan.decisions.push_back({j.id, Outcome::kError,
                                  std::make_shared<const PendingReason>(PendingReason{
                                      "InvalidSnapshot", state.status().message(), "", {}})});
    return plan;
  }
  // The state is ours and dies here: no need to undo the cycle's changes.
  CycleRun run(*this, (*state)->impl(), now, rng, /*restore=*/false);
  Plan plan = run.Run();
  if (!rejected.empty()) {
    for (const auto& [id, st] : rejected)
      plan.decisions.push_back(
          {id, Outcome::kError,
           std::make_shared<const PendingReason>(
               PendingReason{st.code() == StatusCode::kNotFound ? "UnknownQueue" : "InvalidJob",
                             st.message(),
                             "",
                             {}})});
    std::sort(plan.decisions.begin(), plan.decisions.end(),
              [](const JobDecision& a, const JobDecision& b) { return a.job < b.job; });
  }
  return plan;
}

}  // namespace tessera
