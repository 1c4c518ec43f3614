"""The audit chain over wakeful.log: export, verify and read it."""
