"""The relay role: publishes the outbox to wakeful.log, and the memory write door."""
