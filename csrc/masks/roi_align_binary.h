// mmdet's BitmapMasks.crop_and_resize of one box, device-neutral: mmcv's roi_align
// (aligned=True, sampling_ratio=0, 'avg', spatial_scale=1) on a 0/1 mask, then >= 0.5, following
// mmcv's CPU ROIAlignForward line by line in type T (the boxes' dtype, which mmdet also uses for
// the mask), so the CPU kernel (cpu/rle_crop_and_resize_kernel.cpp) and the CUDA one
// (cuda/rle_decode_kernels.cu) round exactly alike.
#pragma once

#include <cmath>
#include <cstdint>

#include "../host_device.h"

namespace mmdet_ext::masks {

// One sampling coordinate along one axis (mmcv's pre_calc_for_bilinear_interpolate); the 2-D
// weights are products of two of these, as in mmcv.
template <typename T>
struct AxisSample {
  bool inside;
  int low, high;
  T l, h;  // distance to low and 1 - that
};

template <typename T>
struct RoiAlignBox {
  T start_h, start_w, bin_h, bin_w;
  int grid_h, grid_w;
  T count;

  MMDET_EXT_HOST_DEVICE RoiAlignBox(const T* roi, int out_h, int out_w) {
    const T offset = static_cast<T>(0.5);
    const T spatial_scale = 1;
    start_w = roi[0] * spatial_scale - offset;
    start_h = roi[1] * spatial_scale - offset;
    const T end_w = roi[2] * spatial_scale - offset;
    const T end_h = roi[3] * spatial_scale - offset;
    const T roi_width = end_w - start_w;
    const T roi_height = end_h - start_h;
    bin_h = static_cast<T>(roi_height) / static_cast<T>(out_h);
    bin_w = static_cast<T>(roi_width) / static_cast<T>(out_w);
    grid_h = static_cast<int>(ceilf(static_cast<float>(roi_height / out_h)));
    grid_w = static_cast<int>(ceilf(static_cast<float>(roi_width / out_w)));
    const int samples = grid_h * grid_w;
    count = static_cast<T>(samples > 1 ? samples : 1);
  }
};

// Sample i of output cell p along an axis of `size` pixels: start + p * bin + (i + .5) * bin /
// grid, in mmcv's exact expression order and types.
template <typename T>
MMDET_EXT_HOST_DEVICE AxisSample<T> axis_sample(T start, T bin, int grid, int p, int i,
                                                int size) {
  T y = start + p * bin + static_cast<T>(i + .5f) * bin / static_cast<T>(grid);
  AxisSample<T> s{};
  s.inside = !(y < -1.0 || y > size);
  if (s.inside) {
    if (y <= 0) {
      y = 0;
    }
    s.low = static_cast<int>(y);
    if (s.low >= size - 1) {
      s.high = s.low = size - 1;
      y = static_cast<T>(s.low);
    } else {
      s.high = s.low + 1;
    }
    s.l = y - s.low;
    s.h = 1. - s.l;
  }
  return s;
}

// Output cell (ph, pw): 1 if the average of its bilinear samples is >= 0.5. sample_y(ph, iy) and
// sample_x(pw, ix) give the AxisSamples (computed or looked up), pixel(y, x) the mask's 0/1 value.
template <typename T, typename SampleY, typename SampleX, typename Pixel>
MMDET_EXT_HOST_DEVICE uint8_t roi_align_cell(const RoiAlignBox<T>& box, int ph, int pw,
                                             const SampleY& sample_y, const SampleX& sample_x,
                                             const Pixel& pixel) {
  T output_val = 0.;
  for (int iy = 0; iy < box.grid_h; ++iy) {
    const AxisSample<T> sy = sample_y(ph, iy);
    for (int ix = 0; ix < box.grid_w; ++ix) {
      const AxisSample<T> sx = sample_x(pw, ix);
      if (!sy.inside || !sx.inside) {
        continue;  // mmcv adds 0 * pixel(0, 0) + ... = 0 here
      }
      const T w1 = sy.h * sx.h, w2 = sy.h * sx.l, w3 = sy.l * sx.h, w4 = sy.l * sx.l;
      const T val = w1 * static_cast<T>(pixel(sy.low, sx.low)) +
                    w2 * static_cast<T>(pixel(sy.low, sx.high)) +
                    w3 * static_cast<T>(pixel(sy.high, sx.low)) +
                    w4 * static_cast<T>(pixel(sy.high, sx.high));
      output_val += val;
    }
  }
  return output_val / box.count >= static_cast<T>(0.5) ? 1 : 0;
}

}  // namespace mmdet_ext::masks
