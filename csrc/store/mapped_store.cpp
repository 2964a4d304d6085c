#include "mapped_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "store_format.h"

namespace mmdet_ext {
namespace store {

namespace {

std::string errno_text() { return std::strerror(errno); }

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw StoreError("annotation store " + path + ": " + problem);
}

uint64_t align_up(uint64_t value) { return (value + kAlignment - 1) / kAlignment * kAlignment; }

// Closes the descriptor on every path out of write_store/MappedStore.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

void write_all(int fd, const void* data, uint64_t size, const std::string& path) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t written = ::write(fd, bytes, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      fail(path, "write failed: " + errno_text());
    }
    bytes += written;
    size -= static_cast<uint64_t>(written);
  }
}

uint64_t header_checksum(Header header) {
  header.header_checksum = 0;
  return checksum64(reinterpret_cast<const uint8_t*>(&header), sizeof(Header));
}

// Strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), as Python decodes it:
// section names become Python str.
bool valid_utf8(const std::string& text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
    else return false;
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
      return false;
    }
    i += len;
  }
  return true;
}

std::string directory_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

}  // namespace

class Mapping {
 public:
  Mapping(void* data, uint64_t size) : data_(data), size_(size) {}
  ~Mapping() { ::munmap(data_, size_); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const uint8_t* bytes() const { return static_cast<const uint8_t*>(data_); }
  uint64_t size() const { return size_; }

 private:
  void* data_;
  uint64_t size_;
};

void write_store(const std::string& path, const std::vector<Section>& sections,
                 const std::string& key) {
  if (key.size() != kKeyBytes) fail(path, "the key must be " + std::to_string(kKeyBytes) + " bytes");
  std::vector<SectionEntry> table(sections.size());
  uint64_t offset = align_up(sizeof(Header) + sizeof(SectionEntry) * sections.size());
  for (size_t i = 0; i < sections.size(); ++i) {
    const Section& section = sections[i];
    const std::string& name = section.name;
    if (name.empty() || name.size() >= kMaxSectionName) fail(path, "bad section name '" + name + "'");
    if (section.ndim != 1 && section.ndim != 2) {
      fail(path, "section '" + name + "' must be a 1-D or 2-D array");
    }
    const uint64_t item = element_size(section.dtype);
    if (item == 0) {
      fail(path, "section '" + name + "' has dtype " + section.type_name +
                     "; a store holds uint8, int8, uint16, int16, uint32, int32, int64, float16, "
                     "float32 or float64");
    }
    if (!valid_utf8(name)) fail(path, "section name is not UTF-8");
    for (size_t j = 0; j < i; ++j) {
      if (sections[j].name == name) fail(path, "two sections named '" + name + "'");
    }
    SectionEntry& entry = table[i];
    std::memset(&entry, 0, sizeof(entry));
    std::memcpy(entry.name, name.data(), name.size());
    entry.dtype = section.dtype;
    entry.ndim = section.ndim;
    entry.shape[0] = section.shape[0];
    entry.shape[1] = section.ndim == 2 ? section.shape[1] : 1;
    entry.offset = offset;
    entry.nbytes = static_cast<uint64_t>(entry.shape[0]) * static_cast<uint64_t>(entry.shape[1]) *
                   item;
    offset = align_up(offset + entry.nbytes);
  }

  // Assemble in memory: the checksum needs every byte, and one sequential write is fastest.
  std::vector<uint8_t> file(offset, 0);
  Header header;
  std::memset(&header, 0, sizeof(header));
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = kFormatVersion;
  header.num_sections = static_cast<uint32_t>(sections.size());
  header.file_size = offset;
  std::memcpy(header.key, key.data(), kKeyBytes);
  // Empty vectors/tensors may have null data pointers, and memcpy from null is UB even for 0 bytes.
  if (!table.empty()) {
    std::memcpy(file.data() + sizeof(Header), table.data(), sizeof(SectionEntry) * table.size());
  }
  for (size_t i = 0; i < sections.size(); ++i) {
    if (table[i].nbytes > 0) {
      std::memcpy(file.data() + table[i].offset, sections[i].data, table[i].nbytes);
    }
  }
  header.payload_checksum = checksum64(file.data() + sizeof(Header), offset - sizeof(Header));
  header.header_checksum = header_checksum(header);
  std::memcpy(file.data(), &header, sizeof(Header));

  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  {
    FileDescriptor fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) fail(path, "cannot create " + temporary + ": " + errno_text());
    try {
      write_all(fd.get(), file.data(), file.size(), temporary);
      if (::fsync(fd.get()) != 0) fail(path, "fsync failed: " + errno_text());
    } catch (...) {
      ::unlink(temporary.c_str());
      throw;
    }
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string reason = errno_text();
    ::unlink(temporary.c_str());
    fail(path, "cannot rename the finished store into place: " + reason);
  }
  FileDescriptor dir(::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() >= 0) ::fsync(dir.get());  // make the rename itself durable
}

MappedStore::MappedStore(const std::string& path, bool verify_payload) : path_(path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(path, "cannot open: " + errno_text());
  struct stat info;
  if (::fstat(fd.get(), &info) != 0) fail(path, "cannot stat: " + errno_text());
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  if (size < sizeof(Header)) {
    fail(path, "truncated: " + std::to_string(size) + " bytes, smaller than the header");
  }
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (data == MAP_FAILED) fail(path, "mmap failed: " + errno_text());
  mapping_ = std::make_shared<Mapping>(data, size);

  Header header;
  std::memcpy(&header, mapping_->bytes(), sizeof(Header));
  if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0) {
    fail(path, "not an mmdet_ext annotation store (bad magic)");
  }
  if (header.version != kFormatVersion) {
    fail(path, "format version " + std::to_string(header.version) + ", this build reads version " +
                   std::to_string(kFormatVersion));
  }
  if (header.header_checksum != header_checksum(header)) fail(path, "corrupt header (checksum)");
  if (header.file_size != size) {
    fail(path, "truncated or padded: header says " + std::to_string(header.file_size) +
                   " bytes, the file has " + std::to_string(size));
  }
  const uint64_t table_end = sizeof(Header) + sizeof(SectionEntry) * uint64_t{header.num_sections};
  if (table_end > size) fail(path, "corrupt section table (runs past the end of the file)");
  if (verify_payload &&
      checksum64(mapping_->bytes() + sizeof(Header), size - sizeof(Header)) !=
          header.payload_checksum) {
    fail(path, "corrupt data (payload checksum mismatch)");
  }
  sections();  // validates every entry's bounds and type
}

std::string MappedStore::key() const {
  Header header;
  std::memcpy(&header, mapping_->bytes(), sizeof(Header));
  return std::string(reinterpret_cast<const char*>(header.key), kKeyBytes);
}

uint64_t MappedStore::file_size() const { return mapping_->size(); }

std::vector<Section> MappedStore::sections() const {
  Header header;
  std::memcpy(&header, mapping_->bytes(), sizeof(Header));
  std::vector<Section> result;
  // Section data starts after the header and the table (the writer aligns it up to kAlignment).
  const uint64_t table_end = sizeof(Header) + sizeof(SectionEntry) * uint64_t{header.num_sections};
  for (uint32_t i = 0; i < header.num_sections; ++i) {
    SectionEntry entry;
    std::memcpy(&entry, mapping_->bytes() + sizeof(Header) + i * sizeof(SectionEntry),
                sizeof(SectionEntry));
    const std::string name(entry.name, strnlen(entry.name, kMaxSectionName));
    if (name.empty() || name.size() == kMaxSectionName) fail(path_, "corrupt section name");
    // Names become Python str: bytes that are not UTF-8 would raise UnicodeDecodeError there.
    if (!valid_utf8(name)) fail(path_, "corrupt section name (not UTF-8)");
    for (const Section& other : result) {
      if (other.name == name) {
        fail(path_, "corrupt section table (two sections named '" + name + "')");
      }
    }
    if (entry.ndim != 1 && entry.ndim != 2) fail(path_, "section '" + name + "' has bad rank");
    const uint64_t item = element_size(entry.dtype);
    if (item == 0) {
      fail(path_, "section '" + name + "' has an unknown or unsupported dtype " +
                      std::to_string(entry.dtype));
    }
    // A 1-D section's shape[1] is 1: the size check below must cover every element of the view.
    // Checked products: a shape whose byte size wraps around 2^64 must not pass as small.
    uint64_t numel = 0, nbytes = 0;
    if (entry.shape[0] < 0 || entry.shape[1] < 0 || (entry.ndim == 1 && entry.shape[1] != 1) ||
        __builtin_mul_overflow(static_cast<uint64_t>(entry.shape[0]),
                               static_cast<uint64_t>(entry.shape[1]), &numel) ||
        __builtin_mul_overflow(numel, item, &nbytes) ||
        entry.offset % kAlignment != 0 || entry.nbytes != nbytes || entry.offset < table_end ||
        entry.offset > mapping_->size() || entry.nbytes > mapping_->size() - entry.offset) {
      fail(path_, "section '" + name + "' lies outside the file or disagrees with its shape");
    }
    // The mapping is read-only: Python exposes the sections only as read-only arrays.
    result.push_back(Section{name, entry.dtype, "", entry.ndim, {entry.shape[0], entry.shape[1]},
                             mapping_->bytes() + entry.offset});
  }
  return result;
}

}  // namespace store
}  // namespace mmdet_ext
