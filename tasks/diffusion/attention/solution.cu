// A correct, deliberately simple solution for diffusion/attention: the FlashAttention-2 schedule
// on the tensor cores through warp-wide WMMA operations (bf16 16 x 16 x 16 tiles with fp32
// accumulators). A block of 4 warps takes 64 query rows of one (sample, head), 16 rows a
// warp, and walks the keys in tiles of 64 staged in shared memory as bf16 (two stages, copied
// with cp.async while the previous tile is computed). Per tile and warp:
//
//   1. S = Q K^T (16 x 64, fp32) with wmma, the query fragments held in registers all along;
//      S is stored to the warp's slice of shared memory.
//   2. Online softmax in shared memory, two lanes a row: keys past the end masked to -inf,
//      new running maximum, p = 2^(s * scale * log2(e) - max), rounded to bf16 into shared
//      memory (P), the per-row factor that rescales what was accumulated so far.
//   3. O = factor * O + P V with wmma; O stays in 8 accumulator fragments (16 x 128, fp32).
//
// The WMMA operations are written as the PTX instructions nvcuda::wmma compiles to
// (wmma.load, wmma.mma, wmma.store), one small wrapper each: <mma.h> does not compile under the
// server's NVRTC options (its crt/mma.h includes "mma.hpp" by a path relative to itself, which
// --no-source-include turns off).
//
// The rescale in 3 needs each accumulator element's row, and WMMA leaves the element order of a
// fragment unspecified. So the kernel does not assume it: once, each warp loads a 16 x 16
// matrix whose entries are their own row numbers into an accumulator fragment, and element i
// of that fragment is the row of element i of every accumulator fragment of this lane.
//
// Simple rather than fast: every warp reads whole key and value tiles from shared memory through
// wmma loads, S and P make a round trip through shared memory, and the two block barriers a tile
// keep the warps in step (the reference uses wgmma with the softmax on registers instead). Right
// on every shape: any sequence length, head count and batch; query rows past the end are
// computed on zeros and not stored, keys past the end weigh exactly 0.
//
// Dynamic shared memory, 97536 bytes (two blocks an SM, which the 255 registers a thread that
// ptxas takes under __launch_bounds__(128, 2) also allow): two stages of a key and a value tile
// (64 rows of 136 bf16: 128 plus 8 of padding so the rows of a fragment fall on different banks;
// 4 x 17408 bytes), then per warp S (16 x 72 fp32, 4608 bytes), P (16 x 72 bf16, 2304 bytes)
// and the 16 row factors (64 bytes). The query tile passes through stage 1's key tile before the
// loop starts.
//
// clang-format off
// @launch attention_wmma<<<dim3(cdiv(seq_len, 64), num_heads, batch), 128, 97536>>>(out, query, key, value, scale, seq_len, num_heads)
// clang-format on

#include <cuda_bf16.h>

namespace {

using Bf16 = __nv_bfloat16;

constexpr int kHeadDim = 128;
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kEdge = 16;                       // a wmma tile is kEdge x kEdge (k = kEdge too)
constexpr int kWarpRows = kEdge;                // query rows per warp
constexpr int kBlockRows = kWarps * kWarpRows;  // query rows per block
constexpr int kTileKeys = 64;                   // keys (and values) per shared-memory tile
constexpr int kTilePitch = kHeadDim + 8;        // bf16 per staged row
constexpr int kScorePitch = kTileKeys + 8;      // fp32 per row of S
constexpr int kProbPitch = kTileKeys + 8;       // bf16 per row of P
constexpr int kTileBytes = kTileKeys * kTilePitch * 2;
constexpr int kScoreBytes = kWarps * kWarpRows * kScorePitch * 4;
constexpr int kProbBytes = kWarps * kWarpRows * kProbPitch * 2;
constexpr int kFactorBytes = kWarps * kWarpRows * 4;
constexpr int kScoreOffset = 4 * kTileBytes;  // two stages of a key and a value tile come first
constexpr int kProbOffset = kScoreOffset + kScoreBytes;
constexpr int kFactorOffset = kProbOffset + kProbBytes;
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kFactorOffset + kFactorBytes == 97536, "the launch directive's shared memory");
static_assert(kBlockRows == kTileKeys, "one tile loader for the query, key and value tiles");
static_assert(kScoreOffset % 128 == 0 && kProbOffset % 128 == 0 && kFactorOffset % 128 == 0,
              "wmma addresses must be 32-byte aligned");

// The WMMA fragments of a warp-wide 16 x 16 x 16 bf16 product, and the five operations on them
// this kernel uses, one PTX instruction each (what nvcuda::wmma's load_matrix_sync, mma_sync and
// store_matrix_sync compile to). Which matrix element a lane's register holds is unspecified,
// as in nvcuda::wmma; only the layout of the matrix in memory is given (row- or column-major,
// `stride` elements between rows or columns). All addresses are shared memory, 32-byte aligned.
struct QueryFragment {  // A operand (Q, or P), row-major: 8 bf16 a lane, in pairs
  unsigned x[4];
};
struct KeyFragment {  // B operand read column-major: K^T's element (d, j) at tile[j * stride + d]
  unsigned x[4];
};
struct ValueFragment {  // B operand read row-major: V's element (j, d) at tile[j * stride + d]
  unsigned x[4];
};
struct Accumulator {  // 16 x 16 fp32
  static constexpr int kElements = 8;
  float x[kElements];
};

__device__ __forceinline__ unsigned shared_address(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

__device__ __forceinline__ void load_fragment(QueryFragment& a, const Bf16* tile, int stride) {
  asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(a.x[0]), "=r"(a.x[1]), "=r"(a.x[2]), "=r"(a.x[3])
               : "r"(shared_address(tile)), "r"(stride)
               : "memory");
}

__device__ __forceinline__ void load_fragment(KeyFragment& b, const Bf16* tile, int stride) {
  asm volatile("wmma.load.b.sync.aligned.col.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(b.x[0]), "=r"(b.x[1]), "=r"(b.x[2]), "=r"(b.x[3])
               : "r"(shared_address(tile)), "r"(stride)
               : "memory");
}

__device__ __forceinline__ void load_fragment(ValueFragment& b, const Bf16* tile, int stride) {
  asm volatile("wmma.load.b.sync.aligned.row.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(b.x[0]), "=r"(b.x[1]), "=r"(b.x[2]), "=r"(b.x[3])
               : "r"(shared_address(tile)), "r"(stride)
               : "memory");
}

// A row-major fp32 16 x 16 matrix into an accumulator.
__device__ __forceinline__ void load_fragment(Accumulator& c, const float* tile, int stride) {
  asm volatile(
      "wmma.load.c.sync.aligned.row.m16n16k16.shared.f32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, [%8], %9;\n"
      : "=f"(c.x[0]), "=f"(c.x[1]), "=f"(c.x[2]), "=f"(c.x[3]), "=f"(c.x[4]), "=f"(c.x[5]),
        "=f"(c.x[6]), "=f"(c.x[7])
      : "r"(shared_address(tile)), "r"(stride)
      : "memory");
}

// An accumulator out to a row-major fp32 16 x 16 matrix.
__device__ __forceinline__ void store_fragment(float* tile, const Accumulator& c, int stride) {
  asm volatile(
      "wmma.store.d.sync.aligned.row.m16n16k16.shared.f32 "
      "[%0], {%1, %2, %3, %4, %5, %6, %7, %8}, %9;\n" ::"r"(shared_address(tile)),
      "f"(c.x[0]), "f"(c.x[1]), "f"(c.x[2]), "f"(c.x[3]), "f"(c.x[4]), "f"(c.x[5]), "f"(c.x[6]),
      "f"(c.x[7]), "r"(stride)
      : "memory");
}

__device__ __forceinline__ void fill_fragment(Accumulator& c, float value) {
#pragma unroll
  for (int i = 0; i < Accumulator::kElements; ++i) c.x[i] = value;
}

// d += a b for a row-major A and a column-major B (S += Q K^T).
__device__ __forceinline__ void mma(Accumulator& d, const QueryFragment& a, const KeyFragment& b) {
  asm("wmma.mma.sync.aligned.row.col.m16n16k16.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, {%12, %13, %14, %15}, "
      "{%0, %1, %2, %3, %4, %5, %6, %7};\n"
      : "+f"(d.x[0]), "+f"(d.x[1]), "+f"(d.x[2]), "+f"(d.x[3]), "+f"(d.x[4]), "+f"(d.x[5]),
        "+f"(d.x[6]), "+f"(d.x[7])
      : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]), "r"(b.x[2]),
        "r"(b.x[3]));
}

// d += a b for a row-major A and a row-major B (O += P V).
__device__ __forceinline__ void mma(Accumulator& d, const QueryFragment& a,
                                    const ValueFragment& b) {
  asm("wmma.mma.sync.aligned.row.row.m16n16k16.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, {%12, %13, %14, %15}, "
      "{%0, %1, %2, %3, %4, %5, %6, %7};\n"
      : "+f"(d.x[0]), "+f"(d.x[1]), "+f"(d.x[2]), "+f"(d.x[3]), "+f"(d.x[4]), "+f"(d.x[5]),
        "+f"(d.x[6]), "+f"(d.x[7])
      : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]), "r"(b.x[2]),
        "r"(b.x[3]));
}

__device__ float negative_infinity() { return __int_as_float(0xff800000); }

// 16-byte global -> shared copy; with `valid` false nothing is read and zeros are written
// (`source` must still be a mapped address).
__device__ __forceinline__ void copy_async_16(void* destination, const void* source, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(destination)),
               "l"(source), "r"(valid ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `kPending` of this thread's committed copy groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Copies rows [first_row, first_row + 64) of one head (row r at head + r * row_stride, 128
// contiguous bf16) into `tile` (rows of kTilePitch); rows at or past seq_len become zeros.
// Sixteen consecutive threads copy one 256-byte row.
__device__ __forceinline__ void load_tile(Bf16* tile, const Bf16* head, int first_row, int seq_len,
                                          long long row_stride) {
  const int chunk = static_cast<int>(threadIdx.x) % 16;  // 8 bf16 = 16 bytes
#pragma unroll
  for (int i = 0; i < kTileKeys / (kThreads / 16); ++i) {
    const int r = static_cast<int>(threadIdx.x) / 16 + i * (kThreads / 16);
    const bool inside = first_row + r < seq_len;
    const Bf16* source = inside ? head + (first_row + r) * row_stride + chunk * 8 : head;
    copy_async_16(tile + r * kTilePitch + chunk * 8, source, inside);
  }
}

}  // namespace

// out, query, key, value: [batch, seq_len, num_heads, 128] bf16, row-major.
extern "C" __global__ void __launch_bounds__(kThreads, 2)
    attention_wmma(Bf16* __restrict__ out, const Bf16* __restrict__ query,
                   const Bf16* __restrict__ key, const Bf16* __restrict__ value, float scale,
                   int seq_len, int num_heads) {
  extern __shared__ __align__(128) unsigned char shared[];
  Bf16* const tiles = reinterpret_cast<Bf16*>(shared);  // stage s: keys 2 s, values 2 s + 1
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  float* const scores =
      reinterpret_cast<float*>(shared + kScoreOffset) + warp * kWarpRows * kScorePitch;
  Bf16* const probs = reinterpret_cast<Bf16*>(shared + kProbOffset) + warp * kWarpRows * kProbPitch;
  float* const factors = reinterpret_cast<float*>(shared + kFactorOffset) + warp * kWarpRows;

  const long long row_stride = static_cast<long long>(num_heads) * kHeadDim;
  const long long head_offset =
      (static_cast<long long>(blockIdx.z) * seq_len * num_heads + blockIdx.y) * kHeadDim;
  const Bf16* const key_head = key + head_offset;
  const Bf16* const value_head = value + head_offset;
  const int first_query = static_cast<int>(blockIdx.x) * kBlockRows;
  const int num_tiles = (seq_len + kTileKeys - 1) / kTileKeys;

  // The query tile goes to stage 1's key tile (free until key tile 1 is copied), key and value
  // tile 0 to stage 0.
  load_tile(tiles + 2 * kTileKeys * kTilePitch, query + head_offset, first_query, seq_len,
            row_stride);
  load_tile(tiles, key_head, 0, seq_len, row_stride);
  load_tile(tiles + kTileKeys * kTilePitch, value_head, 0, seq_len, row_stride);
  commit_copies();
  wait_copies<0>();
  __syncthreads();

  QueryFragment q[kHeadDim / kEdge];  // this warp's 16 query rows, all 128 dimensions
  const Bf16* const query_rows = tiles + (2 * kTileKeys + warp * kWarpRows) * kTilePitch;
#pragma unroll
  for (int k = 0; k < kHeadDim / kEdge; ++k) {
    load_fragment(q[k], query_rows + k * kEdge, kTilePitch);
  }

  // row_of[i]: the row (0..15) of element i of this lane's accumulator fragments, read from a
  // fragment loaded from a matrix of row numbers (built in this warp's S slice).
  for (int e = lane; e < kEdge * kEdge; e += 32) {
    scores[(e / kEdge) * kScorePitch + e % kEdge] = static_cast<float>(e / kEdge);
  }
  __syncwarp();
  int row_of[Accumulator::kElements];
  {
    Accumulator rows;
    load_fragment(rows, scores, kScorePitch);
#pragma unroll
    for (int i = 0; i < Accumulator::kElements; ++i) row_of[i] = static_cast<int>(rows.x[i]);
  }

  Accumulator o[kHeadDim / kEdge];  // 16 x 128, unnormalised
#pragma unroll
  for (int n = 0; n < kHeadDim / kEdge; ++n) fill_fragment(o[n], 0.0f);

  // Softmax state of this lane's row (two lanes a row, each owning half of every tile's
  // columns): the running maximum in log2 units (identical in both lanes) and this lane's share
  // of the running sum of the weights.
  const int row = lane / 2;
  const int half = lane % 2;
  float row_max = negative_infinity();
  float row_sum = 0.0f;
  const float scale_log2 = scale * kLog2e;

  __syncthreads();  // every warp has its query fragments before key tile 1 overwrites them

  for (int t = 0; t < num_tiles; ++t) {
    const int stage = t % 2;
    if (t + 1 < num_tiles) {
      Bf16* const next = tiles + 2 * (1 - stage) * kTileKeys * kTilePitch;
      load_tile(next, key_head, (t + 1) * kTileKeys, seq_len, row_stride);
      load_tile(next + kTileKeys * kTilePitch, value_head, (t + 1) * kTileKeys, seq_len,
                row_stride);
      commit_copies();
      wait_copies<1>();  // tile t's group has landed; tile t + 1's may still be in flight
    } else {
      wait_copies<0>();
    }
    __syncthreads();  // every thread's copies of tile t are visible
    const Bf16* const keys = tiles + 2 * stage * kTileKeys * kTilePitch;
    const Bf16* const values = keys + kTileKeys * kTilePitch;

    // 1. S = Q K^T, 16 keys at a time.
#pragma unroll
    for (int n = 0; n < kTileKeys / kEdge; ++n) {
      Accumulator s;
      fill_fragment(s, 0.0f);
#pragma unroll
      for (int k = 0; k < kHeadDim / kEdge; ++k) {
        KeyFragment key_t;
        load_fragment(key_t, keys + n * kEdge * kTilePitch + k * kEdge, kTilePitch);
        mma(s, q[k], key_t);
      }
      store_fragment(scores + n * kEdge, s, kScorePitch);
    }
    __syncwarp();

    // 2. Online softmax of row `row`: this lane takes the 4-column groups 2 c + half.
    const int keys_left = seq_len - t * kTileKeys;  // >= 1: the tile holds at least one key
    const float* const score_row = scores + row * kScorePitch;
    float x[kTileKeys / 2];
    float tile_max = negative_infinity();
#pragma unroll
    for (int c = 0; c < kTileKeys / 8; ++c) {
      const int column = 8 * c + 4 * half;
      const float4 s4 = *reinterpret_cast<const float4*>(score_row + column);
      x[4 * c + 0] = s4.x * scale_log2;
      x[4 * c + 1] = s4.y * scale_log2;
      x[4 * c + 2] = s4.z * scale_log2;
      x[4 * c + 3] = s4.w * scale_log2;
      if (keys_left < kTileKeys) {  // the last tile: keys past the end weigh nothing
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (column + e >= keys_left) x[4 * c + e] = negative_infinity();
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) tile_max = fmaxf(tile_max, x[4 * c + e]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float new_max = fmaxf(row_max, tile_max);  // finite: the tile has a key
    const float factor = exp2f(row_max - new_max);   // 2^-inf = 0 on the first tile
    row_max = new_max;
    float tile_sum = 0.0f;
    Bf16* const prob_row = probs + row * kProbPitch;
#pragma unroll
    for (int c = 0; c < kTileKeys / 8; ++c) {
      const int column = 8 * c + 4 * half;
      const __nv_bfloat162 p01 =
          __floats2bfloat162_rn(exp2f(x[4 * c + 0] - new_max), exp2f(x[4 * c + 1] - new_max));
      const __nv_bfloat162 p23 =
          __floats2bfloat162_rn(exp2f(x[4 * c + 2] - new_max), exp2f(x[4 * c + 3] - new_max));
      // The sum takes the weights as rounded, the ones the value product uses.
      tile_sum += (__low2float(p01) + __high2float(p01)) + (__low2float(p23) + __high2float(p23));
      *reinterpret_cast<__nv_bfloat162*>(prob_row + column) = p01;
      *reinterpret_cast<__nv_bfloat162*>(prob_row + column + 2) = p23;
    }
    row_sum = row_sum * factor + tile_sum;
    if (half == 0) factors[row] = factor;
    __syncwarp();

    // 3. O = factor * O + P V.
    float element_factor[Accumulator::kElements];
#pragma unroll
    for (int i = 0; i < Accumulator::kElements; ++i) element_factor[i] = factors[row_of[i]];
#pragma unroll
    for (int n = 0; n < kHeadDim / kEdge; ++n) {
#pragma unroll
      for (int i = 0; i < Accumulator::kElements; ++i) o[n].x[i] *= element_factor[i];
    }
#pragma unroll
    for (int k = 0; k < kTileKeys / kEdge; ++k) {
      QueryFragment p;  // P, this warp's 16 rows by 16 keys
      load_fragment(p, probs + k * kEdge, kProbPitch);
#pragma unroll
      for (int n = 0; n < kHeadDim / kEdge; ++n) {
        ValueFragment v;
        load_fragment(v, values + k * kEdge * kTilePitch + n * kEdge, kTilePitch);
        mma(o[n], p, v);
      }
    }
    __syncthreads();  // stage `stage` is copied over by the next iteration
  }

  // Normalise and write: 64 columns at a time through this warp's S slice; each lane converts
  // 32 columns of its row to bf16 and stores them in 16-byte pieces.
  const float total = row_sum + __shfl_xor_sync(0xffffffffu, row_sum, 1);  // >= 1
  const float inverse = 1.0f / total;
  const int query_row = first_query + warp * kWarpRows + row;
#pragma unroll
  for (int part = 0; part < 2; ++part) {
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      store_fragment(scores + n * kEdge, o[4 * part + n], kScorePitch);
    }
    __syncwarp();
    if (query_row < seq_len) {
      const float* const source = scores + row * kScorePitch + 32 * half;
      Bf16* const destination = out + head_offset + query_row * row_stride + 64 * part + 32 * half;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float4 a = *reinterpret_cast<const float4*>(source + 8 * c);
        const float4 b = *reinterpret_cast<const float4*>(source + 8 * c + 4);
        __align__(16) __nv_bfloat162 packed[4];
        packed[0] = __floats2bfloat162_rn(a.x * inverse, a.y * inverse);
        packed[1] = __floats2bfloat162_rn(a.z * inverse, a.w * inverse);
        packed[2] = __floats2bfloat162_rn(b.x * inverse, b.y * inverse);
        packed[3] = __floats2bfloat162_rn(b.z * inverse, b.w * inverse);
        *reinterpret_cast<uint4*>(destination + 8 * c) = *reinterpret_cast<const uint4*>(packed);
      }
    }
    __syncwarp();  // the slice is overwritten by the next part
  }
}
