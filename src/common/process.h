// What a child process is started with: this process's environment, with overrides; argv
// as a shell would read it. Stateless functions; they read `environ` (not while another
// thread changes it).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace tessera {

// This process's environment as a map (a variable given twice: its last value).
std::map<std::string, std::string> EnvironMap();

// EnvironMap() less the variables that carry Tessera's own credentials ($TESSERA_AGENT_TOKEN,
// $TESSERA_LOGS_TOKEN, $TESSERA_TOKEN, $TESSERA_TOKEN_FILE): what a task started from this
// process inherits (an agent's token would let any task act as any node).
std::map<std::string, std::string> EnvironForTasks();

// This process's environment as "KEY=value" strings, with `overrides` in place of (or beside)
// their keys: for an exec, built before fork.
std::vector<std::string> EnvironWith(const std::map<std::string, std::string>& overrides);

// Writes all `n` bytes to `fd`, again after EINTR; stops at another error. Async-signal-safe
// (a forked child's last words).
void WriteAll(int fd, const char* data, size_t n);

// "sbatch --parsable -J 'a b'": argv as a shell would need it, single-quoted where needed.
std::string QuoteArgv(const std::vector<std::string>& argv);

}  // namespace tessera
