#include "sim/traces.h"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tessera::sim {
namespace {

constexpr const char* kNoPodTimes = "no creation_time or deletion_time";

// Reads a whole file; transparently gunzips when the name ends in ".gz".
StatusOr<std::string> ReadFile(const std::string& path) {
  // A directory opens and reads as empty on Linux, which would pass for an empty trace.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return InvalidArgument(path + ": is a directory, expected a trace file");
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0) {
    gzFile f = gzopen(path.c_str(), "rb");
    if (f == nullptr) return NotFound("cannot open " + path);
    std::string out;
    char buf[1 << 16];
    int n;
    while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, n);
    // A stream cut short reads as a clean EOF; only gzerror/gzclose report Z_BUF_ERROR.
    int err = Z_OK;
    gzerror(f, &err);
    int closed = gzclose(f);
    if (err == Z_BUF_ERROR || closed == Z_BUF_ERROR)
      return InvalidArgument(path + ": truncated gzip (the stream ends before its trailer)");
    if (n < 0 || (err != Z_OK && err != Z_STREAM_END) || closed != Z_OK)
      return InvalidArgument(path + ": corrupt gzip stream");
    return out;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string_view> Split(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t p = line.find(sep, start);
    out.push_back(
        line.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos) break;
    start = p + 1;
  }
  return out;
}

std::string BaseName(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

// A UTF-8 byte-order mark, which spreadsheet exports put before the header, is no part of it.
void StripByteOrderMark(std::string& text) {
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
}

// A CSV with a header row; cells are looked up by column name. No quoting (none of the traces
// quote), '\r' tolerated.
class Csv {
 public:
  static StatusOr<Csv> Load(const std::string& path, const std::vector<std::string>& required) {
    auto text = ReadFile(path);
    if (!text.ok()) return text.status();
    Csv csv;
    csv.name_ = BaseName(path);
    csv.text_ = std::move(*text);
    StripByteOrderMark(csv.text_);
    std::string_view all(csv.text_);
    size_t pos = 0;
    int line_no = 0;
    while (pos < all.size()) {
      size_t e = all.find('\n', pos);
      std::string_view line =
          all.substr(pos, e == std::string_view::npos ? std::string_view::npos : e - pos);
      pos = e == std::string_view::npos ? all.size() : e + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) continue;
      if (csv.header_.empty()) {
        for (auto c : Split(line, ',')) csv.header_.emplace_back(c);
        continue;
      }
      csv.rows_.push_back(Split(line, ','));
      csv.lines_.push_back(line_no);
    }
    if (csv.header_.empty())
      return InvalidArgument(csv.name_ + ": empty file, expected a header row");
    for (size_t c = 0; c < csv.header_.size(); ++c)
      csv.col_.emplace(csv.header_[c], static_cast<int>(c));  // optional columns too
    for (const auto& r : required) {
      auto it = std::find(csv.header_.begin(), csv.header_.end(), r);
      if (it == csv.header_.end())
        return InvalidArgument(csv.name_ + ": missing column \"" + r + "\"");
      csv.col_[r] = static_cast<int>(it - csv.header_.begin());
    }
    for (size_t i = 0; i < csv.rows_.size(); ++i)
      if (csv.rows_[i].size() != csv.header_.size())
        return InvalidArgument(csv.name_ + ":" + std::to_string(csv.lines_[i]) + ": expected " +
                               std::to_string(csv.header_.size()) + " columns, got " +
                               std::to_string(csv.rows_[i].size()));
    return csv;
  }
  size_t size() const { return rows_.size(); }
  bool Has(const std::string& col) const { return col_.count(col) > 0; }
  int64_t Line(size_t row) const { return lines_[row]; }
  // An absent optional column reads as empty.
  std::string_view Cell(size_t row, const std::string& col) const {
    auto it = col_.find(col);
    return it == col_.end() ? std::string_view() : rows_[row][it->second];
  }
  std::string Where(size_t row, const std::string& col) const {
    return name_ + ":" + std::to_string(lines_[row]) + ": " + col;
  }
  Status Int(size_t row, const std::string& col, int64_t& out) const {
    std::string_view s = Cell(row, col);
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (ec != std::errc() || p != s.data() + s.size())
      return InvalidArgument(Where(row, col) + ": expected an integer, got \"" + std::string(s) +
                             "\"");
    return Status::Ok();
  }
  // "860662.0" -> 860662; a fractional part rounds up so that no job lasts 0 s by accident.
  Status Seconds(size_t row, const std::string& col, int64_t& out) const {
    std::string_view s = Cell(row, col);
    size_t dot = s.find('.');
    std::string_view whole = s.substr(0, dot);
    auto [p, ec] = std::from_chars(whole.data(), whole.data() + whole.size(), out);
    bool bad = ec != std::errc() || p != whole.data() + whole.size() || out < 0;
    if (!bad && dot != std::string_view::npos) {
      std::string_view frac = s.substr(dot + 1);
      bad = frac.find_first_not_of("0123456789") != std::string_view::npos;
      if (!bad && frac.find_first_not_of('0') != std::string_view::npos) ++out;
    }
    if (bad)
      return InvalidArgument(Where(row, col) + ": expected seconds >= 0, got \"" + std::string(s) +
                             "\"");
    return Status::Ok();
  }

 private:
  std::string name_;
  std::string text_;
  std::vector<std::string> header_;
  std::map<std::string, int> col_;
  std::vector<std::vector<std::string_view>> rows_;
  std::vector<int> lines_;
};

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's civil algorithm).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

int64_t DaysInMonth(int64_t y, int64_t m) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

// "2017-10-09 07:01:55" -> seconds since the epoch (the trace's clock has no zone). Exactly
// that shape, and a real date: DaysFromCivil would turn 2017-02-31 into March 3.
bool ParseTimestamp(std::string_view s, int64_t& out) {
  static constexpr std::string_view kShape = "dddd-dd-dd dd:dd:dd";
  if (s.size() != kShape.size()) return false;
  for (size_t i = 0; i < s.size(); ++i)
    if (kShape[i] == 'd' ? s[i] < '0' || s[i] > '9' : s[i] != kShape[i]) return false;
  auto num = [&](size_t at, size_t len) {
    int64_t v = 0;
    for (size_t i = at; i < at + len; ++i) v = v * 10 + (s[i] - '0');
    return v;
  };
  int64_t y = num(0, 4), mo = num(5, 2), d = num(8, 2), h = num(11, 2), mi = num(14, 2),
          se = num(17, 2);
  if (mo < 1 || mo > 12 || d < 1 || d > DaysInMonth(y, mo) || h > 23 || mi > 59 || se > 60)
    return false;
  out = DaysFromCivil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se;
  return true;
}

// `gpus` whole GPUs as the fewest equal tasks of at most `per` GPUs (one machine each);
// with 8: 12 -> 2 x 6, 24 -> 3 x 8, 20 -> 4 x 5; a prime above 8 becomes that many 1-GPU
// tasks.
// The most GPUs one trace job may ask (2^20; the largest SWF logs have 786,432 processors):
// more is a corrupt line, refused rather than wrapped into another job's size.
constexpr int64_t kMaxJobGpus = int64_t{1} << 20;

Status CheckJobGpus(const std::string& where, int64_t gpus) {
  if (gpus >= 1 && gpus <= kMaxJobGpus) return Status::Ok();
  return InvalidArgument(where + ": must be 1.." + std::to_string(kMaxJobGpus) + ", got " +
                         std::to_string(gpus));
}

void SplitGang(int64_t gpus, TraceJob& j, int64_t per = 8) {
  for (int64_t k = (gpus + per - 1) / per; k <= gpus; ++k)
    if (gpus % k == 0 && gpus / k <= per) {
      j.tasks = static_cast<int32_t>(k);
      j.gpus_per_task = static_cast<int32_t>(gpus / k);
      return;
    }
}

void SortBySubmit(std::vector<TraceJob>& jobs) {
  // Stable: equal submit times keep the file's row order (ids carry the row number).
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const TraceJob& a, const TraceJob& b) { return a.submit < b.submit; });
  if (jobs.empty()) return;
  int64_t t0 = jobs.front().submit;
  for (auto& j : jobs) j.submit -= t0;
}

// One SWF field: an integer, or a decimal ("-1.00", "100.7"). A positive fraction rounds up
// when `round_up` (times, as the CSV loaders do), else only the integer part is kept. Trailing
// junk ("100x") is refused; so is a fraction in a count (`whole`).
bool ParseSwfField(std::string_view tok, bool round_up, bool whole, int64_t& out) {
  const char* end = tok.data() + tok.size();
  auto [p, ec] = std::from_chars(tok.data(), end, out);
  if (ec != std::errc()) return false;
  if (p == end) return true;
  if (*p != '.') return false;
  std::string_view frac(p + 1, static_cast<size_t>(end - p - 1));
  if (frac.empty() || frac.find_first_not_of("0123456789") != std::string_view::npos) return false;
  bool nonzero = frac.find_first_not_of('0') != std::string_view::npos;
  if (nonzero && whole) return false;
  if (nonzero && round_up && tok.front() != '-') ++out;
  return true;
}

}  // namespace

int64_t TraceSkips::total() const {
  int64_t n = 0;
  for (const auto& [reason, count] : by_reason) n += count;
  return n;
}

std::string TraceSkips::ToString() const {
  const int64_t n = total();
  if (n == 0) return "";
  std::string out = std::to_string(n) + (n == 1 ? " record" : " records") + " skipped (";
  bool first = true;
  for (const auto& [reason, count] : by_reason) {
    out += (first ? "" : ", ") + reason + ": " + std::to_string(count);
    first = false;
  }
  return out + ")";
}

StatusOr<std::vector<OpenbNode>> LoadOpenbNodes(const std::string& path) {
  auto csv = Csv::Load(path, {"sn", "cpu_milli", "memory_mib", "gpu", "model"});
  if (!csv.ok()) return csv.status();
  std::vector<OpenbNode> out;
  for (size_t i = 0; i < csv->size(); ++i) {
    OpenbNode n;
    int64_t gpus = 0;
    n.name = csv->Cell(i, "sn");
    TESSERA_RETURN_IF_ERROR(csv->Int(i, "cpu_milli", n.cpu_milli));
    TESSERA_RETURN_IF_ERROR(csv->Int(i, "memory_mib", n.memory_mib));
    TESSERA_RETURN_IF_ERROR(csv->Int(i, "gpu", gpus));
    for (auto [col, v] : {std::pair{"cpu_milli", n.cpu_milli}, {"memory_mib", n.memory_mib}})
      if (v < 0)
        return InvalidArgument(csv->Where(i, col) + ": must be >= 0, got " + std::to_string(v));
    if (gpus < 0 || gpus > 64)
      return InvalidArgument(csv->Where(i, "gpu") + ": must be 0..64, got " + std::to_string(gpus));
    n.gpus = static_cast<int32_t>(gpus);
    n.model = csv->Cell(i, "model");
    if (n.name.empty()) return InvalidArgument(csv->Where(i, "sn") + ": empty node name");
    out.push_back(std::move(n));
  }
  return out;
}

StatusOr<std::vector<OpenbPod>> LoadOpenbPods(const std::string& path) {
  auto csv =
      // gpu_spec, qos, pod_phase and the times are optional (the multigpu* variants have
      // only the first five columns): empty = any GPU model, no times.
      Csv::Load(path, {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"});
  if (!csv.ok()) return csv.status();
  std::vector<OpenbPod> out;
  out.reserve(csv->size());
  for (size_t i = 0; i < csv->size(); ++i) {
    OpenbPod p;
    int64_t num_gpu = 0, gpu_milli = 0;
    p.name = csv->Cell(i, "name");
    p.line = csv->Line(i);
    TESSERA_RETURN_IF_ERROR(csv->Int(i, "cpu_milli", p.cpu_milli));
    TESSERA_RETURN_IF_ERROR(csv->Int(i, "memory_mib", p.memory_mib));
    TESSERA_RETURN_IF_ERROR(csv->Int(i, "num_gpu", num_gpu));
    TESSERA_RETURN_IF_ERROR(csv->Int(i, "gpu_milli", gpu_milli));
    for (auto [col, v] : {std::pair{"cpu_milli", p.cpu_milli}, {"memory_mib", p.memory_mib}})
      if (v < 0)
        return InvalidArgument(csv->Where(i, col) + ": must be >= 0, got " + std::to_string(v));
    if (num_gpu < 0 || num_gpu > 64)
      return InvalidArgument(csv->Where(i, "num_gpu") + ": must be 0..64, got " +
                             std::to_string(num_gpu));
    // Refused rather than clamped: a silently changed request replays another workload.
    // The real files: num_gpu 0 -> 0, 1 -> 50..1000, 2..8 -> 1000.
    const bool ok = num_gpu == 0   ? gpu_milli == 0
                    : num_gpu == 1 ? gpu_milli >= 1 && gpu_milli <= 1000
                                   : gpu_milli == 1000;
    if (!ok)
      return InvalidArgument(csv->Where(i, "gpu_milli") + ": must be " +
                             (num_gpu == 0   ? "0 when num_gpu is 0"
                              : num_gpu == 1 ? "1..1000 when num_gpu is 1"
                                             : "1000 when num_gpu > 1") +
                             ", got " + std::to_string(gpu_milli));
    p.num_gpu = static_cast<int32_t>(num_gpu);
    p.gpu_milli = static_cast<int32_t>(gpu_milli);
    std::string_view spec = csv->Cell(i, "gpu_spec");
    if (!spec.empty())
      for (auto m : Split(spec, '|'))
        if (!m.empty()) p.gpu_spec.emplace_back(m);
    p.qos = csv->Cell(i, "qos");
    p.phase = csv->Cell(i, "pod_phase");
    for (const char* col : {"creation_time", "deletion_time", "scheduled_time"}) {
      if (csv->Cell(i, col).empty()) continue;
      int64_t v = 0;
      TESSERA_RETURN_IF_ERROR(csv->Int(i, col, v));
      std::string c(col);
      (c == "creation_time"   ? p.creation_time
       : c == "deletion_time" ? p.deletion_time
                              : p.scheduled_time) = v;
    }
    if (p.creation_time && p.deletion_time && *p.deletion_time < *p.creation_time)
      return InvalidArgument(csv->Where(i, "deletion_time") + ": before creation_time (" +
                             std::to_string(*p.deletion_time) + " < " +
                             std::to_string(*p.creation_time) + ")");
    out.push_back(std::move(p));
  }
  return out;
}

StatusOr<std::vector<ArrivalOrderEntry>> LoadArrivalOrder(const std::string& path) {
  auto csv = Csv::Load(path, {"idx", "name"});
  if (!csv.ok()) return csv.status();
  std::vector<ArrivalOrderEntry> out;
  out.reserve(csv->size());
  for (size_t i = 0; i < csv->size(); ++i) {
    int64_t idx = 0;
    TESSERA_RETURN_IF_ERROR(csv->Int(i, "idx", idx));
    if (idx != static_cast<int64_t>(i))
      return InvalidArgument(csv->Where(i, "idx") + ": expected " + std::to_string(i) + ", got " +
                             std::to_string(idx));
    ArrivalOrderEntry e;
    e.name = csv->Cell(i, "name");
    e.where = BaseName(path) + ":" + std::to_string(csv->Line(i));
    for (auto [col, field] : {std::pair{"cpu_milli", &e.cpu_milli},
                              {"num_gpu", &e.num_gpu},
                              {"gpu_milli", &e.gpu_milli}}) {
      if (!csv->Has(col)) continue;
      int64_t v = 0;
      TESSERA_RETURN_IF_ERROR(csv->Int(i, col, v));
      *field = v;
    }
    out.push_back(std::move(e));
  }
  return out;
}

StatusOr<std::map<std::string, std::string>> LoadNodePrefix(const std::string& path) {
  auto csv = Csv::Load(path, {"sn", "sim_name"});
  if (!csv.ok()) return csv.status();
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < csv->size(); ++i)
    if (!out.emplace(std::string(csv->Cell(i, "sn")), std::string(csv->Cell(i, "sim_name"))).second)
      return InvalidArgument(csv->Where(i, "sn") + ": duplicate node \"" +
                             std::string(csv->Cell(i, "sn")) + "\"");
  return out;
}

StatusOr<std::vector<TraceJob>> LoadPhilly(const std::string& path) {
  auto csv = Csv::Load(path, {"timestamp", "duration", "num_gpus", "cluster"});
  if (!csv.ok()) return csv.status();
  std::vector<TraceJob> out;
  out.reserve(csv->size());
  for (size_t i = 0; i < csv->size(); ++i) {
    TraceJob j;
    char id[32];
    std::snprintf(id, sizeof id, "philly-%05zu", i);
    j.id = id;
    j.line = csv->Line(i);
    if (!ParseTimestamp(csv->Cell(i, "timestamp"), j.submit))
      return InvalidArgument(csv->Where(i, "timestamp") + ": expected YYYY-MM-DD HH:MM:SS, got \"" +
                             std::string(csv->Cell(i, "timestamp")) + "\"");
    TESSERA_RETURN_IF_ERROR(csv->Seconds(i, "duration", j.duration));
    int64_t gpus = 0;
    TESSERA_RETURN_IF_ERROR(csv->Int(i, "num_gpus", gpus));
    TESSERA_RETURN_IF_ERROR(CheckJobGpus(csv->Where(i, "num_gpus"), gpus));
    // Whole GPUs; a job larger than one 8-GPU machine becomes a gang of equal tasks.
    SplitGang(gpus, j);
    if (csv->Cell(i, "cluster").empty())
      return InvalidArgument(csv->Where(i, "cluster") + ": empty virtual cluster id");
    j.queue = "vc-" + std::string(csv->Cell(i, "cluster"));
    out.push_back(std::move(j));
  }
  SortBySubmit(out);
  return out;
}

StatusOr<std::vector<TraceJob>> LoadTiresias(const std::string& path) {
  auto csv = Csv::Load(path, {"job_id", "num_gpu", "submit_time", "duration"});
  if (!csv.ok()) return csv.status();
  std::vector<TraceJob> out;
  for (size_t i = 0; i < csv->size(); ++i) {
    TraceJob j;
    int64_t gpus = 0;
    j.id = "tiresias-" + std::string(csv->Cell(i, "job_id"));
    j.line = csv->Line(i);
    TESSERA_RETURN_IF_ERROR(csv->Int(i, "num_gpu", gpus));
    TESSERA_RETURN_IF_ERROR(csv->Seconds(i, "submit_time", j.submit));
    TESSERA_RETURN_IF_ERROR(csv->Seconds(i, "duration", j.duration));
    TESSERA_RETURN_IF_ERROR(CheckJobGpus(csv->Where(i, "num_gpu"), gpus));
    SplitGang(gpus, j);
    out.push_back(std::move(j));
  }
  SortBySubmit(out);
  return out;
}

StatusOr<std::vector<TraceJob>> LoadSwf(const std::string& path, const SwfOptions& options,
                                        TraceSkips* skipped) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  std::vector<TraceJob> out;
  std::istringstream in(*text);
  std::string line;
  int line_no = 0;
  TraceSkips skip;
  const std::string name = BaseName(path);
  while (std::getline(in, line)) {
    ++line_no;
    size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == ';') continue;
    std::istringstream fields(line);
    std::vector<int64_t> f;
    std::string tok;
    while (fields >> tok) {
      // Fields are integers except occasionally "-1.00"-style averages. 1-based: 2 submit and
      // 4 run time are seconds; 1 job, 5 and 8 processors and 15 queue are counts.
      const size_t field = f.size() + 1;
      const bool time = field == 2 || field == 4;
      const bool count = field == 1 || field == 5 || field == 8 || field == 15;
      int64_t v = 0;
      if (!ParseSwfField(tok, time, count, v))
        return InvalidArgument(name + ":" + std::to_string(line_no) + ": field " +
                               std::to_string(field) + ": expected " +
                               (count ? "an integer" : "a number") + ", got \"" + tok + "\"");
      f.push_back(v);
    }
    if (f.size() != 18)
      return InvalidArgument(name + ":" + std::to_string(line_no) + ": expected 18 fields, got " +
                             std::to_string(f.size()));
    if (f[1] < 0)  // seconds since the log's start: no "unknown" here, unlike other fields
      return InvalidArgument(name + ":" + std::to_string(line_no) +
                             ": field 2: submit time must be >= 0, got " + std::to_string(f[1]));
    // 1 job, 2 submit, 4 run time, 5 allocated procs, 8 requested procs, 15 queue.
    int64_t procs = f[4] > 0 ? f[4] : f[7];
    if (f[3] <= 0 || procs <= 0) {
      ++skip.by_reason[f[3] <= 0 ? "runtime <= 0" : "processors <= 0"];
      continue;
    }
    TESSERA_RETURN_IF_ERROR(CheckJobGpus(
        name + ":" + std::to_string(line_no) + ": field " + (f[4] > 0 ? "5" : "8"), procs));
    TraceJob j;
    j.id = "swf-" + std::to_string(f[0]);
    j.line = line_no;
    j.submit = f[1];
    j.duration = f[3];
    // Total GPUs = processors, as Philly: 12 -> 2 x 6 (a ceil split would ask 16).
    SplitGang(procs, j, std::max(options.max_gpus_per_task, 1));
    // -1 is SWF's "unknown": such jobs go to the cluster's default queue, not to a "q-1".
    j.queue = f[14] >= 0 ? "q" + std::to_string(f[14]) : "default";
    out.push_back(std::move(j));
  }
  if (skipped) *skipped = std::move(skip);
  SortBySubmit(out);
  return out;
}

std::vector<TraceJob> OpenbPodsAsJobs(const std::vector<OpenbPod>& pods, TraceSkips* skipped) {
  std::vector<TraceJob> out;
  TraceSkips skip;
  for (const OpenbPod& p : pods) {
    if (!p.creation_time || !p.deletion_time) {
      ++skip.by_reason[kNoPodTimes];
      continue;
    }
    if (*p.deletion_time < *p.creation_time) {
      ++skip.by_reason["deletion_time before creation_time"];
      continue;
    }
    TraceJob j;
    j.id = p.name;
    j.line = p.line;
    j.submit = *p.creation_time;
    j.duration = *p.deletion_time - *p.creation_time;
    j.tasks = 1;
    j.gpus_per_task = p.num_gpu;
    j.gpu_milli = p.num_gpu == 1 ? p.gpu_milli : 1000;
    j.cpu_milli = p.cpu_milli;
    j.memory_mib = p.memory_mib;
    j.models = p.gpu_spec;
    out.push_back(std::move(j));
  }
  if (skipped) *skipped = std::move(skip);
  SortBySubmit(out);
  return out;
}

void FitTasksToNodes(std::vector<TraceJob>& jobs, int32_t max_gpus_per_node) {
  if (max_gpus_per_node < 1) return;
  for (TraceJob& j : jobs)
    if (j.gpus_per_task > max_gpus_per_node) {
      // CPU and memory are per task: the job's totals are shared out over the new tasks.
      const int64_t cpu = int64_t{j.tasks} * j.cpu_milli, mem = int64_t{j.tasks} * j.memory_mib;
      SplitGang(int64_t{j.tasks} * j.gpus_per_task, j, max_gpus_per_node);
      j.cpu_milli = (cpu + j.tasks - 1) / j.tasks;
      j.memory_mib = (mem + j.tasks - 1) / j.tasks;
    }
}

namespace {

constexpr const char* kFormats =
    "philly (philly*.csv, or a header with timestamp,duration,num_gpus,cluster), openb "
    "(openb_pod_list*.csv, or name,cpu_milli,memory_mib,num_gpu,gpu_milli), tiresias "
    "(job_id,num_gpu,submit_time,duration), swf (*.swf, *.swf.gz, or lines of 18 numbers)";

// --format auto: the file name, else the first line that is not empty (a CSV header, or SWF's
// ';' comments and 18 numeric fields). "" when neither tells.
StatusOr<std::string> DetectFormat(const std::string& path) {
  const std::string base = BaseName(path);
  if (base.find("philly") != std::string::npos) return std::string("philly");
  if (base.find(".swf") != std::string::npos) return std::string("swf");
  if (base.find("openb_pod_list") != std::string::npos) return std::string("openb");
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  StripByteOrderMark(*text);
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    if (line[first] == ';') return std::string("swf");
    std::vector<std::string_view> cols = Split(line, ',');
    auto has = [&](std::initializer_list<std::string_view> want) {
      for (std::string_view w : want)
        if (std::find(cols.begin(), cols.end(), w) == cols.end()) return false;
      return true;
    };
    if (has({"job_id", "num_gpu", "submit_time", "duration"})) return std::string("tiresias");
    if (has({"timestamp", "duration", "num_gpus", "cluster"})) return std::string("philly");
    if (has({"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}))
      return std::string("openb");
    std::istringstream fields(line);
    std::string tok;
    int n = 0;
    int64_t v = 0;
    while (fields >> tok && ParseSwfField(tok, false, false, v)) ++n;
    if (n >= 18 && !(fields >> tok)) return std::string("swf");
    break;
  }
  return std::string();
}

}  // namespace

StatusOr<LoadedTrace> LoadTrace(const std::string& path, const std::string& format) {
  std::string f = format;
  const std::string base = BaseName(path);
  if (f == "auto") {
    auto detected = DetectFormat(path);
    if (!detected.ok()) return detected.status();
    if (detected->empty())
      return InvalidArgument(base +
                             ": cannot tell the trace format from the file name or the first "
                             "line; understood: " +
                             kFormats + "; or name it with --format");
    f = *detected;
  }
  LoadedTrace out;
  StatusOr<std::vector<TraceJob>> jobs = InvalidArgument("");
  if (f == "philly") {
    jobs = LoadPhilly(path);
  } else if (f == "swf") {
    jobs = LoadSwf(path, {}, &out.skipped);
  } else if (f == "tiresias") {
    jobs = LoadTiresias(path);
  } else if (f == "openb") {
    auto pods = LoadOpenbPods(path);
    if (!pods.ok()) return pods.status();
    jobs = OpenbPodsAsJobs(*pods, &out.skipped);
  } else {
    return InvalidArgument("--format: unknown \"" + format +
                           "\" (auto, philly, openb, tiresias, swf)");
  }
  if (!jobs.ok()) return jobs.status();
  out.jobs = std::move(*jobs);
  // One id, one job: a second one would replace the first in the replay's books.
  std::map<std::string, int64_t> first_line;
  for (const TraceJob& j : out.jobs) {
    auto [it, fresh] = first_line.emplace(j.id, j.line);
    if (!fresh) {
      const auto [a, b] = std::minmax(it->second, j.line);
      return InvalidArgument(base + ":" + std::to_string(b) + ": job id \"" + j.id +
                             "\" is given twice (first at line " + std::to_string(a) + ")");
    }
  }
  const int64_t skipped = out.skipped.total();
  if (out.jobs.empty() && skipped > 0) {
    if (f == "openb" && out.skipped.by_reason.count(kNoPodTimes) == 1 &&
        out.skipped.by_reason.at(kNoPodTimes) == skipped)
      return InvalidArgument(base +
                             ": no pod has both creation_time and deletion_time; a dynamic "
                             "replay needs them (sim fgd uses this list)");
    return InvalidArgument(
        base + ": every record was skipped, no job to replay: " + out.skipped.ToString());
  }
  return out;
}

std::string FindTracesDir() {
  namespace fs = std::filesystem;
  if (const char* t = std::getenv("TESSERA_TRACES"); t != nullptr && *t != 0)
    return fs::is_directory(t) ? std::string(t) : "";
  std::vector<fs::path> candidates;
  if (const char* s = std::getenv("TESSERA_SOURCE_DIR"); s != nullptr && *s != 0)
    candidates.push_back(fs::path(s) / ".." / "shared" / "traces");
  candidates.push_back(fs::path("..") / "shared" / "traces");
  for (const auto& c : candidates)
    if (fs::is_directory(c)) return fs::weakly_canonical(c).string();
  return "";
}

}  // namespace tessera::sim
