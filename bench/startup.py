"""What a ``digest run`` pays before its first query, by whose code it is: ``python -m bench.startup``.

Issue 33 asks the small day's one-shot digest to come within 1.5× of its recorded floor, and names start-up as the
gap. This splits start-up into what the project can change and what it cannot, each probe a fresh interpreter started
``--repeats`` times (median wall time, this interpreter, ``PYTHON*`` variables cleared):

* **the interpreter**: ``python -c pass``;
* **the libraries**: every module a run imports that is not the project's own, in the order the run imports them: the
  standard library's and those of the design card's packages (pydantic-settings, httpx) and of what they import.
  The list is read from a child that imports the CLI and makes the sources' first client (httpx imports httpcore
  then). Names that cannot be imported alone are left out (``typing.io``: an alias, not a module);
* **the CLI**: the same child's imports, with the collector tuned as the ``digest`` script tunes it, and the client.

The digest's own modules cost the difference between the last two; what is left of a run's start-up after its
imports (reading the settings, building the checks) is not in these probes. ``bench.recorded`` reports the three
beside the in-process digest and its floor: the libraries' start-up and the in-process digest together estimate what
a ``digest run`` would take if the project's own modules and set-up cost nothing. An estimate, not a bound: the
in-process digest is itself a median of a few runs, some tens of milliseconds either way.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

# What a `digest run` imports before its first query (`digest.app.console_script` then the CLI and the engine), and
# the first client of the sources, made as theirs are for plain-HTTP backends (`digest.backends.http.tls_context`: no
# CA bundle loaded): httpx imports its transport (httpcore, anyio) only then.
CLI_PROBE = (
    "from digest.app.console_script import raise_young_threshold; raise_young_threshold(); "
    "import digest.app.cli, digest.app.engine, httpx; from digest.backends.http import tls_context; "
    "httpx.AsyncClient(verify=tls_context(['http://127.0.0.1']))"
)

# The modules the CLI probe leaves imported that are not the project's, in import order (`sys.modules` keeps it).
_LIST_PROBE = (
    "import sys; before = set(sys.modules); "
    f"{CLI_PROBE}; "
    "import json; own = ('digest', 'checks'); "
    "print(json.dumps([name for name in sys.modules if name not in before "
    "and name.split('.')[0] not in own and not name.startswith('__editable__')]))"
)

# Imports each named module in order, with the collector tuned as in a run (the tuning's module imports only the
# standard library's); a name that is no module of its own (an alias registered by its package) is passed over, as
# importing it alone fails.
_LIBRARY_PROBE = (
    "from digest.app.console_script import raise_young_threshold; raise_young_threshold()\n"
    "import importlib, json, sys\n"
    "for name in json.loads(sys.argv[1]):\n"
    "    try:\n"
    "        importlib.import_module(name)\n"
    "    except ImportError:\n"
    "        pass\n"
)


@dataclass(frozen=True)
class Startup:
    """Median wall seconds of each probe, and how many library modules the run imports."""

    interpreter: float
    libraries: float
    cli: float
    library_modules: int

    @property
    def own(self) -> float:
        """What the project's own modules add to the libraries (never below zero: the probes' noise)."""
        return max(0.0, self.cli - self.libraries)

    def line(self) -> str:
        """One line for a report."""
        return (
            f"interpreter {self.interpreter:.3f} s; the libraries a run imports ({self.library_modules} modules) "
            f"{self.libraries:.3f} s; the CLI {self.cli:.3f} s, of which the digest's own modules "
            f"{self.own:.3f} s"
        )


def probe_environment() -> dict[str, str]:
    """The environment without ``PYTHON*`` (PYTHONDONTWRITEBYTECODE, PYTHONPATH): a probe starts as the script does."""
    return {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}


def _wall(command: Sequence[str]) -> float:
    """The wall time of one run of ``command``; `CalledProcessError` if it fails."""
    started = time.perf_counter()
    subprocess.run(command, check=True, env=probe_environment(), capture_output=True)  # noqa: S603  # this interpreter
    return time.perf_counter() - started


def library_modules() -> list[str]:
    """The modules a run imports that are not the project's own, in the order it imports them."""
    done = subprocess.run(  # noqa: S603  # this interpreter, our probe
        [sys.executable, "-c", _LIST_PROBE], check=True, env=probe_environment(), capture_output=True, text=True
    )
    names: list[str] = json.loads(done.stdout)
    return names


def measure(repeats: int) -> Startup:
    """Each probe ``repeats`` times, taking turns so that a noisy moment of the machine is shared by all three."""
    names = library_modules()
    probes = {
        "interpreter": [sys.executable, "-c", "pass"],
        "libraries": [sys.executable, "-c", _LIBRARY_PROBE, json.dumps(names)],
        "cli": [sys.executable, "-c", CLI_PROBE],
    }
    for command in probes.values():  # warm the page cache and the bytecode files once, untimed
        _wall(command)
    runs: dict[str, list[float]] = {name: [] for name in probes}
    for _ in range(repeats):
        for name, command in probes.items():
            runs[name].append(_wall(command))
    return Startup(
        interpreter=statistics.median(runs["interpreter"]),
        libraries=statistics.median(runs["libraries"]),
        cli=statistics.median(runs["cli"]),
        library_modules=len(names),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Print the three medians as JSON, and the report's line on stderr."""
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__)
    parser.add_argument("--repeats", type=int, default=15, help="fresh interpreters per probe (median)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats: at least 1")
    startup = measure(args.repeats)
    print(
        json.dumps(
            {
                "interpreter": startup.interpreter,
                "libraries": startup.libraries,
                "cli": startup.cli,
                "own": startup.own,
                "library_modules": startup.library_modules,
            }
        )
    )
    print(startup.line(), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
