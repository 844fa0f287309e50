// ParseIntParam: an integer query parameter (`offset=N`, `limit=M`) read strictly, for the
// server's API and the agent's logs endpoint alike. Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace tessera {

// The decimal integer `text` (an optional '-' and digits, nothing else: no sign '+', spaces or
// trailing characters) when it lies in [min, max]. InvalidArgument naming the parameter:
// "NAME: expected an integer, got \"x\"" (also for a number beyond int64), or
// "NAME: must be MIN..MAX".
StatusOr<int64_t> ParseIntParam(std::string_view name, std::string_view text, int64_t min,
                                int64_t max);

}  // namespace tessera
