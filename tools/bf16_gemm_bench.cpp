// bf16_gemm_bench.cpp — the bfloat16 kernel (bf16::gemm) against Eigen's float32 GEMM on the
// products of a training step (not built by CMake, not a test). From the repository root, with the
// project's virtual environment active:
//
//   EIGEN=$(python -c "import cmeel, os; print(os.path.join(os.path.dirname(cmeel.__file__), '..', 'cmeel.prefix', 'include', 'eigen3'))")
//   mkdir -p build
//   g++ -O3 -march=native -fno-math-errno -fopenmp -DEIGEN_NO_DEBUG -std=c++17 -Icpp/include -I$EIGEN
//       tools/bf16_gemm_bench.cpp cpp/src/kernels/bf16_gemm.cpp -o build/bf16_gemm_bench    (one command)
//   OMP_NUM_THREADS=1 build/bf16_gemm_bench 20      # best of 20 per shape; OMP_NUM_THREADS=2 for both cores
//
// First a correctness sweep (kernel against its reference on odd shapes, all four transpositions),
// then GFLOP/s of Eigen float32 and of the kernel per shape, best of N, alternating.
#include "transformer/kernels/bf16_gemm.hpp"
#include <Eigen/Core>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
using namespace transformer;
using M32 = Eigen::Matrix<float, -1, -1, Eigen::RowMajor>;
struct Case { const char* name; Index M, N, K; bool ta, tb; };
int main(int argc, char** argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 5;
  // correctness on odd shapes
  std::mt19937 g(1); std::normal_distribution<float> nd;
  double worst = 0;
  for (Index M : {1, 7, 12, 13, 33, 129}) for (Index N : {1, 7, 33, 129}) for (Index K : {1, 7, 33, 129, 300, 513}) for (int t = 0; t < 4; ++t) {
    bool ta = t & 1, tb = t & 2;
    M32 A = ta ? M32(K, M) : M32(M, K); M32 B = tb ? M32(N, K) : M32(K, N);
    for (Index i = 0; i < A.size(); ++i) A.data()[i] = nd(g);
    for (Index i = 0; i < B.size(); ++i) B.data()[i] = nd(g);
    M32 C(M, N), R(M, N); C.setConstant(0.5f); R.setConstant(0.5f);
    float beta = (M + N + K) % 2 ? 1.0f : 0.0f;
    bf16::gemm(M, N, K, A.data(), A.cols(), ta, B.data(), B.cols(), tb, beta, C.data(), N);
    bf16::gemm_reference(M, N, K, A.data(), A.cols(), ta, B.data(), B.cols(), tb, beta, R.data(), N);
    double e = (C - R).cwiseAbs().maxCoeff() / (1e-3 + R.cwiseAbs().maxCoeff());
    worst = std::max(worst, e);
  }
  printf("worst rel err vs reference %.3g\n", worst);
  Case cases[] = {
    {"fwd ffn1  1500x128 . 128x512", 1500, 512, 128, false, true},
    {"fwd ffn2  1500x512 . 512x128", 1500, 128, 512, false, true},
    {"fwd qkv   1500x128 . 128x384", 1500, 384, 128, false, true},
    {"fwd out   1500x128 . 128x4000", 1500, 4000, 128, false, true},
    {"dx out    1500x4000 . 4000x128", 1500, 128, 4000, false, false},
    {"dW out    4000x1500 . 1500x128", 4000, 128, 1500, true, false},
    {"dx ffn1   1500x512 . 512x128", 1500, 128, 512, false, false},
    {"dW ffn1   512x1500 . 1500x128", 512, 128, 1500, true, false},
    {"dW qkv    384x1500 . 1500x128", 384, 128, 1500, true, false},
    {"dW d*d    128x1500 . 1500x128", 128, 128, 1500, true, false},
    {"tut fwd ffn 2048x512 . 512x512", 2048, 512, 512, false, true},
    {"tut fwd out 2048x512 . 512x8000", 2048, 8000, 512, false, true},
    // one head's attention products at the quick preset (T ~ 35, d_k 32): stay float32
    {"attn QK^T 35x32 . 32x35", 35, 35, 32, false, true},
    {"attn PV   35x35 . 35x32", 35, 32, 35, false, false},
  };
  for (auto& c : cases) {
    M32 A = c.ta ? M32::Random(c.K, c.M) : M32::Random(c.M, c.K);
    M32 B = c.tb ? M32::Random(c.N, c.K) : M32::Random(c.K, c.N);
    M32 C(c.M, c.N), D(c.M, c.N);
    double tf = 1e9, tb = 1e9;
    for (int r = 0; r < reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      if (!c.ta && c.tb) D.noalias() = A * B.transpose();
      else if (!c.ta && !c.tb) D.noalias() = A * B;
      else D.noalias() = A.transpose() * B;
      auto t1 = std::chrono::steady_clock::now();
      bf16::gemm(c.M, c.N, c.K, A.data(), A.cols(), c.ta, B.data(), B.cols(), c.tb, 0.0f, C.data(), c.N);
      auto t2 = std::chrono::steady_clock::now();
      tf = std::min(tf, std::chrono::duration<double>(t1 - t0).count());
      tb = std::min(tb, std::chrono::duration<double>(t2 - t1).count());
    }
    double fl = 2.0 * c.M * c.N * c.K;
    double err = (C - D).cwiseAbs().maxCoeff() / D.cwiseAbs().maxCoeff();
    printf("%-34s eigen f32 %6.1f GF/s  bf16 %6.1f GF/s  speedup %.2f  (rel diff %.1e)\n", c.name, fl / tf / 1e9, fl / tb / 1e9, tf / tb, err);
  }
}
