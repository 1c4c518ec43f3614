"""The resume gate role: gates 2 to 7 on every wake, and the writes that follow a ruling."""
