// Test helpers for the metrics: reading a series' value back from an exposition text.
#pragma once

#include <string>

namespace tessera::metrics::testing {

// The value of `series` (name and labels, as rendered) in the text exposition `text`, as
// written; "absent" when the text has no such series.
inline std::string SeriesValue(const std::string& text, const std::string& series) {
  const std::string all = "\n" + text, key = "\n" + series + " ";
  size_t at = all.find(key);
  if (at == std::string::npos) return "absent";
  at += key.size();
  return all.substr(at, all.find('\n', at) - at);
}

}  // namespace tessera::metrics::testing
