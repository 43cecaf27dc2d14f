"""The pipeline: one window's checks run, covered, scored, explained and compared with earlier days.

``window`` names the window, ``policy`` every threshold, ``collect`` runs the checks (``checks/``) against the
backends, ``score`` grades, ``explain`` connects findings to causes the data shows, ``trends`` compares with earlier
windows, and ``state`` keeps those earlier windows (and the channels' delivery record) in one SQLite file. It asks
the backends through the protocols of ``checks/`` only; nothing here knows a backend's language or a channel.
"""
