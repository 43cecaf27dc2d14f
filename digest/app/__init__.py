"""The application: the commands people run, and what wires settings, backends and pipeline together.

Settings read once (``settings``), the engine that wires settings, backends and pipeline (``engine``), and the commands
people run — ``cli`` (run, replay, demo), ``serve`` (the bot and its schedule), ``replay``, with the health endpoint,
logging and exit codes. Only this room reads the clock.
"""
