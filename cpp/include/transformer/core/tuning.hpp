// tuning.hpp — every performance knob of the core in one place.
//
// A knob here changes speed only: results stay correct for any value (a few change the order of
// a floating-point sum, which the tests allow for; none changes what is computed). Each comes with
// what it trades and how its value was chosen. "Not swept" means the value was set by the
// reasoning given and was never compared against neighbouring values: a candidate for
// tools/train_speed.py or tools/decode_speed.py (two builds alternating) before it is changed.
//
// Not here, because they are the shape of a kernel's code rather than free choices: the register
// tiles of the GEMM and decoding micro-kernels (f32::kMR / kNR, bf16::kMR / kNR, PackedLinear and
// QuantizedLinear's kPanel / kRowBlock: 12 rows x two 16-lane vectors = 24 accumulators of the 32
// AVX-512 registers) and the fingerprint's 64 lanes (decode_kernels.cpp).
#pragma once

#include <cstddef>

namespace transformer::tuning {

using Index = std::ptrdiff_t;  // Eigen::Index, transformer::Index (tensor.hpp)

// --- when a loop is worth a parallel region ---------------------------------------------------

// Element-wise helpers (bias adds, column sums, residual adds, dropout masks, the finite checks,
// the data-parallel gradient norm) go parallel from this many elements: waking the second thread
// costs a few microseconds, about what one thread needs for 32K simple float operations. Not
// swept.
constexpr Index kParallelMin = 1 << 15;

// Row-wise kernels (softmax, the losses, layer norm, embeddings) and Adam's per-parameter loops go
// parallel from this many elements. Not swept.
constexpr Index kParallelElements = 16384;

// Matrix products with fewer multiply-adds than this run on the calling thread only. float32: at
// the quick preset's shapes most per-head products of attention fall below it and the dense
// layers above; bf16 is higher because packing to bfloat16 is a larger share of a small product.
// Not swept.
constexpr double kF32ParallelMacs = 1 << 18;
constexpr double kBf16ParallelMacs = 1 << 20;

// --- blocking for the caches --------------------------------------------------------------------

// k values per packed block of the GEMMs: a B panel of kKC x 32 columns is 32 KB in float32 and
// in bfloat16, so that it stays in L1 while the A panels stream past it. bf16's 512 puts the dense
// layers' products (K = 512 at d_model 512) in one k block: C is stored once, not stored, read
// back and stored again. A bf16 training step at the tutorial shapes (AMD EPYC Zen 4, 2 threads,
// 2026-12-07) ran 5-9% faster with 512 than with 256 (two runs of alternating rounds).
constexpr Index kF32GemmKC = 256;
constexpr Index kBf16GemmKC = 512;
// The AVX2 float32 kernel's panels are 16 columns wide, so the same 32 KB holds 512 values of k:
// the dense layers' products (K = 512 at d_model 512) then take one k block instead of two, and C
// is stored once rather than stored, read back and stored again. A float32 training step at the
// tutorial shapes (AMD EPYC Zen 4 at the AVX2 level, 2 threads, 2026-12-07) ran 2-8% faster
// with 512 than with 256 (ratio medians of three runs of alternating rounds: 1.08, 1.02, 1.05).
constexpr Index kF32Avx2GemmKC = 512;
// The AMX kernel's k block: its A and B panels of 32 lines are 32 KB each at 512 k values.
constexpr Index kAmxGemmKC = 512;

// Blocks of C are taken row of blocks by row of blocks, so each row of blocks reads every B panel
// of a k block again. When those panels are larger than this (a wide product: the logits against
// a vocabulary of more than 8,192 words), more than a shared L3 slice keeps, blocks are taken
// column by column instead: each column's B panels are read once while the A panels, far fewer,
// pass again. Measured on the 550 x 15,500 x 512 logits product (AMD Zen 3, 2 threads,
// 2026-11-26): 10-17% faster; narrower products stay in the row order, which was as fast or
// faster for them.
constexpr double kF32ColumnOrderBytes = 8.0 * (1 << 20);

// The operand that the order of the blocks reads once per k block (B by columns, a packed A by
// rows) is packed in stripes of blocks of at most this many bytes, each just before its blocks
// run, so that its panels are still in cache when used and the workspace holds one stripe: at the
// output layer's products (15,500 columns or rows, 256 k values) 2 MB instead of 16 MB.
constexpr double kF32StripeBytes = 2.0 * (1 << 20);

// The AVX2 kernel reads a transposed op(A) (trans_a: the weight gradients dW = dy^T x) in place,
// six adjacent floats per k, instead of packing it, when C has at most this many columns: each A
// tile is then read once per B panel, at most 8 times. The quick preset's dW products measured so
// against packed (AMD EPYC Zen 4 at the AVX2 level, 2 threads, 2026-12-07, two runs): 128 x 128
// x 1,500 1.6-1.9x as fast, 512 x 128 and 384 x 128 1.2x, the output weight's 4,000 x 128 x 1,300
// 0.9-1.1x; with 256 columns or more (512 x 512, 2,048 x 512, 15,500 x 512) packing was as fast
// or up to 12% faster.
constexpr Index kF32ColumnsInPlaceMaxN = 128;

// Decoding's few-row kernels: k values (float32 panels) and 4-byte words (int8 / bf16 panels) of
// a 32-wide panel kept in L1 while every block of rows passes over it: 128 x 32 x 4 bytes = 16 KB
// and 256 x 32 x 4 bytes = 32 KB. Not swept.
constexpr Index kPackedKBlock = 128;
constexpr Index kQuantizedWordBlock = 256;
// Decoding products of this many rows or more run on the AMX tiles where the CPU has them (a tile
// holds 16 rows; below that, the VNNI / AVX512_BF16 register kernel). Not swept.
constexpr Index kAmxDecodeRows = 16;
// Rows per pass of the AVX-512 VNNI int8 decoding kernel over a weight panel. GCC 12 keeps part of
// the 24 accumulators of a 12-row pass in memory (a store per product in the inner loop); the 12 of
// a 6-row pass stay in registers. Beam 4 at batch 32 at opus-mt-en-es's shapes, 2 threads, AMD
// EPYC (Zen 4), 2026-12-04: 500-560 tokens/s with 12 rows, 760-880 with 6, 670-760 with 8. The
// AVX512_BF16 kernel measured the same with 6, 8 or 12 and keeps kRowBlock.
constexpr Index kVnniDecodeRows = 6;

// Memory-bound loops (activations, the finite checks, Adam's norm and update check) work in chunks
// of this many elements: 64 KB of float32, shared among the threads chunk by chunk. Not swept.
constexpr Index kElementChunk = 16384;

// Independent partial sums in Adam's vectorised norm and update check: 16 double lanes are two
// AVX-512 registers of accumulators. With one scalar sum the compiler may not reorder the adds
// (floating-point addition is not associative), so the loop runs scalar; with the lanes it
// vectorises.
constexpr Index kReduceLanes = 16;

// --- fixed summation blocks (results independent of the thread count) -------------------------

// Reductions over rows are summed in fixed blocks of rows, each by one thread, then the blocks in
// order; a larger block means fewer partial sums to add and less parallelism. The output layer's
// fused loss (its bias gradient), layer norm's backward (weight and bias gradients) and the
// data-parallel gradient norm (elements of the flat gradient buffer). Not swept.
constexpr Index kLossBlockRows = 16;
constexpr Index kLayerNormBlockRows = 32;
constexpr Index kFlatNormBlock = 8192;

// --- the output layer's fused loss --------------------------------------------------------------

// The training step computes the output layer, its loss and the loss's gradient in chunks of rows
// (chunked_output_loss, layers/loss.hpp), so the (rows, V) logits are never stored whole: a chunk
// holds about kOutputChunkBytes of logits, at least kOutputChunkMinRows rows. Each chunk runs three
// products over the whole (V, d) output weight (logits, dW += dlogits^T y, dy = dlogits W), and
// the GEMM packs W and reads and writes dW once per chunk. At the benchmark's tutorial shapes
// (d_model 512, V = 15,500, about 600 rows) a step measured 0.489 s with 80-row chunks, 0.451 s with
// 256, 0.446 s with 512 and 0.440 s in one chunk (Intel Xeon, AVX-512, 2 threads, 2026-12-02): the
// weight traffic costs more than the cache saves. So a chunk holds up to 64 MB of float32 logits
// (1,082 rows at V = 15,500): batches of that size run in one chunk, as fast as one product, and
// only larger ones (token batches of thousands of rows) are cut, bounding the step's memory.
constexpr Index kOutputChunkBytes = Index(64) << 20;
constexpr Index kOutputChunkMinRows = 32;

// --- inference --------------------------------------------------------------------------------

// Decoding steps with fewer rows than this multiply float32 weights as they are: packing them
// into panels does not pay off at batch 1. Plain float32 products of up to kFewRows rows use the
// few-row kernel (it reads W as it is; the dense layers' kernel packs W on every call). Not swept.
constexpr Index kPreparedMinRows = 4;
constexpr Index kFewRows = 64;

// The weight fingerprint hashes a weight matrix in pieces of this many bytes, each with its own
// seed, so that the pieces can be hashed in parallel. Not swept.
constexpr Index kFingerprintPieceBytes = 1 << 20;

// --- linear attention ---------------------------------------------------------------------------

// Positions per chunk of causal linear attention (attention/linear_attention.cpp). Inside a chunk the
// masked product phi(Q_c) phi(K_c)^T V_c is a GEMM of chunk x chunk x d; across chunks a d x d
// state carries the prefix. Work per position is about 2 * chunk * d (the in-chunk products) plus
// 2 * d * d (the state), so at d = 64 a chunk of 64 balances them, and its buffers (a few
// 64 x 64 blocks, 16 KB each in float32) stay in L1/L2. Not swept.
constexpr Index kLinearAttentionChunk = 64;

// --- LSH attention ----------------------------------------------------------------------------

// LSH attention hashes the keys of a head in blocks of this many rows (a (rows, n_buckets/2)
// product and its argmax), so the scratch stays O(rows x n_buckets) instead of O(T x n_buckets):
// with the default n_buckets = 2 T / chunk a whole-sequence block would grow as T^2 / chunk.
// 256 rows of 128 rotated float32 values are 128 KB, within L2. Not swept.
constexpr Index kLshHashRows = 256;
// --- reversible layers ------------------------------------------------------------------------

// The reversible stack runs its position-wise work (the feed-forward, the norms, the residual
// dropouts) on chunks of this many rows, so the feed-forward's hidden layer is (chunk, d_ff)
// instead of (rows, d_ff). A multiple of kLayerNormBlockRows, so that the norms' weight gradients
// are summed in the same blocks as unchunked. 256 rows keep a chunk's hidden layer small next to
// the attention's (T, T) weights while its products still have rows enough to run at full speed
// (each chunk reads the whole weight matrices again). Not swept.
constexpr Index kReversibleChunkRows = 256;

// --- tiled (memory-linear) softmax attention -------------------------------------------------

// Query rows and keys per block of tiled_attention_forward / _backward. A (64, 128) block of
// scores is 32 KB in float32 and, with the (64, d_k) and (128, d_k) blocks of Q, K, V at d_k = 64,
// the working set stays in L2. Eigen packs both operands of every block product, so larger blocks
// spend less of the time packing; 128 keys also give the products summing over keys (P V, dS K)
// a longer inner dimension. With causal attention a key block ends at the diagonal: only the
// triangle above it in the blocks on the diagonal is computed in vain. Compared (CPU time, one
// thread, float32, n = 4,096, 4 heads, d_k = 64, several alternating rounds) with (32, 128),
// (64, 64), (128, 64), (128, 128), (64, 256) and (128, 256): (64, 64) and (128, 64) were
// 10-20 % slower, (32, 128) 15 % slower, the others within a few percent of (64, 128).
constexpr Index kTiledQueryBlock = 64;
constexpr Index kTiledKeyBlock = 128;

// MultiHeadAttention's "auto" runs the tiled path from this many keys on: below it the (T_q, T_k)
// weights are small and the plain path (two large products) is at least as fast. Not swept.
constexpr Index kTiledAttentionMinLength = 512;

}  // namespace transformer::tuning
