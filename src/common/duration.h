// Durations as flags give them and messages show them, in Go's (and so kubelet's) notation:
// "24h", "1h30m", "90s", "0". Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tessera {

// Whole seconds of `text`: one or more <digits><unit> with unit h, m or s ("24h", "1h30m",
// "45s"), or "0". InvalidArgument naming what is wrong (an unknown unit, a missing one, a
// fraction, a value past int64 seconds).
StatusOr<int64_t> ParseDuration(std::string_view text);

// "24h", "1h30m", "2m5s", "0s": the largest units first, zero parts left out.
std::string FormatDuration(int64_t seconds);

}  // namespace tessera
