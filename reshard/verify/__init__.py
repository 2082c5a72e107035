"""`verify`: prove an lrs/1 dataset, and with a source its equality with it (`reshard.verify.runner`).

`context` holds what the checks share, `output_checks` the output's own check classes, `against_source`
the comparison with the source, `report` the outcome; `report_frames` what `lrs verify --report` keeps
while comparing, `report_page` the page it writes.
"""

from reshard.verify.context import CHECKS, VideoQuality, Violation
from reshard.verify.report import VerifyReport
from reshard.verify.report_frames import REPORT_WORST_FRAMES
from reshard.verify.report_page import write_report_page
from reshard.verify.runner import verify

__all__ = [
    "CHECKS",
    "REPORT_WORST_FRAMES",
    "VerifyReport",
    "VideoQuality",
    "Violation",
    "verify",
    "write_report_page",
]
