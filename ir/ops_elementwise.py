"""Elementwise and broadcast ops (placeholder; being written)."""
