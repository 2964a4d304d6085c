"""What the deferred-pixels tests share: the toy dataset's classes, mmdet's usual preprocessor
settings, a flip that draws every direction, and resizes that cover each case of the CPU and
device resize."""
CLASSES = ('circle', 'rectangle', 'triangle', 'ring')
PREPROCESSOR = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
                    bgr_to_rgb=True, pad_size_divisor=32, pad_mask=True)
FLIP = dict(prob=[0.25, 0.25, 0.25], direction=['horizontal', 'vertical', 'diagonal'])
# The toy images are 320x240: down (odd size), up, exactly 2x down, nearest, reduced decode.
RESIZES = [dict(scale=(301, 211), keep_ratio=True), dict(scale=(1333, 800), keep_ratio=True),
           dict(scale=(160, 120), keep_ratio=False),
           dict(scale=(500, 333), keep_ratio=True, interpolation='nearest'),
           dict(scale=(150, 100), keep_ratio=True)]
