#include "model/labels.h"

#include <algorithm>
#include <cctype>

namespace tessera {
namespace {

bool Alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// Kubernetes' name part of a label key, and a label value when non-empty: at most 63
// characters, alphanumeric at both ends, '-', '_' or '.' between.
bool ValidNamePart(const std::string& s) {
  if (s.empty() || s.size() > 63 || !Alnum(s.front()) || !Alnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return Alnum(c) || c == '-' || c == '_' || c == '.'; });
}

// A DNS subdomain (a label key's prefix): at most 253 characters, lower-case alphanumeric,
// '-' and '.', alphanumeric at both ends of each dot-separated part.
bool ValidPrefix(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  for (;;) {
    size_t dot = s.find('.', start);
    const std::string part = s.substr(start, dot == std::string::npos ? dot : dot - start);
    if (part.empty() || part.size() > 63 || !Alnum(part.front()) || !Alnum(part.back()))
      return false;
    for (char c : part)
      if (!(std::islower(static_cast<unsigned char>(c)) ||
            std::isdigit(static_cast<unsigned char>(c)) || c == '-'))
        return false;
    if (dot == std::string::npos) return true;
    start = dot + 1;
  }
}

}  // namespace

std::string LabelKeyProblem(const std::string& key) {
  const size_t slash = key.find('/');
  if (slash != std::string::npos && !ValidPrefix(key.substr(0, slash)))
    return "the prefix before '/' must be a DNS subdomain (lower-case letters, digits, '-' "
           "and '.', at most 253 characters)";
  const std::string name = slash == std::string::npos ? key : key.substr(slash + 1);
  if (!ValidNamePart(name))
    return "a key's name must be 1-63 characters, letters, digits, '-', '_' or '.', with a "
           "letter or digit at each end (an optional prefix/ before it)";
  return "";
}

std::string LabelValueProblem(const std::string& value) {
  if (value.empty() || ValidNamePart(value)) return "";
  return "a value must be empty or 1-63 characters, letters, digits, '-', '_' or '.', with a "
         "letter or digit at each end";
}

std::string NodeNameProblem(const std::string& name) {
  if (name.empty() || name.size() > 253 || !Alnum(name.front()) || !Alnum(name.back()) ||
      !std::all_of(name.begin(), name.end(),
                   [](char c) { return Alnum(c) || c == '-' || c == '_' || c == '.'; }))
    return "a node name must be 1-253 characters, letters, digits, '-', '_' or '.', with a "
           "letter or digit at each end";
  return "";
}

}  // namespace tessera
