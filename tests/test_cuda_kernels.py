"""The CUDA kernels against their CPU twins, bit for bit, through the public ops.

The CPU kernels are checked against pycocotools, mmdet and mmcv elsewhere (test_mask_codecs.py,
test_lazy_masks.py, test_collate.py), so equality here makes the CUDA kernels exact too. The
comparisons need a GPU and an extension built with CUDA, and are skipped, saying which is
missing, where either is absent (CI has neither).
"""
import numpy as np
import pytest
import torch

from helpers.build import needs_native_decoding
from mmdet_ext import ops
from mmdet_ext._native import _C


def _why_no_cuda():
    if not _C.with_cuda():
        return 'mmdet_ext._C was built without CUDA (needs a CUDA torch and nvcc, see docs/build.md)'
    if not torch.cuda.is_available():
        return 'no CUDA device'
    return None


needs_cuda = pytest.mark.skipif(_why_no_cuda() is not None, reason=str(_why_no_cuda()))
OPS = torch.ops.mmdet_ext


def random_outline(rng, cx, cy, radius, points):
    """A star-shaped outline of `points` vertices around (cx, cy), COCO style [x0, y0, ...]."""
    angles = np.sort(rng.uniform(0, 2 * np.pi, points))
    radii = radius * rng.uniform(0.3, 1.0, points)
    return np.stack([cx + radii * np.cos(angles), cy + radii * np.sin(angles)], 1).ravel()


def random_instances(rng, count, height, width):
    """Polygon instances of 1-3 parts, 3-60 points, some crossing or outside the image edge."""
    instances = []
    for _ in range(count):
        parts = []
        for _ in range(rng.integers(1, 4)):
            cx, cy = rng.uniform(-0.1, 1.1) * width, rng.uniform(-0.1, 1.1) * height
            radius = rng.uniform(2, 0.4 * min(height, width))
            parts.append(random_outline(rng, cx, cy, radius, int(rng.integers(3, 61))))
        instances.append(parts)
    return instances


def random_boxes(rng, count, height, width, dtype):
    """Boxes inside, across and outside the image, tiny and large, as (x1, y1, x2, y2)."""
    x1 = rng.uniform(-0.2, 1.0, count) * width
    y1 = rng.uniform(-0.2, 1.0, count) * height
    w = rng.choice([0.0, 0.5, 3.0, 40.0, 0.8 * width], count) * rng.uniform(0.5, 1.0, count)
    h = rng.choice([0.0, 0.5, 3.0, 40.0, 0.8 * height], count) * rng.uniform(0.5, 1.0, count)
    return torch.from_numpy(np.stack([x1, y1, x1 + w, y1 + h], 1)).to(dtype)


def random_rles(rng, count, height, width):
    masks = []
    for _ in range(count):
        mask = np.zeros((height, width), np.uint8)
        for _ in range(rng.integers(1, 5)):
            y, x = rng.integers(0, height), rng.integers(0, width)
            mask[y:y + rng.integers(1, height), x:x + rng.integers(1, width)] = 1
        mask ^= (rng.random((height, width)) < 0.02).astype(np.uint8)  # ragged edges
        masks.append(torch.from_numpy(mask))
    return masks, ops.pack_counts([ops.rle_encode(m) for m in masks])


def on_gpu(*tensors):
    return [t.cuda() for t in tensors]


@needs_cuda
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
@pytest.mark.parametrize('out_shape', [(28, 28), (14, 9), (112, 112)])
def test_polygons_crop_and_resize_matches_cpu(dtype, out_shape):
    rng = np.random.default_rng(0)
    packed = ops.pack_polygons(random_instances(rng, 12, 800, 1067))
    boxes = random_boxes(rng, 300, 800, 1067, dtype)
    inds = torch.from_numpy(rng.integers(0, 12, 300))
    expected = ops.polygons_crop_and_resize(*packed, boxes, inds, out_shape)
    got = ops.polygons_crop_and_resize(*on_gpu(*packed, boxes, inds), out_shape)
    assert got.device.type == 'cuda'
    assert torch.equal(got.cpu(), expected)
    assert expected.any()  # the comparison saw foreground


@needs_cuda
@pytest.mark.parametrize('size', [(480, 640), (37, 23)])
def test_polygons_to_masks_matches_cpu(size):
    rng = np.random.default_rng(1)
    packed = ops.pack_polygons(random_instances(rng, 10, *size))
    expected = ops.polygons_to_masks(*packed, *size)
    got = ops.polygons_to_masks(*on_gpu(*packed), *size)
    assert torch.equal(got.cpu(), expected)
    assert expected.any()


@needs_cuda
@pytest.mark.parametrize('size', [(480, 640), (37, 23)])
def test_into_ops_with_host_data_match_cpu(size):
    """What LazyInstanceMasks.to_tensor runs on a GPU: packed data on the host, out on the GPU
    (stale contents overwritten), and also with the data already on the GPU."""
    rng = np.random.default_rng(3)
    polygons = ops.pack_polygons(random_instances(rng, 10, *size))
    masks, rles = random_rles(rng, 6, *size)
    for data in (polygons, on_gpu(*polygons)):
        out = torch.full((10, *size), 7, dtype=torch.uint8, device='cuda')
        ops.polygons_to_masks_into(*data, out)
        assert torch.equal(out.cpu(), ops.polygons_to_masks(*polygons, *size))
    for data in (rles, on_gpu(*rles)):
        out = torch.full((6, *size), 7, dtype=torch.uint8, device='cuda')
        ops.rle_decode_batch_into(*data, out)
        assert torch.equal(out.cpu(), torch.stack(masks))


@needs_cuda
def test_rle_decode_matches_cpu():
    rng = np.random.default_rng(2)
    masks, (counts, run_counts) = random_rles(rng, 6, 97, 131)
    got = ops.rle_decode_batch(counts.cuda(), run_counts.cuda(), 97, 131)
    assert torch.equal(got.cpu(), torch.stack(masks))
    single = ops.rle_encode(masks[0])
    assert torch.equal(ops.rle_decode(single.cuda(), 97, 131).cpu(), masks[0])


@needs_cuda
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_rle_crop_and_resize_matches_cpu(dtype):
    rng = np.random.default_rng(3)
    _, (counts, run_counts) = random_rles(rng, 4, 200, 300)
    boxes = random_boxes(rng, 200, 200, 300, dtype)
    boxes[:, 2:] = torch.maximum(boxes[:, 2:], boxes[:, :2])  # roi_align refuses x2 < x1
    inds = torch.from_numpy(rng.integers(0, 4, 200))
    expected = ops.rle_crop_and_resize(counts, run_counts, 200, 300, boxes, inds, (28, 28))
    got = ops.rle_crop_and_resize(*on_gpu(counts, run_counts), 200, 300,
                                  *on_gpu(boxes, inds), (28, 28))
    assert torch.equal(got.cpu(), expected)
    assert expected.any()


@needs_cuda
@pytest.mark.parametrize('size', [(480, 640), (37, 23), (2, 3), (5, 8)])
@pytest.mark.parametrize('dtype', [torch.uint8, torch.bool])
def test_rle_encode_batch_matches_cpu(size, dtype):
    rng = np.random.default_rng(5)
    masks, _ = random_rles(rng, 7, *size)
    batch = torch.stack(masks + [torch.zeros(size, dtype=torch.uint8),
                                 torch.ones(size, dtype=torch.uint8)]).to(dtype)
    expected = ops.rle_encode_batch(batch)
    got = ops.rle_encode_batch(batch.cuda())
    assert all(g.is_cuda and torch.equal(g.cpu(), e) for g, e in zip(got, expected))
    for empty in (torch.zeros(3, 0, 5, dtype=dtype), torch.zeros(0, 4, 5, dtype=dtype)):
        assert all(torch.equal(g.cpu(), e) for g, e in zip(ops.rle_encode_batch(empty.cuda()),
                                                          ops.rle_encode_batch(empty)))


@needs_cuda
@pytest.mark.parametrize('skip_empty', [True, False])
@pytest.mark.parametrize('size', [(480, 640), (37, 23), (1, 1)])
def test_paste_masks_to_rle_matches_cpu(skip_empty, size):
    """Boxes of every kind (random_boxes: tiny, zero-sized, across and past the edges) and
    probabilities smooth, noisy and within float32 steps of the threshold."""
    rng = np.random.default_rng(6)
    height, width = size
    yy, xx = np.meshgrid(np.linspace(-1, 1, 28), np.linspace(-1, 1, 28), indexing='ij')
    smooth = 1 / (1 + np.exp(-8 * (1 - (xx**2 + yy**2) * rng.uniform(0.5, 2, (40, 1, 1)))))
    noisy = rng.random((40, 28, 28))
    near = np.float32(0.5) + rng.integers(-4, 5, (40, 28, 28)).astype(np.float32) * 2.0**-25
    probs = torch.from_numpy(np.concatenate([smooth, noisy, near]).astype(np.float32))
    boxes = random_boxes(rng, 120, height, width, torch.float32)
    expected = ops.paste_masks_to_rle(probs, boxes, height, width, 0.5, skip_empty)
    got = ops.paste_masks_to_rle(*on_gpu(probs, boxes), height, width, 0.5, skip_empty)
    assert all(g.is_cuda and torch.equal(g.cpu(), e) for g, e in zip(got, expected))
    if size == (480, 640):
        assert expected[1].gt(1).any()  # the comparison saw foreground
    none = ops.paste_masks_to_rle(*on_gpu(probs[:0], boxes[:0]), height, width, 0.5, skip_empty)
    assert [t.numel() for t in none] == [0, 0]


@needs_cuda
@pytest.mark.parametrize('reverse_channels', [False, True])
def test_normalize_batch_matches_cpu(reverse_channels):
    rng = np.random.default_rng(4)
    images = torch.from_numpy(rng.integers(0, 256, (3, 3, 64, 80), dtype=np.uint8))
    sizes = torch.tensor([[64, 80], [50, 33], [0, 0]])
    mean, std = torch.tensor([123.675, 116.28, 103.53]), torch.tensor([58.395, 57.12, 57.375])
    expected = ops.normalize_batch(images, mean, std, reverse_channels, sizes, 0.5)
    got = ops.normalize_batch(images.cuda(), mean.cuda(), std.cuda(), reverse_channels,
                              sizes.cuda(), 0.5)
    assert torch.equal(got.cpu(), expected)


@needs_cuda
@pytest.mark.parametrize('interpolation', ['bilinear', 'nearest'])
@pytest.mark.parametrize('dtype', [torch.float32, torch.float16, torch.bfloat16])
def test_resize_normalize_batch_matches_cpu(interpolation, dtype):
    """Up, down, exact 2x, 1 px, every flip, one call: the CUDA kernel gives the CPU's bits."""
    rng = np.random.default_rng(6)
    sizes = [(480, 640), (37, 23), (1, 9), (64, 80), (300, 301)]
    out_shapes = torch.tensor([[800, 1067], [75, 11], [4, 1], [32, 40], [299, 451]])
    images = [rng.integers(0, 256, (3, h, w), dtype=np.uint8) for h, w in sizes]
    data = torch.cat([torch.from_numpy(image).reshape(-1) for image in images])
    shapes = torch.tensor([(h, w, 3) for h, w in sizes])
    flips = torch.tensor([1, 2, 3, 0, 1])
    mean, std = torch.tensor([123.675, 116.28, 103.53]), torch.tensor([58.395, 57.12, 57.375])
    args = dict(reverse_channels=True, interpolation=interpolation, pad_size_divisor=32,
                pad_value=0.5, dtype=dtype)
    expected = ops.resize_normalize_batch(data, shapes, out_shapes, flips, mean, std, **args)
    got = ops.resize_normalize_batch(data.cuda(), shapes, out_shapes, flips, mean.cuda(),
                                     std.cuda(), **args)
    assert got.is_cuda and torch.equal(got.cpu(), expected)


@needs_cuda
@needs_native_decoding
def test_deferred_batch_on_cuda_equals_cpu(toy_coco_root):
    """FastDetDataPreprocessor on a CUDA model: the deferred batch, copied as uint8 (pinned,
    non_blocking), resized on the GPU, equals the CPU result."""
    from mmdet.datasets.transforms import PackDetInputs

    from mmdet_ext import FastDetDataPreprocessor, LazyCocoDataset, LoadLazyAnnotations
    from mmdet_ext import NativeLoadResizeFlip, fast_collate
    from mmdet_ext.transforms import DEFERRED_META_KEYS
    dataset = LazyCocoDataset(
        data_root=str(toy_coco_root), ann_file='annotations/instances_train.json',
        data_prefix=dict(img='train/'),
        metainfo=dict(classes=('circle', 'rectangle', 'triangle', 'ring')),
        pipeline=[LoadLazyAnnotations(with_bbox=True, with_mask=True),
                  NativeLoadResizeFlip(scale=(1333, 800), keep_ratio=True, prob=0.5,
                                       pixels_on='device'),
                  PackDetInputs(meta_keys=DEFERRED_META_KEYS)])
    np.random.seed(0)
    samples = [dataset[i] for i in range(4)]
    config = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], bgr_to_rgb=True,
                  pad_size_divisor=32, pad_mask=True)
    expected = FastDetDataPreprocessor(**config)(fast_collate(samples), training=True)
    batch = fast_collate(samples)
    batch['inputs'] = batch['inputs'].pin_memory()  # what the DataLoader's pin_memory does
    got = FastDetDataPreprocessor(**config).cuda()(batch, training=True)
    assert got['inputs'].is_cuda and torch.equal(got['inputs'].cpu(), expected['inputs'])


@needs_cuda
def test_prefetcher_copies_pinned_deferred_batches_on_a_side_stream():
    from mmdet_ext.engine import CudaStreams, DevicePrefetcher
    batches = [{'inputs': torch.arange(n, dtype=torch.uint8).pin_memory(),
                'pending_warp': {'interpolation': 'bilinear'}} for n in (5, 7, 9)]
    got = list(DevicePrefetcher(iter(batches), CudaStreams('cuda')))
    assert [b['inputs'].device.type for b in got] == ['cuda'] * 3
    for mine, theirs in zip(got, batches):
        assert torch.equal(mine['inputs'].cpu(), theirs['inputs'])
        assert not theirs['inputs'].is_cuda  # the batches handed in are not modified


@needs_cuda
def test_rle_crop_and_resize_of_zero_sized_masks_is_zeros_as_on_the_cpu():
    """0-height or 0-width masks: every roi_align sample falls outside, nothing may be read."""
    boxes, inds = torch.tensor([[0.0, 0.0, 3.0, 3.0], [-2.0, 1.0, 9.0, 4.0]]), torch.tensor([0, 0])
    for height, width in ((0, 5), (5, 0), (0, 0)):
        counts, run_counts = ops.pack_counts([ops.rle_encode(torch.zeros(height, width,
                                                                          dtype=torch.uint8))])
        expected = ops.rle_crop_and_resize(counts, run_counts, height, width, boxes, inds, (7, 7))
        got = ops.rle_crop_and_resize(*on_gpu(counts, run_counts), height, width, *on_gpu(boxes),
                                      inds, (7, 7))
        assert not expected.any() and torch.equal(got.cpu(), expected)


@needs_cuda
def test_cuda_kernels_refuse_bad_input_like_the_cpu_ones():
    packed = ops.pack_polygons([[[1.0, 1.0, 7.0, 2.0, 4.0, 9.0]]])
    boxes = torch.tensor([[0.0, 0.0, 8.0, 8.0]])
    with pytest.raises(RuntimeError, match=r'inds\[0\] = 3 is out of range for 1 masks'):
        ops.polygons_crop_and_resize(*on_gpu(*packed, boxes), torch.tensor([3]), (28, 28))
    with pytest.raises(RuntimeError, match='one CUDA device'):
        ops.polygons_crop_and_resize(*on_gpu(*packed), boxes, torch.tensor([0]), (28, 28))
    with pytest.raises(RuntimeError, match='one CUDA device'):
        ops.paste_masks_to_rle(torch.ones(1, 28, 28).cuda(), boxes, 8, 8, 0.5)
    with pytest.raises(RuntimeError, match='box 0 has a non-finite coordinate'):
        ops.paste_masks_to_rle(*on_gpu(torch.ones(1, 28, 28), boxes * float('nan')), 8, 8, 0.5)
    counts = torch.tensor([64], dtype=torch.int32).cuda()
    with pytest.raises(RuntimeError, match='x2 >= x1 and y2 >= y1'):
        ops.rle_crop_and_resize(counts, torch.tensor([1]).cuda(), 8, 8,
                                torch.tensor([[4.0, 0, 2, 4]]).cuda(), torch.tensor([0]), (28, 28))


@needs_cuda
def test_opcheck_on_cuda():
    packed = ops.pack_polygons([[[1.0, 1.0, 7.0, 2.0, 4.0, 9.0]],
                                [[0.0, 0.0, 5.0, 0.0, 5.0, 5.0], [6, 6, 8, 6, 8, 8]]])
    boxes, inds = torch.tensor([[0.5, 1.0, 8.0, 10.0], [2.0, 2.0, 3.0, 3.0]]), torch.tensor([1, 0])
    mask = (torch.rand(12, 9) < 0.5).to(torch.uint8)
    rles = ops.pack_counts([ops.rle_encode(mask), ops.rle_encode(1 - mask)])
    cases = {
        'polygons_to_masks': (*on_gpu(*packed), 12, 9),
        'polygons_crop_and_resize': (*on_gpu(*packed, boxes, inds), 7, 5),
        'rle_decode_batch': (*on_gpu(*rles), 12, 9),
        'rle_decode_batch_into': (*rles, torch.zeros(2, 12, 9, dtype=torch.uint8).cuda()),
        'polygons_to_masks_into': (*packed, torch.zeros(2, 12, 9, dtype=torch.uint8).cuda()),
        'rle_crop_and_resize': (*on_gpu(*rles), 12, 9, *on_gpu(boxes, inds), 7, 5),
        'rle_encode_batch': (torch.stack([mask, 1 - mask]).cuda(), ),
        'paste_masks_to_rle': (*on_gpu(torch.rand(2, 28, 28), boxes), 12, 9, 0.5),
    }
    for name, args in cases.items():
        torch.library.opcheck(getattr(OPS, name), args,
                              test_utils=('test_schema', 'test_faketensor'))


def test_has_kernel_reports_this_build():
    """What FastDetDataPreprocessor asks before handing a batch to normalize_batch."""
    assert ops.has_kernel('normalize_batch', 'cpu')
    assert ops.has_kernel('polygons_crop_and_resize', torch.device('cpu'))
    assert ops.has_kernel('polygons_crop_and_resize', 'cuda') == _C.with_cuda()
    assert ops.has_kernel('paste_masks_to_rle', 'cuda') == _C.with_cuda()
    assert ops.has_kernel('rle_encode_batch', 'cuda') == _C.with_cuda()
    assert not ops.has_kernel('warp_image', 'cuda')  # OpenCV on the CPU only
    assert not ops.has_kernel('normalize_batch', 'meta')
