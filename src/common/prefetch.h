// A hint to fetch the cache line at `p` ahead of its use, for loops over records scattered
// in memory (the engine's pending jobs).
#pragma once

namespace tessera {

// GCC 12 deletes __builtin_prefetch once the engine's PrefetchAhead is inlined into
// allocate's loop (checked in the object code: none were left, and the cycle did not
// change); an asm statement stays.
inline void Prefetch(const void* p) {
#if defined(__x86_64__) && defined(__GNUC__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p);
#endif
}

}  // namespace tessera
