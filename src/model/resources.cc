#include "model/resources.h"

#include <cctype>
#include <limits>

namespace tessera {
namespace {

struct Suffix {
  const char* text;
  int64_t num;  // value = mantissa * num / den
  int64_t den;
};

// Kubernetes quantity suffixes (binary and decimal), plus "m" (milli).
constexpr Suffix kSuffixes[] = {
    {"Ki", 1LL << 10, 1},      {"Mi", 1LL << 20, 1},         {"Gi", 1LL << 30, 1},
    {"Ti", 1LL << 40, 1},      {"Pi", 1LL << 50, 1},         {"k", 1000LL, 1},
    {"K", 1000LL, 1},          {"M", 1000000LL, 1},          {"G", 1000000000LL, 1},
    {"T", 1000000000000LL, 1}, {"P", 1000000000000000LL, 1}, {"m", 1, 1000},
    {"u", 1, 1000000},         {"n", 1, 1000000000},         {"", 1, 1},
};

// Parses "<digits>[.<digits>]<suffix>" into value * scale exactly, or fails.
StatusOr<int64_t> ParseScaled(const std::string& text, int64_t scale, const char* unit) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("invalid quantity \"" + text + "\": " + why);
  };
  if (text.empty()) return bad("empty");
  size_t i = 0;
  if (text[0] == '-') return bad("must not be negative");
  if (text[0] == '+') ++i;
  __int128 mantissa = 0;
  int64_t frac_den = 1;
  bool digits = false, dot = false;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digits = true;
      mantissa = mantissa * 10 + (c - '0');
      if (dot) frac_den *= 10;
      if (mantissa > (static_cast<__int128>(1) << 100) || frac_den > 1000000000000LL)
        return bad("too large or too precise");
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  if (!digits) return bad("expected a number");
  const std::string suffix = text.substr(i);
  const Suffix* unit_of = nullptr;
  for (const Suffix& s : kSuffixes)
    if (suffix == s.text) unit_of = &s;
  Suffix exponent{"", 1, 1};  // Kubernetes' decimal exponent form: "1e9", "129e6", "5E-3"
  if (unit_of == nullptr && suffix.size() > 1 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    size_t k = 1;
    const bool negative = suffix[k] == '-';
    if (suffix[k] == '-' || suffix[k] == '+') ++k;
    int e = 0;
    bool any = false;
    for (; k < suffix.size() && std::isdigit(static_cast<unsigned char>(suffix[k])) && e <= 18; ++k)
      e = e * 10 + (suffix[k] - '0'), any = true;
    if (!any || k != suffix.size() || e > 18) return bad("bad exponent \"" + suffix + "\"");
    for (int n = 0; n < e; ++n) (negative ? exponent.den : exponent.num) *= 10;
    unit_of = &exponent;
  }
  if (unit_of != nullptr) {
    // mantissa < 2^100, unit x scale <= 10^24: the product is checked before it is made. A
    // mantissa past the bound is a value past int64 anyway (at most 10^12 of it is fraction).
    const __int128 per = static_cast<__int128>(unit_of->num) * scale;
    constexpr __int128 kMost = ~(static_cast<unsigned __int128>(1) << 127);
    if (mantissa > kMost / per) return bad("too large");
    __int128 num = mantissa * per;
    __int128 den = static_cast<__int128>(frac_den) * unit_of->den;
    if (num % den != 0) return bad(std::string("not a whole number of ") + unit);
    __int128 v = num / den;
    if (v > std::numeric_limits<int64_t>::max()) return bad("too large");
    return static_cast<int64_t>(v);
  }
  return bad("unknown suffix \"" + suffix + "\"");
}

}  // namespace

StatusOr<int64_t> ParseMilliQuantity(const std::string& text) {
  return ParseScaled(text, 1000, "milli-units");
}

StatusOr<int64_t> ParseMicroQuantity(const std::string& text) {
  return ParseScaled(text, 1000000, "millionths");
}

StatusOr<int64_t> ParseByteQuantity(const std::string& text) {
  return ParseScaled(text, 1, "bytes");
}

std::string FormatBytes(int64_t bytes) {
  static const char* kUnits[] = {"Ki", "Mi", "Gi", "Ti", "Pi"};
  std::string unit;
  for (const char* u : kUnits) {
    if (bytes == 0 || bytes % 1024 != 0) break;
    bytes /= 1024;
    unit = u;
  }
  return std::to_string(bytes) + unit;
}

std::string FormatMicro(int64_t micros) {
  std::string frac = std::to_string(1000000 + micros % 1000000).substr(1);
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  return std::to_string(micros / 1000000) + (frac.empty() ? "" : "." + frac);
}

std::string FormatMilli(int64_t milli) {
  if (milli % 1000 == 0) return std::to_string(milli / 1000);
  return std::to_string(milli) + "m";
}

}  // namespace tessera
