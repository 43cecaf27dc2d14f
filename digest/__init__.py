"""digest: a daily cluster health digest."""
