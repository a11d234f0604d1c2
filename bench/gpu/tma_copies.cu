// Bulk tensor copies for the TMA variants of bench/gpu/variants.py (appended to a reference's
// source, before the variant's kernel): a box of a @tensormap into shared memory, completing on
// an mbarrier that was told how many bytes to expect.

namespace {

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
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
      "r"(bar)
      : "memory");
}

}  // namespace
