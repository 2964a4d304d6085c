"""``NativeLoadResizeFlip(decode_on='device')``: the workers send the files' bytes and the
training process decodes the batch (nvJPEG on a GPU where it may, the CPU decoder elsewhere).

On the CPU (CI): the model inputs equal those of the workers' decode and of mmdet's
``DetDataPreprocessor`` bit for bit, per sample and batched, in workers and threads; what
nvJPEG is allowed to take (``_C.jpeg_gpu_decode_refusal``) for every kind of file it must not
take. On a GPU with an nvJPEG build: nvJPEG's pixels against cv2.imdecode's (close, not
equal: its own IDCT and chroma upsampling), and the files it refuses decoded exactly.
"""
import copy
import shutil

import cv2
import numpy as np
import pytest
import torch
from mmdet.datasets.transforms import PackDetInputs
from mmdet.models.data_preprocessors import DetDataPreprocessor
from mmengine.dataset import pseudo_collate
from mmengine.logging import MMLogger
from PIL import Image
from torch.utils.data import DataLoader

from helpers.build import needs_native_decoding
from helpers.deferred_batches import CLASSES, FLIP, PREPROCESSOR, RESIZES
from helpers.encoded_images import encoded_image
from mmdet_ext import (FastDetDataPreprocessor, LazyCocoDataset, LoadLazyAnnotations,
                       NativeLoadResizeFlip, fast_collate)
from mmdet_ext._native import _C
from mmdet_ext.engine import DevicePrefetcher, RecordingStreams
from mmdet_ext.ops import decode_encoded_batch, decode_image, decode_jpegs_into, nvjpeg_problem
from mmdet_ext.transforms import DEFERRED_META_KEYS


def _dataset(root, decode_on, resize=RESIZES[0], pixels_on='device', **kwargs):
    meta_keys = DEFERRED_META_KEYS if pixels_on == 'device' else DEFERRED_META_KEYS[:-1]
    pipeline = [LoadLazyAnnotations(with_bbox=True, with_mask=True),
                # No reduced decode: decode_on='device' decodes at full size, as mmdet does.
                NativeLoadResizeFlip(**resize, **FLIP, pixels_on=pixels_on, decode_on=decode_on,
                                     reduced_decode=False),
                PackDetInputs(meta_keys=meta_keys)]
    return LazyCocoDataset(data_root=str(root), ann_file='annotations/instances_train.json',
                           data_prefix=dict(img='train/'), metainfo=dict(classes=CLASSES),
                           pipeline=pipeline, **kwargs)


def _samples(dataset, indices=range(8), seed=0):
    np.random.seed(seed)  # RandomFlip draws from numpy's global RNG
    return [dataset[i] for i in indices]


def _batched(dataset, indices=range(8), seed=0):
    np.random.seed(seed)
    return dataset.__getitems__(list(indices))


def _assert_same_batches(ours, reference):
    assert torch.equal(ours['inputs'], reference['inputs'])
    for mine, theirs in zip(ours['data_samples'], reference['data_samples']):
        assert mine.metainfo.keys() - {'pending_warp'} == theirs.metainfo.keys() - {'pending_warp'}
        for key in ('batch_input_shape', 'pad_shape', 'img_shape', 'ori_shape', 'flip_direction',
                    'scale_factor'):
            assert mine.metainfo[key] == theirs.metainfo[key], key
        np.testing.assert_array_equal(mine.gt_instances.masks.to_ndarray(),
                                      theirs.gt_instances.masks.to_ndarray())
        assert torch.equal(mine.gt_instances.bboxes, theirs.gt_instances.bboxes)


# --- which files nvJPEG may take (no GPU needed) ---------------------------------------------

def _jpeg(image, *params):
    ok, data = cv2.imencode('.jpg', image, list(params))
    assert ok
    return data.tobytes()


def _with_segment(data: bytes, marker: int, payload: bytes) -> bytes:
    """``data`` with a marker segment inserted right after SOI."""
    return data[:2] + bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, 'big') + payload + \
        data[2:]


def _adobe_rgb(data: bytes) -> bytes:
    """The JPEG with its JFIF segment replaced by an Adobe one saying "no colour transform":
    libjpeg then reads the components as RGB (a JFIF segment would take precedence)."""
    assert data[2:4] == b'\xff\xe0'
    after_jfif = 4 + int.from_bytes(data[4:6], 'big')
    return _with_segment(data[:2] + data[after_jfif:], 0xEE, b'Adobe\x00\x64\x00\x00\x00\x00\x00')


def _exif_jpeg(image, orientation: int) -> bytes:
    from io import BytesIO
    exif = Image.Exif()
    exif[0x0112] = orientation
    out = BytesIO()
    Image.fromarray(image[:, :, ::-1]).save(out, 'JPEG', quality=95, exif=exif)
    return out.getvalue()


def _rgb_component_ids(data: bytes) -> bytes:
    """The JPEG with its three components named 'R', 'G', 'B' in the frame header."""
    sof = data.index(b'\xff\xc0')
    patched = bytearray(data)
    for k, name in enumerate(b'RGB'):
        patched[sof + 10 + 3 * k] = name
    return bytes(patched)


IMAGE = cv2.GaussianBlur((np.random.default_rng(0).random((40, 60, 3)) * 255).astype(np.uint8),
                         (5, 5), 0)
REFUSALS = {
    'a PNG': (cv2.imencode('.png', IMAGE)[1].tobytes(), 'not a JPEG'),
    'progressive': (_jpeg(IMAGE, cv2.IMWRITE_JPEG_PROGRESSIVE, 1), 'SOF marker 0xC2'),
    'grayscale': (_jpeg(IMAGE[..., 0]), '1 components'),
    'EXIF orientation 6': (_exif_jpeg(IMAGE, 6), 'EXIF orientation 6'),
    'an Adobe segment': (_adobe_rgb(_jpeg(IMAGE)), 'Adobe'),
    'RGB components': (_rgb_component_ids(_jpeg(IMAGE)), 'RGB-coded'),
    'truncated': (_jpeg(IMAGE)[:-40], 'does not end with the EOI marker'),
    'another size': (_jpeg(IMAGE[:, :50]), 'its frame is 50x40, not 60x40'),
    'no frame header': (b'\xff\xd8\xff\xda\x00\x02' + bytes(20), 'no frame header'),
}


def test_nvjpeg_may_take_baseline_color_jpegs_of_their_size():
    assert _C.jpeg_gpu_decode_refusal(_jpeg(IMAGE), 40, 60) is None
    assert _C.jpeg_gpu_decode_refusal(_exif_jpeg(IMAGE, 1), 40, 60) is None  # EXIF, upright


@pytest.mark.parametrize('kind', REFUSALS)
def test_nvjpeg_leaves_to_the_cpu_what_it_would_not_decode_as_cv2(kind):
    data, reason = REFUSALS[kind]
    assert reason in _C.jpeg_gpu_decode_refusal(data, 40, 60)


def test_rgb_and_adobe_files_are_what_cv2_reads_differently():
    """The refusals above are not arbitrary: cv2 reads these files' colours by their markers."""
    plain = cv2.imdecode(np.frombuffer(_jpeg(IMAGE), np.uint8), cv2.IMREAD_COLOR)
    for kind in ('RGB components', 'an Adobe segment'):
        other = cv2.imdecode(np.frombuffer(REFUSALS[kind][0], np.uint8), cv2.IMREAD_COLOR)
        assert not np.array_equal(plain, other), kind


# --- the batch decode on the CPU --------------------------------------------------------------

@needs_native_decoding
def test_cpu_decode_of_a_batch_is_decode_image():
    files = [_jpeg(IMAGE), REFUSALS['progressive'][0], REFUSALS['grayscale'][0],
             REFUSALS['a PNG'][0], _exif_jpeg(IMAGE, 6), encoded_image(31, 17).numpy().tobytes()]
    expected = [decode_image(torch.frombuffer(bytearray(f), dtype=torch.uint8), planar=True)
                for f in files]
    assert expected[4].shape == (3, 60, 40)  # rotated by its EXIF orientation
    data = torch.frombuffer(bytearray(b''.join(files)), dtype=torch.uint8)
    out = decode_encoded_batch(data, [len(f) for f in files], [e.shape for e in expected],
                               torch.device('cpu'))
    assert torch.equal(out, torch.cat([e.reshape(-1) for e in expected]))


@needs_native_decoding
def test_cpu_decode_names_the_file_that_does_not_decode():
    good = encoded_image(240, 320).numpy().tobytes()
    corrupt = bytearray(good)
    middle = len(corrupt) // 2
    corrupt[middle:middle + 64] = bytes(range(7, 71))  # garbage inside the scan, the end intact
    data = torch.frombuffer(bytearray(good + bytes(corrupt)), dtype=torch.uint8)
    with pytest.raises(RuntimeError, match=r'1: b\.jpg'):
        decode_encoded_batch(data, [len(good)] * 2, [(3, 240, 320)] * 2, torch.device('cpu'),
                             names=['a.jpg', 'b.jpg'])
    with pytest.raises(RuntimeError, match=r'0: a\.jpg'):  # decodes, but not to that shape
        decode_encoded_batch(data[:len(good)], [len(good)], [(3, 241, 320)], torch.device('cpu'),
                             names=['a.jpg'])
    with pytest.raises(ValueError, match='add up to'):
        decode_encoded_batch(data, [len(good)], [(3, 240, 320)], torch.device('cpu'))


# --- the pipeline -----------------------------------------------------------------------------

@needs_native_decoding
def test_samples_carry_the_files_bytes_and_the_geometry(toy_coco_root):
    encoded = _samples(_dataset(toy_coco_root, 'device'))
    decoded = _samples(_dataset(toy_coco_root, 'worker'))
    for mine, theirs in zip(encoded, decoded):
        path = mine['data_samples'].img_path
        with open(path, 'rb') as f:
            file_bytes = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
        assert mine['inputs'].shape == (1, 1, file_bytes.numel())
        assert torch.equal(mine['inputs'].reshape(-1), file_bytes)
        warp = mine['data_samples'].metainfo.pop('pending_warp')
        height, width = theirs['inputs'].shape[1:]
        assert warp.pop('decoded_shape') == (height, width, 3)
        assert warp == theirs['data_samples'].metainfo.pop('pending_warp')
        assert mine['data_samples'].metainfo == theirs['data_samples'].metainfo
        assert torch.equal(mine['data_samples'].gt_instances.bboxes.tensor,
                           theirs['data_samples'].gt_instances.bboxes.tensor)


@needs_native_decoding
@pytest.mark.parametrize('resize', RESIZES)
def test_model_inputs_equal_the_workers_decode_and_mmdet(toy_coco_root, resize):
    encoded = _samples(_dataset(toy_coco_root, 'device', resize))
    decoded = _samples(_dataset(toy_coco_root, 'worker', resize))
    eager = _samples(_dataset(toy_coco_root, 'worker', resize, pixels_on='worker'))
    ours = FastDetDataPreprocessor(**PREPROCESSOR)(fast_collate(encoded), training=True)
    today = FastDetDataPreprocessor(**PREPROCESSOR)(fast_collate(decoded), training=True)
    mmdet = DetDataPreprocessor(**PREPROCESSOR)(pseudo_collate(eager), training=True)
    _assert_same_batches(ours, today)
    _assert_same_batches(ours, mmdet)


@needs_native_decoding
def test_collate_packs_the_bytes_without_touching_the_samples(toy_coco_root):
    samples = _samples(_dataset(toy_coco_root, 'device'), range(4))
    before = copy.deepcopy(samples)
    batch = fast_collate(samples)
    for sample, original in zip(samples, before):
        assert torch.equal(sample['inputs'], original['inputs'])
        assert sample['data_samples'].metainfo == original['data_samples'].metainfo
    assert torch.equal(batch['inputs'], torch.cat([s['inputs'].reshape(-1) for s in samples]))
    warp = batch['pending_warp']
    assert warp['encoded_sizes'].tolist() == [s['inputs'].numel() for s in samples]
    assert warp['image_shapes'].tolist() == [
        list(s['data_samples'].pending_warp['decoded_shape']) for s in samples]


@needs_native_decoding
@pytest.mark.parametrize('num_workers,usable_cpus', [(0, 1), (0, 2), (2, None)],
                         indirect=['usable_cpus'])
def test_batched_fetch_sends_the_same_bytes(toy_coco_root, num_workers, usable_cpus):
    dataset = _dataset(toy_coco_root, 'device')
    reference = _dataset(toy_coco_root, 'device', batched_fetch=False)
    batched = _batched(dataset)
    per_sample = _samples(reference)
    for got, want in zip(batched, per_sample):
        assert torch.equal(got['inputs'], want['inputs'])
        assert got['data_samples'].metainfo == want['data_samples'].metainfo
    loader = DataLoader(dataset, batch_size=4, num_workers=num_workers, collate_fn=fast_collate,
                        worker_init_fn=lambda worker: np.random.seed(0))
    np.random.seed(0)
    batch = next(iter(loader))
    np.random.seed(0)
    in_process = fast_collate([reference[i] for i in range(4)])
    assert torch.equal(batch['inputs'], in_process['inputs'])
    for key in ('image_shapes', 'out_shapes', 'encoded_sizes'):
        assert torch.equal(batch['pending_warp'][key], in_process['pending_warp'][key])


def _rotated_with_exif(path):
    """Rewrite the JPEG as a phone does: pixels stored rotated, EXIF orientation 6 to undo it."""
    image = cv2.imread(str(path))
    path.write_bytes(_exif_jpeg(cv2.rotate(image, cv2.ROTATE_90_COUNTERCLOCKWISE), 6))


@needs_native_decoding
def test_exif_rotated_photos_decode_upright(toy_coco_root, tmp_path):
    root = tmp_path / 'rotated'
    shutil.copytree(toy_coco_root, root)
    upright = cv2.imread(str(root / 'train' / '000003.jpg')).shape  # 216x384: not square
    _rotated_with_exif(root / 'train' / '000003.jpg')
    for batched_fetch in (True, False):
        encoded = _dataset(root, 'device', batched_fetch=batched_fetch)
        samples = _batched(encoded) if batched_fetch else _samples(encoded)
        decoded = _samples(_dataset(root, 'worker'))
        assert samples[3]['data_samples'].pending_warp['decoded_shape'] == upright
        _assert_same_batches(FastDetDataPreprocessor(**PREPROCESSOR)(fast_collate(samples)),
                             FastDetDataPreprocessor(**PREPROCESSOR)(fast_collate(decoded)))


@needs_native_decoding
def test_bad_configurations_and_mixed_batches_raise(toy_coco_root):
    with pytest.raises(ValueError, match="decode_on='gpu' is not a setting"):
        NativeLoadResizeFlip(scale=(10, 10), pixels_on='device', decode_on='gpu')
    with pytest.raises(ValueError, match="needs pixels_on='device'"):
        NativeLoadResizeFlip(scale=(10, 10), decode_on='device')
    with pytest.raises(ValueError, match="color_type='color'"):
        NativeLoadResizeFlip(scale=(10, 10), defer='decode', color_type='grayscale')
    mixed = _samples(_dataset(toy_coco_root, 'device'), range(2)) + \
        _samples(_dataset(toy_coco_root, 'worker'), range(2))
    with pytest.raises(ValueError, match='carry encoded bytes'):
        fast_collate(mixed)


@needs_native_decoding
def test_encoded_batches_are_not_prefetched_to_the_device(toy_coco_root):
    """nvJPEG reads the files from host memory: the prefetcher passes such batches on as they
    are (here with pinned-looking inputs, as RecordingStreams reports every tensor pinned)."""
    loader = DataLoader(_dataset(toy_coco_root, 'device'), batch_size=3, collate_fn=fast_collate)
    streams = RecordingStreams()
    got = list(DevicePrefetcher(iter(loader), streams))
    assert len(got) == 3
    assert all(streams.name_of(batch['inputs']) == 'not copied' for batch in got)


@needs_native_decoding
def test_the_cpu_decode_is_logged_once(toy_coco_root, tmp_path):
    log_file = tmp_path / 'run.log'
    MMLogger.get_instance(f'gpu_decode_{tmp_path.name}', log_file=str(log_file), log_level='INFO')
    samples = _samples(_dataset(toy_coco_root, 'device'), range(4))
    preprocessor = FastDetDataPreprocessor(**PREPROCESSOR)
    for _ in range(2):
        preprocessor(fast_collate(samples))
    assert log_file.read_text().count("decode_on='device' batches are decoded on the CPU") == 1


# --- on a GPU with nvJPEG ---------------------------------------------------------------------

def _why_no_nvjpeg():
    if not torch.cuda.is_available():
        return 'no CUDA device'
    return nvjpeg_problem()


needs_nvjpeg = pytest.mark.skipif(_why_no_nvjpeg() is not None, reason=str(_why_no_nvjpeg()))


def _photo_like(height, width, seed):
    rng = np.random.default_rng(seed)
    base = cv2.resize((rng.random((height // 8, width // 8, 3)) * 255).astype(np.uint8),
                      (width, height), interpolation=cv2.INTER_CUBIC)
    noise = rng.normal(0, 6, (height, width, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


# What nvJPEG's pixels must be, per chroma subsampling. Its colour planes are upsampled by
# replication where libjpeg (cv2, mmdet) interpolates ("fancy upsampling"): on the first lent GPU
# (2026-11-28, benchmarks/results/gpu.md) the 640x480 4:2:0 file differed from cv2 by mean |diff|
# 6.214, max 48, PSNR 29.9 dB -- libjpeg-turbo's own decode of that file with TJFLAG_FASTUPSAMPLE
# differs from its default by mean 6.213, max 48, PSNR 29.9 dB. Without subsampling nothing is
# upsampled, and only the IDCT could differ (libjpeg's fast integer IDCT against its default:
# PSNR 41-45 dB on these files).
MIN_PSNR = {'4:2:0': 28.0, '4:4:4': 40.0}
SAMPLING = {'4:2:0': cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420,
            '4:4:4': cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444}


@needs_nvjpeg
@pytest.mark.parametrize('sampling', sorted(SAMPLING))
def test_nvjpeg_pixels_are_close_to_cv2s(sampling):
    """Not equal to cv2's: see MIN_PSNR. Every image's difference is printed for the record
    before any is asserted."""
    files = [_jpeg(_photo_like(h, w, seed), cv2.IMWRITE_JPEG_QUALITY, q,
                   cv2.IMWRITE_JPEG_SAMPLING_FACTOR, SAMPLING[sampling])
             for seed, (h, w, q) in enumerate([(480, 640, 90), (333, 501, 75), (64, 48, 95)])]
    tensors = [torch.frombuffer(bytearray(f), dtype=torch.uint8) for f in files]
    # cv2 itself as the reference: a GPU machine may have no C++ OpenCV for decode_image
    expected = [torch.from_numpy(cv2.imdecode(np.frombuffer(f, np.uint8), cv2.IMREAD_COLOR)
                                 .transpose(2, 0, 1).copy()) for f in files]
    offsets = np.concatenate([[0], np.cumsum([e.numel() for e in expected])]).tolist()
    out = torch.zeros(offsets[-1], dtype=torch.uint8, device='cuda')
    decoded = decode_jpegs_into(tensors, out, offsets[:-1], [e.shape for e in expected])
    assert decoded.tolist() == [True] * 3
    psnrs = []
    for image, start in zip(expected, offsets):
        got = out[start:start + image.numel()].view(image.shape).cpu()
        diff = (got.int() - image.int()).abs().float()
        psnrs.append(float(10 * torch.log10(255 ** 2 / (diff ** 2).mean().clamp_min(1e-12))))
        print(f'nvJPEG vs CPU decode {sampling} {tuple(image.shape)}: mean |diff| '
              f'{diff.mean():.3f}, max {diff.max():.0f}, PSNR {psnrs[-1]:.1f} dB')
    assert min(psnrs) > MIN_PSNR[sampling]


@needs_native_decoding
@needs_nvjpeg
def test_files_nvjpeg_refuses_are_decoded_exactly_on_the_cpu():
    files = [_jpeg(IMAGE), REFUSALS['progressive'][0], REFUSALS['grayscale'][0],
             REFUSALS['a PNG'][0], _exif_jpeg(IMAGE, 6)]
    expected = [decode_image(torch.frombuffer(bytearray(f), dtype=torch.uint8), planar=True)
                for f in files]
    data = torch.frombuffer(bytearray(b''.join(files)), dtype=torch.uint8)
    out = decode_encoded_batch(data, [len(f) for f in files], [e.shape for e in expected],
                               torch.device('cuda')).cpu()
    offsets = np.concatenate([[0], np.cumsum([e.numel() for e in expected])]).tolist()
    for k, (image, start) in enumerate(zip(expected, offsets)):
        got = out[start:start + image.numel()].view(image.shape)
        if k > 0:  # the refused ones
            assert torch.equal(got, image)


@needs_native_decoding
@needs_nvjpeg
def test_the_preprocessor_decodes_on_the_gpu(toy_coco_root):
    encoded = _samples(_dataset(toy_coco_root, 'device'), range(4))
    decoded = _samples(_dataset(toy_coco_root, 'worker'), range(4))
    model_device = torch.device('cuda')
    ours = FastDetDataPreprocessor(**PREPROCESSOR).to(model_device)(fast_collate(encoded))
    today = FastDetDataPreprocessor(**PREPROCESSOR).to(model_device)(fast_collate(decoded))
    assert ours['inputs'].device.type == 'cuda'
    assert ours['inputs'].shape == today['inputs'].shape
    # normalised units: one grey level is about 1/58
    assert (ours['inputs'] - today['inputs']).abs().mean() < 0.05
