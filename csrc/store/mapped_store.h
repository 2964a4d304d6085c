// Reading and writing annotation store files (see store_format.h).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Tensor.h>

namespace mmdet_ext {
namespace store {

// A store file that is missing, truncated, corrupt or of another format version. Python sees it
// as mmdet_ext._C.StoreError (a RuntimeError) and decides whether to rebuild or report.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writes `sections` (CPU, contiguous, 1-D or 2-D tensors) to `path` atomically: a temporary file
// in the same directory is written, fsync'ed and renamed over `path`, so a reader never sees a
// half-written store and a crash leaves any previous file intact.
void write_store(const std::string& path,
                 const std::vector<std::pair<std::string, at::Tensor>>& sections,
                 const std::string& key);

class Mapping;

// A store file mapped read-only into memory. Every process that opens the same file shares its
// pages through the page cache; tensors returned by sections() are views into the mapping and
// keep it alive.
class MappedStore {
 public:
  // Validates magic, version, header checksum, size and, if `verify_payload`, the checksum of all
  // data; throws StoreError naming the file and the problem.
  MappedStore(const std::string& path, bool verify_payload);

  const std::string& path() const { return path_; }
  std::string key() const;
  uint64_t file_size() const;
  std::vector<std::pair<std::string, at::Tensor>> sections() const;

 private:
  std::string path_;
  std::shared_ptr<Mapping> mapping_;
};

}  // namespace store
}  // namespace mmdet_ext
