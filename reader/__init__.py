"""lrs reader package."""
