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
//      only the tiles a group spans are computed: the diagonal tile and the few after it.
//   4. nms_scan: the greedy pass. Runs of 64-box chunks joined by a group that crosses their
//      boundary ("segments") are independent; one warp scans each segment, chunk by chunk:
//      the chunk's survivors from its diagonal words (a loop over kept boxes only), then their
//      rows ORed into the removed bits of the later chunks of the segment.
//   5. nms_compact: the kept boxes' keys gathered in one block (popcount prefix sums).
//   6. nms_emit: each kept box's output position is the number of kept keys below its own (the
//      key orders by score, then index); the rest of keep is -1.
//
// @workspace sort_keys u64[cdiv(num_boxes, 1024) * 2048]
// @workspace sorted_boxes float4[num_boxes]
// @workspace sorted_groups i64[num_boxes]
// @workspace sorted_keys u64[num_boxes]
// @workspace overlap u64[num_boxes * cdiv(num_boxes, 64)]
// @workspace chunk_bits u64[2 * cdiv(num_boxes, 64)]
// @workspace kept_keys u64[num_boxes]
// @launch nms_sort_chunks<<<cdiv(num_boxes, 1024), 512>>>(sort_keys, scores, idxs, num_boxes)
// @launch nms_merge<<<cdiv(num_boxes, 1024) * 4, 256>>>(sorted_boxes, sorted_groups,
//   sorted_keys, sort_keys, boxes, num_boxes)
// @launch nms_mask<<<dim3(cdiv(num_boxes, 64), 4), 64>>>(overlap, sorted_boxes, sorted_groups,
//   iou_threshold, num_boxes)
// @launch nms_scan<<<cdiv(num_boxes, 256), 128>>>(chunk_bits, overlap, sorted_groups, num_boxes)
// @launch nms_compact<<<1, 1024>>>(kept_keys, num_kept, chunk_bits, sorted_keys, num_boxes)
// @launch nms_emit<<<cdiv(num_boxes, 32), 256>>>(keep, kept_keys, num_kept, num_boxes)
//
// Design notes:
// - torchvision sorts all boxes, fills the full upper-triangular mask (N^2 / 2 IoUs) and reduces
//   it one box at a time. Sorting by group first makes the mask block-diagonal: a detector's
//   groups hold tens of boxes, so the mask costs about 64 IoUs a box and the greedy pass runs
//   one independent segment per warp. One group of every box is still right: one long segment.
// - Keys are unique (the index is in them), so every sort and rank is a permutation and the
//   result is deterministic. Scores order through their IEEE bits flipped to unsigned order.
// - Workspace contents are unspecified at the start of a call: every word a kernel reads is
//   written earlier in the same call (the mask tiles read are exactly the tiles written; each
//   segment's warp zeroes its own removed words).
// - IoU in fp32 as torchvision computes it (no +1 pixel); two zero-area boxes give 0 / 0, a NaN
//   that compares false, so they never suppress each other.

namespace {

constexpr int kChunk = 1024;         // boxes a block sorts in nms_sort_chunks
constexpr int kMaskSlices = 4;       // gridDim.y of nms_mask: column tiles a row block shares
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

// 4. One warp per segment: chunk r starts one unless a group crosses from chunk r - 1.
// chunk_bits[0 .. W) holds the removed bits of each chunk, chunk_bits[W .. 2W) the kept bits.
extern "C" __global__ void __launch_bounds__(128)
    nms_scan(unsigned long long* __restrict__ chunk_bits,
             const unsigned long long* __restrict__ overlap,
             const long long* __restrict__ sorted_groups, int num_boxes) {
  const int words = (num_boxes + 63) / 64;
  const int lane = threadIdx.x & 31;
  const int r = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (r >= words) return;
  if (r > 0 && sorted_groups[r * 64 - 1] == sorted_groups[r * 64]) return;
  int end = r + 1;
  while (end < words && sorted_groups[end * 64 - 1] == sorted_groups[end * 64]) ++end;
  unsigned long long* removed = chunk_bits;
  unsigned long long* kept_bits = chunk_bits + words;
  for (int c = r + 1 + lane; c < end; c += 32) removed[c] = 0;
  __syncwarp();
  for (int c = r; c < end; ++c) {
    const int row0 = c * 64;
    const int rows = min(64, num_boxes - row0);
    const unsigned long long valid = rows == 64 ? ~0ULL : (1ULL << rows) - 1;
    const unsigned long long dead = c == r ? 0ULL : removed[c];
    const unsigned long long diagonal_low =
        lane < rows ? overlap[static_cast<long long>(row0 + lane) * words + c] : 0ULL;
    const unsigned long long diagonal_high =
        lane + 32 < rows ? overlap[static_cast<long long>(row0 + 32 + lane) * words + c] : 0ULL;
    // Greedy inside the chunk: the first live box is kept and removes what it overlaps.
    unsigned long long live = valid & ~dead;
    unsigned long long kept = 0;
    while (live != 0) {
      const int t = __ffsll(static_cast<long long>(live)) - 1;
      kept |= 1ULL << t;
      const unsigned long long word =
          __shfl_sync(0xFFFFFFFFu, t < 32 ? diagonal_low : diagonal_high, t & 31);
      live &= ~word & ~(1ULL << t);
    }
    if (lane == 0) kept_bits[c] = kept;
    // The kept rows remove boxes of later chunks their groups reach.
    const long long last_group = sorted_groups[row0 + rows - 1];
    for (int later = c + 1 + lane; later < end; later += 32) {
      if (sorted_groups[later * 64] != last_group) break;
      unsigned long long hit = 0;
      for (unsigned long long bits = kept; bits != 0; bits &= bits - 1) {
        const int t = __ffsll(static_cast<long long>(bits)) - 1;
        hit |= overlap[static_cast<long long>(row0 + t) * words + later];
      }
      removed[later] |= hit;
    }
    __syncwarp();
  }
}

// 5. One block: the keys of the kept boxes, in group-major order, and their count.
extern "C" __global__ void __launch_bounds__(1024)
    nms_compact(unsigned long long* __restrict__ kept_keys, int* __restrict__ num_kept,
                const unsigned long long* __restrict__ chunk_bits,
                const unsigned long long* __restrict__ sorted_keys, int num_boxes) {
  __shared__ int warp_total[32];
  __shared__ int running;
  const int words = (num_boxes + 63) / 64;
  const unsigned long long* kept_bits = chunk_bits + words;
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
    int at = running + warp_total[warp] + inclusive - count;
    for (unsigned long long b = bits; b != 0; b &= b - 1) {
      kept_keys[at++] = sorted_keys[w * 64 + __ffsll(static_cast<long long>(b)) - 1];
    }
    __syncthreads();  // every thread has read running and warp_total
    if (threadIdx.x == blockDim.x - 1) running = at;
    __syncthreads();
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
