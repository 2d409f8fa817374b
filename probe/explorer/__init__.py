"""The explorer's torch-free half: `sources` (what app.py may read under its root) and `figures` (what it draws)."""
