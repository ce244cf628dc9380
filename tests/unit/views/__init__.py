"""views layer."""
