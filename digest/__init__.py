"""digest: a daily cluster health digest."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("digest")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

# The JSON output's contract version: raised when a field changes meaning or goes away (additions keep it).
SCHEMA_VERSION = 1
