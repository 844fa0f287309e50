#include "common/hostlist.h"

#include <algorithm>
#include <charconv>
#include <cstdint>

namespace tessera {
namespace {

constexpr size_t kMaxNameLength = 253;  // a DNS name's

bool ParseCount(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

StatusOr<std::vector<std::string>> ExpandHostlist(const std::string& expr, size_t max_names) {
  const size_t kMaxNames = max_names;
  std::vector<std::string> out;
  // Split on commas outside brackets.
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  for (char c : expr) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0) return InvalidArgument("hostlist \"" + expr + "\": unbalanced ']'");
    if (c == ',' && depth == 0) {
      items.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0) return InvalidArgument("hostlist \"" + expr + "\": unbalanced '['");
  items.push_back(cur);
  for (const std::string& item : items) {
    if (item.empty()) continue;
    size_t lb = item.find('[');
    if (lb == std::string::npos) {
      if (item.size() > kMaxNameLength)
        return InvalidArgument("hostlist \"" + expr + "\": a name longer than " +
                               std::to_string(kMaxNameLength) + " characters");
      out.push_back(item);
      continue;
    }
    size_t rb = item.find(']', lb);
    std::string prefix = item.substr(0, lb), suffix = item.substr(rb + 1);
    if (suffix.find('[') != std::string::npos)
      return InvalidArgument("hostlist \"" + expr + "\": more than one range per name");
    std::string ranges = item.substr(lb + 1, rb - lb - 1);
    for (size_t start = 0; start <= ranges.size();) {
      size_t end = ranges.find(',', start);
      if (end == std::string::npos) end = ranges.size();
      const std::string range = ranges.substr(start, end - start);
      start = end + 1;
      size_t dash = range.find('-');
      std::string lo_s = range.substr(0, dash);
      std::string hi_s = dash == std::string::npos ? lo_s : range.substr(dash + 1);
      int64_t lo = 0, hi = 0;
      if (!ParseCount(lo_s, lo) || !ParseCount(hi_s, hi) || lo < 0 || hi < lo)
        return InvalidArgument("hostlist \"" + expr + "\": bad range \"" + range + "\"");
      if (prefix.size() + std::max(lo_s.size(), hi_s.size()) + suffix.size() > kMaxNameLength)
        return InvalidArgument("hostlist \"" + expr + "\": a name longer than " +
                               std::to_string(kMaxNameLength) + " characters");
      if (static_cast<uint64_t>(hi - lo) >= kMaxNames ||
          out.size() + static_cast<size_t>(hi - lo) >= kMaxNames)
        return InvalidArgument("hostlist \"" + expr + "\": more than " + std::to_string(kMaxNames) +
                               " names");
      for (int64_t v = lo; v <= hi; ++v) {
        std::string num = std::to_string(v);
        if (num.size() < lo_s.size()) num.insert(0, lo_s.size() - num.size(), '0');
        out.push_back(prefix + num + suffix);
      }
    }
  }
  if (out.size() > kMaxNames)
    return InvalidArgument("hostlist \"" + expr + "\": more than " + std::to_string(kMaxNames) +
                           " names");
  return out;
}

std::string JoinHostlist(const std::vector<std::string>& hosts) {
  std::string s;
  for (const std::string& h : hosts) s += (s.empty() ? "" : ",") + h;
  return s;
}

namespace {

// "gpu007" -> {"gpu", "007"}; a name not ending in a digit has no number.
std::pair<std::string, std::string> SplitTrailingNumber(const std::string& name) {
  size_t i = name.size();
  while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9') --i;
  // Past 18 digits the value would not fit an int64; such a name stays whole.
  if (name.size() - i > 18) i = name.size();
  return {name.substr(0, i), name.substr(i)};
}

bool Padded(const std::string& num) { return num.size() > 1 && num[0] == '0'; }

}  // namespace

std::string CompressHostlist(const std::vector<std::string>& hosts) {
  std::string out;
  for (size_t i = 0; i < hosts.size();) {
    auto [prefix, num] = SplitTrailingNumber(hosts[i]);
    // The neighbours that can share this name's bracket: same prefix, and a number that
    // ExpandHostlist writes back the same (it pads to the width of a range's low end).
    std::vector<std::string> nums{num};
    size_t j = i + 1;
    for (; !num.empty() && j < hosts.size(); ++j) {
      auto [p, n] = SplitTrailingNumber(hosts[j]);
      if (p != prefix || n.empty()) break;
      if ((Padded(n) || Padded(num)) && n.size() != num.size()) break;
      nums.push_back(n);
    }
    if (!out.empty()) out += ",";
    if (nums.size() == 1) {
      out += hosts[i];
    } else {
      std::string ranges;
      for (size_t k = 0; k < nums.size();) {
        size_t end = k;
        while (end + 1 < nums.size() && std::stoll(nums[end + 1]) == std::stoll(nums[end]) + 1)
          ++end;
        ranges += (ranges.empty() ? "" : ",") + nums[k] + (end > k ? "-" + nums[end] : "");
        k = end + 1;
      }
      out += prefix + "[" + ranges + "]";
    }
    i = j;
  }
  return out;
}

}  // namespace tessera
