"""The backends' HTTP clients: one room, one role — speak a backend's API and translate its failures once.

``prometheus`` (VictoriaMetrics, vmselect, Prometheus), ``victorialogs`` and ``loki``. Checks see them only through
the protocols of `checks.contract` and `checks.log_questions`.
"""
