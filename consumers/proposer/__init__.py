"""The proposer role: asks the model for a proposal, which it never acts on."""
