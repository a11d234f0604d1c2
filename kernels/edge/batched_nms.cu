// Reference for edge/batched_nms: torchvision.ops.batched_nms(boxes, scores, idxs, iou_threshold)
// on detector candidates, fp32 boxes and scores, int64 groups (class, or image * classes + class):
//
//   visit the boxes by decreasing score; keep a box unless a kept box of its group overlaps it
//   with IoU > iou_threshold; keep[0 .. num_kept-1] = the kept indices by decreasing score
//   (equal scores: lower index first), keep[num_kept ..] = -1, num_kept[0] = the count.
//
// Launch plan (six kernels; W = cdiv(num_boxes, 64) words of 64 boxes):
//   1. nms_sort_chunks: each chunk of 1024 boxes sorted in shared memory (bitonic) by the key
//      (group, score descending, index): boxes of one group become contiguous, in greedy order.
//   2. nms_merge: a box's place in the whole order is its place in its chunk plus, for every
//      other chunk, how many of that chunk's keys are smaller (a binary search): the boxes are
//      scattered into that "group-major" order.
//   3. nms_mask: torchvision's bitmask, in group-major order: bit k of word (row, c) says box
//      64c + k lies in row's group, after it, with IoU > threshold. Groups are contiguous, so
//      only the tiles a group spans are computed: the diagonal tile and the few after it, the
//      tiles of a row block dealt over 16 blocks (one long group spreads over the GPU).
//   4. nms_scan: the greedy pass. Runs of 64-box chunks joined by a group that crosses their
//      boundary ("segments") are independent; one block of 256 threads scans each segment,
//      chunk by chunk, its removed words in shared memory: warp 0 finds the chunk's survivors
//      from its diagonal words in registers (ffs + shuffle, one step per kept box; the next
//      chunk's diagonal words load meanwhile), then all threads OR the kept rows' words of the
//      later chunks their group reaches into the removed words (up to 1024 independent L2 loads
//      in flight a pass, 32-bit shared atomics).
//   5. nms_compact: the kept boxes' keys gathered in one block (popcount prefix sums over the
//      kept words, then a warp a word, a lane two of its boxes: one L2 round trip a word).
//   6. nms_emit: each kept box's output position is the number of kept keys below its own (the
//      key orders by score, then index); the rest of keep is -1.
//
// Expected cost on the H200 (L2 round trip ~0.3 us, a __syncthreads ~0.03 us, a greedy step
// ~70 cycles), from the generator's inputs (segments and kept counts counted on drawn cases):
// - nms_scan costs per chunk of its longest segment about 2 barriers + K greedy steps (K kept
//   boxes in the chunk, ~13) + one pass of loads where the group reaches on: ~1700 cycles,
//   0.85 us. val_b1_8400: one group spans the image, a segment of ~131 chunks: ~110 us.
//   rtdetr_b8_300: images of 300 boxes do not end on chunk boundaries, segments of 14 to 30
//   chunks: ~25 us.
//   predict_b16_384: images of 384 = 6 x 64 boxes, segments of at most 6 chunks: ~5 us.
//   predict_b1_512: 8 chunks: ~7 us.
// - nms_mask: one long group of 8400 boxes is 131 x 132 / 2 = 8.6 k tiles of 64 x 64 IoUs at
//   ~30 instructions each over 132 SMs: ~35 us; tens-of-box groups: 2-3 tiles a row block,
//   ~3 us.
// - nms_sort_chunks: 55 bitonic stages of a barrier each: ~5-10 us. nms_merge: (chunks - 1)
//   binary searches of 10 dependent loads: 1 us at 512 boxes, ~15 us at 6144, ~25 us at 8400.
// - nms_compact + nms_emit: a few us (the compact's 32 warps take ~4 words each at 8400
//   boxes; the emit counts ~1700 kept keys over 8 warps, ~210 L1 hits a warp).
// Totals: predict_b1_512 ~20 us, predict_b16_384 ~40 us, rtdetr_b8_300 ~50 us,
// val_b1_8400 ~180 us.
//
// @workspace sort_keys u64[cdiv(num_boxes, 1024) * 2048]
// @workspace sorted_boxes float4[num_boxes]
// @workspace sorted_groups i64[num_boxes]
// @workspace sorted_keys u64[num_boxes]
// @workspace overlap u64[num_boxes * cdiv(num_boxes, 64)]
// @workspace kept_bits u64[cdiv(num_boxes, 64)]
// @workspace kept_keys u64[num_boxes]
// @launch nms_sort_chunks<<<cdiv(num_boxes, 1024), 512>>>(sort_keys, scores, idxs, num_boxes)
// @launch nms_merge<<<cdiv(num_boxes, 1024) * 4, 256>>>(sorted_boxes, sorted_groups,
//   sorted_keys, sort_keys, boxes, num_boxes)
// @launch nms_mask<<<dim3(cdiv(num_boxes, 64), 16), 64>>>(overlap, sorted_boxes, sorted_groups,
//   iou_threshold, num_boxes)
// @launch nms_scan<<<cdiv(num_boxes, 64), 256, cdiv(num_boxes, 64) * 24>>>(kept_bits, overlap,
//   sorted_groups, num_boxes)
// @launch nms_compact<<<1, 1024>>>(kept_keys, num_kept, kept_bits, sorted_keys, num_boxes)
// @launch nms_emit<<<cdiv(num_boxes, 32), 256>>>(keep, kept_keys, num_kept, num_boxes)
//
// Design notes:
// - torchvision sorts all boxes, fills the full upper-triangular mask (N^2 / 2 IoUs) and reduces
//   it one box at a time. Sorting by group first makes the mask block-diagonal: a detector's
//   groups hold tens of boxes, so the mask costs about 64 IoUs a box and the greedy pass runs
//   one independent segment per block. One group of every box is still right: one long segment
//   (its shared memory is 24 bytes a chunk: 4.5 KiB at 12000 boxes).
// - Keys are unique (the index is in them), so every sort and rank is a permutation and the
//   result is deterministic. Scores order through their IEEE bits flipped to unsigned order.
// - Workspace contents are unspecified at the start of a call: every word a kernel reads is
//   written earlier in the same call (the mask tiles read are exactly the tiles written: a kept
//   row's words are read up to the last chunk its group reaches; the removed words are in
//   shared memory, zeroed by the segment's block).
// - IoU in fp32 as torchvision computes it (no +1 pixel); two zero-area boxes give 0 / 0, a NaN
//   that compares false, so they never suppress each other.

namespace {

constexpr int kChunk = 1024;       // boxes a block sorts in nms_sort_chunks
constexpr int kMaskSlices = 16;    // gridDim.y of nms_mask: column tiles a row block shares
constexpr int kScanThreads = 256;  // blockDim.x of nms_scan
constexpr int kScanUnroll = 4;     // overlap loads a thread of nms_scan keeps in flight
constexpr unsigned long long kPadKey = ~0ULL;
constexpr unsigned long long kSignBit = 1ULL << 63;

struct Key {
  unsigned long long group;  // idxs with the sign bit flipped: unsigned order is signed order
  unsigned long long rest;   // (score bits flipped to descending order) << 32 | index
};

__device__ __forceinline__ bool key_less(const Key& a, const Key& b) {
  return a.group < b.group || (a.group == b.group && a.rest < b.rest);
}

// Larger scores give smaller values; equal scores tie here and the index decides.
__device__ __forceinline__ unsigned int descending_score_bits(float score) {
  const unsigned int bits = __float_as_uint(score);
  const unsigned int ascending = bits ^ ((bits & 0x80000000u) ? 0xFFFFFFFFu : 0x80000000u);
  return ~ascending;
}

__device__ __forceinline__ bool overlaps(const float4& a, float area_a, const float4& b,
                                         float area_b, float threshold) {
  const float w = fmaxf(fminf(a.z, b.z) - fmaxf(a.x, b.x), 0.0f);
  const float h = fmaxf(fminf(a.w, b.w) - fmaxf(a.y, b.y), 0.0f);
  const float inter = w * h;
  return inter / (area_a + area_b - inter) > threshold;
}

__device__ __forceinline__ float area_of(const float4& b) { return (b.z - b.x) * (b.w - b.y); }

}  // namespace

// 1. Sorts chunk blockIdx.x (1024 keys, padded with kPadKey) in shared memory.
extern "C" __global__ void __launch_bounds__(512)
    nms_sort_chunks(unsigned long long* __restrict__ sort_keys, const float* __restrict__ scores,
                    const long long* __restrict__ idxs, int num_boxes) {
  __shared__ Key keys[kChunk];
  const int base = blockIdx.x * kChunk;
  for (int p = threadIdx.x; p < kChunk; p += blockDim.x) {
    const int box = base + p;
    Key key{kPadKey, kPadKey};
    if (box < num_boxes) {
      key.group = static_cast<unsigned long long>(idxs[box]) ^ kSignBit;
      key.rest = (static_cast<unsigned long long>(descending_score_bits(scores[box])) << 32) |
                 static_cast<unsigned int>(box);
    }
    keys[p] = key;
  }
  __syncthreads();
  // Bitonic network: thread t owns the pair (i, i + j), i = t with a zero bit inserted at j.
  for (int k = 2; k <= kChunk; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      const int t = threadIdx.x;
      const int i = 2 * t - (t & (j - 1));
      const bool ascending = (i & k) == 0;
      const Key a = keys[i];
      const Key b = keys[i + j];
      if (key_less(b, a) == ascending) {
        keys[i] = b;
        keys[i + j] = a;
      }
      __syncthreads();
    }
  }
  for (int p = threadIdx.x; p < kChunk; p += blockDim.x) {
    sort_keys[2 * (base + p)] = keys[p].group;
    sort_keys[2 * (base + p) + 1] = keys[p].rest;
  }
}

// 2. Ranks every sorted key among all chunks and scatters its box to that rank.
extern "C" __global__ void __launch_bounds__(256)
    nms_merge(float4* __restrict__ sorted_boxes, long long* __restrict__ sorted_groups,
              unsigned long long* __restrict__ sorted_keys,
              const unsigned long long* __restrict__ sort_keys, const float* __restrict__ boxes,
              int num_boxes) {
  const int slot = blockIdx.x * blockDim.x + threadIdx.x;
  const int chunks = (num_boxes + kChunk - 1) / kChunk;
  if (slot >= chunks * kChunk) return;
  const Key key{sort_keys[2 * slot], sort_keys[2 * slot + 1]};
  if (key.rest == kPadKey) return;
  const int own = slot / kChunk;
  int rank = slot - own * kChunk;
  for (int c = 0; c < chunks; ++c) {
    if (c == own) continue;
    const unsigned long long* chunk = sort_keys + 2 * c * kChunk;
    int lo = 0, hi = kChunk;  // keys of chunk c below `key`: the first position not below it
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      const Key probe{chunk[2 * mid], chunk[2 * mid + 1]};
      if (key_less(probe, key)) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    rank += lo;
  }
  const unsigned int box = static_cast<unsigned int>(key.rest);
  sorted_boxes[rank] = reinterpret_cast<const float4*>(boxes)[box];
  sorted_groups[rank] = static_cast<long long>(key.group ^ kSignBit);
  sorted_keys[rank] = key.rest;
}

// 3. Overlap words of row block blockIdx.x against column blocks r + y, r + y + 4, ... while the
// last row's group reaches into the column block (groups ascend, so once it does not, no later
// block does either).
extern "C" __global__ void __launch_bounds__(64)
    nms_mask(unsigned long long* __restrict__ overlap, const float4* __restrict__ sorted_boxes,
             const long long* __restrict__ sorted_groups, float iou_threshold, int num_boxes) {
  __shared__ float4 column_box[64];
  __shared__ float column_area[64];
  __shared__ long long column_group[64];
  const int words = (num_boxes + 63) / 64;
  const int r = blockIdx.x;
  const int row = r * 64 + threadIdx.x;
  const long long last_group = sorted_groups[min(r * 64 + 63, num_boxes - 1)];
  float4 row_box = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  long long row_group = 0;
  if (row < num_boxes) {
    row_box = sorted_boxes[row];
    row_group = sorted_groups[row];
  }
  const float row_area = area_of(row_box);
  for (int c = r + blockIdx.y; c < words; c += kMaskSlices) {
    if (c > r && sorted_groups[c * 64] != last_group) break;
    const int col = c * 64 + threadIdx.x;
    __syncthreads();  // the previous tile is no longer read
    if (col < num_boxes) {
      column_box[threadIdx.x] = sorted_boxes[col];
      column_area[threadIdx.x] = area_of(column_box[threadIdx.x]);
      column_group[threadIdx.x] = sorted_groups[col];
    }
    __syncthreads();
    if (row >= num_boxes) continue;
    const int count = min(64, num_boxes - c * 64);
    const int first = c == r ? threadIdx.x + 1 : 0;  // only boxes after the row
    unsigned long long word = 0;
    for (int k = first; k < count; ++k) {
      if (column_group[k] == row_group &&
          overlaps(row_box, row_area, column_box[k], column_area[k], iou_threshold)) {
        word |= 1ULL << k;
      }
    }
    overlap[static_cast<long long>(row) * words + c] = word;
  }
}

// 4. One block per segment: chunk r starts one unless a group crosses from chunk r - 1. The
// segment's removed words live in shared memory. Per chunk, warp 0 resolves the chunk's own
// greedy from its diagonal words (prefetched one chunk ahead) in registers, then every thread
// ORs the kept rows' words of the later chunks their group reaches into the removed words, the
// loads of one pass all in flight together.
extern "C" __global__ void __launch_bounds__(kScanThreads)
    nms_scan(unsigned long long* __restrict__ kept_bits,
             const unsigned long long* __restrict__ overlap,
             const long long* __restrict__ sorted_groups, int num_boxes) {
  extern __shared__ unsigned long long segment[];  // 24 bytes a chunk of the segment
  __shared__ int end_chunk;
  __shared__ int kept_count;
  __shared__ int kept_rows[64];
  const int words = (num_boxes + 63) / 64;
  const int r = blockIdx.x;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if (r > 0 && sorted_groups[r * 64 - 1] == sorted_groups[r * 64]) return;
  if (threadIdx.x == 0) end_chunk = words;
  __syncthreads();
  for (int c = r + 1 + threadIdx.x; c < words; c += kScanThreads) {
    if (sorted_groups[c * 64 - 1] != sorted_groups[c * 64]) {
      atomicMin(&end_chunk, c);
      break;
    }
  }
  __syncthreads();
  const int length = end_chunk - r;
  unsigned long long* removed = segment;                                    // [length]
  long long* first_group = reinterpret_cast<long long*>(segment + length);  // [length]
  int* reach = reinterpret_cast<int*>(segment + 2 * length);                // [length]
  for (int i = threadIdx.x; i < length; i += kScanThreads) {
    removed[i] = 0;
    first_group[i] = sorted_groups[(r + i) * 64];
  }
  __syncthreads();
  // reach[i]: the last chunk of the segment that chunk i's last group reaches (i if none): the
  // first groups of later chunks ascend, so a binary search finds the first one past it.
  for (int i = threadIdx.x; i < length; i += kScanThreads) {
    const long long last_group = sorted_groups[min((r + i) * 64 + 63, num_boxes - 1)];
    int lo = i + 1, hi = length;
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (first_group[mid] <= last_group) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    reach[i] = lo - 1;
  }
  unsigned long long diagonal_low = 0, diagonal_high = 0;
  if (warp == 0) {
    const int rows = min(64, num_boxes - r * 64);
    if (lane < rows) diagonal_low = overlap[static_cast<long long>(r * 64 + lane) * words + r];
    if (lane + 32 < rows) {
      diagonal_high = overlap[static_cast<long long>(r * 64 + 32 + lane) * words + r];
    }
  }
  __syncthreads();
  for (int i = 0; i < length; ++i) {
    const int c = r + i;
    const int row0 = c * 64;
    if (warp == 0) {
      // The next chunk's diagonal words load while this chunk resolves.
      unsigned long long next_low = 0, next_high = 0;
      if (i + 1 < length) {
        const int next_rows = min(64, num_boxes - row0 - 64);
        if (lane < next_rows) {
          next_low = overlap[static_cast<long long>(row0 + 64 + lane) * words + c + 1];
        }
        if (lane + 32 < next_rows) {
          next_high = overlap[static_cast<long long>(row0 + 96 + lane) * words + c + 1];
        }
      }
      const int rows = min(64, num_boxes - row0);
      const unsigned long long valid = rows == 64 ? ~0ULL : (1ULL << rows) - 1;
      // Greedy inside the chunk: the first live box is kept and removes what it overlaps.
      unsigned long long live = valid & ~removed[i];
      unsigned long long kept = 0;
      while (live != 0) {
        const int t = __ffsll(static_cast<long long>(live)) - 1;
        kept |= 1ULL << t;
        const unsigned long long word =
            __shfl_sync(0xFFFFFFFFu, t < 32 ? diagonal_low : diagonal_high, t & 31);
        live &= ~word & ~(1ULL << t);
      }
      if ((kept >> lane) & 1ULL) kept_rows[__popcll(kept & ((1ULL << lane) - 1))] = lane;
      if ((kept >> (lane + 32)) & 1ULL) {
        kept_rows[__popcll(kept & ((1ULL << (lane + 32)) - 1))] = lane + 32;
      }
      if (lane == 0) {
        kept_count = __popcll(kept);
        kept_bits[c] = kept;
      }
      diagonal_low = next_low;
      diagonal_high = next_high;
    }
    __syncthreads();
    // Item = (kept row, later chunk), the later chunk fastest: kScanUnroll loads a thread in
    // flight, then the nonzero words ORed into the removed words (32-bit shared atomics).
    const int later = reach[i] - i;
    const int items = kept_count * later;
    for (int base = threadIdx.x; base < items; base += kScanUnroll * kScanThreads) {
      unsigned long long hit[kScanUnroll];
      int target[kScanUnroll];
#pragma unroll
      for (int u = 0; u < kScanUnroll; ++u) {
        const int item = base + u * kScanThreads;
        hit[u] = 0;
        target[u] = 0;
        if (item < items) {
          const int j = i + 1 + item % later;
          const int row = row0 + kept_rows[item / later];
          target[u] = j;
          hit[u] = overlap[static_cast<long long>(row) * words + r + j];
        }
      }
#pragma unroll
      for (int u = 0; u < kScanUnroll; ++u) {
        if (hit[u] == 0) continue;
        unsigned int* halves = reinterpret_cast<unsigned int*>(removed + target[u]);
        const unsigned int low = static_cast<unsigned int>(hit[u]);
        const unsigned int high = static_cast<unsigned int>(hit[u] >> 32);
        if (low != 0) atomicOr(halves, low);
        if (high != 0) atomicOr(halves + 1, high);
      }
    }
    __syncthreads();
  }
}

// 5. One block: the keys of the kept boxes, in group-major order, and their count.
extern "C" __global__ void __launch_bounds__(1024)
    nms_compact(unsigned long long* __restrict__ kept_keys, int* __restrict__ num_kept,
                const unsigned long long* __restrict__ kept_bits,
                const unsigned long long* __restrict__ sorted_keys, int num_boxes) {
  __shared__ int warp_total[32];
  __shared__ int running;
  __shared__ unsigned long long word_bits[1024];
  __shared__ int word_offset[1024];
  const int words = (num_boxes + 63) / 64;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) running = 0;
  __syncthreads();
  for (int base = 0; base < words; base += blockDim.x) {
    const int w = base + threadIdx.x;
    const unsigned long long bits = w < words ? kept_bits[w] : 0ULL;
    const int count = __popcll(bits);
    int inclusive = count;
    for (int d = 1; d < 32; d <<= 1) {
      const int up = __shfl_up_sync(0xFFFFFFFFu, inclusive, d);
      if (lane >= d) inclusive += up;
    }
    if (lane == 31) warp_total[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
      const int total = warp_total[lane];
      int scan = total;
      for (int d = 1; d < 32; d <<= 1) {
        const int up = __shfl_up_sync(0xFFFFFFFFu, scan, d);
        if (lane >= d) scan += up;
      }
      warp_total[lane] = scan - total;  // exclusive offset of each warp
    }
    __syncthreads();
    const int at = running + warp_total[warp] + inclusive - count;
    word_bits[threadIdx.x] = bits;
    word_offset[threadIdx.x] = at;
    __syncthreads();  // every thread has read running and warp_total
    if (threadIdx.x == blockDim.x - 1) running = at + count;
    // Gather: a warp a word, a lane two of its boxes, so the loads of a word go out together.
    const int stop = min(static_cast<int>(blockDim.x), words - base);
    for (int q = warp; q < stop; q += blockDim.x / 32) {
      const unsigned long long b = word_bits[q];
      const int offset = word_offset[q];
      const int row0 = (base + q) * 64;
      if ((b >> lane) & 1ULL) {
        kept_keys[offset + __popcll(b & ((1ULL << lane) - 1))] = sorted_keys[row0 + lane];
      }
      if ((b >> (lane + 32)) & 1ULL) {
        kept_keys[offset + __popcll(b & ((1ULL << (lane + 32)) - 1))] =
            sorted_keys[row0 + 32 + lane];
      }
    }
    __syncthreads();  // word_bits and word_offset are read before the next words overwrite them
  }
  if (threadIdx.x == 0) num_kept[0] = running;
}

// 6. Output position of kept box p: the kept keys below its own, counted by 8 warps over
// slices of the kept list for 32 positions a block.
extern "C" __global__ void __launch_bounds__(256)
    nms_emit(long long* __restrict__ keep, const unsigned long long* __restrict__ kept_keys,
             const int* __restrict__ num_kept, int num_boxes) {
  __shared__ int partial[8][32];
  const int kept = num_kept[0];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int p = blockIdx.x * 32 + lane;
  if (blockIdx.x * 32 >= kept) {
    if (warp == 0 && p < num_boxes) keep[p] = -1;
    return;
  }
  const unsigned long long own = p < kept ? kept_keys[p] : kPadKey;
  const int slice = (kept + 7) / 8;
  const int stop = min(kept, (warp + 1) * slice);
  int below = 0;
  for (int q = warp * slice; q < stop; ++q) below += kept_keys[q] < own ? 1 : 0;
  partial[warp][lane] = below;
  __syncthreads();
  if (warp != 0 || p >= num_boxes) return;
  if (p >= kept) {
    keep[p] = -1;
    return;
  }
  int rank = 0;
  for (int w = 0; w < 8; ++w) rank += partial[w][lane];
  keep[rank] = static_cast<long long>(static_cast<unsigned int>(own));
}
