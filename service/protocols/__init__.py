"""The wire protocols: each turns HTTP requests and gRPC calls into calls on the data plane or the model
manager, and their results back into responses. Routes and RPC handlers parse and delegate; none holds
model logic.

Modules, in the order a request meets them:

- `inference_routes`: the inference routes (predict, classify, regress, v2 infer), matched ahead of
  FastAPI's router and middleware, which cost more than a small model.
- `bodies`: body size limits and Content-Encoding, applied before any parsing.
- `codecs`: request and response bodies <-> arrays, per protocol (`tfserving` for Predict requests
  and `tfserving_response` for its replies, `tfserving_examples` for classify and regress, `v2`,
  `v2_grpc` for v2's protobuf tensors, `float_digits` for TensorFlow's float32 formatting, and
  `fastjson`, orjson with the json module where the protocols are laxer than orjson).
- `proto`: our copies of TensorFlow Serving's API schemas (PredictRequest, ClassificationRequest,
  PredictionLog, the PredictionService and ModelService) and of KServe v2's gRPC schemas (Triton's
  grpc_service and model_config), for warm-up files and gRPC.
- `tfserving_documents`, `open_inference`: each protocol's status and metadata documents (and v2's
  request parameters), shared by its REST and gRPC transports.
- `rest_tfserving`: TensorFlow Serving's REST API (`/v1/models/...`: status, metadata, predict,
  classify, regress, upload, labels, delete).
- `rest_v2`: the Open Inference Protocol (KServe v2, as Triton speaks it) under `/v2`, with the
  repository extension.
- `rest_partial_runs`: partial runs over TensorFlow Serving's REST paths.
- `grpc`: TensorFlow Serving's and KServe v2's gRPC services, health and reflection, on their own port.
"""
