// decode_jpegs_into on CUDA: the JPEGs nvJPEG may take (jpeg_frame.h: baseline, 3 components, no
// EXIF rotation, of their planned size) decoded as one batch straight into their channel-planar
// places of the output; the rest are left to the caller's CPU decoder.
//
// nvJPEG is opened with dlopen on first use, not linked: torch's CUDA wheels do not ship it (the
// CUDA toolkit and the nvidia-nvjpeg wheel do), and an extension that failed to import where it is
// missing would take every other op with it. mmdet_ext/ops/gpu_decode.py loads the wheel's copy
// first when there is one.
#include <dlfcn.h>

#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nvjpeg.h>
#include <torch/library.h>

#include "../jpeg_frame.h"
#include "../nvjpeg_decode.h"

namespace mmdet_ext {
namespace {

struct NvjpegApi {
  decltype(&nvjpegCreateSimple) create_simple = nullptr;
  decltype(&nvjpegJpegStateCreate) state_create = nullptr;
  decltype(&nvjpegDecodeBatchedInitialize) batched_initialize = nullptr;
  decltype(&nvjpegDecodeBatched) decode_batched = nullptr;
  std::string error;  // empty once every function was found
};

// The soname of the nvJPEG of the CUDA major version this was compiled against.
std::string library_name() { return "libnvjpeg.so." + std::to_string(CUDART_VERSION / 1000); }

const NvjpegApi& api() {
  static const NvjpegApi loaded = [] {
    NvjpegApi found;
    const std::string name = library_name();
    void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* error = dlerror();
      found.error = "cannot load " + name + " (" + (error ? error : "not found") +
                    "): install the CUDA toolkit's nvJPEG, or `pip install nvidia-nvjpeg` for "
                    "CUDA 13 (nvidia-nvjpeg-cu12 for CUDA 12)";
      return found;
    }
    auto resolve = [&](auto& function, const char* symbol) {
      function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(
          dlsym(library, symbol));
      if (function == nullptr && found.error.empty()) found.error = name + " has no " + symbol;
    };
    resolve(found.create_simple, "nvjpegCreateSimple");
    resolve(found.state_create, "nvjpegJpegStateCreate");
    resolve(found.batched_initialize, "nvjpegDecodeBatchedInitialize");
    resolve(found.decode_batched, "nvjpegDecodeBatched");
    return found;
  }();
  return loaded;
}

// One library handle and batch state per GPU, used by one call at a time. Never destroyed: at
// process exit the CUDA runtime may already be gone.
struct BatchDecoder {
  nvjpegHandle_t handle = nullptr;
  nvjpegJpegState_t state = nullptr;
  int batch_size = 0;  // what the state is initialised for; 0: initialise before the next batch
  std::mutex mutex;
};

BatchDecoder& decoder_for(int device) {
  static std::mutex decoders_mutex;
  static std::unordered_map<int, BatchDecoder> decoders;
  const std::lock_guard<std::mutex> lock(decoders_mutex);
  BatchDecoder& decoder = decoders[device];
  if (decoder.handle == nullptr) {
    TORCH_CHECK(api().create_simple(&decoder.handle) == NVJPEG_STATUS_SUCCESS &&
                    api().state_create(decoder.handle, &decoder.state) == NVJPEG_STATUS_SUCCESS,
                "decode_jpegs_into: nvJPEG could not be initialised on cuda:", device);
  }
  return decoder;
}

at::Tensor decode_jpegs_into_cuda(at::TensorList data, at::Tensor out, at::IntArrayRef offsets,
                                  at::IntArrayRef shapes) {
  const size_t count = data.size();
  TORCH_CHECK(out.is_cuda() && out.scalar_type() == at::kByte && out.dim() == 1 &&
                  out.is_contiguous(),
              "decode_jpegs_into: out must be a contiguous 1-D uint8 CUDA tensor");
  TORCH_CHECK(offsets.size() == count && shapes.size() == 3 * count,
              "decode_jpegs_into: one offset and one (C, H, W) per image, got ", offsets.size(),
              " offsets and ", shapes.size(), " shape values for ", count, " images");
  std::vector<size_t> chosen;
  for (size_t i = 0; i < count; ++i) {
    const at::Tensor& bytes = data[i];
    TORCH_CHECK(bytes.device().is_cpu() && bytes.scalar_type() == at::kByte && bytes.dim() == 1 &&
                    bytes.is_contiguous(),
                "decode_jpegs_into: image ", i, "'s bytes must be a contiguous 1-D uint8 CPU tensor");
    const int64_t channels = shapes[3 * i], height = shapes[3 * i + 1], width = shapes[3 * i + 2];
    TORCH_CHECK(channels == 3 && height > 0 && width > 0,
                "decode_jpegs_into: image ", i, " must decode to (3, H, W), got (", channels, ", ",
                height, ", ", width, ")");
    TORCH_CHECK(offsets[i] >= 0 && offsets[i] + channels * height * width <= out.numel(),
                "decode_jpegs_into: image ", i, " does not fit out at offset ", offsets[i]);
    if (!gpu_decode_refusal(bytes.data_ptr<uint8_t>(), bytes.numel(), height, width)) {
      chosen.push_back(i);
    }
  }
  at::Tensor decoded = at::zeros({static_cast<int64_t>(count)}, at::kBool);
  if (chosen.empty()) return decoded;
  TORCH_CHECK(api().error.empty(), "decode_jpegs_into: ", api().error);

  const c10::cuda::CUDAGuard guard(out.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  std::vector<const unsigned char*> sources;
  std::vector<size_t> lengths;
  std::vector<nvjpegImage_t> destinations;
  uint8_t* base = out.data_ptr<uint8_t>();
  for (const size_t i : chosen) {
    sources.push_back(data[i].data_ptr<uint8_t>());
    lengths.push_back(static_cast<size_t>(data[i].numel()));
    const int64_t height = shapes[3 * i + 1], width = shapes[3 * i + 2];
    nvjpegImage_t image{};
    for (int c = 0; c < 3; ++c) {  // NVJPEG_OUTPUT_BGR: planes B, G, R, as the CPU decode lays out
      image.channel[c] = base + offsets[i] + c * height * width;
      image.pitch[c] = static_cast<size_t>(width);
    }
    destinations.push_back(image);
  }
  BatchDecoder& decoder = decoder_for(out.device().index());
  const std::lock_guard<std::mutex> lock(decoder.mutex);
  const int batch_size = static_cast<int>(chosen.size());
  if (decoder.batch_size != batch_size) {
    TORCH_CHECK(api().batched_initialize(decoder.handle, decoder.state, batch_size, 1,
                                         NVJPEG_OUTPUT_BGR) == NVJPEG_STATUS_SUCCESS,
                "decode_jpegs_into: nvJPEG could not prepare a batch of ", batch_size);
    decoder.batch_size = batch_size;
  }
  const nvjpegStatus_t status = api().decode_batched(decoder.handle, decoder.state, sources.data(),
                                                     lengths.data(), destinations.data(), stream);
  if (status != NVJPEG_STATUS_SUCCESS) {
    // Corrupt data, or a file nvJPEG does not take after all: the caller's CPU decoder decodes
    // them all again, and names any file that does not decode.
    decoder.batch_size = 0;  // the header: re-initialise after a failed batch
    return decoded;
  }
  // nvJPEG's own copies from the inputs are invisible to torch's pinned-memory allocator, which
  // could hand a pinned input to another tensor once the caller drops it: wait here.
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  bool* decoded_flags = decoded.data_ptr<bool>();
  for (const size_t i : chosen) decoded_flags[i] = true;
  return decoded;
}

}  // namespace

std::optional<std::string> nvjpeg_load_error() {
  if (api().error.empty()) return std::nullopt;
  return api().error;
}

TORCH_LIBRARY_IMPL(mmdet_ext, CUDA, m) { m.impl("decode_jpegs_into", &decode_jpegs_into_cuda); }

}  // namespace mmdet_ext
