"""Property-based fuzzing of every parser that takes bytes from outside the server (hypothesis).

Each test feeds a parser random inputs and mutations of real ones (the golden fixtures TensorFlow
wrote: graphs, SavedModels, tensor bundles, serialized Examples) and checks that only the parser's
typed errors come out, within a memory bound (`harness.call_parser`). `harness` holds the settings
profiles (`HYPOTHESIS_PROFILE=ci`, the default, deterministic and quick; `long` for a real search),
`mutations` the byte-level mutation strategy, `seeds` the fixture files mutations start from.
"""
