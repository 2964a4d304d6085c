// JPEG decoding on libjpeg(-turbo) with the settings OpenCV's JpegDecoder uses (out_color_space
// JCS_EXT_BGR / JCS_GRAYSCALE, libjpeg's defaults otherwise: islow IDCT, fancy upsampling), so
// the pixels are the ones cv2.imdecode returns -- except that libjpeg's warnings are errors.
// libjpeg only *warns* about corrupt entropy-coded data ("Corrupt JPEG data: premature end of
// data segment", "... extraneous bytes before marker") and carries on with made-up pixels, and
// cv::imdecode ignores warnings: silent wrong data.
#include "jpeg_decoder.h"

#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t first

#include <jerror.h>
#include <jpeglib.h>

#include <c10/util/Exception.h>

#include "exif_orientation.h"

namespace mmdet_ext {
namespace {

static_assert(BITS_IN_JSAMPLE == 8, "decode_image needs the 8-bit libjpeg API");

struct StrictErrorManager {
  jpeg_error_mgr pub;  // first member: libjpeg passes cinfo->err to the callbacks
  std::jmp_buf jump;
  bool warning = false;
  char message[JMSG_LENGTH_MAX] = {};
};

// Warnings about the header alone, after which libjpeg decodes the data exactly as specified.
bool is_harmless_warning(int code) {
  return code == JWRN_JFIF_MAJOR       // unknown JFIF version in APP0
         || code == JWRN_NOT_SEQUENTIAL;  // progression fields set in a baseline SOS, ignored
}

// Never returns: libjpeg's error_exit must not, and its state after a warning is not to be
// trusted, so both end the decode at the setjmp in JpegSession::run.
[[noreturn]] void bail_out(j_common_ptr cinfo, bool warning) {
  auto* errors = reinterpret_cast<StrictErrorManager*>(cinfo->err);
  errors->warning = warning;
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

void on_error(j_common_ptr cinfo) { bail_out(cinfo, false); }

void on_message(j_common_ptr cinfo, int msg_level) {
  // msg_level -1 is a warning; 0 and up are trace messages, off by default
  if (msg_level < 0 && !is_harmless_warning(cinfo->err->msg_code)) bail_out(cinfo, true);
}

// A jpeg_decompress_struct that is destroyed on every path, and the one place libjpeg is called
// from. No object with a destructor may live between run()'s setjmp and libjpeg's longjmp, so
// the steps are lambdas over plain pointers and integers.
class JpegSession {
 public:
  JpegSession() {
    cinfo_.err = jpeg_std_error(&errors_.pub);
    errors_.pub.error_exit = on_error;
    errors_.pub.emit_message = on_message;
  }
  ~JpegSession() { jpeg_destroy_decompress(&cinfo_); }  // a no-op before jpeg_create_decompress
  JpegSession(const JpegSession&) = delete;
  JpegSession& operator=(const JpegSession&) = delete;

  // Runs `step` on the decompressor; false when libjpeg raised an error or a warning.
  template <typename Step>
  bool run(Step&& step) {
    if (setjmp(errors_.jump) != 0) return false;
    step(&cinfo_);
    return true;
  }

  jpeg_decompress_struct& cinfo() { return cinfo_; }
  int error_code() const { return errors_.pub.msg_code; }

  // Throws the error (or warning) that made run() return false.
  void fail(int64_t size) const {
    TORCH_CHECK(!errors_.warning, "decode_image: corrupt JPEG data in the ", size,
                "-byte buffer (libjpeg: ", errors_.message, ")");
    TORCH_CHECK(false, "decode_image: cannot decode the ", size, "-byte JPEG (libjpeg: ",
                errors_.message, ")");
  }

 private:
  jpeg_decompress_struct cinfo_{};  // zeroed, so that destroying it before creation is safe
  StrictErrorManager errors_{};
};

// OpenCV's JpegDecoder takes the first APP1 segment for EXIF, whatever it holds.
int first_app1_orientation(const jpeg_decompress_struct& cinfo) {
  for (jpeg_saved_marker_ptr marker = cinfo.marker_list; marker != nullptr;
       marker = marker->next) {
    if (marker->marker == JPEG_APP0 + 1) {
      return read_exif_orientation(marker->data, marker->data_length);
    }
  }
  return 1;
}

// A progressive JPEG whose scans stop before every DCT coefficient of every component is coded
// to its last bit -- a file cut at a scan boundary with an EOI after it, or a damaged scan
// header -- gets no libjpeg warning: libjpeg estimates the missing coefficients ("block
// smoothing"), and libjpeg-turbo versions estimate differently (Debian's 2.1.5 against the
// opencv-python wheel's 3.0.3: up to 6 levels apart), so the pixels would be neither the image
// nor cv2's. Call after jpeg_start_decompress, which reads every scan of a progressive JPEG.
void check_progression_complete(const jpeg_decompress_struct& cinfo, int64_t size) {
  if (!cinfo.progressive_mode || cinfo.coef_bits == nullptr) return;
  for (int component = 0; component < cinfo.num_components; ++component) {
    for (int k = 0; k < DCTSIZE2; ++k) {
      // -1: no scan coded this coefficient; otherwise the point transform Al of its last scan
      const int bits = cinfo.coef_bits[component][k];
      TORCH_CHECK(bits == 0, "decode_image: incomplete progressive JPEG in the ", size,
                  "-byte buffer: the scans end before coefficient ", k, " of component ",
                  component, (bits < 0 ? " is coded" : " is refined to its last bit"),
                  " (a file cut short at a scan boundary?)");
    }
  }
}

// Entropy-decodes every scan, at 1/8 size to spend little on the IDCT, so that corrupt data is
// an error even when the pixels come from cv::imdecode (4-component JPEGs).
void check_scans(JpegSession& session, int64_t size) {
  jpeg_decompress_struct& cinfo = session.cinfo();
  cinfo.out_color_space = JCS_CMYK;
  cinfo.scale_num = 1;
  cinfo.scale_denom = 8;
  if (!session.run([](j_decompress_ptr cinfo) { jpeg_start_decompress(cinfo); })) {
    session.fail(size);
  }
  check_progression_complete(cinfo, size);
  const bool ok = session.run([](j_decompress_ptr cinfo) {
    JSAMPARRAY row = (*cinfo->mem->alloc_sarray)(
        reinterpret_cast<j_common_ptr>(cinfo), JPOOL_IMAGE,
        cinfo->output_width * cinfo->output_components, 1);
    while (cinfo->output_scanline < cinfo->output_height) {
      if (jpeg_read_scanlines(cinfo, row, 1) != 1) return;  // cannot happen with jpeg_mem_src
    }
    jpeg_finish_decompress(cinfo);
  });
  if (!ok) session.fail(size);
}

}  // namespace

std::string libjpeg_version() {
#ifdef LIBJPEG_TURBO_VERSION_NUMBER  // MMMmmmppp
  constexpr int kNumber = LIBJPEG_TURBO_VERSION_NUMBER;
  return std::to_string(kNumber / 1000000) + "." + std::to_string(kNumber / 1000 % 1000) + "." +
         std::to_string(kNumber % 1000);
#else
  return std::to_string(JPEG_LIB_VERSION);
#endif
}

bool is_jpeg(const uint8_t* data, int64_t size) {
  return size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

std::optional<DecodedJpeg> decode_jpeg(const uint8_t* data, int64_t size, JpegOutput output,
                                       int scale_denom, bool read_orientation,
                                       int64_t max_pixels) {
  JpegSession session;
  const bool header_ok = session.run([&](j_decompress_ptr cinfo) {
    jpeg_create_decompress(cinfo);
    jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
    if (read_orientation) jpeg_save_markers(cinfo, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(cinfo, TRUE);
  });
  if (!header_ok) {
    if (session.error_code() == JERR_BAD_PRECISION) return std::nullopt;  // 12-bit: OpenCV's
    session.fail(size);
  }
  jpeg_decompress_struct& cinfo = session.cinfo();
  // Checked on the declared size, not the (reduced) output size as OpenCV does: libjpeg keeps a
  // progressive JPEG's coefficients at full size whatever the scale, so a small file declaring a
  // huge image would otherwise allocate gigabytes (a decompression bomb).
  const int64_t declared = int64_t{cinfo.image_width} * cinfo.image_height;
  TORCH_CHECK(declared <= max_pixels, "decode_image: the JPEG declares ", cinfo.image_width, "x",
              cinfo.image_height, " pixels, more than max_pixels=", max_pixels,
              " (decompression bomb?); raise max_pixels if it is genuine");
  if (cinfo.num_components == 4) {
    check_scans(session, size);
    return std::nullopt;
  }

  DecodedJpeg decoded;
  if (read_orientation) decoded.orientation = first_app1_orientation(cinfo);
  // As cv::imdecode: IMREAD_UNCHANGED is colour for a JPEG of more than one component.
  const bool color = output == JpegOutput::kBgr ||
                     (output == JpegOutput::kUnchanged && cinfo.num_components > 1);
  cinfo.out_color_space = color ? JCS_EXT_BGR : JCS_GRAYSCALE;
  cinfo.scale_num = 1;
  cinfo.scale_denom = static_cast<unsigned int>(scale_denom);
  if (!session.run([](j_decompress_ptr cinfo) { jpeg_calc_output_dimensions(cinfo); })) {
    session.fail(size);
  }
  const int height = static_cast<int>(cinfo.output_height);  // <= 65500, libjpeg's limit
  const int width = static_cast<int>(cinfo.output_width);

  cv::Mat image(height, width, color ? CV_8UC3 : CV_8UC1);
  uint8_t* const pixels = image.data;
  const size_t stride = image.step[0];
  if (!session.run([](j_decompress_ptr cinfo) { jpeg_start_decompress(cinfo); })) {
    session.fail(size);
  }
  check_progression_complete(cinfo, size);
  const bool ok = session.run([pixels, stride](j_decompress_ptr cinfo) {
    while (cinfo->output_scanline < cinfo->output_height) {
      JSAMPROW row = pixels + stride * cinfo->output_scanline;
      if (jpeg_read_scanlines(cinfo, &row, 1) != 1) return;  // cannot happen with jpeg_mem_src
    }
    // Reads up to EOI: trailing garbage in the last scan is reported here.
    jpeg_finish_decompress(cinfo);
  });
  if (!ok) session.fail(size);
  TORCH_CHECK(cinfo.output_scanline == cinfo.output_height, "decode_image: libjpeg stopped after ",
              cinfo.output_scanline, " of ", height, " rows");
  decoded.image = image;
  return decoded;
}

}  // namespace mmdet_ext
