#include "common/duration.h"

#include <cctype>
#include <limits>

namespace tessera {

StatusOr<int64_t> ParseDuration(std::string_view text) {
  const std::string quoted = "\"" + std::string(text) + "\"";
  if (text == "0") return 0;
  if (text.empty()) return InvalidArgument("empty duration (e.g. 24h, 90m, 30s)");
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t total = 0;
  size_t i = 0;
  while (i < text.size()) {
    int64_t n = 0;
    const size_t digits = i;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      if (n > (kMax - (text[i] - '0')) / 10) return InvalidArgument(quoted + ": too long");
      n = n * 10 + (text[i] - '0');
    }
    if (i == digits)
      return InvalidArgument(quoted + ": expected a number at \"" + std::string(text.substr(i)) +
                             "\" (e.g. 24h, 90m, 30s)");
    if (i == text.size())
      return InvalidArgument(quoted + ": missing unit after " + std::to_string(n) + " (h, m or s)");
    const char unit = text[i++];
    const int64_t scale = unit == 'h' ? 3600 : unit == 'm' ? 60 : unit == 's' ? 1 : 0;
    if (scale == 0)
      return InvalidArgument(quoted + ": unknown unit \"" + std::string(1, unit) +
                             "\" (h, m or s)");
    if (n > (kMax - total) / scale) return InvalidArgument(quoted + ": too long");
    total += n * scale;
  }
  return total;
}

std::string FormatDuration(int64_t seconds) {
  if (seconds <= 0) return "0s";
  std::string out;
  if (seconds >= 3600) out += std::to_string(seconds / 3600) + "h";
  if (seconds % 3600 >= 60) out += std::to_string(seconds % 3600 / 60) + "m";
  if (seconds % 60 != 0) out += std::to_string(seconds % 60) + "s";
  return out;
}

}  // namespace tessera
