"""`wakeful memory ...`: the operator's commands over memory records."""
