"""`verify`: prove an lrs/1 dataset, and with a source its equality with it (`reshard.verify.runner`).

`context` holds what the checks share, `output_checks` the output's own check classes, `against_source`
the comparison with the source, `report` the outcome.
"""

from reshard.verify.context import CHECKS, VideoQuality, Violation
from reshard.verify.report import VerifyReport
from reshard.verify.runner import verify

__all__ = ["CHECKS", "VerifyReport", "VideoQuality", "Violation", "verify"]
