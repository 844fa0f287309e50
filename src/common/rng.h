// Rng: the engine's only source of randomness, passed in explicitly.
//
// xoshiro256** seeded through splitmix64: fast, with a fixed, documented sequence on every
// platform (std::mt19937 is fixed too, but std::uniform_int_distribution is not, so the
// bounded draw below is our own). Equal seeds give equal sequences, which is what makes
// plans and simulations byte-for-byte reproducible. Not thread-safe; one per cycle/run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { Seed(seed); }
  void Seed(uint64_t seed);
  uint64_t Next();
  // Uniform in [0, n), n > 0, without modulo bias (Lemire's method).
  uint64_t Below(uint64_t n);

 private:
  uint64_t s_[4];
};

// `bytes` bytes from the OS's entropy (never an Rng: its seed may be fixed), as lowercase
// hex: secrets and keys no one may guess (API tokens, logs tokens, idempotency keys).
std::string SecureRandomHex(size_t bytes);

}  // namespace tessera
