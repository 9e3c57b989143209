"""gRPC: TensorFlow Serving's PredictionService and ModelService and KServe v2's GRPCInferenceService on
one port beside HTTP, over the same data plane, batching, auth, limits and metrics (`protocol="grpc"`).

Modules, in the order a call goes through them:

- `options`: how it listens: credentials (PEM files, TensorFlow Serving's SSLConfig, ALTS) and server arguments.
- `server`: the grpc.aio server on the app's event loop (a port, a Unix socket): the token interceptor,
  health, reflection.
- `services`: the services under their real names (`tensorflow.serving.PredictionService`), from our
  schema copies; the reflection pool under the real names; `Stub`, a client over our messages.
- `rpc`: what handlers share: errors to statuses (from `service.errors`' one table), deadlines, parsing.
- `tfserving`: PredictionService and ModelService handlers.
- `kserve`: GRPCInferenceService handlers (the tensors' codec is `service.protocols.codecs.v2_grpc`).
"""
