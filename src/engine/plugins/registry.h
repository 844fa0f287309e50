// The one explicit registry of engine plugins: configuration name -> factory.
//
// Every built-in is one line in registry.cc (paper policies from src/engine/plugins/paper/
// included). Names are what scheduler configurations use: Volcano's (priority, gang,
// conformance, drf, proportion, predicates, nodeorder, binpack) and Tessera's own (fifo,
// binpack, spread, fragmentation, topology, ...). Immutable; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "engine/plugin.h"

namespace tessera {

struct PluginRegistration {
  const char* name;
  const char* summary;  // one line for docs and error messages
  PluginFactory factory;
};

// All registered plugins, sorted by name.
const std::vector<PluginRegistration>& PluginRegistry();
// nullptr when unknown.
const PluginRegistration* FindPlugin(const std::string& name);
// Builds the named plugin; "unknown plugin" errors name `path` and list the known names.
StatusOr<PluginInstance> MakePlugin(const std::string& name, const Json& arguments,
                                    const std::string& path);

// Helpers for factories: read an optional integer `weight` (>= 0) and reject any other key.
Status ReadOnlyWeight(const Json& arguments, const std::string& path, int64_t& weight);

}  // namespace tessera
