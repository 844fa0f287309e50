#include "common/int_param.h"

#include <charconv>
#include <string>
#include <system_error>

namespace tessera {

StatusOr<int64_t> ParseIntParam(std::string_view name, std::string_view text, int64_t min,
                                int64_t max) {
  int64_t x = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, x);
  if (text.empty() || ec != std::errc() || ptr != end)
    return InvalidArgument(std::string(name) + ": expected an integer, got \"" + std::string(text) +
                           "\"");
  if (x < min || x > max)
    return InvalidArgument(std::string(name) + ": must be " + std::to_string(min) + ".." +
                           std::to_string(max));
  return x;
}

}  // namespace tessera
