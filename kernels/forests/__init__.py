"""Kernels of TensorFlow Decision Forests' inference ops (which TensorFlow Serving's model server links): the
model resource, loading the Yggdrasil model from the SavedModel's assets, and inference, run by YDF.

    model      the model resource: SimpleMLCreateModelResource and the load ops, a Yggdrasil model held by ydf
    features   the inference ops' packed feature banks unpacked into ydf's per-feature columns
    inference  SimpleMLInferenceOp(WithHandle) and SimpleMLInferenceLeafIndexOpWithHandle, shaped as TF-DF's
"""
