"""producers."""
