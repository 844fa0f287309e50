#include "backends/slurm/slurm_cli.h"

#include <charconv>

namespace tessera::slurm {
namespace {

std::string FirstLines(std::string s, size_t max = 400) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  for (char& c : s) {
    if (c == '\n') c = ' ';
  }
  if (s.size() > max) s = s.substr(0, max) + "...";
  return s;
}

bool Contains(const std::string& s, const char* needle) { return s.find(needle) != s.npos; }

}  // namespace

Status SlurmError(const std::vector<std::string>& argv, const CommandResult& r) {
  std::string what = argv.empty() ? "slurm" : argv[0];
  std::string msg = what + " (exit " + std::to_string(r.exit_code) +
                    "): " + FirstLines(r.err.empty() ? r.out : r.err);
  // The controller is down, restarting or overloaded: the same call can work later.
  for (const char* transient :
       {"Unable to contact slurm controller", "Socket timed out", "Connection refused",
        "Communication connection failure", "Zero Bytes were transmitted", "Transport endpoint",
        "Slurm temporarily unable", "Resource temporarily unavailable",
        "slurmctld is not responding"}) {
    if (Contains(r.err, transient)) return Unavailable(msg);
  }
  if (Contains(r.err, "Invalid job id")) return NotFound(msg);
  if (Contains(r.err, "submission failed") || Contains(r.err, "invalid") ||
      Contains(r.err, "Invalid")) {
    return FailedPrecondition(msg);
  }
  return Internal(msg);
}

StatusOr<CommandResult> SlurmCli::RunChecked(const std::vector<std::string>& argv,
                                             const std::string& input) {
  auto r = runner_.Run(argv, input);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) return SlurmError(argv, *r);
  return r;
}

StatusOr<std::vector<SlurmNode>> SlurmCli::Nodes() {
  auto r = RunChecked({"sinfo", "--json"}, "");
  if (!r.ok()) return r.status();
  auto nodes = ParseSinfoJson(r->out);
  if (!nodes.ok() && nodes.status().code() == StatusCode::kInvalidArgument) {
    return Internal(nodes.status().message());
  }
  return nodes;
}

StatusOr<std::vector<SlurmJob>> SlurmCli::Jobs() {
  auto r = RunChecked({"squeue", "--json"}, "");
  if (!r.ok()) return r.status();
  auto jobs = ParseSqueueJson(r->out);
  if (!jobs.ok() && jobs.status().code() == StatusCode::kInvalidArgument) {
    return Internal(jobs.status().message());
  }
  return jobs;
}

StatusOr<std::vector<SlurmPartition>> SlurmCli::Partitions() {
  auto r = RunChecked({"scontrol", "-a", "-o", "show", "partition"}, "");
  if (!r.ok()) return r.status();
  auto parts = ParseScontrolPartitions(r->out);
  if (!parts.ok()) return Internal(parts.status().message());
  return parts;
}

StatusOr<int64_t> SlurmCli::Submit(const std::vector<std::string>& argv,
                                   const std::string& script) {
  auto r = RunChecked(argv, script);
  if (!r.ok()) return r.status();
  std::string out = r->out;
  size_t end = out.find_first_of(";\n");
  std::string id_text = out.substr(0, end);
  int64_t id = 0;
  auto [p, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
  if (ec != std::errc() || p != id_text.data() + id_text.size() || id <= 0) {
    return Internal("sbatch --parsable printed \"" + FirstLines(out) + "\", not a job id");
  }
  return id;
}

Status SlurmCli::Cancel(const std::vector<int64_t>& ids) {
  if (ids.empty()) return Status::Ok();
  std::vector<std::string> argv = {"scancel"};
  for (int64_t id : ids) argv.push_back(std::to_string(id));
  auto r = RunChecked(argv, "");
  return r.ok() ? Status::Ok() : r.status();
}

StatusOr<std::optional<SlurmJob>> SlurmCli::ShowJob(int64_t id) {
  auto r = RunChecked({"scontrol", "-o", "show", "job", std::to_string(id)}, "");
  if (!r.ok()) {
    if (r.status().code() == StatusCode::kNotFound) return std::optional<SlurmJob>();
    return r.status();
  }
  // A heterogeneous job prints one line per component; the first is the leader.
  std::string line = r->out.substr(0, r->out.find('\n'));
  auto job = SlurmJobFromScontrol(ParseScontrolLine(line));
  if (!job.ok()) return Internal(job.status().message());
  return std::optional<SlurmJob>(*job);
}

}  // namespace tessera::slurm
