"""Judging one run of a case against what it must do (``Case.expected``).

Verdicts: ``ok``; ``hang`` (no result before the timeout); ``crash`` (killed by a signal, or
died without a result); ``silent_wrong`` (loaded data it must refuse, drop or skip without a
record, a sample that would train wrong, an image neither loaded nor dropped with a record, or
pickled code that ran); ``unnamed_error`` (an error that does not name the file / record, or is
not of the upstream type it must also be); ``unexpected_error`` (a named error where the input
must load, be dropped or be skipped).
"""
import json

from .case import Case

VERDICTS = ('ok', 'hang', 'crash', 'silent_wrong', 'unnamed_error', 'unexpected_error')


def sample_faults(samples: list[dict]) -> list[str]:
    """What would train silently wrong in loaded samples."""
    faults = []
    for s in samples:
        if s['img_shape'] != s['json_hw']:
            faults.append(f"image {s['img_id']} decodes to {s['img_shape']}, the json says "
                          f"{s['json_hw']}")
        if not s['boxes_finite']:
            faults.append(f"image {s['img_id']} has a non-finite box")
        for box, ignored, pixels in zip(s['boxes'], s['ignore'], s['mask_pixels']):
            if not ignored and (box[2] - box[0]) * (box[3] - box[1]) >= 1 and pixels == 0:
                faults.append(f"image {s['img_id']}: an empty mask under box "
                              f"{[round(v, 1) for v in box]}")
    return faults


def lost_images(result: dict) -> list:
    """The json's images that did not load and were not dropped with a record, or loaded out of
    order or twice: each image loads once, in the json's order, unless a record drops it."""
    dropped = {json.dumps(p['image_id']) for p in result.get('problems', [])
               if p['ann_id'] is None and (p['action'] == 'drop_image' or not p['storable'])}
    expected = [i for i in result['json_image_ids'] if json.dumps(i) not in dropped]
    loaded = [s['img_id'] for s in result['samples']]
    if loaded == expected:
        return []
    return [i for i in expected if i not in loaded] or [f'{loaded} loaded, {expected} expected']


def _first_line(text: str, limit: int = 110) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ''
    return line if len(line) <= limit else line[:limit - 3] + '...'


def outcome_text(result: dict) -> str:
    """A short description of what happened, for the results table."""
    status = result['status']
    if status in ('hang', 'crash'):
        return f"{status.upper()}: {result.get('message', '')}"
    if result.get('code_ran'):
        return 'PICKLED CODE RAN'
    if status == 'error':
        return f"{result['error_type']}: {_first_line(result['message'])}"
    if 'samples' not in result:
        return 'loads'
    parts = [f"loads {len(result['samples'])} samples"]
    if result.get('problems'):
        first = result['problems'][0]
        parts.append(f"records {first['kind']} ({first['action']}): "
                     f"{_first_line(first['reason'], 70)}")
    if result.get('bad_samples'):
        parts.append(f"skips {len(result['bad_samples'])} (bad_samples.jsonl)")
    faults = sample_faults(result['samples'])
    if faults:
        parts.append(f'SILENTLY WRONG: {faults[0]}')
    lost = lost_images(result) if not result.get('bad_samples') else []
    if lost:
        parts.append(f'SILENTLY LOST: images {lost}')
    return '; '.join(parts)


def judge(case: Case, result: dict, policy: str) -> str:
    """The verdict (one of ``VERDICTS``) of one run of ``case`` under ``policy``."""
    status = result['status']
    if status in ('hang', 'crash'):
        return status
    if result.get('code_ran'):
        return 'silent_wrong'
    must_fail = case.expected == 'error' or (case.expected == 'skip' and policy == 'raise')
    if status == 'error':
        named = all(name in result['message'] for name in case.names)
        typed = not case.is_a or case.is_a in result['error_bases']
        if not (named and typed):
            return 'unnamed_error'
        return 'ok' if must_fail else 'unexpected_error'
    if sample_faults(result.get('samples', [])) or must_fail:
        return 'silent_wrong'
    # Data cases only (a checkpoint has no samples). Under 'skip' a bad sample is replaced by
    # another, so skip cases cannot be counted this way.
    if case.expected in ('drop', 'loads') and 'samples' in result and lost_images(result):
        return 'silent_wrong'
    if case.expected == 'drop':
        recorded = any(all(name in json.dumps(p, ensure_ascii=False) for name in case.names)
                       for p in result['problems'])
        return 'ok' if recorded else 'silent_wrong'
    if case.expected == 'skip':
        recorded = any(all(name in json.dumps(b, ensure_ascii=False) for name in case.names)
                       for b in result['bad_samples'])
        return 'ok' if recorded else 'silent_wrong'
    if result.get('problems') or result.get('bad_samples'):
        return 'unexpected_error'  # valid input reported as bad
    return 'ok'
