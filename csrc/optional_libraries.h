// The optional C++ libraries of a build, and the error of an op whose library is missing.
//
// setup.py defines MMDET_EXT_WITH_OPENCV when pkg-config finds OpenCV (opencv4), and
// MMDET_EXT_WITH_LIBJPEG when it finds libjpeg as well (the strict JPEG decoder writes into
// OpenCV's cv::Mat, so libjpeg is used only together with OpenCV). Without them the sources that
// need them are not compiled, and the ops built on them (decode_image, warp_image) keep their
// schema and Python wrapper but get a kernel that calls fail_built_without: an import works the
// same in every build, and the error says what to install.
#pragma once

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

namespace mmdet_ext {

// Throws c10::NotImplementedError (Python's NotImplementedError) naming `op`, the missing
// `library`, and how to get a build that has it.
[[noreturn]] inline void fail_built_without(const char* op, const char* library) {
  C10_THROW_ERROR(NotImplementedError,
                  c10::str(op, ": this build of mmdet_ext has no ", library, " (setup.py did not "
                           "find it for C++ with pkg-config, or MMDET_EXT_WITH_OPENCV=0 / "
                           "MMDET_EXT_WITH_LIBJPEG=0 switched it off), and ", op, " needs it. "
                           "Install the C++ libraries (Debian/Ubuntu: apt-get install "
                           "libopencv-dev libjpeg62-turbo-dev pkg-config), then rebuild: "
                           "pip install --no-build-isolation -e . ; mmdet_ext.build_info() shows "
                           "what a build has."));
}

}  // namespace mmdet_ext
