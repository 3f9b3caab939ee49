"""forecasting (not built yet)."""
