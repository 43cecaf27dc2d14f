"""Output: a graded digest turned into what a reader sees.

Text, Telegram HTML and JSON (``render``), the chart (``chart``, which asks its questions through the same seam as the
checks), and the escaping of hostile text (``safe_text``). It knows no channel: the channels send what it renders.
"""
