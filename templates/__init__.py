"""Jinja2 templates of the digest, shipped as package data (this file only makes the folder importable)."""
