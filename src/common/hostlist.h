// Hostlists: Slurm's compact notation for node names ("gpu-node-[1-3,5],login1"), read where
// Slurm writes it (squeue's node lists) and where users write it (sbatch -w/-x).
// Stateless functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace tessera {

// "node[1-3,5],gpu7" -> {"node1","node2","node3","node5","gpu7"}, in the order written.
// Zero padding is kept ("n[01-03]" -> n01 n02 n03); text after the brackets too
// ("a[1-2]-ib" -> a1-ib a2-ib). Empty items are skipped. Refused, quoting the expression:
// unbalanced brackets, more than one bracket per name, a range that is not lo-hi with
// lo <= hi, a name longer than 253 characters, and more than `max_names` names in all.
StatusOr<std::vector<std::string>> ExpandHostlist(const std::string& expr,
                                                  size_t max_names = 100000);
// The inverse, as a plain comma-separated list (Slurm accepts it).
std::string JoinHostlist(const std::vector<std::string>& hosts);
// The inverse in Slurm's compact form, as SLURM_JOB_NODELIST carries it: neighbours that
// differ only in a trailing number share one bracket, ascending runs as ranges
// ({gpu1,gpu2,gpu3,gpu5,cpu1} -> "gpu[1-3,5],cpu1"), zero padding kept. The order is kept,
// not sorted as Slurm does: scripts take the first name as the rank-0 host.
// ExpandHostlist(CompressHostlist(h)) == h.
std::string CompressHostlist(const std::vector<std::string>& hosts);

}  // namespace tessera
