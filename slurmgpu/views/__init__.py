"""Views: documents rendered as text, JSON or HTML (no decisions)."""
