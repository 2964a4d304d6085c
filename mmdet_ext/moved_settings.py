"""Settings that moved to their one home: the old spelling keeps working (or is ignored, where it
changes nothing), and says so once per process."""
import logging

from mmengine.logging import print_log

# The settings already warned about in this process.
_warned: set = set()


def warn_once(setting: str, message: str) -> None:
    """Log ``message`` (with "; logged once") as a warning the first time ``setting`` is seen in
    this process; later calls for it say nothing."""
    if setting not in _warned:
        _warned.add(setting)
        print_log(f'{message}; logged once', logger='current', level=logging.WARNING)
