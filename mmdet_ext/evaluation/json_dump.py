"""mmengine's ``dump`` with json files written in one pass by the C encoder.

``CocoMetric.results2json`` writes every detection to json with mmengine's ``dump``, whose
``json.dump`` into a file object runs Python's pure-Python encoder (only ``json.dumps`` uses the C
one): 60% of a whole evaluation with faster-coco-eval (500 images x 100 detections). Encoding the
text with ``json.dumps`` (mmengine's own ``dump_to_str``, the same ``default``) gives the same
bytes, several times faster.
"""
from pathlib import Path

from mmengine.fileio import dump, get_file_backend


def dump_json_in_one_pass(obj, file=None, file_format=None, **kwargs):
    """``mmengine.fileio.dump``: the same result, json files to a path encoded in one call."""
    path = str(file) if isinstance(file, (str, Path)) else None
    if path is None or kwargs or (file_format or path.rsplit('.', 1)[-1]) != 'json':
        return dump(obj, file, file_format, **kwargs)
    get_file_backend(path).put_text(dump(obj, file_format='json'), path)
