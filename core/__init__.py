"""Settings, errors and names shared by every role."""
