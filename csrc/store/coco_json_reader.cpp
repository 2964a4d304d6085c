// Streaming COCO json reader (coco_json_reader.h): a rapidjson SAX handler that is a small state
// machine over the top-level object, the three record arrays and the fields of each record.
#include "coco_json_reader.h"

#ifdef MMDET_EXT_WITH_RAPIDJSON

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <rapidjson/error/en.h>
#include <rapidjson/filereadstream.h>
#include <rapidjson/reader.h>

namespace mmdet_ext {
namespace store {
namespace {

// Append-only column in fixed blocks: growing never copies (a std::vector of 25M boxes would
// briefly hold twice its size while it reallocates), and to_tensor frees each block as it copies.
// 64 MiB blocks: above glibc's largest mmap threshold (32 MiB), so each block is its own mapping
// and freeing it returns the memory to the system; smaller blocks would come from the heap and
// stay resident after the copy (untouched pages of a block cost nothing).
template <typename T>
class Column {
 public:
  static constexpr size_t kBlock = (size_t{64} << 20) / sizeof(T);
  void push(T value) {
    if (size_ % kBlock == 0 && size_ / kBlock == blocks_.size()) {
      blocks_.emplace_back(new T[kBlock]);
    }
    blocks_[size_ / kBlock][size_ % kBlock] = value;
    ++size_;
  }
  size_t size() const { return size_; }
  void truncate(size_t size) { size_ = std::min(size, size_); }  // blocks stay for reuse
  at::Tensor to_tensor(at::ScalarType dtype) {
    at::Tensor out = at::empty({static_cast<int64_t>(size_)}, at::TensorOptions().dtype(dtype));
    auto* dst = static_cast<char*>(out.data_ptr());
    for (size_t b = 0; b * kBlock < size_; ++b) {
      const size_t n = std::min(kBlock, size_ - b * kBlock);
      std::memcpy(dst + b * kBlock * sizeof(T), blocks_[b].get(), n * sizeof(T));
      blocks_[b].reset();
    }
    blocks_.clear();
    size_ = 0;
    return out;
  }

 private:
  std::vector<std::unique_ptr<T[]>> blocks_;
  size_t size_ = 0;
};

const char* type_name(char kind) {  // Python's name for a json value's type, as messages say it
  switch (kind) {
    case '{': return "dict";
    case '[': return "list";
    case 's': return "str";
    case 'i': return "int";
    case 'f': return "float";
    case 'b': return "bool";
    default: return "NoneType";
  }
}

// Byte offset of the first byte that is not valid UTF-8 in data[0, size) as Python's strict
// decoder sees it (no overlong forms, no surrogates, nothing past U+10FFFF), or -1. A character
// cut off at the end of the range counts as valid.
int64_t first_invalid_utf8(const uint8_t* data, int64_t size) {
  int64_t i = 0;
  while (i < size) {
    const uint8_t c = data[i];
    const int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n < 0 || (n == 1 && c < 0xC2) || (n == 3 && c > 0xF4)) return i;
    if (i + n >= size) return -1;
    for (int k = 1; k <= n; ++k) {
      if ((data[i + k] >> 6) != 2) return i;
    }
    const uint8_t d = n > 0 ? data[i + 1] : 0;
    if ((c == 0xE0 && d < 0xA0) || (c == 0xED && d >= 0xA0) || (c == 0xF0 && d < 0x90) ||
        (c == 0xF4 && d >= 0x90)) {
      return i;  // overlong, surrogate, or beyond U+10FFFF
    }
    i += n + 1;
  }
  return -1;
}

// A number rapidjson refuses as "too big to be stored in double" (1e400, 0e400, a 400-digit
// integer) where Python's json reads one (inf, 0.0, an int). `start` is its file offset, `text`
// its characters as written.
struct BigNumber {
  int64_t start;
  std::string text;
};

// Whether rapidjson may refuse `text`, a json number, as too big: a positive exponent above 300
// or more than 300 integer digits (rapidjson refuses from 309 on; the margin costs nothing but
// re-reading a number it would have read, to the same value). Text that is not a json number
// (-?int frac? exp?) is left to rapidjson, which refuses it with its own message.
bool may_be_too_big(const std::string& text) {
  const auto digits_from = [&text](size_t i) {
    size_t j = i;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
    return j - i;
  };
  size_t i = text[0] == '-' ? 1 : 0;
  const size_t int_digits = digits_from(i);
  if (int_digits == 0 || (int_digits > 1 && text[i] == '0')) return false;
  i += int_digits;
  if (i < text.size() && text[i] == '.') {
    const size_t frac_digits = digits_from(i + 1);
    if (frac_digits == 0) return false;
    i += 1 + frac_digits;
  }
  bool big_exponent = false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    const bool negative = i < text.size() && text[i] == '-';
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    const size_t exp_digits = digits_from(i);
    if (exp_digits == 0) return false;
    size_t first = i;
    while (first + 1 < i + exp_digits && text[first] == '0') ++first;  // leading zeros
    const size_t significant = i + exp_digits - first;
    big_exponent = !negative && (significant > 3 ||
                                 (significant == 3 && std::atoi(text.c_str() + first) > 300));
    i += exp_digits;
  }
  return i == text.size() && (int_digits > 300 || big_exponent);
}

// Every number token outside strings in the file (from byte `base`) that rapidjson may refuse as
// too big, in file order. A lexer of json's strings and numbers only: run once, and only after
// rapidjson has refused such a number, so well-formed files never pay for it.
std::vector<BigNumber> find_big_numbers(FILE* file, int64_t base) {
  std::vector<BigNumber> found;
  std::fseek(file, base, SEEK_SET);
  std::vector<char> buffer(1 << 16);
  bool in_string = false, escape = false, in_number = false;
  std::string number;
  int64_t offset = base, number_start = 0;
  auto end_number = [&]() {
    if (may_be_too_big(number)) found.push_back({number_start, number});
    in_number = false;
  };
  for (size_t got; (got = std::fread(buffer.data(), 1, buffer.size(), file)) > 0;) {
    for (size_t k = 0; k < got; ++k, ++offset) {
      const char c = buffer[k];
      if (in_string) {
        if (escape) {
          escape = false;
        } else if (c == '\\') {
          escape = true;
        } else if (c == '"') {
          in_string = false;
        }
        continue;
      }
      if (in_number) {
        if ((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
          number.push_back(c);
          continue;
        }
        end_number();
      }
      if (c == '"') {
        in_string = true;
      } else if (c == '-' || (c >= '0' && c <= '9')) {
        in_number = true;
        number.assign(1, c);
        number_start = offset;
      }
    }
  }
  if (in_number) end_number();
  return found;
}

// The file stream rapidjson parses, with each BigNumber shown as "0" padded with spaces to its
// length (so every byte offset stays the file's). The handler asks for the number that was
// there (take_big_number) and reads its real text itself.
class BigNumberStream {
 public:
  using Ch = char;
  BigNumberStream(rapidjson::FileReadStream* in, int64_t base, const std::vector<BigNumber>& big)
      : in_(in), base_(base), big_(big) {}

  Ch Peek() const { return shown(in_->Peek(), position()); }
  Ch Take() {
    const int64_t at = position();
    const Ch c = shown(in_->Take(), at);
    if (next_ < big_.size()) {
      const BigNumber& number = big_[next_];
      if (at == number.start) taken_ = &number;
      if (at + 1 >= number.start + static_cast<int64_t>(number.text.size())) ++next_;
    }
    return c;
  }
  size_t Tell() const { return in_->Tell(); }
  // Read-only stream: rapidjson's insitu interface is never used.
  Ch* PutBegin() { RAPIDJSON_ASSERT(false); return nullptr; }
  void Put(Ch) { RAPIDJSON_ASSERT(false); }
  void Flush() { RAPIDJSON_ASSERT(false); }
  size_t PutEnd(Ch*) { RAPIDJSON_ASSERT(false); return 0; }

  // The BigNumber whose text rapidjson has just read as "0", once; nullptr otherwise.
  const BigNumber* take_big_number() {
    const BigNumber* number = taken_;
    taken_ = nullptr;
    return number;
  }

 private:
  int64_t position() const { return base_ + static_cast<int64_t>(in_->Tell()); }
  Ch shown(Ch c, int64_t at) const {
    if (next_ < big_.size() && at >= big_[next_].start) return at == big_[next_].start ? '0' : ' ';
    return c;
  }

  rapidjson::FileReadStream* in_;
  int64_t base_;
  const std::vector<BigNumber>& big_;
  size_t next_ = 0;
  const BigNumber* taken_ = nullptr;
};

enum Section { kOther = -1, kImages = 0, kAnnotations = 1, kCategories = 2 };
const char* const kSectionNames[3] = {"images", "annotations", "categories"};

// A json number as the reader saw it: an integer (exactly) or a double.
struct Number {
  bool is_int = false;
  bool is_double = false;
  int64_t i = 0;
  double d = 0;
};

enum Field {
  kNoField, kId, kImageId, kCategoryId, kBbox, kArea, kIscrowd, kIgnore, kSegmentation,
  kFileName, kHeight, kWidth, kIrregularKey, kSkipField
};

class Handler {
 public:
  Handler(const std::string& path, BigNumberStream* stream, int64_t base,
          int64_t file_size, bool record_starts, const ReadProgress& progress)
      : path_(path), stream_(stream), base_(base), file_size_(file_size),
        record_starts_(record_starts), progress_(progress) {}

  std::string error;  // set when the handler stops the parse

  // --- rapidjson SAX interface -------------------------------------------------------------
  bool Null() { return scalar('n', Number()); }
  bool Bool(bool b) { Number n; n.i = b; return scalar('b', n); }
  bool Int(int i) { return integer(i); }
  bool Uint(unsigned u) { return integer(u); }
  bool Int64(int64_t i) { return integer(i); }
  bool Uint64(uint64_t u) {
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return scalar('I', Number());  // beyond int64: whatever field it is in is irregular
    }
    return integer(static_cast<int64_t>(u));
  }
  bool Double(double d) { Number n; n.is_double = true; n.d = d; return scalar('f', n); }
  // Numbers arrive as their text (kParseNumbersAsStringsFlag): std::from_chars rounds correctly
  // as Python's float() does, and is many times faster than rapidjson's full-precision path.
  bool RawNumber(const char* s, rapidjson::SizeType len, bool) {
    if (const BigNumber* big = stream_->take_big_number()) {
      // rapidjson read "0" where the file has a number too big for it: judge the real one.
      s = big->text.c_str();
      len = static_cast<rapidjson::SizeType>(big->text.size());
    }
    if (skip_depth_ > 0) return true;
    const char* end = s + len;
    bool is_integer = true;
    for (const char* p = s; p < end; ++p) {
      if (*p == '.' || *p == 'e' || *p == 'E' || *p == 'N' || *p == 'I') {
        is_integer = false;
        break;
      }
    }
    if (is_integer) {
      int64_t value = 0;
      const auto [ptr, ec] = std::from_chars(s, end, value);
      if (ec == std::errc() && ptr == end) return integer(value);
      return scalar('I', Number());  // beyond int64: Python's int, irregular for the columns
    }
    double value = 0;
    const bool minus = len > 0 && s[0] == '-';
    const char* body = minus ? s + 1 : s;
    if (body < end && *body == 'N') {
      value = std::numeric_limits<double>::quiet_NaN();
    } else if (body < end && *body == 'I') {
      value = minus ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
    } else {
      const auto [ptr, ec] = std::from_chars(s, end, value);
      if (ec == std::errc::result_out_of_range) {
        // Overflow to +-inf, underflow to +-0, as Python's float() gives them.
        value = std::strtod(std::string(s, len).c_str(), nullptr);
      } else if (ec != std::errc() || ptr != end) {
        return fail(c10::str("a number rapidjson accepted is not a number: ", std::string(s, len)));
      }
    }
    return Double(value);
  }
  bool String(const char* s, rapidjson::SizeType len, bool) {
    if (skip_depth_ > 0) return true;
    if (depth_ == 3 && field_ == kFileName && section_ == kImages) {
      if (len == 0 || std::memchr(s, 0, len) != nullptr ||
          first_invalid_utf8(reinterpret_cast<const uint8_t*>(s), len) >= 0) {
        // Python names the problem (a "\\udcxx" escape reads as a lone surrogate, which
        // rapidjson writes as bytes that are not UTF-8).
        irregular_ = true;
      } else {
        name_.assign(s, len);
        have_name_ = true;
      }
      field_ = kNoField;
      return true;
    }
    return scalar('s', Number());
  }
  bool Key(const char* s, rapidjson::SizeType len, bool) {
    if (skip_depth_ > 0) return true;
    const std::string key(s, len);
    if (depth_ == 1) {
      top_keys_ += key;
      top_keys_.push_back('\0');
      section_ = kOther;
      for (int k = 0; k < 3; ++k) {
        if (key == kSectionNames[k]) section_ = static_cast<Section>(k);
      }
      return true;
    }
    if (depth_ == 3) field_ = field_of(key);
    return true;
  }
  bool StartObject() { return open('{'); }
  bool StartArray() { return open('['); }
  bool EndObject(rapidjson::SizeType) { return close(); }
  bool EndArray(rapidjson::SizeType) { return close(); }

  // --- results -----------------------------------------------------------------------------
  std::vector<std::pair<std::string, at::Tensor>> columns();
  bool has_images() const { return section_ends_[kImages] >= 0; }
  const std::string& top_keys() const { return top_keys_; }  // NUL-terminated keys

 private:
  int64_t offset() const { return base_ + static_cast<int64_t>(stream_->Tell()); }

  bool fail(const std::string& message) {
    error = path_ + ": " + message;
    return false;
  }

  static Field field_of(const std::string& key) {
    if (key == "id") return kId;
    if (key == "image_id") return kImageId;
    if (key == "category_id") return kCategoryId;
    if (key == "bbox") return kBbox;
    if (key == "area") return kArea;
    if (key == "iscrowd") return kIscrowd;
    if (key == "ignore") return kIgnore;
    if (key == "segmentation") return kSegmentation;
    if (key == "file_name") return kFileName;
    if (key == "height") return kHeight;
    if (key == "width") return kWidth;
    if (key == "mask_file") return kIrregularKey;
    return kSkipField;
  }

  bool integer(int64_t value) {
    Number n;
    n.is_int = true;
    n.i = value;
    n.d = static_cast<double>(value);
    return scalar('i', n);
  }

  // A scalar value event; `kind` as in type_name ('I': an integer beyond int64).
  bool scalar(char kind, const Number& n) {
    if (skip_depth_ > 0) return true;
    if (depth_ == 0) return fail(c10::str("the json is a ", type_name(kind), ", not a COCO object "
                                          "with \"images\", \"annotations\", \"categories\""));
    if (depth_ == 1) {
      if (section_ != kOther) return not_a_list(type_name(kind));
      return true;
    }
    if (depth_ == 2) {
      if (section_ == kOther) return true;
      return fail(c10::str(kSectionNames[section_], "[", record_count(), "] is a ",
                           type_name(kind), ", not an object"));
    }
    if (section_ == kOther || section_ == kCategories) return true;
    if (depth_ == 3) return record_scalar(kind, n);
    // Inside bbox (depth 4) or a polygon part (depth 5).
    const bool number = kind == 'i' || kind == 'f';
    if (!number) {
      irregular_ = true;
      return true;
    }
    if (field_ == kBbox && depth_ == 4) {
      if (bbox_n_ < 4) bbox_[bbox_n_] = n.d;
      ++bbox_n_;
    } else if (field_ == kSegmentation && depth_ == 5) {
      coords_.push(n.d);
      ++part_len_;
    } else {
      irregular_ = true;  // a number directly in "segmentation": not a list of polygons
    }
    return true;
  }

  bool record_scalar(char kind, const Number& n) {
    const Field field = field_;
    field_ = kNoField;
    if (field == kSkipField || field == kNoField) return true;
    if (field == kIrregularKey) {
      irregular_ = true;
      return true;
    }
    if (section_ == kImages) {
      if (!n.is_int || (field != kId && n.i <= 0)) {
        if (field == kId || field == kHeight || field == kWidth || field == kFileName) {
          irregular_ = true;
        }
        return true;
      }
      if (field == kId) { img_.id = n.i; img_.have |= 1; }
      if (field == kHeight) { img_.h = n.i; img_.have |= 2; }
      if (field == kWidth) { img_.w = n.i; img_.have |= 4; }
      return true;
    }
    // Annotations.
    switch (field) {
      case kId:
      case kImageId:
      case kCategoryId:
        if (!n.is_int) {
          irregular_ = true;
        } else if (field == kId) {
          ann_.id = n.i;
          ann_.have |= 1;
        } else if (field == kImageId) {
          ann_.image_id = n.i;
          ann_.have |= 2;
        } else {
          ann_.category_id = n.i;
          ann_.have |= 4;
        }
        return true;
      case kArea:
        if (!n.is_int && !n.is_double) irregular_ = true;
        ann_.area = n.d;
        return true;
      case kIscrowd:
      case kIgnore: {
        // json.loads gives True/False or 0/1, which Python compares equal; anything else is
        // Python's to judge.
        const bool ok = (kind == 'b' || kind == 'i') && (n.i == 0 || n.i == 1);
        if (!ok) irregular_ = true;
        (field == kIscrowd ? ann_.iscrowd : ann_.ignore) = static_cast<uint8_t>(n.i);
        return true;
      }
      case kSegmentation:
        if (kind != 'n') irregular_ = true;  // null is "no segmentation", as in Python
        return true;
      default:
        irregular_ = true;  // bbox not a list, ...
        return true;
    }
  }

  bool not_a_list(const char* type) {
    return fail(c10::str("\"", kSectionNames[section_], "\" is a ", type, ", not a list"));
  }

  size_t record_count() const {
    switch (section_) {
      case kImages: return img_count_;
      case kAnnotations: return ann_count_;
      default: return cat_count_;
    }
  }

  bool open(char kind) {
    if (skip_depth_ > 0) {
      ++skip_depth_;
      return true;
    }
    if (depth_ == 0 && kind != '{') {
      return fail("the json is a list, not a COCO object with \"images\", \"annotations\", "
                  "\"categories\"");
    }
    if (depth_ == 1 && section_ != kOther) {
      if (kind != '[') return not_a_list("dict");
      if (seen_[section_]) {
        // A repeated key: json.loads keeps the last; so do the columns only if we start over,
        // which a streaming reader cannot. Rare enough to refuse with a clear message.
        return fail(c10::str("\"", kSectionNames[section_], "\" appears twice at the top level"));
      }
      seen_[section_] = true;
    }
    if (depth_ == 1 && section_ == kOther) return skip();
    if (depth_ == 2) {
      if (section_ == kOther) return skip();
      if (kind != '{') {
        return fail(c10::str(kSectionNames[section_], "[", record_count(), "] is a list, not an "
                             "object"));
      }
      begin_record();
      if (section_ == kCategories) {
        skip();  // read by Python from its span
        return true;
      }
    }
    if (depth_ == 3) {
      const Field field = field_;
      if (section_ == kImages) {
        if (field == kId || field == kHeight || field == kWidth || field == kFileName) {
          irregular_ = true;
        }
        field_ = kNoField;
        return skip();
      }
      // Annotations: only bbox and segmentation lists are read.
      if (field == kBbox && kind == '[') {
        if (have_bbox_) irregular_ = true;
        have_bbox_ = true;
        bbox_n_ = 0;
      } else if (field == kSegmentation && kind == '[') {
        if (kind_ != 0) irregular_ = true;  // given twice
        kind_ = 1;
      } else {
        if (field != kSkipField && field != kNoField) irregular_ = true;
        field_ = kNoField;
        return skip();
      }
    } else if (depth_ == 4) {
      // A polygon part inside "segmentation"; anything else at this depth is irregular.
      if (field_ == kSegmentation && kind == '[') {
        part_len_ = 0;
      } else {
        irregular_ = true;
        return skip();
      }
    } else if (depth_ >= 5) {
      irregular_ = true;
      return skip();
    }
    ++depth_;
    return true;
  }

  bool skip() {
    skip_depth_ = 1;
    return true;
  }

  bool close() {
    if (skip_depth_ > 0) {
      if (--skip_depth_ > 0) return true;
      // The skipped container has ended; it was at depth_ (not counted in depth_).
      if (depth_ == 2 && section_ == kCategories) end_record();
      return true;
    }
    --depth_;
    if (depth_ == 1 && section_ != kOther) {
      section_ends_[section_] = offset() + 1;
    } else if (depth_ == 2) {
      end_record();
    } else if (depth_ == 3) {
      field_ = kNoField;  // the bbox or segmentation list has ended
    } else if (depth_ == 4) {
      part_lens_.push(part_len_);
      ++nparts_;
    }
    return true;
  }

  void begin_record() {
    record_start_ = offset();
    irregular_ = false;
    img_ = Image();
    ann_ = Annotation();
    have_name_ = false;
    have_bbox_ = false;
    bbox_n_ = 0;
    kind_ = 0;
    nparts_ = 0;
    coords_mark_ = coords_.size();
    parts_mark_ = part_lens_.size();
    field_ = kNoField;
  }

  void end_record() {
    const int64_t end = offset() + 1;
    if (section_ == kCategories) {
      spans_[kCategories].push_back({static_cast<int64_t>(cat_count_++), record_start_, end});
      return;
    }
    if (section_ == kImages) {
      if (img_.have != 7 || !have_name_) irregular_ = true;
      if (irregular_) {
        spans_[kImages].push_back({static_cast<int64_t>(img_count_), record_start_, end});
        img_name_len_.push(0);
      } else {
        img_name_len_.push(static_cast<int64_t>(name_.size()));
        for (char c : name_) name_bytes_.push(static_cast<uint8_t>(c));
      }
      img_id_.push(img_.id);
      img_h_.push(img_.h);
      img_w_.push(img_.w);
      img_start_.push(record_start_);
      img_irregular_.push(irregular_);
      ++img_count_;
      return;
    }
    // Annotations.
    if (ann_.have != 7 || !have_bbox_ || bbox_n_ != 4) irregular_ = true;
    if (kind_ == 1 && nparts_ == 0) irregular_ = true;  // "segmentation": [] is Python's case
    if (irregular_) {
      spans_[kAnnotations].push_back({static_cast<int64_t>(ann_count_), record_start_, end});
      coords_.truncate(coords_mark_);
      part_lens_.truncate(parts_mark_);
      nparts_ = 0;
    }
    ann_id_.push(ann_.id);
    ann_image_id_.push(ann_.image_id);
    ann_category_id_.push(ann_.category_id);
    for (int k = 0; k < 4; ++k) ann_bbox_.push(irregular_ ? 0.0 : bbox_[k]);
    ann_area_.push(ann_.area);
    ann_iscrowd_.push(ann_.iscrowd);
    ann_ignore_.push(ann_.ignore);
    ann_kind_.push(irregular_ ? 2 : kind_);
    ann_nparts_.push(nparts_);
    if (record_starts_) ann_start_.push(record_start_);
    ++ann_count_;
    if (progress_ && offset() >= next_progress_) {
      next_progress_ = offset() + (64 << 20);
      progress_(offset(), file_size_);
    }
  }

  struct Image {
    int64_t id = 0, h = 0, w = 0;
    int have = 0;
  };
  struct Annotation {
    int64_t id = 0, image_id = 0, category_id = 0;
    double area = 0.0;
    uint8_t iscrowd = 0, ignore = 0;
    int have = 0;
  };
  struct Span {
    int64_t index, start, end;
  };

  const std::string& path_;
  BigNumberStream* stream_;
  int64_t base_;
  int64_t file_size_;
  bool record_starts_;
  const ReadProgress& progress_;
  int64_t next_progress_ = 0;

  int depth_ = 0;       // open containers we track (skipped ones are counted in skip_depth_)
  int skip_depth_ = 0;  // >0 while inside a skipped container
  Section section_ = kOther;
  bool seen_[3] = {false, false, false};
  std::string top_keys_;
  int64_t section_ends_[3] = {-1, -1, -1};
  size_t img_count_ = 0, ann_count_ = 0, cat_count_ = 0;

  // The record being read.
  int64_t record_start_ = 0;
  bool irregular_ = false;
  Field field_ = kNoField;
  Image img_;
  Annotation ann_;
  std::string name_;
  bool have_name_ = false;
  bool have_bbox_ = false;
  int bbox_n_ = 0;
  double bbox_[4] = {0, 0, 0, 0};
  uint8_t kind_ = 0;
  int32_t nparts_ = 0;
  int32_t part_len_ = 0;
  size_t coords_mark_ = 0, parts_mark_ = 0;

  Column<int64_t> img_id_, img_h_, img_w_, img_name_len_, img_start_;
  Column<uint8_t> name_bytes_, img_irregular_;
  Column<int64_t> ann_id_, ann_image_id_, ann_category_id_, ann_start_;
  Column<double> ann_bbox_, ann_area_, coords_;
  Column<uint8_t> ann_iscrowd_, ann_ignore_, ann_kind_;
  Column<int32_t> ann_nparts_, part_lens_;
  std::vector<Span> spans_[3];

};

std::vector<std::pair<std::string, at::Tensor>> Handler::columns() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  auto add = [&out](const char* name, at::Tensor t) { out.emplace_back(name, std::move(t)); };
  add("img_id", img_id_.to_tensor(at::kLong));
  add("img_h", img_h_.to_tensor(at::kLong));
  add("img_w", img_w_.to_tensor(at::kLong));
  add("img_name_len", img_name_len_.to_tensor(at::kLong));
  add("img_name_bytes", name_bytes_.to_tensor(at::kByte));
  add("img_start", img_start_.to_tensor(at::kLong));
  add("img_irregular", img_irregular_.to_tensor(at::kByte));
  add("ann_id", ann_id_.to_tensor(at::kLong));
  add("ann_image_id", ann_image_id_.to_tensor(at::kLong));
  add("ann_category_id", ann_category_id_.to_tensor(at::kLong));
  add("ann_bbox", ann_bbox_.to_tensor(at::kDouble));
  add("ann_area", ann_area_.to_tensor(at::kDouble));
  add("ann_iscrowd", ann_iscrowd_.to_tensor(at::kByte));
  add("ann_ignore", ann_ignore_.to_tensor(at::kByte));
  add("ann_kind", ann_kind_.to_tensor(at::kByte));
  add("ann_nparts", ann_nparts_.to_tensor(at::kInt));
  add("part_len", part_lens_.to_tensor(at::kInt));
  add("coords", coords_.to_tensor(at::kDouble));
  if (record_starts_) add("ann_start", ann_start_.to_tensor(at::kLong));
  for (int k = 0; k < 3; ++k) {
    at::Tensor spans = at::empty({static_cast<int64_t>(spans_[k].size()) * 3}, at::kLong);
    auto* p = spans.data_ptr<int64_t>();
    for (const Span& s : spans_[k]) {
      *p++ = s.index;
      *p++ = s.start;
      *p++ = s.end;
    }
    out.emplace_back(std::string(kSectionNames[k]) + "_spans", spans);
  }
  at::Tensor keys = at::empty({static_cast<int64_t>(top_keys_.size())}, at::kByte);
  std::memcpy(keys.data_ptr(), top_keys_.data(), top_keys_.size());
  add("top_keys", keys);
  at::Tensor ends = at::empty({3}, at::kLong);
  for (int k = 0; k < 3; ++k) ends.data_ptr<int64_t>()[k] = section_ends_[k];
  add("section_ends", ends);
  return out;
}

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> read_coco_json(const std::string& path,
                                                               bool record_starts,
                                                               const ReadProgress& progress) {
  std::unique_ptr<FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) throw CocoJsonError(path + ": cannot be opened: " + std::strerror(errno));
  std::fseek(file.get(), 0, SEEK_END);
  const int64_t size = std::ftell(file.get());
  std::fseek(file.get(), 0, SEEK_SET);
  // A UTF-8 byte order mark before the json is harmless (Python reads it as utf-8-sig).
  unsigned char bom[3] = {0, 0, 0};
  const size_t got = std::fread(bom, 1, 3, file.get());
  const bool has_bom = got == 3 && bom[0] == 0xEF && bom[1] == 0xBB && bom[2] == 0xBF;
  const int64_t base = has_bom ? 3 : 0;
  std::fseek(file.get(), base, SEEK_SET);

  std::vector<char> buffer(1 << 16);
  constexpr unsigned kFlags = rapidjson::kParseIterativeFlag |
                              rapidjson::kParseNumbersAsStringsFlag |
                              rapidjson::kParseNanAndInfFlag |
                              rapidjson::kParseValidateEncodingFlag;
  std::vector<BigNumber> big_numbers;
  std::unique_ptr<rapidjson::FileReadStream> file_stream;
  std::unique_ptr<BigNumberStream> stream;
  std::unique_ptr<Handler> handler_owner;
  rapidjson::ParseResult result;
  // rapidjson refuses a number too big for a double (1e400) that json.loads reads as inf: the
  // file is then parsed once more with those numbers hidden from rapidjson (BigNumberStream), so
  // they reach the records as Infinity does, and validation decides, as with the Python reader.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::fseek(file.get(), base, SEEK_SET);
    file_stream = std::make_unique<rapidjson::FileReadStream>(file.get(), buffer.data(),
                                                              buffer.size());
    stream = std::make_unique<BigNumberStream>(file_stream.get(), base, big_numbers);
    handler_owner = std::make_unique<Handler>(path, stream.get(), base, size, record_starts,
                                              progress);
    rapidjson::Reader reader;
    result = reader.Parse<kFlags>(*stream, *handler_owner);
    if (result || result.Code() != rapidjson::kParseErrorNumberTooBig || attempt > 0) break;
    big_numbers = find_big_numbers(file.get(), base);
    if (big_numbers.empty()) break;  // not expected (the lexer finds a superset): the error stands
    handler_owner.reset();  // frees its columns before the next parse makes new ones
  }
  Handler& handler = *handler_owner;
  if (!result) {
    if (!handler.error.empty()) throw CocoJsonError(handler.error);
    const int64_t at = base + static_cast<int64_t>(result.Offset());
    // Is the file UTF-8 up to where the parse stopped? A latin-1 byte outside a string is a
    // syntax error to rapidjson; to the user it is an encoding problem.
    const int64_t from = std::max<int64_t>(0, at - 4096);
    const int64_t window = std::min<int64_t>(size, at + 8) - from;
    std::vector<uint8_t> bytes(static_cast<size_t>(std::max<int64_t>(window, 0)));
    std::fseek(file.get(), from, SEEK_SET);
    const size_t read = std::fread(bytes.data(), 1, bytes.size(), file.get());
    int64_t bad = first_invalid_utf8(bytes.data(), static_cast<int64_t>(read));
    if (from > 0 && bad >= 0 && bad < 4) bad = -1;  // may be a character the window cut
    if (result.Code() == rapidjson::kParseErrorStringInvalidEncoding || bad >= 0) {
      const int64_t where = bad >= 0 ? from + bad : at;
      throw CocoJsonError(c10::str(path, ": not UTF-8 at byte ", where, "; json must be UTF-8 "
                                   "(a file name written in latin-1? a UTF-16 file?)"));
    }
    std::string message = c10::str(path, ": not valid json at byte ", at, " of ", size, ": ",
                                   rapidjson::GetParseError_En(result.Code()));
    if (result.Code() == rapidjson::kParseErrorDocumentEmpty) {
      message += "; the file is empty";
    } else if (at >= size) {
      message += "; the file looks truncated";
    }
    throw CocoJsonError(message);
  }
  if (!handler.has_images()) {
    std::string keys;
    size_t start = 0;
    for (int shown = 0; start < handler.top_keys().size() && shown < 10; ++shown) {
      const size_t end = handler.top_keys().find('\0', start);
      keys += (shown ? ", '" : "'") + handler.top_keys().substr(start, end - start) + "'";
      start = end + 1;
    }
    throw CocoJsonError(c10::str(path, ": no \"images\" list (keys: [", keys, "]): not a COCO "
                                 "instances json"));
  }
  return handler.columns();
}

}  // namespace store
}  // namespace mmdet_ext

#endif  // MMDET_EXT_WITH_RAPIDJSON
