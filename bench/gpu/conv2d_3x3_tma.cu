// A design variant of diffusion/conv2d_3x3's reference (bench/gpu/variants.py appends
// bench/gpu/tma_copies.cu and this to kernels/diffusion/conv2d_3x3.cu and routes the layers it
// serves to it): the warp-specialised kernel with its stages filled by the tensor memory
// accelerator instead of 256 producer threads' cp.async copies. Per K tile one producer thread
// issues two bulk tensor copies, a box of the input (64 channels of the tile's kBlockM / width
// whole image rows, shifted by the tap; the halo outside the image reads as zeros) and a box of
// the weight (64 channels of one tap of 160 output channels), both written in the 128-byte
// swizzle the consumers' wgmma descriptors read, and the stage's "full" barrier completes when
// their bytes have landed. The layers it serves: in_channels % 64 == 0 and tiles of whole rows
// of one image (width divides kBlockM, kBlockM divides height * width), every SDXL layer but
// conv_in.

// input_rows: input as [batch][height][width][in_channels], box (64, width, kBlockM / width, 1);
// weight_taps: weight as [out_channels][9][in_channels], box (64, 1, 160); both 128-byte
// swizzled. Launch as conv2d_3x3_specialized.
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
    for (int k_tile = pipeline.k_begin; k_tile < pipeline.k_end; ++k_tile) {
      const int step = k_tile - pipeline.k_begin;
      const int s = step % kStages;
      if (step >= kStages) barrier_wait(pipeline.empty(s), ((step / kStages) + 1) & 1);
      const int slice = k_tile / 9;
      const int tap = k_tile - slice * 9;
      const unsigned full = pipeline.full(s);
      arrive_expecting(full, (kBlockM + kBlockN) * kRowBytes);
      load_box(pipeline.stage(s), input_rows, slice * kBlockK, tap % 3 - 1,
               first_row + tap / 3 - 1, image, full);
      load_box(pipeline.stage(s) + kBlockM * kRowBytes, weight_taps, slice * kBlockK, tap,
               pipeline.n0, full);
    }
  };
  run_specialized<kBlockM, kStages, kSplit>(out, bias, batch, height, width, in_channels,
                                            out_channels, 1, produce);
}
