"""dsflow: streaming pipelines as code."""

from dsflow.errors import Diagnostic, DsflowError, Location, ProjectError

__version__ = "0.1.0"

__all__ = ["Diagnostic", "DsflowError", "Location", "ProjectError", "__version__"]
