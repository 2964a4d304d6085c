// Reading and writing annotation store files (see store_format.h).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace mmdet_ext {
namespace store {

// A store file that is missing, truncated, corrupt or of another format version. Python sees it
// as mmdet_ext._C.StoreError (a RuntimeError) and decides whether to rebuild or report.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One named, typed 1-D or 2-D array: the unit a store holds. Plain bytes, no tensor: the store
// is read and written the same way whatever torch the extension is built against.
struct Section {
  std::string name;
  int32_t dtype;         // element type code (store_format.h); unsupported: any other value
  std::string type_name; // how the caller names its element type, for the error naming it
  int32_t ndim;          // 1 or 2
  int64_t shape[2];      // a 1-D section's shape[1] is 1
  const void* data;      // C-contiguous elements
};

// Writes `sections` to `path` atomically: a temporary file in the same directory is written,
// fsync'ed and renamed over `path`, so a reader never sees a half-written store and a crash
// leaves any previous file intact.
void write_store(const std::string& path, const std::vector<Section>& sections,
                 const std::string& key);

class Mapping;

// A store file mapped read-only into memory. Every process that opens the same file shares its
// pages through the page cache; the data of the sections() it returns lies in the mapping, valid
// while this object lives.
class MappedStore {
 public:
  // Validates magic, version, header checksum, size and, if `verify_payload`, the checksum of all
  // data; throws StoreError naming the file and the problem.
  MappedStore(const std::string& path, bool verify_payload);

  const std::string& path() const { return path_; }
  std::string key() const;
  uint64_t file_size() const;
  std::vector<Section> sections() const;

 private:
  std::string path_;
  std::shared_ptr<Mapping> mapping_;
};

}  // namespace store
}  // namespace mmdet_ext
