"""Inference: running requests on loaded versions, whatever protocol they came in by.

Modules, in the order a request goes through them:

- `dataplane`: resolves names against the signature, checks dtypes and shapes, and runs the request
  in the worker pool, on the event loop (cheap plans) or through the version's batcher, within its
  deadline; observes every request.
- `inline`: which requests run on the event loop, their plans having measured cheaper than a thread hop.
- `admission`: the worker pool with a bounded queue: past `max_queued_requests` waiting requests, a
  request is shed at once (503, Retry-After) instead of queueing into its timeout.
- `batching`: dynamic batching per version and feed/fetch signature (TensorFlow Serving's
  `BatchingSession`), with priorities, deadlines and padding to allowed sizes.
- `batching_parameters`: TensorFlow Serving's batching parameters file as the server's batching options.
- `partial_runs`: the registry of partial-run handles, tied to the version that set them up.
- `examples`: TensorFlow Serving's Classify, Regress and MultiInference: tf.Examples fed as one vector of
  serialized examples, the outputs read as TensorFlow Serving reads them.
- `predict`: TensorFlow Serving's PredictRequest message (TensorProtos by alias), checked and run.
"""
