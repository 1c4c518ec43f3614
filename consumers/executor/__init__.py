"""The executor role: carries out an approved proposal's side effects, once."""
