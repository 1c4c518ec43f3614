"""Example apps on the wakeful SDK: the refund agent (the default app) and supplier onboarding."""
