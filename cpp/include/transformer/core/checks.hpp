// checks.hpp — what an entry point checks before it works: sizes against the memory there is
// (before anything is allocated) and values that must be finite (inputs, weights, losses).
//
// Sizes are multiplied in double, never in Index, so an absurd size cannot overflow on its way
// to the check. The estimates below count the buffers a pass keeps (activations, attention
// weights, gradients); they are meant to refuse what can never fit, not to predict to the byte.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "transformer/core/tensor.hpp"

namespace transformer {

// A NaN or infinite value where only finite ones make sense: weights, a loss, a gradient norm, a
// layer's output. Python sees transformer_cpp.NonFiniteError, both a FloatingPointError and a
// RuntimeError.
class NonFiniteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bytes this process may still use: MemAvailable of /proc/meminfo (or the cgroup's room, or the
// address space an rlimit leaves) plus what the process already holds (its buffers are reused
// when shapes repeat), else the physical memory; never more than TRANSFORMER_CPP_MEMORY_LIMIT
// (bytes) when that is set.
double memory_limit_bytes();
// Bytes of address space this process may still map under its limits (ulimit -v: RLIMIT_AS, and
// RLIMIT_DATA), or -1 without a limit. Thread stacks count against it, not against the memory.
double address_space_room_bytes();
// "1.5 GB", "12 KB": for messages; and a count as "13107200" (or "1.2e+20" when huge).
std::string format_bytes(double bytes);
std::string format_count(double count);
// Throws std::invalid_argument (ValueError) when `bytes` is more than memory_limit_bytes():
// "<who>: <what> needs 1.2 TB, more than the 3.1 GB of memory available".
void check_memory(const std::string& who, const std::string& what, double bytes);

// Whether p[0, n) holds no NaN or infinity, in one vectorised pass: x * 0 is 0 for every finite x
// and NaN for NaN and +-inf, and a sum with a NaN in it is NaN. (Eigen's allFinite() ends in a
// scalar loop.)
template <typename T>
bool all_finite(const T* p, Index n) {
  return !std::isnan((ConstRowArray<T>(p, n) * T(0)).sum());
}

// Index of the first NaN or infinite element of p[0, n), or -1. Parallel for large n.
template <typename T>
Index first_nonfinite(const T* p, Index n);

// Throws std::invalid_argument (ValueError) if p[0, n) holds a NaN or infinite value:
// "<who>: <arg> holds nan at flat index 7; inputs must be finite".
template <typename T>
void check_finite_input(const T* p, Index n, const std::string& who, const std::string& arg);

// Names of the parameters that hold a NaN or infinite value, in order.
template <typename T>
std::vector<std::string> nonfinite_parameters(const ParameterList<T>& params);
// Throws NonFiniteError naming those parameters (at most a few, then how many more).
template <typename T>
void check_finite_parameters(const ParameterList<T>& params, const std::string& who);

// --- parameter counts, for the memory checks of the constructors ---------------------------
// (double: see the top of this file; a size <= 0 gives a count the later checks refuse)

inline double linear_parameters(double in, double out) { return in * out + out; }
inline double attention_parameters(double d) { return 4 * d * d + 4 * d; }
inline double feed_forward_parameters(double d, double d_ff) { return 2 * d * d_ff + d_ff + d; }
inline double encoder_layer_parameters(double d, double d_ff) {
  return attention_parameters(d) + feed_forward_parameters(d, d_ff) + 4 * d;
}
inline double decoder_layer_parameters(double d, double d_ff) {
  return 2 * attention_parameters(d) + feed_forward_parameters(d, d_ff) + 6 * d;
}

// Check that `parameters` values, their gradients and `extra` elements of type T fit; returns
// `pass` so that a constructor can run the check before its first member is built.
template <typename T>
Index checked_size(const char* who, const std::string& what, double parameters, double extra, Index pass) {
  check_memory(who, concat(what, " (", format_count(parameters), " parameters, value and gradient)"),
               (2 * parameters + extra) * static_cast<double>(sizeof(T)));
  return pass;
}

// --- activation estimates (elements), for the memory checks of forward passes ---------------
// rq query rows and rk key rows of B sequences (Tq, Tk long), H heads, width d.

inline double attention_elements(double rq, double rk, double B, double H, double Tq, double Tk, double d) {
  return (8 * rq + 4 * rk) * d + 2 * B * H * Tq * Tk + 4 * B * (Tq + Tk) * d;
}
inline double feed_forward_elements(double rows, double d, double d_ff) { return rows * (3 * d_ff + 3 * d); }
inline double encoder_layer_elements(double rows, double B, double H, double T, double d, double d_ff) {
  return attention_elements(rows, rows, B, H, T, T, d) + feed_forward_elements(rows, d, d_ff) + 10 * rows * d;
}
inline double decoder_layer_elements(double rows, double mem_rows, double B, double H, double T, double S, double d,
                                     double d_ff) {
  return attention_elements(rows, rows, B, H, T, T, d) + attention_elements(rows, mem_rows, B, H, T, S, d) +
         feed_forward_elements(rows, d, d_ff) + 14 * rows * d;
}

}  // namespace transformer
