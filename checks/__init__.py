"""The digest's checks: one module per signal, all speaking the contract of `checks.contract`."""
