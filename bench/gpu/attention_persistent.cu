// A design variant of diffusion/attention's reference (bench/gpu/variants.py puts it in place of
// the reference's kernel): a persistent grid. min(work tiles, 132) blocks each take every
// gridDim.x-th work tile (128 query rows of one sample and head, q tiles fastest), so that the
// producer loads the next work tile's query and first key and value tiles while the consumers
// finish the last one's values and store its output, instead of every block paying its start
// and its epilogue alone. The stages and their barrier phases run on across work tiles (tile g
// of the block's sequence of key tiles), the query tile has an "empty" barrier the consumers
// release after their last scores of a work tile, and the consumers' turns restart with each
// work tile exactly as the reference's do once.
// out, query, key, value: [batch, seq_len, num_heads, 128] bf16, row-major, 256-byte aligned.
extern "C" __global__ void __launch_bounds__(kThreads, 1)
    attention_forward(__nv_bfloat16* __restrict__ out,
                      const __grid_constant__ CUtensorMap query_rows,
                      const __grid_constant__ CUtensorMap key_rows,
                      const __grid_constant__ CUtensorMap value_rows, float scale, int seq_len,
                      int num_heads, int batch) {
  extern __shared__ __align__(16) unsigned char shared_storage[];
  const unsigned base = (shared_address(shared_storage) + kSwizzleAtomBytes - 1) &
                        ~static_cast<unsigned>(kSwizzleAtomBytes - 1);
  const unsigned q_tile = base;
  // Barriers after the tiles: the query's, then per stage the key's and value's "full" (copied)
  // and "empty" (read by both consumers) barriers.
  const unsigned barriers = base + (1 + 2 * kStages) * kTileBytes;
  const unsigned full_q = barriers;
  auto full_k = [&](int s) { return barriers + 8 * (1 + s); };
  auto full_v = [&](int s) { return barriers + 8 * (1 + kStages + s); };
  auto empty_k = [&](int s) { return barriers + 8 * (1 + 2 * kStages + s); };
  auto empty_v = [&](int s) { return barriers + 8 * (1 + 3 * kStages + s); };
  const unsigned empty_q = barriers + 8 * (1 + 4 * kStages);
  auto k_tile = [&](int s) { return base + (1 + 2 * s) * kTileBytes; };
  auto v_tile = [&](int s) { return base + (2 + 2 * s) * kTileBytes; };

  if (threadIdx.x == 0) {
    barrier_init(full_q, 1);
    for (int s = 0; s < kStages; ++s) {
      barrier_init(full_k(s), 1);
      barrier_init(full_v(s), 1);
      barrier_init(empty_k(s), 8);  // one arrival per consumer warp
      barrier_init(empty_v(s), 8);
    }
    barrier_init(empty_q, 8);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const long long row_stride = static_cast<long long>(num_heads) * kHeadDim;
  const int kv_tiles = (seq_len + kBlockKV - 1) / kBlockKV;
  const int q_tiles = (seq_len + kBlockQ - 1) / kBlockQ;
  const int work_tiles = q_tiles * num_heads * batch;
  const int warpgroup = static_cast<int>(threadIdx.x) / 128;

  if (warpgroup == 0) {
    // Producer: the query tile, then every key and value tile through the stages.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n");
    if (threadIdx.x != 0) return;
    int round = 0;
    for (int work = blockIdx.x; work < work_tiles; work += gridDim.x, ++round) {
      const int q0 = work % q_tiles * kBlockQ;
      const int head = work / q_tiles % num_heads;
      const int sample = work / q_tiles / num_heads;
      const auto load = [&](unsigned tile, const CUtensorMap& rows, int first_row, unsigned bar) {
        arrive_expecting(bar, kTileBytes);
        load_box(tile, rows, 0, head, first_row, sample, bar);
        load_box(tile + kHalfBytes, rows, 64, head, first_row, sample, bar);
      };
      // The query tile once both consumers' last scores of the previous work tile are done.
      if (round > 0) barrier_wait(empty_q, (round - 1) & 1);
      load(q_tile, query_rows, q0, full_q);
      for (int tile = 0; tile < kv_tiles; ++tile) {
        const int g = round * kv_tiles + tile;  // the block's key tile count so far
        const int s = g % kStages;
        const unsigned reuse = ((g / kStages) + 1) & 1;  // parity of the consumers' release
        if (g >= kStages) barrier_wait(empty_k(s), reuse);
        load(k_tile(s), key_rows, tile * kBlockKV, full_k(s));
        if (g >= kStages) barrier_wait(empty_v(s), reuse);
        load(v_tile(s), value_rows, tile * kBlockKV, full_v(s));
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n");
  const int consumer = warpgroup - 1;  // rows 64 consumer .. + 63
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32 % 4;  // rows 16 warp .. + 15 of its 64
  const unsigned q_rows = q_tile + consumer * 64 * 128;
  const int my_turn = 1 + consumer;     // named barrier this consumer waits on to issue
  const int their_turn = 2 - consumer;  // the other's

  const float scale_log2 = scale * kLog2e;
  float o[64];
  float s[64];
  unsigned p[kBlockKV / 16][4];
  int round = 0;
  for (int work = blockIdx.x; work < work_tiles; work += gridDim.x, ++round) {
    const int q0 = work % q_tiles * kBlockQ;
    const long long head_offset =
        (static_cast<long long>(work / q_tiles / num_heads) * seq_len * num_heads +
         work / q_tiles % num_heads) *
        kHeadDim;
    const int g0 = round * kv_tiles;  // the block's key tiles before this work tile's
    float row_max[2] = {__int_as_float(0xff800000), __int_as_float(0xff800000)};
    float row_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int e = 0; e < 64; ++e) {
      o[e] = 0.0f;
      s[e] = 0.0f;
    }

    barrier_wait(full_q, round & 1);
    if (consumer == 1) named_arrive(1);  // consumer 0 issues first

    // Accumulator layout (m64nN, per warp 16 rows): element 4 i + e of lane l is row
    // 16 warp + l / 4 + 8 (e / 2), column 8 i + 2 (l % 4) + e % 2. "Row half" r is e / 2.
    // Scores of tile `tile` into s (issued, not waited for): k16 step kk reads columns 16 kk ..
    // 16 kk + 15, in half kk / 4 at byte 32 (kk % 4) of each 128-byte row.
    auto issue_scores = [&](int tile) {
      const unsigned k = k_tile((g0 + tile) % kStages);
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 16; ++kk) {
        const unsigned column = (kk / 4) * kHalfBytes + (kk % 4) * 32;
        wgmma_scores(s, descriptor(q_rows + column, 16, kSwizzleAtomBytes),
                     descriptor(k + column, 16, kSwizzleAtomBytes), kk > 0);
      }
    };
    // O += P V of tile `tile` (issued, not waited for): k16 step t takes keys 16 t .. 16 t + 15,
    // the score chunks 2 t and 2 t + 1 and the value rows 16 t .. 16 t + 15 (two 8-key groups of
    // 1024 bytes, 2048 bytes a step).
    auto issue_values = [&](int tile) {
      const unsigned v = v_tile((g0 + tile) % kStages);
#pragma unroll
      for (int t = 0; t < kBlockKV / 16; ++t) {
        wgmma_values(o, p[t],
                     descriptor(v + t * 2 * kSwizzleAtomBytes, kHalfBytes, kSwizzleAtomBytes));
      }
    };
    auto release = [&](unsigned bar) {
      __syncwarp();
      if (lane == 0) barrier_arrive(bar);
    };
    // Online softmax of the scores of tile `tile` in s: the new row maxima, the factor what was
    // accumulated so far must be rescaled by (returned in rescale), the exponentials in s.
    auto softmax = [&](int tile, float(&rescale)[2]) {
      const int kv0 = tile * kBlockKV;
      if (kv0 + kBlockKV > seq_len) {
#pragma unroll
        for (int e = 0; e < 64; ++e) {
          if (kv0 + (e / 4) * 8 + (lane % 4) * 2 + e % 2 >= seq_len)
            s[e] = __int_as_float(0xff800000);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float m = row_max[r];
#pragma unroll
        for (int i = 0; i < 16; ++i) m = fmaxf(m, fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        rescale[r] = exp2_approx((row_max[r] - m) * scale_log2);
        row_max[r] = m;
        const float m_scaled = m * scale_log2;
        float sum = row_sum[r] * rescale[r];
#pragma unroll
        for (int i = 0; i < 16; ++i) {
#pragma unroll
          for (int e = 4 * i + 2 * r; e < 4 * i + 2 * r + 2; ++e) {
            s[e] = exp2_approx(fmaf(s[e], scale_log2, -m_scaled));
            sum += s[e];
          }
        }
        row_sum[r] = sum;
      }
    };

    auto pack_scores = [&]() {
#pragma unroll
      for (int t = 0; t < kBlockKV / 16; ++t) {
#pragma unroll
        for (int j = 0; j < 4; ++j) p[t][j] = pack_bf16(s[8 * t + 2 * j], s[8 * t + 2 * j + 1]);
      }
    };

    // O to a new maximum: each row half r times rescale[r].
    auto rescale_o = [&](const float(&rescale)[2]) {
#pragma unroll
      for (int i = 0; i < 16; ++i) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[4 * i + e] *= rescale[e / 2];
      }
    };

    // The factor O is rescaled by before the next P V: 2^(previous maximum - this tile's).
    float rescale[2];
    // Tile 0: scores only (nothing is accumulated yet).
    {
      barrier_wait(full_k(g0 % kStages), (g0 / kStages) & 1);
      fence_for_wgmma();
      named_sync(my_turn);
      wgmma_fence();
      issue_scores(0);
      wgmma_commit();
      if (!(consumer == 1 && kv_tiles == 1)) named_arrive(their_turn);
      wgmma_wait<0>();
      hold(s);
      release(empty_k(g0 % kStages));
      softmax(0, rescale);
      pack_scores();
    }
    // Tile t: its scores, and behind them the previous tile's O += P V, issued in this consumer's
    // turn; the softmax of tile t runs while the other consumer issues.
    for (int tile = 1; tile < kv_tiles; ++tile) {
      const int g = g0 + tile;
      const int stage = g % kStages;
      const int previous = (g - 1) % kStages;
      barrier_wait(full_k(stage), (g / kStages) & 1);
      barrier_wait(full_v(previous), ((g - 1) / kStages) & 1);
      fence_for_wgmma();
      named_sync(my_turn);
      wgmma_fence();
      issue_scores(tile);
      wgmma_commit();
      // O to the previous tile's maximum while the scores run, then its P V on top.
      rescale_o(rescale);
      wgmma_fence();
      issue_values(tile - 1);
      wgmma_commit();
      // The other consumer issues next; the last turn consumer 1 would hand over is never taken.
      if (!(consumer == 1 && tile == kv_tiles - 1)) named_arrive(their_turn);
      wgmma_wait<1>();
      hold(s);
      release(empty_k(stage));
      softmax(tile, rescale);
      wgmma_wait<0>();
      hold(o);
      hold(p);
      release(empty_v(previous));
      pack_scores();
    }
    // Every score of this work tile is done: the producer may load the next query tile.
    release(empty_q);
    // The last tile's values.
    {
      const int last = g0 + kv_tiles - 1;
      barrier_wait(full_v(last % kStages), (last / kStages) & 1);
      fence_for_wgmma();
      rescale_o(rescale);
      wgmma_fence();
      issue_values(kv_tiles - 1);
      wgmma_commit();
      wgmma_wait<0>();
      hold(o);
      release(empty_v(last % kStages));
    }

    // Epilogue: full row sums, normalise, round to bf16, store the rows inside the sequence.
    __nv_bfloat16* const out_head = out + head_offset;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float total = row_sum[r];
      total += __shfl_xor_sync(0xffffffffu, total, 1);
      total += __shfl_xor_sync(0xffffffffu, total, 2);
      const float inverse = 1.0f / total;
      const int row = q0 + consumer * 64 + warp * 16 + r * 8 + lane / 4;
      if (row < seq_len) {
        __nv_bfloat16* const destination =
            out_head + static_cast<long long>(row) * row_stride + (lane % 4) * 2;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          *reinterpret_cast<unsigned*>(destination + i * 8) =
              pack_bf16(o[4 * i + 2 * r] * inverse, o[4 * i + 2 * r + 1] * inverse);
        }
      }
    }
  }
}
