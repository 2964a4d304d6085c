#!/usr/bin/env python
"""Hand mutations of the C++ kernels (issue 56, item 3): each one a plausible bug planted in a
csrc/ file, the extension rebuilt in place, and the tests that should catch it run.

    nice -n 10 python tools/cpp_mutations.py            # every mutation of MUTATIONS
    nice -n 10 python tools/cpp_mutations.py flip rle   # those whose name contains a word given

Why by hand and not with mutmut: mutmut mutates Python only, and a C++ mutant costs a compile
(30 s to a few minutes here), so a few chosen bugs in the kernels that carry exactness and
safety claims say more per hour than hundreds of generated ones.

Unlike tools/mutation_test.py this changes the working tree: it edits the csrc/ file, rebuilds
``mmdet_ext/_C*.so`` in place (``setup.py build_ext --inplace``, incremental with ninja) and
runs ``pytest -x -q`` on the mutation's tests. The file is always put back (try/finally, and
SIGINT/SIGTERM are turned into an exception so the finally runs), and the extension is rebuilt
once more at the end so that the built .so matches the source again. A mutation whose original
snippet is not found exactly once is refused before anything is changed.

Verdicts: killed (pytest exit 1: a test failed), survived (exit 0), build failed (the mutant
does not compile), and 'pytest exit N' for anything else (collection error, crash), which needs
a look. Prints a markdown table; the report is in benchmarks/results/mutation.md.
"""
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Fail the build rather than quietly build without a library: a build without OpenCV would make
# the image tests skip, and a skipped test kills nothing.
BUILD_ENV = {'MMDET_EXT_WITH_OPENCV': '1', 'MMDET_EXT_WITH_LIBJPEG': '1',
             'MMDET_EXT_WITH_RAPIDJSON': '1'}
BUILD_COMMAND = [sys.executable, 'setup.py', 'build_ext', '--inplace']
PYTEST_ARGS = ['-x', '-q', '-p', 'no:cacheprovider', '-W', 'ignore']


@dataclass
class Mutation:
    name: str
    path: str  # relative to the repository root
    original: str  # must occur exactly once in the file
    mutated: str
    description: str
    tests: list  # pytest node ids or files


MUTATIONS = [
    Mutation(
        'rle_decode_run_short', 'csrc/masks/rle_codec.cpp',
        'end = start + counts[j]; position < end;',
        'end = start + counts[j] - 1; position < end;',
        'paint_counts (rle_decode*) paints every foreground run one pixel short',
        ['tests/test_mask_codecs.py::test_rle_codecs_match_pycocotools']),
    Mutation(
        'rle_encode_run_short', 'csrc/masks/rle_codec.cpp',
        'rows[j + 1] : height;',
        'rows[j + 1] : height - 1;',
        'encode_rows (rle_encode*) ends a foreground run that reaches the bottom of its column '
        'one row early',
        ['tests/test_mask_codecs.py::test_rle_codecs_match_pycocotools']),
    Mutation(
        'rle_string_delta_index', 'csrc/masks/cpu/rle_string_kernels.cpp',
        'if (runs.size() > 2) {',
        'if (runs.size() > 1) {',
        'rle_from_string adds the count two back from the third count on (pycocotools: fourth)',
        ['tests/test_mask_codecs.py::test_rle_codecs_match_pycocotools']),
    Mutation(
        'warp_flip_swapped', 'csrc/transforms/warp_planar.h',
        'const bool mirrored = flip == 1 || flip == 3;\n'
        '  const bool upside_down = flip == 2 || flip == 3;',
        'const bool mirrored = flip == 2 || flip == 3;\n'
        '  const bool upside_down = flip == 1 || flip == 3;',
        'warp_image / decode_images_into: horizontal and vertical flips swapped',
        ['tests/test_fused_loading.py::test_warp_image_op_equals_mmcv']),
    Mutation(
        'resize_row_clamp_dropped', 'csrc/transforms/resize_normalize_batch.cpp',
        'static_cast<int32_t>(clamp_index(s + 1, src)),',
        'static_cast<int32_t>(s + 1),',
        'resize_normalize_batch: the second source row/column of a bilinear tap not clamped to '
        'the image (an upscale reads one row past the bottom)',
        ['tests/test_resize_normalize.py::test_resize_equals_cv2_bit_for_bit']),
    Mutation(
        'polygon_grid_truncated', 'csrc/masks/polygon_raster.h',
        'return {static_cast<int>(kGridScale * x + .5), static_cast<int>(kGridScale * y + .5)};',
        'return {static_cast<int>(kGridScale * x), static_cast<int>(kGridScale * y + .5)};',
        'polygon rasteriser: x truncated onto the 5x grid instead of rounded (rleFrPoly: + .5)',
        ['tests/test_mask_codecs.py::test_polygons_match_pycocotools']),
    Mutation(
        'jpeg_reduced_flag', 'csrc/io/image_decoder.cpp',
        'static_cast<int>(scale_denom) * 8;',
        'static_cast<int>(scale_denom) * 16;',
        'decode_image: a 4-component JPEG (through cv::imdecode) reduced by twice the scale '
        'asked (IMREAD_REDUCED_*_N bits off by one power of two)',
        ['tests/test_decode_image.py::test_cmyk_jpeg_goes_through_opencv_and_matches']),
    Mutation(
        'store_bounds_check_dropped', 'csrc/store/mapped_store.cpp',
        ' ||\n        entry.offset > mapping_->size() || '
        'entry.nbytes > mapping_->size() - entry.offset) {',
        ') {',
        "annotation store reader: a section's offset and size not checked against the file",
        ['tests/test_annotation_store.py::test_corrupt_section_table_is_a_store_error',
         'tests/test_annotation_store.py::'
         'test_a_section_past_the_end_of_the_file_is_a_store_error']),
]


class Interrupted(Exception):
    """Raised by the SIGINT/SIGTERM handler so that the finally blocks restore the source."""


def on_signal(signum, frame):
    raise Interrupted(f'signal {signum}')


def read(path: str) -> str:
    with open(os.path.join(REPO, path)) as f:
        return f.read()


def write(path: str, text: str) -> None:
    with open(os.path.join(REPO, path), 'w') as f:
        f.write(text)


def check_snippets(mutations: list) -> None:
    """Refuses to start unless every original snippet occurs exactly once in its file."""
    for m in mutations:
        found = read(m.path).count(m.original)
        if found != 1:
            sys.exit(f'{m.name}: the original snippet occurs {found} times in {m.path}, '
                     'expected once; update MUTATIONS')


def build() -> bool:
    result = subprocess.run(BUILD_COMMAND, cwd=REPO, env={**os.environ, **BUILD_ENV},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        print(result.stdout[-3000:], file=sys.stderr)
    return result.returncode == 0


def run_tests(tests: list) -> tuple:
    """pytest's exit code and its last line (the summary)."""
    env = {**os.environ, 'PYTHONPATH': REPO, 'PYTHONDONTWRITEBYTECODE': '1'}
    result = subprocess.run([sys.executable, '-m', 'pytest', *PYTEST_ARGS, *tests], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = result.stdout.strip().splitlines()
    failed = [line for line in lines if line.startswith('FAILED ')]
    return result.returncode, (failed[0] if failed else lines[-1] if lines else '')


def run_mutation(m: Mutation) -> dict:
    """Applies `m`, rebuilds, runs its tests; the file is restored whatever happens."""
    original_text = read(m.path)
    start = time.time()
    try:
        write(m.path, original_text.replace(m.original, m.mutated))
        if not build():
            verdict, detail = 'build failed', ''
        else:
            code, detail = run_tests(m.tests)
            verdict = {0: 'survived', 1: 'killed'}.get(code, f'pytest exit {code}')
    finally:
        write(m.path, original_text)
    return {'verdict': verdict, 'detail': detail, 'seconds': time.time() - start}


def main(words: list) -> None:
    mutations = [m for m in MUTATIONS if not words or any(w in m.name for w in words)]
    check_snippets(mutations)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    results = []
    try:
        for m in mutations:
            print(f'[cpp_mutations] {m.name} ...', file=sys.stderr, flush=True)
            results.append((m, run_mutation(m)))
            print(f'[cpp_mutations] {m.name}: {results[-1][1]["verdict"]}', file=sys.stderr,
                  flush=True)
    finally:
        # Every file is back as it was; rebuild so that the .so is the unmutated source's again.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print('[cpp_mutations] rebuilding the unmutated extension', file=sys.stderr, flush=True)
        if not build():
            print('[cpp_mutations] the final rebuild FAILED: the .so may be a mutant\'s; run '
                  'setup.py build_ext --inplace', file=sys.stderr)
    print_report(results)


def print_report(results: list) -> None:
    """A markdown table, then one wrapped item per mutation (lines of at most 100 columns)."""
    print('| mutation | verdict | time |')
    print('| --- | --- | ---: |')
    for m, r in results:
        print(f'| `{m.name}` | {r["verdict"]} | {r["seconds"]:.0f} s |')
    print()
    for m, r in results:
        # pytest's short summary: 'FAILED node - message', or the last line when nothing failed
        failure = r['detail'].removeprefix('FAILED ').split(' - ')[0]
        text = (f'- `{m.name}`, `{m.path}`: {m.description}. Ran '
                f'{", ".join(f"`{t}`" for t in m.tests)}: {r["verdict"]}'
                + (f', first failure `{failure}`.' if r['verdict'] == 'killed'
                   else f' ({r["detail"]}).'))
        print(textwrap.fill(text, width=100, subsequent_indent='  ', break_long_words=False,
                            break_on_hyphens=False))

if __name__ == '__main__':
    main(sys.argv[1:])
