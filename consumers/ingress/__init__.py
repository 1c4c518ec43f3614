"""The ingress role: the HTTP door upstream systems post signed events to."""
