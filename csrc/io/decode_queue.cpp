// DecodeQueue (decode_queue.h). Why native threads: the batched fetch in the training process
// (num_workers=0) plans a batch in Python, one sample after another, and each image can be
// decoded as soon as its plan is made. Python threads cannot do it: a thread returning from a
// decode waits for the GIL, which the planning thread holds for up to the switch interval (5 ms),
// so the decodes stall (measured: slower than decoding after the plan). Here `submit` only
// queues the image (the GIL held for microseconds) and `wait` releases the GIL and decodes what is
// still queued on the calling thread as well, until every queued image is done (so a queue of
// cores - 1 threads leaves the planning thread a core of its own, and uses every core once it
// waits).
#include "io/decode_queue.h"

#include <optional>

#include <unistd.h>

#include <torch/extension.h>

#if !(defined(MMDET_EXT_WITH_OPENCV) && defined(MMDET_EXT_WITH_LIBJPEG))
#include "optional_libraries.h"
#endif

namespace mmdet_ext {

DecodeQueue::DecodeQueue(int64_t threads) : creator_pid_(getpid()) {
  TORCH_CHECK(threads >= 0, "DecodeQueue: threads must be >= 0, got ", threads);
  for (int64_t t = 0; t < threads; ++t) workers_.emplace_back([this] { serve(); });
}

DecodeQueue::~DecodeQueue() {
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

void DecodeQueue::push(const DecodeTask& task) {
  TORCH_CHECK(getpid() == creator_pid_,
              "DecodeQueue: made in another process (its threads were not forked)");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(task);
    ++pending_;
  }
  work_ready_.notify_one();
}

std::vector<std::pair<int64_t, std::string>> DecodeQueue::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!tasks_.empty()) run_next(lock);
  all_done_.wait(lock, [this] { return pending_ == 0; });
  return std::exchange(errors_, {});
}

void DecodeQueue::serve() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, nothing left
    run_next(lock);
  }
}

// Takes the next task and decodes it with `lock` released; `lock` is held again on return.
void DecodeQueue::run_next(std::unique_lock<std::mutex>& lock) {
  const DecodeTask task = tasks_.front();
  tasks_.pop_front();
  lock.unlock();
#if defined(MMDET_EXT_WITH_OPENCV) && defined(MMDET_EXT_WITH_LIBJPEG)
  std::string error = run_decode(task);
#else
  std::string error = "built without OpenCV and libjpeg";  // push() is never reached there
#endif
  lock.lock();
  if (!error.empty()) errors_.emplace_back(task.tag, std::move(error));
  if (--pending_ == 0) all_done_.notify_all();
}

namespace {

// Raw pointers go into the task, not tensors: dropping a reference to a tensor that Python also
// holds takes the GIL in this torch (its Python object changes owner), which would stall the
// queue's threads exactly as Python threads stall. The caller keeps the tensors alive.
void submit(DecodeQueue& queue, int64_t tag, const at::Tensor& data, int64_t flags,
            int64_t scale_denom, int64_t max_pixels, const at::Tensor& out, int64_t offset,
            const std::vector<int64_t>& shape, const std::optional<std::vector<int64_t>>& warp,
            int64_t interpolation, const std::optional<std::vector<int64_t>>& slot_hw) {
#if !(defined(MMDET_EXT_WITH_OPENCV) && defined(MMDET_EXT_WITH_LIBJPEG))
  fail_built_without("DecodeQueue", "OpenCV and libjpeg");
#else
  TORCH_CHECK(data.device().is_cpu() && data.scalar_type() == at::kByte && data.dim() == 1 &&
                  data.is_contiguous(),
              "DecodeQueue: expected contiguous 1-D CPU uint8 encoded bytes, got ",
              data.scalar_type(), " ", data.sizes(), " on ", data.device());
  TORCH_CHECK(out.device().is_cpu() && out.scalar_type() == at::kByte && out.dim() == 1 &&
                  out.is_contiguous(),
              "DecodeQueue: out must be a contiguous 1-D CPU uint8 tensor, got ",
              out.scalar_type(), " ", out.sizes(), " on ", out.device());
  TORCH_CHECK(shape.size() == 3, "DecodeQueue: bad expected shape ", c10::IntArrayRef(shape));
  TORCH_CHECK(!warp.has_value() || warp->size() == 3 || warp->size() == 7,
              "DecodeQueue: warp must be (out_height, out_width, flip), or those and the part "
              "kept (y, x, height, width), got ", c10::IntArrayRef(*warp));
  TORCH_CHECK(!slot_hw.has_value() || (slot_hw->size() == 2 && (*slot_hw)[0] > 0 &&
                                        (*slot_hw)[1] > 0),
              "DecodeQueue: slot_hw must be (height, width), both > 0, got ",
              c10::IntArrayRef(*slot_hw));
  queue.push(plan_decode("DecodeQueue", tag, data.data_ptr<uint8_t>(), data.numel(),
                         out.data_ptr<uint8_t>(), out.numel(), offset, flags, scale_denom,
                         max_pixels, shape.data(), warp.has_value() ? warp->data() : nullptr,
                         warp.has_value() && warp->size() == 7 ? warp->data() + 3 : nullptr,
                         interpolation, slot_hw.has_value() ? slot_hw->data() : nullptr));
#endif
}

}  // namespace

void bind_decode_queue(pybind11::module_& m) {
  namespace py = pybind11;
  py::class_<DecodeQueue>(m, "DecodeQueue",
                          "Images decoded on native threads (no GIL) while Python goes on: "
                          "submit() queues one, wait() returns when all are done.")
      .def(py::init<int64_t>(), py::arg("threads"))
      .def("submit", &submit, py::arg("tag"), py::arg("data"), py::arg("flags"),
           py::arg("scale_denom"), py::arg("max_pixels"), py::arg("out"), py::arg("offset"),
           py::arg("shape"), py::arg("warp") = py::none(), py::arg("interpolation") = 1,
           py::arg("slot_hw") = py::none(),
           "Queue the decode of `data` into `out[offset:]` as [C, H, W] = `shape`: with `warp` "
           "(out_height, out_width, flip code[, y, x, height, width]), resized with "
           "`interpolation` (cv2's code), the part (y, x, height, width) of it kept (all of it "
           "without one) and flipped, into a slot of `slot_hw` (height, width) of a padded batch "
           "when given. "
           "Keep both tensors alive until wait() returns.")
      .def("wait", &DecodeQueue::wait, py::call_guard<py::gil_scoped_release>(),
           "Decode what is still queued on this thread too, until every queued image is "
           "done; [(tag, error)] of those that failed since the last wait.");
}

}  // namespace mmdet_ext
