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
// Launch plan: one templated kernel, conv2d_3x3_kernel<BM, STAGES, VECTOR_LOADS, SPLIT_K>,
// persistent and warp-specialised. A block has three warpgroups (384 threads): warpgroup 0 only
// copies (cp.async gathers of A and B into a STAGES-deep ring of shared-memory stages), warpgroups
// 1 and 2 only multiply (wgmma.m64n160k16 from shared memory; warpgroup g the rows
// [(g - 1) BM / 2, g BM / 2) of a BM x 160 tile of out, as BM / 128 accumulators of 80 fp32
// registers per thread) and store. K advances 64 at a time (one tap, 64 channels; the nine taps
// of a slice of 64 channels one after another). The grid is min(tiles, 132) blocks; block b
// computes tiles b, b + gridDim.x, ... (column tiles fastest, so blocks resident together read
// the same input rows), and its copying warpgroup runs ahead into the next tile's stages while
// the wgmma warpgroups add the bias and store the last one. With SPLIT_K, blocks 2 c and
// 2 c + 1 form a cluster that computes tile c, each over half of the channel slices, and add
// their fp32 partial sums through distributed shared memory before the bias and the rounding.
//
//   case                   M       BM x BN     tiles   blocks                 stages   smem
//   128 x 128 x 320 -> 320  32768  256 x 160   256     132 (2 tiles or 1)     3        157 KiB
//   64 x 64 x 640 -> 640     8192  256 x 160   128     128                    3        157 KiB
//   32 x 32 x 1280 -> 1280   2048  256 x 160   64      128 (K split in two)   3        157 KiB
//
// 160 columns divide every SDXL width (320, 640, 1280) and make each case's blocks a whole
// number of waves (97 % of the 132 SMs busy). 256 rows are used wherever they still give a
// full wave; where they give at most 66 tiles (the 32 x 32 layers, and every small image with
// more than 64 channels) each tile's K is split over a 2-block cluster instead of taking
// 128-row tiles: 256 x 160 tiles fetch half the weight bytes per FLOP that 128 x 160 tiles do
// (below). Between 67 and 127 tiles, or with at most 64 input channels (one slice, nothing to
// split), the third launch takes 128-row tiles. The stage counts are set by L1 rather than
// latency: the 256-row tile takes 3 stages (157 KiB, a 164 KiB carveout leaving 92 KiB of L1)
// and the 128-row tile 5 (181 KiB, 60 KiB of L1), so that L1 holds the activation rows the
// nine taps of a channel slice share (below). Channel counts that are not multiples of 8
// (conv_in's 4) take the last launch, whose loads are element by element.
//
// clang-format off
// @launch if (in_channels % 8 == 0 && cdiv(batch * height * width, 256) * cdiv(out_channels, 160) >= 128)
//     conv2d_3x3_kernel<256, 3, true, false><<<min(cdiv(batch * height * width, 256) * cdiv(out_channels, 160), 132), 384, 160896>>>(out, input, weight, bias, batch, height, width, in_channels, out_channels)
// @launch if (in_channels % 8 == 0 && in_channels > 64 && cdiv(batch * height * width, 256) * cdiv(out_channels, 160) <= 66)
//     conv2d_3x3_kernel<256, 3, true, true><<<2 * cdiv(batch * height * width, 256) * cdiv(out_channels, 160), 384, 160896>>>(out, input, weight, bias, batch, height, width, in_channels, out_channels)
// @cluster conv2d_3x3_kernel<256, 3, true, true> (2, 1, 1)
// @launch if (in_channels % 8 == 0 && cdiv(batch * height * width, 256) * cdiv(out_channels, 160) < 128 && (in_channels <= 64 || cdiv(batch * height * width, 256) * cdiv(out_channels, 160) > 66))
//     conv2d_3x3_kernel<128, 5, true, false><<<min(cdiv(batch * height * width, 128) * cdiv(out_channels, 160), 132), 384, 185472>>>(out, input, weight, bias, batch, height, width, in_channels, out_channels)
// @launch if (in_channels % 8 != 0)
//     conv2d_3x3_kernel<128, 4, false, false><<<min(cdiv(batch * height * width, 128) * cdiv(out_channels, 160), 132), 384, 148608>>>(out, input, weight, bias, batch, height, width, in_channels, out_channels)
// clang-format on
//
// (Dynamic shared memory: STAGES * (BM + 160) * 128 bytes plus 1 KiB to align the stages to
// 1024 bytes, which the 128-byte swizzle needs, plus 128 bytes of mbarriers. 132 is the H200's
// SM count; on another GPU the grid is still correct, each block simply walks more or fewer
// tiles. The split-K launch has exactly two blocks per tile: each block computes one tile, and
// its reduction reuses the stages.)
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
// - Why warp specialisation: when the same warps both issued the copies and the wgmmas, every
//   K tile went through a block-wide barrier, the copies could run only two tiles ahead and
//   their issue (13 cp.async per thread, with the halo tests and address arithmetic) sat
//   between one wgmma batch and the next; the previous version of this kernel ran at 450 to
//   510 TFLOP/s, about half the roof, in every case alike. Here the copying warpgroup issues
//   a stage's 26 (BM 256) or 18 (BM 128) cp.async per thread, about 280 instructions per
//   thread per K tile against the 1280 (BM 256) or 640 (BM 128) tensor-core cycles that the
//   tile's wgmmas take, on its own warps; the ring is handed over through mbarriers, not
//   block barriers:
//   full[s]: 128 arrivals, one per copying thread, each a cp.async.mbarrier.arrive.noinc that
//   lands once all of that thread's copies into the stage have (an ordinary arrive after the
//   st.shared of the element-wise path); empty[s]: 8 arrivals, one per wgmma warp, once the
//   wgmmas that read the stage have completed. A wgmma warpgroup waits on full[s], issues
//   fence.proxy.async (cp.async writes through the generic proxy, wgmma reads through the async
//   one), issues the stage's batch, commits it and waits until only that batch is in flight,
//   then releases the stage before (so one batch always runs while the next stage is awaited);
//   the copier refills stage s once empty[s] has completed the matching phase. A stage freed
//   when batch t - 1 completes (batch t starting) holds K tile t - 1 + STAGES, which the
//   tensor cores reach STAGES - 1 batches later: 2 x 1280 cycles at BM 256 (3 stages),
//   4 x 640 at BM 128 (5 stages), about 1.4 us for the copies to land in, against 1 to 2
//   tiles of lead (one of them spent behind the block barrier) before.
// - Registers: 384 threads at 168 registers each; setmaxnreg moves them to 72 for the
//   copiers (their 16 packed pixel positions, pointers and counters) and 216 for the wgmma
//   warps (160 accumulator registers at BM 256). ptxas reports no spills, except about 200
//   bytes in the split-K instantiation, all outside the K loop (the tile index of the
//   copiers, and the partial sums while the reduction's 40 loads per thread are in flight).
// - Expected speed: the tensor cores need 1280 cycles per BM 256 K tile; if the copies now keep
//   up, the math runs at the 580 to 660 TFLOP/s that cuDNN's kernels reach on these shapes
//   (about 90 to 105 us per 60 GFLOP call, against 119 to 135 us before). The first K tiles of
//   a block's next tile are in flight during its epilogue, which for the 128 x 128 case (two
//   tiles per block) hides one pipeline fill and one store of 80 KiB per block.
// - Split-K for the 32 x 32 layers: 128-row tiles (128 blocks) fetch 160 weight rows per 128
//   pixels, 472 MB of weight reads from L2 per 1280 -> 1280 call (20 KiB per K tile per
//   block), plus about 63 MB of activations: 535 MB, 4.5 TB/s at the 118.7 us measured. Two
//   blocks per 256 x 160 tile, each over half of K, fetch half the weight bytes (236 MB) and,
//   with 10 image rows of 32 pixels (40 KiB) per slice held in L1, about 52 MB of activations:
//   290 MB, 2.9 TB/s at 100 us. The price is the reduction: each block sends one warpgroup's
//   partial sums (128 x 160 fp32, 80 KiB) to the other through distributed shared memory and
//   stores the other 128 rows, once per call (a few microseconds at most against ~90 us of
//   K loop). The sums stay fp32 until the one rounding, as without the split.
// - Arithmetic intensity from L2: a 256 x 160 tile moves 53 KiB per 5.2 MFLOP (98 FLOP/byte,
//   about 5 TB/s of L2 traffic at the tensor cores' peak), 128 x 160 36 KiB per 2.6 MFLOP
//   (71 FLOP/byte, 7 TB/s at peak) if every copy came from L2. The activations do not all:
//   the nine taps of a channel slice are consecutive K tiles and gather overlapping rows
//   (shifted by one pixel or one image row), and their copies allocate in L1. For a 128-row
//   tile of a 32-wide image the slice's distinct rows are 6 image rows (24 KiB, within the
//   L1 left beside 181 KiB of shared memory) against 9 x 16 KiB gathered, so L2 sees about
//   23 KiB per K tile instead of 36 (112 FLOP/byte). The 256-row tiles' windows are 4 image
//   rows of 128 pixels (64 KiB) or 6 of 64 (48 KiB); the previous version's 4 stages (209 KiB)
//   left 28 KiB of L1, less than even the 32 KiB that the three taps of one filter row share,
//   so nearly all of the 9 x 32 KiB per slice came from L2: with B, 613 MB per call at 128 x
//   128 and at 64 x 64, 4.5 to 5 TB/s at the times measured (and 535 MB, 4.5 TB/s, at
//   32 x 32), which suggests L2 bandwidth, not the tensor cores, set those times. With 3
//   stages the windows fit in the 92 KiB of L1 and A's L2 traffic falls from 377 MB to 63
//   to 84 MB per call (300 to 320 MB in all, about 3.2 TB/s at 100 us). Shared memory: per
//   k16 step each warpgroup reads its A rows (2 KiB per m64) and all of B (5 KiB), under 90
//   bytes per clock at peak, within the SM's 128.
// - Padding costs nothing: a neighbour outside the image (the halo), a pixel past M or a
//   channel past C_in is a cp.async with source size 0, which reads nothing and writes zeros;
//   zero rows and columns add nothing to the sums. Rows past M and columns past C_out are not
//   stored.
// - Not done here, and where more speed would come from: sharing each weight stage
//   between blocks of a cluster (the kernel cannot be given a tensor map, so this needs either
//   weights pre-swizzled into a workspace by a first launch and multicast with 1-D bulk copies,
//   or st.shared::cluster from registers); gathering each channel slice's input rows once into
//   shared memory and reading the nine taps' A operands from it (wgmma with A from registers,
//   loaded by ldmatrix at shifted rows), instead of relying on L1.

#include <cuda_bf16.h>

namespace {

constexpr int kThreads = 384;           // a copying warpgroup, then two wgmma warpgroups
constexpr int kCopyThreads = 128;       // the copying warpgroup
constexpr int kProducerRegisters = 72;  // after setmaxnreg: 128 x 72 + 256 x 216 = 384 x 168
constexpr int kConsumerRegisters = 216;
constexpr int kBlockN = 160;       // output channels per block: the wgmma's N
constexpr int kBlockK = 64;        // K per stage: one tap, 64 channels
constexpr int kRowBytes = 128;     // a stage row: kBlockK bf16, one swizzle row
constexpr int kChunksPerRow = 8;   // 16-byte chunks per row
constexpr int kChunkElems = 8;     // bf16 per chunk
constexpr int kAtomBytes = 1024;   // 8 rows: one 128-byte swizzle atom
constexpr int kAccumulators = 80;  // fp32 registers of one m64n160 accumulator per thread

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

// mbarriers in shared memory (8 bytes each). init sets the number of arrivals that complete a
// phase; arrive is one of them (release at CTA scope); the cp.async form counts as an arrival
// once every cp.async this thread issued before it has landed (.noinc: the init count already
// includes it); try_wait.parity reports whether the phase of that parity has completed (acquire
// at CTA scope).
__device__ __forceinline__ void barrier_init(unsigned barrier, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(count) : "memory");
}

__device__ __forceinline__ void barrier_arrive(unsigned barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(barrier) : "memory");
}

__device__ __forceinline__ void barrier_arrive_on_copies(unsigned barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(barrier) : "memory");
}

__device__ __forceinline__ void barrier_wait(unsigned barrier, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred complete;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 complete, [%1], %2;\n"
        "selp.u32 %0, 1, 0, complete;\n"
        "}\n"
        : "=r"(done)
        : "r"(barrier), "r"(parity)
        : "memory");
  } while (done == 0);
}

// The pieces of the split-K reduction between the two blocks of a cluster (kSplitK). A
// barrier across both blocks (every thread arrives; release / acquire at cluster scope);
// mapa turns a shared::cta address into the same variable's shared::cluster address in block
// `rank` of the cluster; an arrive on, or a 16-byte load from, such an address; a wait that
// acquires at cluster scope (the arrivals it waits for come from the other block).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

__device__ __forceinline__ unsigned cluster_address(unsigned address, unsigned rank) {
  unsigned mapped;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(mapped) : "r"(address), "r"(rank));
  return mapped;
}

__device__ __forceinline__ void barrier_arrive_cluster(unsigned cluster_barrier) {
  asm volatile(
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_barrier)
      : "memory");
}

__device__ __forceinline__ void barrier_wait_cluster(unsigned barrier, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred complete;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 complete, [%1], %2;\n"
        "selp.u32 %0, 1, 0, complete;\n"
        "}\n"
        : "=r"(done)
        : "r"(barrier), "r"(parity)
        : "memory");
  } while (done == 0);
}

__device__ __forceinline__ float4 load_cluster_16(unsigned cluster_address) {
  float4 value;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(value.x), "=f"(value.y), "=f"(value.z), "=f"(value.w)
               : "r"(cluster_address)
               : "memory");
  return value;
}

__device__ __forceinline__ void store_shared_f32x4(unsigned destination, float a, float b, float c,
                                                   float d) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(destination), "f"(a), "f"(b),
               "f"(c), "f"(d)
               : "memory");
}

// Barrier 1 over the 256 threads of the two wgmma warpgroups (barrier 0 is __syncthreads).
__device__ __forceinline__ void sync_consumers() {
  asm volatile("bar.sync 1, 256;\n" ::: "memory");
}

// Hands registers back to the block's pool (the copying warpgroup) or takes them from it (the
// two wgmma warpgroups); every thread of a warpgroup executes the same one.
template <int kRegisters>
__device__ __forceinline__ void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

template <int kRegisters>
__device__ __forceinline__ void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
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

}  // namespace

// out: [batch, height, width, out_channels]; input: [batch, height, width, in_channels];
// weight: [out_channels, 3, 3, in_channels]; bias: [out_channels]; all bf16, contiguous.
// kVectorLoads requires in_channels % 8 == 0 (16-byte aligned pixels and weight rows). Launch:
// 384 threads, any number of blocks (each walks the kBlockM x 160 tiles of out blockIdx.x,
// blockIdx.x + gridDim.x, ...; column tiles fastest), dynamic shared memory
// kStages * (kBlockM + 160) * 128 + 1024 + 128. kSplitK (kBlockM 256, kVectorLoads): exactly
// 2 * tiles blocks in clusters of 2, blocks 2 c and 2 c + 1 computing tile c together.
template <int kBlockM, int kStages, bool kVectorLoads, bool kSplitK>
__global__ void __launch_bounds__(kThreads, 1)
    conv2d_3x3_kernel(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ input,
                      const __nv_bfloat16* __restrict__ weight,
                      const __nv_bfloat16* __restrict__ bias, int batch, int height, int width,
                      int in_channels, int out_channels) {
  constexpr int kTilesPerWarpgroup = kBlockM / 128;  // m64 accumulators per wgmma warpgroup
  constexpr int kWarpgroupRows = kBlockM / 2;
  constexpr int kStageBytes = (kBlockM + kBlockN) * kRowBytes;
  constexpr int kRowsPerPass = kCopyThreads / kChunksPerRow;  // rows one pass of copies covers
  constexpr int kASlots = kBlockM / kRowsPerPass;             // A chunks per copying thread
  constexpr int kBSlots = kBlockN / kRowsPerPass;             // B chunks per copying thread
  constexpr unsigned kConsumerWarps = 8;                      // arrivals that free a stage
  static_assert(kBlockM == 128 || kBlockM == 256, "one or two m64 tiles per warpgroup");
  static_assert(kBlockN % kRowsPerPass == 0, "B rows split evenly over the copying threads");
  static_assert(kStageBytes % kAtomBytes == 0, "every stage starts on a swizzle atom");
  static_assert(kStages >= 2, "one stage in the copies, one in the math");
  static_assert(
      !kSplitK || (kVectorLoads && kBlockM == 256 && 2 * 20 * 128 * 16 <= kStages * kStageBytes),
      "split-K: one warpgroup's partial sums (two m64 x 160 fp32) fit in the stages");

  // Stages, 1024-byte aligned in the shared window: kBlockM rows of A, then 160 rows of B; after
  // them the mbarriers, full[s] (the stage's copies landed) then empty[s] (its wgmmas are done).
  extern __shared__ __align__(16) unsigned char shared_storage[];
  const unsigned smem_base =
      (shared_address(shared_storage) + (kAtomBytes - 1)) & ~static_cast<unsigned>(kAtomBytes - 1);
  const unsigned full_barriers = smem_base + kStages * kStageBytes;
  const unsigned empty_barriers = full_barriers + kStages * 8;
  const unsigned ready_barrier = empty_barriers + kStages * 8;  // split-K: partials written
  const unsigned taken_barrier = ready_barrier + 8;             // split-K: partials read

  const int thread = static_cast<int>(threadIdx.x);
  if (thread == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(full_barriers + s * 8, kCopyThreads);
      barrier_init(empty_barriers + s * 8, kConsumerWarps);
    }
    if constexpr (kSplitK) {
      barrier_init(ready_barrier, 128);
      barrier_init(taken_barrier, 128);
    }
    fence_async_proxy();
  }
  if constexpr (kSplitK) {
    cluster_sync();  // both blocks' barriers are initialised before either arrives remotely
  } else {
    __syncthreads();
  }

  const int pixels = batch * height * width;
  const int tiles_n = (out_channels + kBlockN - 1) / kBlockN;
  const int tiles = (pixels + kBlockM - 1) / kBlockM * tiles_n;
  // Split-K: the two blocks of a cluster (blockIdx.x 2 c and 2 c + 1) compute tile c, block
  // `split` over the channel slices [first_slice, end_slice); the launch gives exactly
  // 2 * tiles blocks, so each block has one tile (the reduction reuses the stages).
  const int split = kSplitK ? static_cast<int>(blockIdx.x & 1u) : 0;
  const int first_tile = static_cast<int>(kSplitK ? blockIdx.x >> 1 : blockIdx.x);
  const int tile_stride = static_cast<int>(kSplitK ? gridDim.x >> 1 : gridDim.x);
  const int slices = (in_channels + kBlockK - 1) / kBlockK;
  const int half_slices = (slices + 1) / 2;
  const int first_slice = kSplitK && split == 1 ? half_slices : 0;
  const int end_slice = kSplitK && split == 0 ? half_slices : slices;
  const int k_tiles = 9 * (end_slice - first_slice);

  if (thread < kCopyThreads) {
    // The copying warpgroup: fills stage after stage, K tile after K tile, tile after tile,
    // waiting only for the stage it refills to be released by the wgmma warps.
    release_registers<kProducerRegisters>();
    const int chunk = thread % kChunksPerRow;      // the 16-byte chunk this thread copies
    const int first_row = thread / kChunksPerRow;  // its rows: first_row + i * kRowsPerPass
    const int weight_row = 9 * in_channels;        // elements per output channel
    int stage = 0;
    unsigned phase = 0;   // how many times `stage` has been filled, mod 2
    bool refill = false;  // true once every stage has been filled once
    for (int tile = first_tile; tile < tiles; tile += tile_stride) {
      const int m0 = tile / tiles_n * kBlockM;
      const int n0 = tile % tiles_n * kBlockN;
      // Image row (high 16 bits, signed) and column (low 16 bits) of each A row's pixel; an
      // impossible row for pixels past M, so every tap of them reads as padding.
      unsigned a_position[kASlots];
#pragma unroll
      for (int i = 0; i < kASlots; ++i) {
        const int pixel = m0 + first_row + i * kRowsPerPass;
        const int h = pixel < pixels ? pixel / width % height : -4;
        const int w = pixel % width;
        a_position[i] = (static_cast<unsigned>(h) << 16) | static_cast<unsigned>(w);
      }
      const int a_first = (m0 + first_row) * in_channels;  // element of this thread's first row
      const int b_first = (n0 + first_row) * weight_row;
      int slice = first_slice;
      int tap = 0;
      for (int k_tile = 0; k_tile < k_tiles; ++k_tile) {
        if (refill) barrier_wait(empty_barriers + stage * 8, phase ^ 1u);
        // K tile k_tile: channels [64 slice, + 64) at tap (dr, ds). The nine taps of a channel
        // slice are consecutive K tiles, so the input rows they share are still in L1.
        const int dr = tap / 3 - 1;
        const int ds = tap - (tap / 3) * 3 - 1;
        const int channel = slice * kBlockK + chunk * kChunkElems;
        const bool channel_in = channel < in_channels;
        const int a_shift = (dr * width + ds) * in_channels + channel;
        const int b_shift = tap * in_channels + channel;
        const unsigned stage_address = smem_base + static_cast<unsigned>(stage) * kStageBytes;
#pragma unroll
        for (int i = 0; i < kASlots; ++i) {
          const int ih = (static_cast<int>(a_position[i]) >> 16) + dr;
          const int iw = static_cast<int>(a_position[i] & 0xFFFFu) + ds;
          const bool inside = static_cast<unsigned>(ih) < static_cast<unsigned>(height) &&
                              static_cast<unsigned>(iw) < static_cast<unsigned>(width);
          const bool valid = inside && channel_in;
          const int offset = a_first + i * kRowsPerPass * in_channels + a_shift;
          const unsigned destination =
              stage_address + swizzled_offset(first_row + i * kRowsPerPass, chunk);
          if constexpr (kVectorLoads) {
            copy_async_16_l1(destination, valid ? input + offset : input, valid);
          } else {
            store_shared_16(destination, valid ? load_chunk_elementwise(input + (offset - channel),
                                                                        channel, in_channels)
                                               : make_uint4(0u, 0u, 0u, 0u));
          }
        }
#pragma unroll
        for (int j = 0; j < kBSlots; ++j) {
          const int row = first_row + j * kRowsPerPass;
          const bool valid = n0 + row < out_channels && channel_in;
          const int offset = b_first + j * kRowsPerPass * weight_row + b_shift;
          const unsigned destination =
              stage_address + kBlockM * kRowBytes + swizzled_offset(row, chunk);
          if constexpr (kVectorLoads) {
            copy_async_16_l2(destination, valid ? weight + offset : weight, valid);
          } else {
            store_shared_16(destination, valid ? load_chunk_elementwise(weight + (offset - channel),
                                                                        channel, in_channels)
                                               : make_uint4(0u, 0u, 0u, 0u));
          }
        }
        if constexpr (kVectorLoads) {
          barrier_arrive_on_copies(full_barriers + stage * 8);
        } else {
          barrier_arrive(full_barriers + stage * 8);
        }
        if (++tap == 9) {
          tap = 0;
          ++slice;
        }
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1u;
          refill = true;
        }
      }
    }
    if constexpr (kVectorLoads) {  // nothing in flight when the thread exits
      commit_copies();
      wait_copies<0>();
    }
    return;
  }

  // The two wgmma warpgroups: warpgroup g computes rows [g kBlockM / 2, (g + 1) kBlockM / 2) of
  // each tile, keeping one batch of wgmmas in flight while it waits for the next stage.
  claim_registers<kConsumerRegisters>();
  const int consumer = thread - kCopyThreads;
  const int warpgroup = consumer / 128;
  const int lane = consumer % 32;
  const int warp_in_group = (consumer % 128) / 32;
  const bool even_channels = out_channels % 2 == 0;
  int stage = 0;
  unsigned phase = 0;  // how many times `stage` has been consumed, mod 2
  float acc[kTilesPerWarpgroup][kAccumulators];
  for (int tile = first_tile; tile < tiles; tile += tile_stride) {
    const int m0 = tile / tiles_n * kBlockM;
    const int n0 = tile % tiles_n * kBlockN;
#pragma unroll
    for (int t = 0; t < kTilesPerWarpgroup; ++t) {
#pragma unroll
      for (int i = 0; i < kAccumulators; ++i) acc[t][i] = 0.0f;
    }
    int previous_stage = 0;
    for (int k_tile = 0; k_tile < k_tiles; ++k_tile) {
      barrier_wait(full_barriers + stage * 8, phase);
      fence_async_proxy();  // the copies (generic proxy) before this warpgroup's wgmma reads

      const unsigned stage_address = smem_base + static_cast<unsigned>(stage) * kStageBytes;
      const unsigned a_tile = stage_address + warpgroup * kWarpgroupRows * kRowBytes;
      const unsigned b_tile = stage_address + kBlockM * kRowBytes;
#pragma unroll
      for (int t = 0; t < kTilesPerWarpgroup; ++t) fence_accumulators(acc[t]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk) {
        const unsigned long long b_descriptor = matrix_descriptor(b_tile + kk * 32);
#pragma unroll
        for (int t = 0; t < kTilesPerWarpgroup; ++t) {
          wgmma_m64n160k16(acc[t], matrix_descriptor(a_tile + t * 64 * kRowBytes + kk * 32),
                           b_descriptor);
        }
      }
      wgmma_commit();
#pragma unroll
      for (int t = 0; t < kTilesPerWarpgroup; ++t) fence_accumulators(acc[t]);
      wgmma_wait<1>();  // this warpgroup's batch k_tile - 1 is done; batch k_tile may still run
#pragma unroll
      for (int t = 0; t < kTilesPerWarpgroup; ++t) fence_accumulators(acc[t]);
      if (k_tile > 0) {
        __syncwarp();
        if (lane == 0) barrier_arrive(empty_barriers + previous_stage * 8);
      }
      previous_stage = stage;
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1u;
      }
    }
    wgmma_wait<0>();
#pragma unroll
    for (int t = 0; t < kTilesPerWarpgroup; ++t) fence_accumulators(acc[t]);
    __syncwarp();
    if (lane == 0 && k_tiles > 0) barrier_arrive(empty_barriers + previous_stage * 8);

    if constexpr (kSplitK) {
      // Block `split` keeps warpgroup `split`'s rows and receives the other block's partial
      // sums of them; its other warpgroup sends its own rows' partial sums the other way. The
      // sender writes them into its own stages (free: every copy has landed and, after the
      // barrier, every wgmma of both warpgroups has completed), float4 j of thread c at
      // 16 (128 j + c) bytes, and arrives on the receiver's ready barrier; the receiver reads
      // them through distributed shared memory, adds them and arrives on the sender's taken
      // barrier, which keeps the sender's block (and its shared memory) alive until then.
      const unsigned peer = static_cast<unsigned>(split ^ 1);
      const unsigned own_slot = static_cast<unsigned>(consumer % 128) * 16;
      sync_consumers();
      if (warpgroup != split) {
#pragma unroll
        for (int t = 0; t < kTilesPerWarpgroup; ++t) {
#pragma unroll
          for (int q = 0; q < kAccumulators / 4; ++q) {
            store_shared_f32x4(smem_base + static_cast<unsigned>(t * 20 + q) * 128 * 16 + own_slot,
                               acc[t][4 * q], acc[t][4 * q + 1], acc[t][4 * q + 2],
                               acc[t][4 * q + 3]);
          }
        }
        barrier_arrive_cluster(cluster_address(ready_barrier, peer));
        barrier_wait_cluster(taken_barrier, 0);
        continue;  // the receiving block stores these rows
      }
      barrier_wait_cluster(ready_barrier, 0);
      const unsigned peer_partials = cluster_address(smem_base, peer);
#pragma unroll
      for (int t = 0; t < kTilesPerWarpgroup; ++t) {
#pragma unroll
        for (int q = 0; q < kAccumulators / 4; ++q) {
          const float4 partial = load_cluster_16(
              peer_partials + static_cast<unsigned>(t * 20 + q) * 128 * 16 + own_slot);
          acc[t][4 * q] += partial.x;
          acc[t][4 * q + 1] += partial.y;
          acc[t][4 * q + 2] += partial.z;
          acc[t][4 * q + 3] += partial.w;
        }
      }
      barrier_arrive_cluster(cluster_address(taken_barrier, peer));
    }

    // Epilogue (the copying warpgroup is already filling the stages of the next tile): bias in
    // fp32, one rounding to bf16. Thread l of warp w of the warpgroup holds rows
    // 16 w + l / 4 (+ 8) and columns 8 j + 2 (l % 4) (+ 1) of each m64 accumulator.
#pragma unroll
    for (int t = 0; t < kTilesPerWarpgroup; ++t) {
      const int row0 = m0 + warpgroup * kWarpgroupRows + t * 64 + warp_in_group * 16 + lane / 4;
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
}
