"""accounting layer."""
