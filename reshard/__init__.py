"""lrs reshard package."""
