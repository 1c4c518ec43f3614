"""The runtime's side of every app's workflows: pure functions over checkpoints, with no I/O and no
clock of their own (DESIGN section 10). `engine` makes and moves tasks by each workflow's table,
`wakes` applies events and deadlines, `effects` judges proposals and tool outcomes, `compat` is
gate 4 and `window` builds what the model sees. The workflows themselves belong to apps, written
with the SDK (`wakeful.sdk`); the bundled example apps (`wakeful.examples`) hold two of them."""
