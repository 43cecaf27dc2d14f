"""digest: a daily cluster health digest."""

# The one place the version is written: pyproject.toml reads it from here (`dynamic`), so the installed metadata and
# `digest --version` cannot differ, and no start pays for a scan of the installed distributions to read it back.
__version__ = "0.1.0"

# The JSON output's contract version: raised when a field changes meaning or goes away (additions keep it).
SCHEMA_VERSION = 1
