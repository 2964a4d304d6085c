// mmdet_ext._C.DecodeQueue: images decoded one at a time on native threads that never take the
// GIL, each into its place in a buffer, while Python goes on. Why: the batched fetch in the
// training process (num_workers=0) plans a batch in Python, one sample after another; each image
// can be decoded as soon as its plan is made (mmdet_ext/datasets/overlapped_decode.py). Python
// threads cannot do it: a thread returning from a decode waits for the GIL, which the planning
// thread holds for up to the switch interval (5 ms), so the decodes stall (measured: slower than
// decoding after the plan). Here `submit` only queues the image (the GIL held for microseconds)
// and `wait` releases the GIL and decodes what is still queued on the calling thread as well,
// until every queued image is done (so a queue of cores - 1 threads leaves the planning thread a
// core of its own, and uses every core once it waits). Each image is decoded as
// decode_images_into decodes it (decode_one_planar), packed [C, H, W] at its offset.
#include "io/decode_queue.h"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <unistd.h>

#include <torch/extension.h>

#if defined(MMDET_EXT_WITH_OPENCV) && defined(MMDET_EXT_WITH_LIBJPEG)
#include <opencv2/core.hpp>

#include "io/decode_one_planar.h"
#include "transforms/warp_planar.h"
#else
#include "optional_libraries.h"
#endif

namespace mmdet_ext {
namespace {

// What a task does: decode an image into its place in `out` (kInto); decode it and hold the
// decoded pixels under its tag (kHold: the place is not known yet); write the held pixels of its
// tag into `out`, resized and flipped (kWarpHeld).
enum class TaskKind { kInto, kHold, kWarpHeld };

// Raw pointers, not tensors: dropping a reference to a tensor that Python also holds takes the
// GIL in this torch (its Python object changes owner), which would stall these threads exactly
// as Python threads stall. The caller keeps the tensors alive until wait() returns.
struct DecodeTask {
  TaskKind kind;
  int64_t tag;  // the caller's name for the image, returned with its error
  const uint8_t* data;
  int64_t data_size;
  uint8_t* out;  // where the image goes (kInto, kWarpHeld)
  int64_t flags;
  int64_t scale_denom;
  int64_t max_pixels;
  int64_t shape[3];        // (C, H, W) it decodes to; kWarpHeld: C, out_height, out_width
  int64_t out_hw_flip[3];  // kWarpHeld
  int64_t interpolation;   // kWarpHeld
  int64_t plane_step;      // kInto, kWarpHeld: the layout at `out`
  int64_t row_step;
};

class DecodeQueue {
 public:
  explicit DecodeQueue(int64_t threads) : creator_pid_(getpid()) {
    TORCH_CHECK(threads >= 1, "DecodeQueue: threads must be >= 1, got ", threads);
    for (int64_t t = 0; t < threads; ++t) workers_.emplace_back([this] { serve(); });
  }

  ~DecodeQueue() {
    if (getpid() != creator_pid_) {
      // A forked child holds a copy of the object but none of the threads: nothing to join or
      // detach. Leaked on purpose: a joinable std::thread's destructor would terminate.
      new std::vector<std::thread>(std::move(workers_));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    work_ready_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }

  // Queues the decode of `data` (encoded bytes) into `out` at `offset`, [C, H, W] = `shape`.
  // Both must stay alive, unchanged, until wait() returns.
  void submit(int64_t tag, const at::Tensor& data, int64_t flags, int64_t scale_denom,
              int64_t max_pixels, const at::Tensor& out, int64_t offset,
              const std::vector<int64_t>& shape) {
    DecodeTask task = encoded_task(TaskKind::kInto, tag, data, flags, scale_denom, max_pixels,
                                   shape);
    check_out(out, offset, shape[0], shape[1] * shape[2], shape[2], shape[1], shape[2]);
    task.out = out.data_ptr<uint8_t>() + offset;
    task.plane_step = shape[1] * shape[2];
    task.row_step = shape[2];
    push(task);
  }

  // Queues the decode of `data` to `shape`, held under `tag` until submit_warp writes it.
  void submit_hold(int64_t tag, const at::Tensor& data, int64_t flags, int64_t scale_denom,
                   int64_t max_pixels, const std::vector<int64_t>& shape) {
    push(encoded_task(TaskKind::kHold, tag, data, flags, scale_denom, max_pixels, shape));
  }

  // Queues writing the pixels held under `tag` (a wait() after their submit_hold) into `out` at
  // `offset`: resized to out_height x out_width and flipped (warp_planar.h's codes), C planes
  // plane_step bytes apart, rows row_step apart. `out` must stay alive until wait() returns.
  void submit_warp(int64_t tag, const at::Tensor& out, int64_t offset, int64_t channels,
                   int64_t out_height, int64_t out_width, int64_t flip, int64_t interpolation,
                   int64_t plane_step, int64_t row_step) {
    check_available();
#if defined(MMDET_EXT_WITH_OPENCV) && defined(MMDET_EXT_WITH_LIBJPEG)
    check_warp_arguments("DecodeQueue", out_height, out_width, interpolation, flip);
#endif
    TORCH_CHECK(channels >= 1 && channels <= 4, "DecodeQueue: bad channel count ", channels);
    check_out(out, offset, channels, plane_step, row_step, out_height, out_width);
    DecodeTask task{};
    task.kind = TaskKind::kWarpHeld;
    task.tag = tag;
    task.out = out.data_ptr<uint8_t>() + offset;
    task.shape[0] = channels;
    task.out_hw_flip[0] = out_height;
    task.out_hw_flip[1] = out_width;
    task.out_hw_flip[2] = flip;
    task.interpolation = interpolation;
    task.plane_step = plane_step;
    task.row_step = row_step;
    push(task);
  }

  // Runs queued tasks in the calling thread too (the caller releases the GIL) until every
  // submitted one is done; returns (tag, error) of each that failed since the last wait.
  std::vector<std::pair<int64_t, std::string>> wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!tasks_.empty()) run_next(lock);
    all_done_.wait(lock, [this] { return pending_ == 0; });
    return std::exchange(errors_, {});
  }

  // Drops every held image (a batch that is given up, or done).
  void release_held() {
    std::lock_guard<std::mutex> lock(mutex_);
    held_.clear();
  }

 private:
  void check_available() const {
#if !(defined(MMDET_EXT_WITH_OPENCV) && defined(MMDET_EXT_WITH_LIBJPEG))
    fail_built_without("DecodeQueue", "OpenCV and libjpeg");
#endif
    TORCH_CHECK(getpid() == creator_pid_,
                "DecodeQueue: made in another process (its threads were not forked)");
  }

  DecodeTask encoded_task(TaskKind kind, int64_t tag, const at::Tensor& data, int64_t flags,
                          int64_t scale_denom, int64_t max_pixels,
                          const std::vector<int64_t>& shape) const {
    check_available();
    TORCH_CHECK(data.device().is_cpu() && data.scalar_type() == at::kByte && data.dim() == 1 &&
                    data.is_contiguous(),
                "DecodeQueue: expected contiguous 1-D CPU uint8 encoded bytes, got ",
                data.scalar_type(), " ", data.sizes(), " on ", data.device());
    TORCH_CHECK(shape.size() == 3 && shape[0] >= 1 && shape[0] <= 4 && shape[1] > 0 &&
                    shape[2] > 0,
                "DecodeQueue: bad expected shape ", c10::IntArrayRef(shape));
    DecodeTask task{};
    task.kind = kind;
    task.tag = tag;
    task.data = data.data_ptr<uint8_t>();
    task.data_size = data.numel();
    task.flags = flags;
    task.scale_denom = scale_denom;
    task.max_pixels = max_pixels;
    std::copy(shape.begin(), shape.end(), task.shape);
    return task;
  }

  // `out` holds `channels` planes of `height` rows of `width` at `offset` with these steps.
  static void check_out(const at::Tensor& out, int64_t offset, int64_t channels,
                        int64_t plane_step, int64_t row_step, int64_t height, int64_t width) {
    TORCH_CHECK(out.device().is_cpu() && out.scalar_type() == at::kByte && out.dim() == 1 &&
                    out.is_contiguous(),
                "DecodeQueue: out must be a contiguous 1-D CPU uint8 tensor, got ",
                out.scalar_type(), " ", out.sizes(), " on ", out.device());
    TORCH_CHECK(row_step >= width && plane_step >= height * row_step,
                "DecodeQueue: rows ", row_step, " and planes ", plane_step, " bytes apart cannot "
                "hold ", height, "x", width, " (h x w)");
    const int64_t size = (channels - 1) * plane_step + (height - 1) * row_step + width;
    TORCH_CHECK(offset >= 0 && offset <= out.numel() - size, "DecodeQueue: the image (", size,
                " bytes at offset ", offset, ") does not fit in out (", out.numel(), " bytes)");
  }

  void push(const DecodeTask& task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks_.push_back(task);
      ++pending_;
    }
    work_ready_.notify_one();
  }

  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      work_ready_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, nothing left
      run_next(lock);
    }
  }

  // Takes the next task and runs it with `lock` released; `lock` is held again on return.
  void run_next(std::unique_lock<std::mutex>& lock) {
    DecodeTask task = tasks_.front();
    tasks_.pop_front();
    lock.unlock();
    std::string error = run(task);
    lock.lock();
    if (!error.empty()) errors_.emplace_back(task.tag, std::move(error));
    if (--pending_ == 0) all_done_.notify_all();
  }

  // The task's work; its error's text, or empty.
  std::string run(const DecodeTask& task) {
#if defined(MMDET_EXT_WITH_OPENCV) && defined(MMDET_EXT_WITH_LIBJPEG)
    try {
      const Layout layout{task.plane_step, task.row_step};
      switch (task.kind) {
        case TaskKind::kInto:
          decode_one_planar(task.data, task.data_size, task.flags, task.scale_denom,
                            task.max_pixels, task.shape, nullptr, layout, task.out);
          break;
        case TaskKind::kHold: {
          cv::Mat decoded = decode_checked(task.data, task.data_size, task.flags,
                                           task.scale_denom, task.max_pixels, task.shape);
          std::lock_guard<std::mutex> lock(mutex_);
          held_[task.tag] = std::move(decoded);
          break;
        }
        case TaskKind::kWarpHeld: {
          cv::Mat decoded;
          {
            std::lock_guard<std::mutex> lock(mutex_);
            auto found = held_.find(task.tag);
            TORCH_CHECK(found != held_.end(), "no decoded image is held under tag ", task.tag);
            decoded = std::move(found->second);
            held_.erase(found);
          }
          TORCH_CHECK(decoded.channels() == task.shape[0], "the image held has ",
                      decoded.channels(), " channels, not ", task.shape[0]);
          const Warp warp{task.out_hw_flip, static_cast<int>(task.interpolation)};
          write_planar(decoded, &warp, layout, task.out);
          break;
        }
      }
      return {};
    } catch (const std::exception& err) {
      return error_text(err);
    }
#else
    return "built without OpenCV and libjpeg";
#endif
  }

  const pid_t creator_pid_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable all_done_;
  std::deque<DecodeTask> tasks_;
  std::vector<std::pair<int64_t, std::string>> errors_;
#if defined(MMDET_EXT_WITH_OPENCV) && defined(MMDET_EXT_WITH_LIBJPEG)
  std::unordered_map<int64_t, cv::Mat> held_;
#else
  std::unordered_map<int64_t, int> held_;
#endif
  int64_t pending_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

void bind_decode_queue(pybind11::module_& m) {
  namespace py = pybind11;
  py::class_<DecodeQueue>(m, "DecodeQueue",
                          "Images decoded on native threads (no GIL) while Python goes on: "
                          "submit() queues one, wait() returns when all are done.")
      .def(py::init<int64_t>(), py::arg("threads"))
      .def("submit", &DecodeQueue::submit, py::arg("tag"), py::arg("data"), py::arg("flags"),
           py::arg("scale_denom"), py::arg("max_pixels"), py::arg("out"), py::arg("offset"),
           py::arg("shape"),
           "Queue the decode of `data` into `out[offset:]` as [C, H, W] = `shape`, as "
           "decode_images_into decodes an image (packed, no warp). Keep both tensors alive "
           "until wait() returns.")
      .def("submit_hold", &DecodeQueue::submit_hold, py::arg("tag"), py::arg("data"),
           py::arg("flags"), py::arg("scale_denom"), py::arg("max_pixels"), py::arg("shape"),
           "Queue the decode of `data` to `shape`, the pixels held under `tag` for submit_warp "
           "(its place is not known yet). Keep `data` alive until wait() returns.")
      .def("submit_warp", &DecodeQueue::submit_warp, py::arg("tag"), py::arg("out"),
           py::arg("offset"), py::arg("channels"), py::arg("out_height"), py::arg("out_width"),
           py::arg("flip"), py::arg("interpolation"), py::arg("plane_step"),
           py::arg("row_step"),
           "Queue writing the pixels held under `tag` (held by a wait() after submit_hold) "
           "into `out[offset:]`, resized and flipped as warp_image does, planes `plane_step` "
           "and rows `row_step` bytes apart. Keep `out` alive until wait() returns.")
      .def("wait", &DecodeQueue::wait, py::call_guard<py::gil_scoped_release>(),
           "Run what is queued on this thread too, until all is done; [(tag, error)] of what "
           "failed since the last wait.")
      .def("release_held", &DecodeQueue::release_held,
           "Drop every decoded image still held (a batch given up, or done).");
}

}  // namespace mmdet_ext
