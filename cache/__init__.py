"""lrs cache package."""
