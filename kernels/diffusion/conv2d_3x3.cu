// Reference for diffusion/conv2d_3x3: the 3x3 convolution of SDXL's UNet resnet blocks
// (diffusers ResnetBlock2D.conv1 / conv2, torch.nn.Conv2d(C_in, C_out, 3, padding=1)) on
// channels_last bf16 activations, stride 1, zero padding 1, bias, fp32 accumulation.
//
// Device code only, compiled by NVRTC for sm_90a and launched as the directives below say (see
// kernels/llm/rms_norm.cu for the conventions). It computes
//
//   out[n, h, w, o] = bias[o] + sum_{r, s < 3} sum_{c < C_in}
//                       weight[o, r, s, c] * input[n, h + r - 1, w + s - 1, c]
//
// with input taken as 0 outside the image, products of bf16 values accumulated in fp32, the
// bias added in fp32 and one rounding to bf16. input is [batch, height, width, in_channels],
// weight [out_channels, 3, 3, in_channels] (a channels_last Conv2d weight in memory), bias
// [out_channels], out [batch, height, width, out_channels].
//
// The convolution is an implicit GEMM: out[M, C_out] = A[M, K] * weight[C_out, K]^T with
// M = batch * height * width output pixels, K = 9 * C_in ordered (tap r, tap s, channel) like
// the weight's rows, and A's row m the 3x3 neighbourhood of pixel m, gathered from input on
// the fly (never materialised). Pixel m + (r - 1) * width + (s - 1) is the neighbour at tap
// (r, s) when it lies inside the image, so a row's gather is one offset per tap.
//
// Launch plan: one tiling, three ways to fill it. A block computes a BM x 160 tile of out with
// two consumer warpgroups, warpgroup g the rows [g BM / 2, (g + 1) BM / 2), as BM / 128
// wgmma.m64n160k16 accumulators (80 fp32 registers each per thread). K advances 64 at a time
// (one tap, 64 channels; the nine taps of a slice of 64 channels one after another) through a
// ring of shared-memory stages; the grid is one block per output tile, column tiles fastest
// (blocks resident together read the same input rows).
// - conv2d_3x3_tma<256, 4, 1> (512 threads) where 256-row tiles still fill the 132 SMs and the
//   TMA's boxes fit (in_channels % 64 == 0, tiles of whole image rows: every SDXL layer but
//   conv_in): one producer thread loads each stage as two bulk tensor copies (the @tensormap
//   maps input_rows and weight_taps) and the two consumer warpgroups multiply and release them,
//   meeting at mbarriers, neither side waiting for the other's whole block.
// - conv2d_3x3_tma<256, 4, 2> where 256-row tiles fill only half of them (the 32 x 32 layers:
//   64 tiles): two blocks a tile, a 2-block cluster, each summing half of K; rank 1 leaves its
//   fp32 partial sums in its shared memory and rank 0 adds them through distributed shared
//   memory before the one rounding.
// - conv2d_3x3_specialized<256, 4, 1 or 2>: the same two launches for layers the boxes do not
//   fit (channel counts that are multiples of 8 but not of 64, images whose rows do not tile
//   256), its stages gathered by two producer warpgroups with cp.async.
// - conv2d_3x3_kernel<128, 5> (256 threads) for smaller problems: both warpgroups copy and
//   multiply in step, one block barrier a K tile; and conv2d_3x3_kernel<128, 4, false> for
//   channel counts that are not multiples of 8 (conv_in's 4), whose loads go element by
//   element.
//
//   case                   M       BM x BN     blocks   waves on 132 SMs   kernel
//   128 x 128 x 320 -> 320  32768  256 x 160   256      1.94               tma
//   64 x 64 x 640 -> 640     8192  256 x 160   128      0.97               tma
//   64 x 64 x 320 -> 640     8192  256 x 160   128      0.97               tma
//   32 x 32 x 1280 -> 1280   2048  256 x 160   2 x 64   0.97               tma, K split in two
//   32 x 32 x 640 -> 1280    2048  256 x 160   2 x 64   0.97               tma, K split in two
//
// 160 columns divide every SDXL width (320, 640, 1280) and make each case's grid a whole
// number of waves (97 % of the 132 SMs busy). The four 256-row launches take 209 KiB of
// shared memory. The in-step 128-row tile takes 5 stages rather than 6 so that the carveout
// leaves 60 KiB of L1 for the activation rows its nine taps share (below).
//
// clang-format off
// @tensormap input_rows input dims(in_channels, width, height, batch) box(64, width, 256 / width, 1) swizzle(128)
// @tensormap weight_taps weight dims(in_channels, 9, out_channels) box(64, 1, 160) swizzle(128)
// @launch if (in_channels % 64 == 0 && 256 % width == 0 && height * width % 256 == 0 && cdiv(batch * height * width, 256) * cdiv(out_channels, 160) >= 128)
//     conv2d_3x3_tma<256, 4, 1><<<cdiv(batch * height * width, 256) * cdiv(out_channels, 160), 512, 214144>>>(out, input_rows, weight_taps, bias, batch, height, width, in_channels, out_channels)
// @launch if (in_channels % 64 == 0 && 256 % width == 0 && height * width % 256 == 0 && cdiv(batch * height * width, 256) * cdiv(out_channels, 160) < 128 && cdiv(batch * height * width, 256) * cdiv(out_channels, 160) >= 64)
//     conv2d_3x3_tma<256, 4, 2><<<cdiv(batch * height * width, 256) * cdiv(out_channels, 160) * 2, 512, 214144>>>(out, input_rows, weight_taps, bias, batch, height, width, in_channels, out_channels)
// @cluster conv2d_3x3_tma<256, 4, 2> (2, 1, 1)
// @launch if (!(in_channels % 64 == 0 && 256 % width == 0 && height * width % 256 == 0) && in_channels % 8 == 0 && cdiv(batch * height * width, 256) * cdiv(out_channels, 160) >= 128)
//     conv2d_3x3_specialized<256, 4, 1><<<cdiv(batch * height * width, 256) * cdiv(out_channels, 160), 512, 214144>>>(out, input, weight, bias, batch, height, width, in_channels, out_channels)
// @launch if (!(in_channels % 64 == 0 && 256 % width == 0 && height * width % 256 == 0) && in_channels % 8 == 0 && cdiv(batch * height * width, 256) * cdiv(out_channels, 160) < 128 && cdiv(batch * height * width, 256) * cdiv(out_channels, 160) >= 64)
//     conv2d_3x3_specialized<256, 4, 2><<<cdiv(batch * height * width, 256) * cdiv(out_channels, 160) * 2, 512, 214144>>>(out, input, weight, bias, batch, height, width, in_channels, out_channels)
// @cluster conv2d_3x3_specialized<256, 4, 2> (2, 1, 1)
// @launch if (in_channels % 8 == 0 && cdiv(batch * height * width, 256) * cdiv(out_channels, 160) < 64)
//     conv2d_3x3_kernel<128, 5, true><<<cdiv(batch * height * width, 128) * cdiv(out_channels, 160), 256, 185344>>>(out, input, weight, bias, batch, height, width, in_channels, out_channels)
// @launch if (in_channels % 8 != 0)
//     conv2d_3x3_kernel<128, 4, false><<<cdiv(batch * height * width, 128) * cdiv(out_channels, 160), 256, 148480>>>(out, input, weight, bias, batch, height, width, in_channels, out_channels)
// clang-format on
//
// (Dynamic shared memory: STAGES * (BM + 160) * 128 bytes plus 1 KiB to align the stages to
// 1024 bytes, which the 128-byte swizzle needs, and for the specialised kernel 128 bytes of
// mbarriers.)
//
// Design notes (why, for whoever optimises this next):
// - Every SDXL case is compute bound: 2 * M * C_out * 9 * C_in = 60 GFLOP per 320 -> 320 call
//   at 128 x 128 (and per 640 and 1280 call) against 28 to 44 MB moved. The roof is the H200's
//   989 TFLOP/s of dense bf16 (about 61 us per call); mma.sync reaches only about two thirds
//   of it on Hopper, hence wgmma, which reads both operands straight from shared memory.
// - Shared memory holds each stage as rows of 64 bf16 (128 bytes) in the 128-byte swizzle
//   that wgmma's K-major layout expects: 16-byte chunk c of row r lives at chunk c ^ (r % 8),
//   8 rows make a 1024-byte atom, atoms are 1024 bytes apart (the descriptor's stride). The
//   four k16 steps of a stage move the descriptor's start 32 bytes along the row. The copies
//   write whole rows (8 consecutive threads, 8 chunks), so they have no bank conflicts either.
// - The in-step pipeline (conv2d_3x3_kernel): at iteration t the block waits for stage t's
//   copies, publishes them to the async proxy (fence.proxy.async: cp.async writes through the
//   generic proxy, wgmma reads through the async one) and syncs; each warpgroup issues its
//   wgmmas on stage t and commits them, then the block refills the stage of tile t - 2 with
//   tile t + STAGES - 2, and each warpgroup waits until only its batch t is in flight. Tile
//   t - 2's wgmmas are then complete in both warpgroups (each waited for them in iteration
//   t - 1, before this iteration's barrier), so the refill never overwrites a stage that a
//   wgmma still reads; one batch of wgmmas stays in flight across the barrier and the copies.
// - The specialised pipeline (conv2d_3x3_specialized): the producers fill stage k % STAGES
//   with K tile k as soon as both consumers released the tile before it, each thread's copies
//   arriving on the stage's "full" mbarrier when they land (cp.async.mbarrier.arrive.noinc);
//   a consumer waits on "full", fences the async proxy, issues its 8 wgmmas, waits for its
//   previous batch and releases that batch's stage ("empty", one arrival a warp). The copies
//   of the next STAGES - 1 tiles run behind the multiplies with no barrier across the block.
//   A producer thread copies 8 A rows and 5 B rows a stage; which taps of its A rows are
//   padding is worked out once, nine bits a row. setmaxnreg gives the producers 56 registers
//   and the consumers 200 (two m64n160 accumulators are 160): 256 x 56 + 256 x 200 = 65536.
// - The TMA kernel (conv2d_3x3_tma) is the specialised pipeline with one producer thread: per
//   K tile it tells the stage's "full" barrier how many bytes to expect (mbarrier.arrive
//   .expect_tx) and issues the two boxes, whose bytes complete the barrier as they land. The
//   tensor map's 128-byte swizzle writes each box exactly as the wgmma descriptors read it, the
//   shift by the tap is a change of box coordinates (negative or past the image reads as
//   zeros), and the copies bypass L1 and the registers of 256 producer threads.
// - Measured on the H200 (h200_reference_variants_conv2d.json, h200_parity.json): the
//   specialised kernel is 1.15-1.17x the in-step one on the 256-row tiles; on the 32 x 32
//   layers the K split is 1.07x the in-step 128-row tiles at 1280 input channels and even
//   (0.99) at 640. The TMA kernel is 1.17-1.26x the specialised one on every SDXL layer
//   (h200_reference_variants_tma.json, 2026-12-04; the cp.async stages are 0.79-0.85x of it,
//   h200_reference_variants_dec04.json). Against the faster of cuDNN and torch.compile in one
//   run (h200_parity.json) that took the 32 x 32 layers from 1.17-1.21x to 0.99-1.02x and the
//   64- and 128-pixel layers from 0.94-1.10x to 0.75-0.90x.
// - Arithmetic intensity from L2: a 256 x 160 tile moves 53 KiB per 5.2 MFLOP (97 FLOP/byte,
//   about 10 TB/s of L2 traffic at the tensor cores' peak), 128 x 160 36 KiB per 2.6 MFLOP
//   (71 FLOP/byte, 14 TB/s at peak) if every copy came from L2. The activations do not all:
//   the nine taps of a channel slice are consecutive K tiles and gather overlapping rows
//   (shifted by one pixel or one image row), and their copies allocate in L1. For the in-step
//   kernel's 128-row tile of a 32-wide image the slice's distinct rows are 6 image rows (24
//   KiB, within the L1 left beside 181 KiB of shared memory) against 9 x 16 KiB gathered, so
//   L2 sees about 23 KiB per K tile instead of 36 (112 FLOP/byte). The 256-row tiles' windows
//   (48 to 64 KiB) do not fit beside 209 KiB, so they get little of this; their intensity is
//   higher to begin with. Nsight Compute put the specialised kernel's L2 throughput at about a
//   third of its peak, so L2 is not what holds it back. Shared memory: per k16 step each
//   consumer reads its A rows (2 KiB per m64) and all of B (5 KiB) per m64, under 90 bytes per
//   clock at peak, within the SM's 128.
// - Padding costs nothing: a neighbour outside the image (the halo), a pixel past M or a
//   channel past C_in is a cp.async with source size 0, which reads nothing and writes zeros
//   (for the TMA, a box element outside the tensor's extents); zero rows and columns add
//   nothing to the sums. Rows past M and columns past C_out are not stored.
// - The 32 x 32 layers (M = 2048) have 64 tiles of 256 x 160: a wave of 128 blocks needs K
//   split in two. The partial sums (160 KiB a block) go through the stages, which are free
//   by then: rank 1's consumers first wait for each other (named barrier 1, so that neither
//   overwrites a stage the other's last wgmmas read), store, and meet rank 0 at a cluster
//   barrier; a second one keeps rank 1's shared memory alive until rank 0 has read it. Its
//   producers stay for both barriers (barrier.cluster counts every thread of the cluster).
//   cuDNN runs these layers on 128 x 128 tiles with the K loop split across blocks ("segment
//   k"), 120 blocks for 160 tiles.
// - Where the time went before the TMA (a one-off probe of the cp.async kernel, read by hand,
//   not a committed benchmark): timed apart, its copies alone and its multiplies alone each
//   took well over half of the whole, and together they overlapped poorly, on every layer.
//   Gathering each channel slice's input rows once per tap column (a window of kBlockM + 2 width
//   rows, the three tap rows read from it at offsets of one image row: a third to a half fewer
//   activation copies) was no faster; neither were .cg activation copies or one producer
//   warpgroup instead of two. Nsight Compute showed cuDNN's kernels bypassing L1 (TMA loads, by
//   all signs) with the tensor cores 69-79 % busy, where the cp.async kernel's were about 55 %
//   busy. A tensor map cannot be made in device code (tensormap.replace sets the documented
//   fields, but a map built that way from zeros differs from cuTensorMapEncodeTiled's in bytes
//   that no field covers), hence the launch plan's @tensormap: host-built maps for each call.
// - Not tried yet: a producer of one warp instead of two warpgroups of which one thread works
//   (the registers and the 256 idle threads would go to a third consumer warpgroup or to larger
//   tiles), and clusters of blocks on neighbouring row tiles of one column tile, each weight box
//   loaded once and multicast to all of them.

#include <cuda_bf16.h>

namespace {

constexpr int kThreads = 256;          // two warpgroups
constexpr int kProducerThreads = 256;  // the specialised kernel's two producer warpgroups
constexpr int kBlockN = 160;           // output channels per block: the wgmma's N
constexpr int kBlockK = 64;            // K per stage: one tap, 64 channels
constexpr int kRowBytes = 128;         // a stage row: kBlockK bf16, one swizzle row
constexpr int kChunksPerRow = 8;       // 16-byte chunks per row
constexpr int kChunkElems = 8;         // bf16 per chunk
constexpr int kAtomBytes = 1024;       // 8 rows: one 128-byte swizzle atom
constexpr int kAccumulators = 80;      // fp32 registers of one m64n160 accumulator per thread

__device__ __forceinline__ unsigned shared_address(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of 128-byte rows laid out in the
// 128-byte swizzle (the tile starts on a 1024-byte boundary).
__device__ __forceinline__ unsigned swizzled_offset(int row, int chunk) {
  return static_cast<unsigned>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

// 16-byte global -> shared copies. With `valid` false nothing is read (source size 0) and the 16
// bytes are zero-filled; `source` must still be a mapped address. The weight goes through L2
// only (.cg: each weight chunk is read once per block); the activations are also cached in L1
// (.ca), where the nine taps of a channel slice, copied one after another, find most of the
// rows they share.
__device__ __forceinline__ void copy_async_16_l2(unsigned destination, const void* source,
                                                 bool valid) {
  const int source_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(source),
               "r"(source_bytes)
               : "memory");
}

__device__ __forceinline__ void copy_async_16_l1(unsigned destination, const void* source,
                                                 bool valid) {
  const int source_bytes = valid ? 16 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(source),
               "r"(source_bytes)
               : "memory");
}

__device__ __forceinline__ void commit_copies() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most kPending of this thread's committed copy groups are in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void store_shared_16(unsigned destination, uint4 value) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(destination), "r"(value.x),
               "r"(value.y), "r"(value.z), "r"(value.w)
               : "memory");
}

// Makes this thread's shared-memory writes (cp.async and st.shared: generic proxy) visible to
// wgmma's reads (async proxy); a barrier after it publishes them to the other threads.
__device__ __forceinline__ void fence_async_proxy() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void barrier_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void barrier_arrive(unsigned bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar)
               : "memory");
}

// The barrier at `bar` gets one arrival once every copy this thread issued before has landed.
__device__ __forceinline__ void arrive_when_copied(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// One arrival on `bar` that also expects `bytes` of bulk copies to complete on it.
__device__ __forceinline__ void arrive_expecting(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// The box of `map` at coordinates (c0, c1, c2[, c3]) into shared memory at `destination`,
// counted on `bar` as it lands.
__device__ __forceinline__ void load_box(unsigned destination, const CUtensorMap& map, int c0,
                                         int c1, int c2, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(destination),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void load_box(unsigned destination, const CUtensorMap& map, int c0,
                                         int c1, int c2, int c3, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(destination),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// Every thread of every block of the cluster: shared-memory writes before it are visible to
// reads after it, in any block.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
                   : "memory");
}

// The specialised kernel's 256 consumer threads (named barrier 1).
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, 256;\n" ::: "memory");
}

// The address of `address` (this block's shared memory) in block `rank` of the cluster.
__device__ __forceinline__ unsigned peer_shared_address(unsigned address, unsigned rank) {
  unsigned peer;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(peer) : "r"(address), "r"(rank));
  return peer;
}

__device__ __forceinline__ void store_shared_f32x4(unsigned address, float x, float y, float z,
                                                   float w) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "f"(x), "f"(y), "f"(z),
               "f"(w)
               : "memory");
}

__device__ __forceinline__ float4 load_cluster_f32x4(unsigned address) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(address)
               : "memory");
  return v;
}

__device__ __forceinline__ void barrier_wait(unsigned bar, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// wgmma shared-memory matrix descriptor of a K-major tile in the 128-byte swizzle starting at
// shared address `address`: start address >> 4 in bits 0-13, leading byte offset >> 4 in bits
// 16-29 (not used by a K-major swizzled layout; 1 by convention), stride byte offset >> 4 in
// bits 32-45 (1024: from one 8-row atom to the next), base offset 0 (atoms are 1024-aligned;
// the k16 steps move the start by 32 to 96 bytes, below bit 7), swizzle mode 1 (128-byte) in
// bits 62-63.
__device__ __forceinline__ unsigned long long matrix_descriptor(unsigned address) {
  unsigned long long descriptor = (address & 0x3FFFFu) >> 4;
  descriptor |= 1ull << 16;
  descriptor |= static_cast<unsigned long long>(kAtomBytes >> 4) << 32;
  descriptor |= 1ull << 62;
  return descriptor;
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most kPending of this warpgroup's committed wgmma groups are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accesses to the accumulators across an asynchronous wgmma's
// issue or wait (the registers are written by the tensor cores in between).
__device__ __forceinline__ void fence_accumulators(float (&d)[kAccumulators]) {
#pragma unroll
  for (int i = 0; i < kAccumulators; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d (64 x 160, fp32, the warpgroup's) += A (64 x 16, K-major) * B (160 x 16, K-major)^T, both
// bf16 in shared memory. Thread t of the warpgroup holds, in d[4 j + q], row
// 16 (t / 32) + (t % 32) / 4 + 8 (q / 2) and column 8 j + 2 (t % 4) + q % 2.
__device__ __forceinline__ void wgmma_m64n160k16(float (&d)[kAccumulators],
                                                 unsigned long long a_descriptor,
                                                 unsigned long long b_descriptor) {
  asm volatile(
      "{\n"
      ".reg .pred accumulate;\n"
      "setp.ne.b32 accumulate, %82, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n160k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
      "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "
      "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, "
      "%55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, "
      "%73, %74, %75, %76, %77, %78, %79}, "
      "%80, %81, accumulate, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
      : "l"(a_descriptor), "l"(b_descriptor), "r"(1));
}

// Eight bf16 of one pixel's channels [channel, channel + 8), element by element, zeros at or
// past `channels` (the path for channel counts that are not multiples of 8).
__device__ __forceinline__ uint4 load_chunk_elementwise(const __nv_bfloat16* __restrict__ row,
                                                        int channel, int channels) {
  const unsigned short* bits = reinterpret_cast<const unsigned short*>(row);
  unsigned words[4];
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    const int c0 = channel + 2 * p;
    const unsigned lo = c0 < channels ? bits[c0] : 0u;
    const unsigned hi = c0 + 1 < channels ? bits[c0 + 1] : 0u;
    words[p] = lo | (hi << 16);
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

// One stage's products for a warpgroup, issued and committed as one wgmma batch: acc[t] (rows
// 64 t .. of the warpgroup's A rows at a_tile) += A * B^T over the stage's 64 K, 4 k16 steps.
template <int kTiles>
__device__ __forceinline__ void multiply_stage(float (&acc)[kTiles][kAccumulators], unsigned a_tile,
                                               unsigned b_tile) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t) fence_accumulators(acc[t]);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kBlockK / 16; ++kk) {
    const unsigned long long b_descriptor = matrix_descriptor(b_tile + kk * 32);
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      wgmma_m64n160k16(acc[t], matrix_descriptor(a_tile + t * 64 * kRowBytes + kk * 32),
                       b_descriptor);
    }
  }
  wgmma_commit();
#pragma unroll
  for (int t = 0; t < kTiles; ++t) fence_accumulators(acc[t]);
}

// Epilogue of both kernels: bias in fp32, one rounding to bf16, rows past M and columns past
// out_channels not stored. Thread l of warp w of a warpgroup holds rows 16 w + l / 4 (+ 8) and
// columns 8 j + 2 (l % 4) (+ 1) of each of its m64 accumulators; accumulator t covers rows
// row_base + 64 t onwards.
template <int kTiles>
__device__ __forceinline__ void store_tile(const float (&acc)[kTiles][kAccumulators],
                                           __nv_bfloat16* __restrict__ out,
                                           const __nv_bfloat16* __restrict__ bias, int row_base,
                                           int n0, int pixels, int out_channels, int warp,
                                           int lane) {
  const bool even_channels = out_channels % 2 == 0;
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    const int row0 = row_base + t * 64 + warp * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
      const int column = n0 + j * 8 + (lane % 4) * 2;
      if (column >= out_channels) continue;
      const bool second_in = column + 1 < out_channels;
      const float bias0 = __bfloat162float(bias[column]);
      const float bias1 = second_in ? __bfloat162float(bias[column + 1]) : 0.0f;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = row0 + 8 * half;
        if (row >= pixels) continue;
        const float v0 = acc[t][4 * j + 2 * half] + bias0;
        const float v1 = acc[t][4 * j + 2 * half + 1] + bias1;
        __nv_bfloat16* destination = out + static_cast<long long>(row) * out_channels + column;
        if (even_channels) {
          *reinterpret_cast<__nv_bfloat162*>(destination) = __floats2bfloat162_rn(v0, v1);
        } else {
          destination[0] = __float2bfloat16_rn(v0);
          if (second_in) destination[1] = __float2bfloat16_rn(v1);
        }
      }
    }
  }
}

}  // namespace

// out: [batch, height, width, out_channels]; input: [batch, height, width, in_channels];
// weight: [out_channels, 3, 3, in_channels]; bias: [out_channels]; all bf16, contiguous.
// kVectorLoads requires in_channels % 8 == 0 (16-byte aligned pixels and weight rows). Launch:
// 256 threads, one block per kBlockM x 160 tile of out (gridDim.x = cdiv(M, kBlockM) *
// cdiv(out_channels, 160)), dynamic shared memory kStages * (kBlockM + 160) * 128 + 1024.
template <int kBlockM, int kStages, bool kVectorLoads>
__global__ void __launch_bounds__(kThreads, 1)
    conv2d_3x3_kernel(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ input,
                      const __nv_bfloat16* __restrict__ weight,
                      const __nv_bfloat16* __restrict__ bias, int batch, int height, int width,
                      int in_channels, int out_channels) {
  constexpr int kTilesPerWarpgroup = kBlockM / 128;  // m64 accumulators per warpgroup
  constexpr int kWarpgroupRows = kBlockM / 2;
  constexpr int kStageBytes = (kBlockM + kBlockN) * kRowBytes;
  constexpr int kRowsPerPass = kThreads / kChunksPerRow;  // rows one pass of copies covers
  constexpr int kASlots = kBlockM / kRowsPerPass;         // A chunks per thread per stage
  constexpr int kBSlots = kBlockN / kRowsPerPass;         // B chunks per thread per stage
  static_assert(kBlockM == 128 || kBlockM == 256, "one or two m64 tiles per warpgroup");
  static_assert(kBlockN % kRowsPerPass == 0, "B rows split evenly over the threads");
  static_assert(kStageBytes % kAtomBytes == 0, "every stage starts on a swizzle atom");
  static_assert(kStages >= 3, "one stage in the copies, one in the math, one in flight");

  // Stages, 1024-byte aligned in the shared window: kBlockM rows of A, then 160 rows of B.
  extern __shared__ __align__(16) unsigned char shared_storage[];
  const unsigned smem_base =
      (shared_address(shared_storage) + (kAtomBytes - 1)) & ~static_cast<unsigned>(kAtomBytes - 1);

  const int pixels = batch * height * width;
  const int tiles_n = (out_channels + kBlockN - 1) / kBlockN;
  const int m0 = static_cast<int>(blockIdx.x) / tiles_n * kBlockM;
  const int n0 = static_cast<int>(blockIdx.x) % tiles_n * kBlockN;

  const int thread = static_cast<int>(threadIdx.x);
  const int chunk = thread % kChunksPerRow;      // the 16-byte chunk this thread copies
  const int first_row = thread / kChunksPerRow;  // its rows: first_row + i * kRowsPerPass

  // The output pixel of each A row this thread gathers, and its image row and column (an
  // impossible row for pixels past M, so every tap of it reads as padding).
  int a_pixel[kASlots], a_h[kASlots], a_w[kASlots];
#pragma unroll
  for (int i = 0; i < kASlots; ++i) {
    const int pixel = m0 + first_row + i * kRowsPerPass;
    a_pixel[i] = pixel;
    a_w[i] = pixel % width;
    a_h[i] = pixel < pixels ? pixel / width % height : -4;
  }

  const int k_tiles = 9 * ((in_channels + kBlockK - 1) / kBlockK);
  const long long weight_row = 9ll * in_channels;  // elements per output channel

  // Starts the copies of K tile `k_tile` (channels [64 (k_tile / 9), + 64) at tap k_tile % 9)
  // into its stage: A's rows gathered from the tap's neighbours, B's from the weight. The
  // nine taps of a channel slice are consecutive K tiles, so the input rows they share are
  // still in L1 (a 128 x 160 tile of a 32-wide image gathers 6 image rows, 24 KiB, for all
  // nine); the weight's K order is the same (tap, channel) as its rows, just visited slice by
  // slice.
  auto load_tile = [&](int k_tile) {
    const int slice = k_tile / 9;
    const int tap = k_tile - slice * 9;
    const int channel = slice * kBlockK + chunk * kChunkElems;
    const int dr = tap / 3 - 1;
    const int ds = tap % 3 - 1;
    const bool channel_in = channel < in_channels;
    const unsigned stage = smem_base + static_cast<unsigned>(k_tile % kStages) * kStageBytes;
#pragma unroll
    for (int i = 0; i < kASlots; ++i) {
      const int ih = a_h[i] + dr;
      const int iw = a_w[i] + ds;
      const bool inside = static_cast<unsigned>(ih) < static_cast<unsigned>(height) &&
                          static_cast<unsigned>(iw) < static_cast<unsigned>(width);
      const long long neighbour = static_cast<long long>(a_pixel[i]) + dr * width + ds;
      const __nv_bfloat16* source = input + neighbour * in_channels;
      const unsigned destination = stage + swizzled_offset(first_row + i * kRowsPerPass, chunk);
      if constexpr (kVectorLoads) {
        const bool valid = inside && channel_in;
        copy_async_16_l1(destination, valid ? source + channel : input, valid);
      } else {
        store_shared_16(destination, inside && channel_in
                                         ? load_chunk_elementwise(source, channel, in_channels)
                                         : make_uint4(0u, 0u, 0u, 0u));
      }
    }
#pragma unroll
    for (int j = 0; j < kBSlots; ++j) {
      const int row = first_row + j * kRowsPerPass;
      const int o = n0 + row;
      const bool row_in = o < out_channels;
      const __nv_bfloat16* source = weight + static_cast<long long>(o) * weight_row +
                                    static_cast<long long>(tap) * in_channels;
      const unsigned destination = stage + kBlockM * kRowBytes + swizzled_offset(row, chunk);
      if constexpr (kVectorLoads) {
        const bool valid = row_in && channel_in;
        copy_async_16_l2(destination, valid ? source + channel : weight, valid);
      } else {
        store_shared_16(destination, row_in && channel_in
                                         ? load_chunk_elementwise(source, channel, in_channels)
                                         : make_uint4(0u, 0u, 0u, 0u));
      }
    }
  };

  const int warpgroup = thread / 128;
  float acc[kTilesPerWarpgroup][kAccumulators];
#pragma unroll
  for (int t = 0; t < kTilesPerWarpgroup; ++t) {
#pragma unroll
    for (int i = 0; i < kAccumulators; ++i) acc[t][i] = 0.0f;
  }

  // Prologue: tiles 0 .. kStages - 3 in flight, one commit group each (empty past the end, so
  // that "tile t has landed" is always "at most kStages - 3 groups pending").
#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < k_tiles) load_tile(s);
    commit_copies();
  }

  for (int k_tile = 0; k_tile < k_tiles; ++k_tile) {
    wait_copies<kStages - 3>();  // this thread's copies of tile k_tile have landed
    fence_async_proxy();
    __syncthreads();  // everyone's have; every warpgroup is done with tile k_tile - 2

    const unsigned stage = smem_base + static_cast<unsigned>(k_tile % kStages) * kStageBytes;
    const unsigned a_tile = stage + warpgroup * kWarpgroupRows * kRowBytes;
    const unsigned b_tile = stage + kBlockM * kRowBytes;
    multiply_stage(acc, a_tile, b_tile);

    // Refill the stage of tile k_tile - 2 while this batch runs.
    if (k_tile + kStages - 2 < k_tiles) load_tile(k_tile + kStages - 2);
    commit_copies();

    wgmma_wait<1>();  // this warpgroup's batch k_tile - 1 is done; batch k_tile may still run
#pragma unroll
    for (int t = 0; t < kTilesPerWarpgroup; ++t) fence_accumulators(acc[t]);
  }
  wgmma_wait<0>();
#pragma unroll
  for (int t = 0; t < kTilesPerWarpgroup; ++t) fence_accumulators(acc[t]);
  wait_copies<0>();  // drain the trailing (empty) groups before the block exits

  const int lane = thread % 32;
  const int warp_in_group = (thread % 128) / 32;
  store_tile<kTilesPerWarpgroup>(acc, out, bias, m0 + warpgroup * kWarpgroupRows, n0, pixels,
                                 out_channels, warp_in_group, lane);
}

namespace {

// Where a block of the warp-specialised kernel works, as its producers see it: the ring of
// stages (1024-byte aligned: kBlockM rows of A, then 160 rows of B) with a "full" and an "empty"
// mbarrier per stage after it, the block's output tile and the K tiles [k_begin, k_end) it sums.
struct Pipeline {
  unsigned smem_base;
  unsigned barriers;
  int stages;
  int stage_bytes;
  int m0, n0;
  int k_begin, k_end;
  int pixels;
  __device__ __forceinline__ unsigned full(int s) const { return barriers + 8 * s; }
  __device__ __forceinline__ unsigned empty(int s) const { return barriers + 8 * (stages + s); }
  __device__ __forceinline__ unsigned stage(int s) const {
    return smem_base + static_cast<unsigned>(s) * stage_bytes;
  }
};

// A producer's loop: for every K tile k of the block, waits until the consumers have released
// stage k % kStages (from the second round of the ring on), then fill(stage, slice, tap) with
// the tile's 64-channel slice and 3x3 tap.
template <int kStages, class Fill>
__device__ __forceinline__ void for_each_k_tile(const Pipeline& pipeline, Fill fill) {
  for (int k_tile = pipeline.k_begin; k_tile < pipeline.k_end; ++k_tile) {
    const int step = k_tile - pipeline.k_begin;
    const int s = step % kStages;
    if (step >= kStages) barrier_wait(pipeline.empty(s), ((step / kStages) + 1) & 1);
    const int slice = k_tile / 9;
    fill(s, slice, k_tile - slice * 9);
  }
}

// The body of the warp-specialised kernel: two producer warpgroups that fill every K tile into
// a kStages-deep ring of shared-memory stages (`produce(pipeline, thread)`, each stage's "full"
// barrier expecting `full_arrivals` arrivals) and two consumer warpgroups that multiply them,
// meeting at mbarriers instead of a block barrier a tile.
template <int kBlockM, int kStages, int kSplit, class Produce>
__device__ __forceinline__ void run_specialized(__nv_bfloat16* __restrict__ out,
                                                const __nv_bfloat16* __restrict__ bias, int batch,
                                                int height, int width, int in_channels,
                                                int out_channels, unsigned full_arrivals,
                                                Produce produce) {
  constexpr int kTilesPerConsumer = kBlockM / 128;  // m64 accumulators per consumer warpgroup
  constexpr int kConsumerRows = kBlockM / 2;
  constexpr int kStageBytes = (kBlockM + kBlockN) * kRowBytes;
  static_assert(kBlockM == 128 || kBlockM == 256, "one or two m64 tiles per consumer");
  static_assert(kSplit == 1 || kSplit == 2, "K whole, or halved over a 2-block cluster");
  static_assert(
      kSplit == 1 || 2 * kTilesPerConsumer * kAccumulators * 128 * 4 <= kStages * kStageBytes,
      "the partial sums fit in the stages");
  static_assert(kStageBytes % kAtomBytes == 0, "every stage starts on a swizzle atom");

  extern __shared__ __align__(16) unsigned char shared_storage[];
  Pipeline pipeline;
  pipeline.smem_base =
      (shared_address(shared_storage) + (kAtomBytes - 1)) & ~static_cast<unsigned>(kAtomBytes - 1);
  pipeline.barriers = pipeline.smem_base + kStages * kStageBytes;
  pipeline.stages = kStages;
  pipeline.stage_bytes = kStageBytes;
  const unsigned smem_base = pipeline.smem_base;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(pipeline.full(s), full_arrivals);
      barrier_init(pipeline.empty(s), 8);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int pixels = batch * height * width;
  const int tiles_n = (out_channels + kBlockN - 1) / kBlockN;
  const int tile = static_cast<int>(blockIdx.x) / kSplit;
  const int m0 = tile / tiles_n * kBlockM;
  const int n0 = tile % tiles_n * kBlockN;
  // The K tiles [k_begin, k_end) this block sums: all of them, or one half of them per block
  // of the cluster (blocks 2 j and 2 j + 1, ranks 0 and 1, share a tile).
  const int k_tiles = 9 * ((in_channels + kBlockK - 1) / kBlockK);
  const int rank = static_cast<int>(blockIdx.x) % kSplit;
  const int k_begin = rank * (k_tiles / 2);
  const int k_end = kSplit == 1 || rank == 1 ? k_tiles : k_tiles / 2;
  pipeline.m0 = m0;
  pipeline.n0 = n0;
  pipeline.k_begin = k_begin;
  pipeline.k_end = k_end;
  pipeline.pixels = pixels;
  const int thread = static_cast<int>(threadIdx.x);
  float acc[kTilesPerConsumer][kAccumulators];

  if (thread < kProducerThreads) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n");
    produce(pipeline, thread);
    if constexpr (kSplit == 1) return;
    cluster_sync();  // the consumers' partial sums are in shared memory
    cluster_sync();  // rank 0 has read them
    return;
  }

  // Consumers: warpgroup c multiplies rows [c kBlockM / 2, (c + 1) kBlockM / 2) of each stage
  // by its B, keeping one batch of wgmmas in flight while it waits for the next stage.
  asm volatile("setmaxnreg.inc.sync.aligned.u32 200;\n");
  const int consumer = (thread - kProducerThreads) / 128;
  const int lane = thread % 32;
  const int warp_in_group = (thread % 128) / 32;
#pragma unroll
  for (int t = 0; t < kTilesPerConsumer; ++t) {
#pragma unroll
    for (int i = 0; i < kAccumulators; ++i) acc[t][i] = 0.0f;
  }

  for (int step = 0; step < k_end - k_begin; ++step) {
    const int s = step % kStages;
    barrier_wait(pipeline.full(s), (step / kStages) & 1);
    fence_async_proxy();  // copies may have written the stage through the generic proxy

    const unsigned a_tile = pipeline.stage(s) + consumer * kConsumerRows * kRowBytes;
    const unsigned b_tile = pipeline.stage(s) + kBlockM * kRowBytes;
    multiply_stage(acc, a_tile, b_tile);
    wgmma_wait<1>();  // batch k_tile - 1 is done: its stage can be refilled
#pragma unroll
    for (int t = 0; t < kTilesPerConsumer; ++t) fence_accumulators(acc[t]);
    if (step > 0 && lane == 0) barrier_arrive(pipeline.empty((step - 1) % kStages));
  }
  wgmma_wait<0>();
#pragma unroll
  for (int t = 0; t < kTilesPerConsumer; ++t) fence_accumulators(acc[t]);
  if constexpr (kSplit == 2) {
    // Rank 1 leaves its partial sums in its own stages (both consumers are past their last
    // wgmma first: named barrier 1), rank 0 adds them to its own through distributed shared
    // memory. Thread l of consumer c puts accumulator t's registers 4 q .. 4 q + 3 at 16-byte
    // slot ((c T + t) 20 + q) 128 + l % 128: each warp's 32 slots are 512 contiguous bytes.
    const unsigned slot =
        smem_base + static_cast<unsigned>(consumer * kTilesPerConsumer * (kAccumulators / 4) * 128 +
                                          thread % 128) *
                        16;
    if (rank == 1) {
      consumers_sync();
#pragma unroll
      for (int t = 0; t < kTilesPerConsumer; ++t) {
#pragma unroll
        for (int q = 0; q < kAccumulators / 4; ++q) {
          store_shared_f32x4(slot + (t * (kAccumulators / 4) + q) * 128 * 16, acc[t][4 * q],
                             acc[t][4 * q + 1], acc[t][4 * q + 2], acc[t][4 * q + 3]);
        }
      }
    }
    cluster_sync();
    if (rank == 0) {
      const unsigned remote = peer_shared_address(slot, 1);
#pragma unroll
      for (int t = 0; t < kTilesPerConsumer; ++t) {
#pragma unroll
        for (int q = 0; q < kAccumulators / 4; ++q) {
          const float4 partial =
              load_cluster_f32x4(remote + (t * (kAccumulators / 4) + q) * 128 * 16);
          acc[t][4 * q] += partial.x;
          acc[t][4 * q + 1] += partial.y;
          acc[t][4 * q + 2] += partial.z;
          acc[t][4 * q + 3] += partial.w;
        }
      }
    }
    cluster_sync();
    if (rank == 1) return;
  }
  store_tile<kTilesPerConsumer>(acc, out, bias, m0 + consumer * kConsumerRows, n0, pixels,
                                out_channels, warp_in_group, lane);
}

}  // namespace

// The warp-specialised form of conv2d_3x3_kernel for in_channels % 8 == 0 (same arguments, same
// sums): 512 threads, run_specialized with producers that gather with cp.async. One block per
// kBlockM x 160 tile of out (gridDim.x = cdiv(M, kBlockM) * cdiv(out_channels, 160)), dynamic
// shared memory kStages * (kBlockM + 160) * 128 + 1152.
template <int kBlockM, int kStages, int kSplit>
__global__ void __launch_bounds__(kProducerThreads + 256, 1)
    conv2d_3x3_specialized(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ input,
                           const __nv_bfloat16* __restrict__ weight,
                           const __nv_bfloat16* __restrict__ bias, int batch, int height, int width,
                           int in_channels, int out_channels) {
  constexpr int kRowsPerPass = kProducerThreads / kChunksPerRow;  // 32 rows a pass
  constexpr int kASlots = kBlockM / kRowsPerPass;  // A chunks per producer thread per stage
  constexpr int kBSlots = kBlockN / kRowsPerPass;  // B chunks per producer thread per stage
  constexpr int kMaskWords = (kASlots + 2) / 3;    // three A rows' nine tap bits a word
  static_assert(kBlockN % kRowsPerPass == 0, "B rows split evenly over the producers");
  // Producers: K tile k (channels [64 (k / 9), + 64) at tap k % 9) into stage k % kStages, once
  // both consumers have released what that stage held before. Thread t copies chunk t % 8 of
  // rows t / 8 + 32 i of A and of B; each thread's copies arrive on the stage's "full" barrier
  // when they land.
  const auto produce = [&](const Pipeline& pipeline, int thread) {
    const int m0 = pipeline.m0;
    const int n0 = pipeline.n0;
    const int chunk = thread % kChunksPerRow;
    const int first_row = thread / kChunksPerRow;
    const unsigned row_offset =
        first_row * kRowBytes + static_cast<unsigned>((chunk ^ (first_row & 7)) << 4);

    // Bit 9 (i % 3) + tap of taps[i / 3]: the neighbour at `tap` (3 r + s) of the output pixel
    // of this thread's A row i lies inside the image (none for pixels past M).
    unsigned taps[kMaskWords];
#pragma unroll
    for (int word = 0; word < kMaskWords; ++word) taps[word] = 0;
#pragma unroll
    for (int i = 0; i < kASlots; ++i) {
      const int pixel = m0 + first_row + i * kRowsPerPass;
      const int w = pixel % width;
      const int h = pixel / width % height;
#pragma unroll
      for (int tap = 0; tap < 9; ++tap) {
        const int ih = h + tap / 3 - 1;
        const int iw = w + tap % 3 - 1;
        const bool inside = pixel < pipeline.pixels &&
                            static_cast<unsigned>(ih) < static_cast<unsigned>(height) &&
                            static_cast<unsigned>(iw) < static_cast<unsigned>(width);
        taps[i / 3] |= (inside ? 1u : 0u) << (9 * (i % 3) + tap);
      }
    }
    const long long a_step = static_cast<long long>(kRowsPerPass) * in_channels;
    const long long b_step = static_cast<long long>(kRowsPerPass) * 9 * in_channels;
    const __nv_bfloat16* a_first = input + static_cast<long long>(m0 + first_row) * in_channels;
    const __nv_bfloat16* b_first =
        weight + static_cast<long long>(n0 + first_row) * 9 * in_channels;

    for_each_k_tile<kStages>(pipeline, [&](int s, int slice, int tap) {
      const int channel = slice * kBlockK + chunk * kChunkElems;
      const bool channel_in = channel < in_channels;
      const long long neighbour = static_cast<long long>(tap / 3 - 1) * width + (tap % 3 - 1);
      const __nv_bfloat16* a_source = a_first + neighbour * in_channels + channel;
      const __nv_bfloat16* b_source = b_first + tap * in_channels + channel;
      const unsigned stage = pipeline.stage(s) + row_offset;
#pragma unroll
      for (int i = 0; i < kASlots; ++i) {
        const bool valid = channel_in && ((taps[i / 3] >> (9 * (i % 3) + tap)) & 1u) != 0;
        copy_async_16_l1(stage + i * kRowsPerPass * kRowBytes,
                         valid ? a_source + i * a_step : input, valid);
      }
#pragma unroll
      for (int j = 0; j < kBSlots; ++j) {
        const bool valid = channel_in && n0 + first_row + j * kRowsPerPass < out_channels;
        copy_async_16_l2(stage + (kBlockM + j * kRowsPerPass) * kRowBytes,
                         valid ? b_source + j * b_step : weight, valid);
      }
      arrive_when_copied(pipeline.full(s));
    });
    asm volatile("cp.async.wait_all;\n" ::: "memory");
  };
  run_specialized<kBlockM, kStages, kSplit>(out, bias, batch, height, width, in_channels,
                                            out_channels, kProducerThreads, produce);
}

// conv2d_3x3_specialized with its stages filled by the tensor memory accelerator (same sums,
// same tiling, same launch), for the layers whose boxes fit: in_channels % 64 == 0 and tiles of
// whole rows of one image (width divides kBlockM and kBlockM divides height * width), every
// SDXL layer but conv_in. Per K tile one producer thread issues two bulk tensor copies: a box of
// the input (64 channels of the tile's kBlockM / width image rows, shifted by the tap; the TMA
// reads the halo outside the image as zeros) and a box of the weight (64 channels of one tap of
// 160 output channels), both landing in the 128-byte swizzle the consumers' wgmma descriptors
// read; the stage's "full" barrier completes when their bytes have arrived.
//
// input_rows: input as [batch][height][width][in_channels], box (64, width, kBlockM / width, 1);
// weight_taps: weight as [out_channels][9][in_channels], box (64, 1, 160); both 128-byte
// swizzled (the @tensormap directives above).
template <int kBlockM, int kStages, int kSplit>
__global__ void __launch_bounds__(kProducerThreads + 256, 1)
    conv2d_3x3_tma(__nv_bfloat16* __restrict__ out, const __grid_constant__ CUtensorMap input_rows,
                   const __grid_constant__ CUtensorMap weight_taps,
                   const __nv_bfloat16* __restrict__ bias, int batch, int height, int width,
                   int in_channels, int out_channels) {
  const auto produce = [&](const Pipeline& pipeline, int thread) {
    if (thread != 0) return;
    const int image_pixels = height * width;
    const int image = pipeline.m0 / image_pixels;
    const int first_row = pipeline.m0 % image_pixels / width;
    for_each_k_tile<kStages>(pipeline, [&](int s, int slice, int tap) {
      const unsigned full = pipeline.full(s);
      arrive_expecting(full, (kBlockM + kBlockN) * kRowBytes);
      load_box(pipeline.stage(s), input_rows, slice * kBlockK, tap % 3 - 1, first_row + tap / 3 - 1,
               image, full);
      load_box(pipeline.stage(s) + kBlockM * kRowBytes, weight_taps, slice * kBlockK, tap,
               pipeline.n0, full);
    });
  };
  run_specialized<kBlockM, kStages, kSplit>(out, bias, batch, height, width, in_channels,
                                            out_channels, 1, produce);
}
