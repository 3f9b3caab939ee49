"""control (not built yet)."""
