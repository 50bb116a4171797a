"""TFLMSv2's user surface on lmsforge's TensorFlow LMS (see README.md beside this package).

TFLMSv2 (IBM PowerAI 1.6, TensorFlow 1.x) rewrote the graph; lmsforge's TensorFlow LMS pages
tensors in the GPU allocator instead. This package keeps TFLMSv2's names, arguments and messages,
so a user's script runs unchanged, and maps each one onto the allocator's LMS.

``LMS`` is imported on first use: it subclasses TensorFlow classes, and the knobs, the stats
wrappers and the offline tools must stay importable without starting TensorFlow.
"""

from ._backend import NO_LMS_BUILD, LmsUnavailableError
from .knobs import Knobs

__all__ = ["LMS", "LMSWarning", "Knobs", "LmsUnavailableError", "NO_LMS_BUILD"]


def __getattr__(name):
    if name in ("LMS", "LMSWarning"):
        from . import lms
        return getattr(lms, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
