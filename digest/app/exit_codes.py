"""The exit codes of every `digest` command, in one table (the README's "Exit codes" repeats it).

A CronJob or a supervisor acts on them: 1 is worth retrying as it is (Telegram or the state file was busy), 2 is
not (someone must change the configuration, the arguments or the state file first).
"""

from __future__ import annotations

from digest.pipeline.state import StateError

EXIT_OK = 0  # the digest was made (and posted, if asked)
EXIT_FAILED = 1  # a delivery failed, the state file was locked by another writer, or the demo's backends did not start
EXIT_USAGE = 2  # bad configuration or arguments, an unusable state file, or a chat that refused the post for good


def for_state_error(error: StateError) -> int:
    """A busy (locked) state file is transient; a corrupt or unwritable one needs a person."""
    return EXIT_FAILED if error.busy else EXIT_USAGE
