// mmdet_ext._C.DecodeQueue: the one executor of CPU batch decodes. Images are decoded one at a
// time on native threads that never take the GIL, each into its place in a buffer, while the
// caller goes on; wait() decodes what is still queued on the calling thread as well. The batched
// fetch (mmdet_ext/datasets/batch_decoder.py) submits each image as soon as it is planned;
// decode_images_into (io/cpu/decode_images_into_kernel.cpp) pushes a whole checked batch and
// waits. Each image goes through run_decode (decode_one_planar.h).
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>

#include "io/decode_one_planar.h"

namespace mmdet_ext {

class DecodeQueue {
 public:
  // `threads` of its own; 0: wait() decodes everything on the calling thread (a DataLoader
  // worker, whose parallelism is the other workers).
  explicit DecodeQueue(int64_t threads);
  ~DecodeQueue();
  DecodeQueue(const DecodeQueue&) = delete;
  DecodeQueue& operator=(const DecodeQueue&) = delete;

  // Queues a checked task (plan_decode); its buffers must stay alive, unchanged, until wait()
  // returns.
  void push(const DecodeTask& task);

  // Decodes queued images in the calling thread too until every pushed image is decoded;
  // returns (tag, error) of each that failed since the last wait, in the order they failed.
  std::vector<std::pair<int64_t, std::string>> wait();

 private:
  void serve();
  void run_next(std::unique_lock<std::mutex>& lock);

  const pid_t creator_pid_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable all_done_;
  std::deque<DecodeTask> tasks_;
  std::vector<std::pair<int64_t, std::string>> errors_;
  int64_t pending_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

// mmdet_ext._C.DecodeQueue, its submit() checking the tensors and arguments (plan_decode).
void bind_decode_queue(pybind11::module_& m);

}  // namespace mmdet_ext
