"""Measured against predicted: comparison tables, the study's findings, and the helpers the
notebooks use (``from testbed import analysis``). Reads run folders; never runs anything.
"""

from testbed.analysis.findings import *  # noqa: F401,F403
from testbed.analysis.findings import __all__ as _findings_all
from testbed.analysis.notebook import *  # noqa: F401,F403
from testbed.analysis.notebook import __all__ as _notebook_all

__all__ = [*_notebook_all, *_findings_all]
