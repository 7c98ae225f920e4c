// runtime.hpp — threads (their number and the address space their stacks take).
#pragma once

namespace transformer {

// Number of threads used by OpenMP loops and Eigen's parallel GEMM (the same pool), at most
// kMaxThreads.
constexpr int kMaxThreads = 1024;
// Refuses (std::invalid_argument) more threads than affordable_threads(), unless the count is
// no more than the process has already been given (their stacks are mapped or promised).
void set_num_threads(int n);
// The most threads whose stacks fit in half of the address space an rlimit (ulimit -v) leaves,
// at most kMaxThreads; thread_stack_bytes() is what each one maps.
int affordable_threads();
double thread_stack_bytes();
int get_num_threads();

}  // namespace transformer
