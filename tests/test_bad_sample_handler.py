"""``BadSampleHandler`` on its own: arguments, per-worker counts, records and the stop summary
(written for the survivors of the mutation run, benchmarks/results/mutation.md)."""
import json
import pickle

import pytest

from mmdet_ext.datasets.bad_samples import (BadSampleHandler, MissingFileBadSampleError,
                                            TooManyBadSamplesError)


def test_arguments_and_defaults():
    handler = BadSampleHandler()
    assert (handler.on_bad_sample, handler.max_bad_fraction) == ('raise', 0.1)
    with pytest.raises(ValueError, match=r"^on_bad_sample must be 'raise' or 'skip', got 'x'$"):
        BadSampleHandler('x')
    for fraction in (0, 1.5, -0.1):
        with pytest.raises(ValueError, match=r'^max_bad_fraction must be in \(0, 1\], got'):
            BadSampleHandler('skip', fraction)
    BadSampleHandler('skip', 1)


def test_a_worker_copy_starts_its_counts_afresh(tmp_path):
    handler = BadSampleHandler('skip', 1.0, work_dir=str(tmp_path))
    handler.tried_one()
    handler.handle(OSError('x'), 3, 4, 'a.jpg')
    copy = pickle.loads(pickle.dumps(handler))
    assert (copy.tried, copy.bad, copy.bad_count) == (0, {}, 0)
    assert (copy.on_bad_sample, copy.max_bad_fraction, copy.work_dir) == \
        ('skip', 1.0, str(tmp_path))


def test_raise_message_and_missing_file_error():
    handler = BadSampleHandler()
    with pytest.raises(MissingFileBadSampleError) as info:
        handler.handle(FileNotFoundError('gone'), 1, 2, 'b.jpg')
    assert str(info.value) == \
        'cannot load sample 1 (img_id=2, img_path=b.jpg): FileNotFoundError: gone'
    assert isinstance(info.value, FileNotFoundError)


def test_records_and_the_summary_of_a_stop(tmp_path):
    handler = BadSampleHandler('skip', 0.5, work_dir=str(tmp_path))
    for _ in range(12):
        handler.tried_one()
    for idx in range(12):
        try:
            handler.handle(ValueError(f'bad {idx}'), idx, idx + 100, f'{idx}.jpg')
        except TooManyBadSamplesError as err:
            stopped_at, message = idx, str(err)
            break
    assert stopped_at == 6
    assert message == ('7 of the 12 samples this process tried were bad '
                       '(> max_bad_fraction=0.5); 7 distinct:\n  ' +
                       '\n  '.join(f'sample {i}: ValueError: bad {i}' for i in range(7)))
    records = [json.loads(line) for line in
               (tmp_path / 'bad_samples.jsonl').read_text().splitlines()]
    assert [sorted(r) for r in records] == [['error', 'img_id', 'img_path', 'pid',
                                             'sample_idx']] * 7
    assert records[0]['img_path'] == '0.jpg' and records[0]['error'] == 'ValueError: bad 0'


def test_the_summary_lists_ten_samples(tmp_path):
    handler = BadSampleHandler('skip', 0.9, work_dir=str(tmp_path))
    for _ in range(20):
        handler.tried_one()
    with pytest.raises(TooManyBadSamplesError) as info:
        for idx in range(20):
            handler.handle(ValueError('x'), idx, None, None)
    assert info.value.args[0].startswith('19 of the 20 samples')
    assert info.value.args[0].count('\n  sample ') == 10
