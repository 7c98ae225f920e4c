// random.hpp — seeded randomness that does not depend on the thread count.
//
// Two kinds of draws:
//   * Rng: a sequential generator (splitmix64) for parameter initialisation, always drawn in the
//     same order on one thread.
//   * counter_uniform(seed, stream, counter, index): a stateless hash, so element `index` of the
//     `counter`-th dropout mask of layer `stream` is the same number whichever thread draws it.
#pragma once

#include <cmath>
#include <cstdint>

namespace transformer {

// splitmix64's increment (2^64 divided by the golden ratio, odd)
constexpr std::uint64_t kSplitmixIncrement = 0x9E3779B97F4A7C15ULL;

// splitmix64's finaliser alone: every input bit affects every output bit (a bijection)
inline std::uint64_t mix64(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

inline std::uint64_t splitmix64(std::uint64_t x) { return mix64(x + kSplitmixIncrement); }

// Uniform in [0, 1) from the top 53 bits of a 64-bit word.
inline double to_unit_double(std::uint64_t bits) {
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

// counter_uniform in two steps: the key of (seed, stream, counter), the same for every element of
// one mask, then the element's draw from it (a mask's loop computes the key once).
inline std::uint64_t counter_key(std::uint64_t seed, std::uint64_t stream, std::uint64_t counter) {
  std::uint64_t h = splitmix64(seed ^ 0x5851F42D4C957F2DULL);
  h = splitmix64(h ^ stream);
  return splitmix64(h ^ counter);
}
// The 53 bits of a keyed draw: keyed_uniform is keyed_bits53 * 2^-53, exactly.
inline std::uint64_t keyed_bits53(std::uint64_t key, std::uint64_t index) { return splitmix64(key ^ index) >> 11; }
inline double keyed_uniform(std::uint64_t key, std::uint64_t index) { return to_unit_double(splitmix64(key ^ index)); }

inline double counter_uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t counter, std::uint64_t index) {
  return keyed_uniform(counter_key(seed, stream, counter), index);
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(splitmix64(seed ^ 0xD1B54A32D192ED03ULL)) {}
  // splitmix64's sequence: the state advances by its increment and each output is the mixed state
  std::uint64_t next() {
    const std::uint64_t previous = state_;
    state_ += kSplitmixIncrement;
    return splitmix64(previous);  // adds the increment itself, so this mixes the new state
  }
  double uniform() { return to_unit_double(next()); }                          // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }  // [lo, hi)
  double normal() {                                                            // N(0, 1), Box-Muller
    const double u1 = 1.0 - uniform();                                         // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::uint64_t state_;
};

}  // namespace transformer
