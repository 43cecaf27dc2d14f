"""Development and test tooling, apart from the product: real backend servers started on loopback, and loaders.

Nothing in `digest/` or `checks/` imports this package except `digest demo`, which needs embedded backends.
"""
