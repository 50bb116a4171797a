"""TFLMSv2's tunable hyper-parameters, with TFLMSv2's names, defaults and checks.

TFLMSv2 (``ibm-lms.md`` §5.2): the three are distances in topological order and -1 means
"auto-tune". ``swapout_threshold`` refuses 0 (every tensor would be swapped). ``swapin_ahead`` and
``swapin_groupby`` take -1 or a distance >= 0: TFLMSv2's own README and issue 29's snippet pass
``swapin_ahead=0`` (swap in right before the consumer), and its code used any value >= 0 as is; ``sync_mode`` is 0 (asynchronous), 1 (synchronous page-outs), 2 (synchronous
page-ins) or 3 (both). Shared by the ``LMS`` object and the offline simulator, so a setting the
simulator recommends is one ``LMS(...)`` accepts.
"""

from __future__ import annotations

from dataclasses import dataclass

AUTO = -1
SYNC_MODES = (0, 1, 2, 3)


@dataclass(frozen=True)
class Knobs:
    swapout_threshold: int = AUTO
    swapin_ahead: int = AUTO
    swapin_groupby: int = AUTO
    sync_mode: int = 0

    def __post_init__(self) -> None:
        _check_distance("swapout_threshold", self.swapout_threshold, zero_allowed=False)
        _check_distance("swapin_ahead", self.swapin_ahead, zero_allowed=True)
        _check_distance("swapin_groupby", self.swapin_groupby, zero_allowed=True)
        if type(self.sync_mode) is not int or self.sync_mode not in SYNC_MODES:
            raise ValueError(f"sync_mode must be 0, 1, 2 or 3, not {self.sync_mode!r} "
                             "(0 none, 1 synchronous page-outs, 2 synchronous page-ins, 3 both)")

    @property
    def needs_tuning(self) -> bool:
        """True while any distance is left to auto-tuning (-1)."""
        return AUTO in (self.swapout_threshold, self.swapin_ahead, self.swapin_groupby)


def _check_distance(name: str, value: object, *, zero_allowed: bool) -> None:
    # bool is an int subclass; TFLMSv2 refused True/False for these counts, and so do we.
    if type(value) is not int:
        raise TypeError(f"{name} must be an int, not {type(value).__name__} ({value!r})")
    lowest = 0 if zero_allowed else 1
    if value != AUTO and value < lowest:
        allowed = "-1 (auto) or >= 0" if zero_allowed else "-1 (auto) or >= 1"
        raise ValueError(f"{name} must be {allowed}, not {value}")
