// Syntax of node names and of label and taint keys and values, as Kubernetes checks them:
// they end up in selectors, hostlists, MASTER_ADDR, tables and metric labels.
#pragma once

#include <string>

namespace tessera {

// Each: "" when valid, else why not (a clause to follow "key \"x\": ").
std::string LabelKeyProblem(const std::string& key);
std::string LabelValueProblem(const std::string& value);
// 1-253 characters: letters, digits, '-', '_' and '.', a letter or digit at each end.
std::string NodeNameProblem(const std::string& name);

}  // namespace tessera
