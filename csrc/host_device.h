// MMDET_EXT_HOST_DEVICE marks the device-neutral functions that the CPU kernels and the CUDA
// kernels both call, so the two compute the same bits from the same source. nvcc must not fuse
// multiply-adds in them (setup.py passes --fmad=false): the CPU does not, and rounding would
// differ.
#pragma once

#ifdef __CUDACC__
#define MMDET_EXT_HOST_DEVICE __host__ __device__
#else
#define MMDET_EXT_HOST_DEVICE
#endif
