"""advice layer."""
