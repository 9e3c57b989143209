"""Kernels of the ragged-tensor ops: a ragged tensor is flat values plus one row-splits vector per ragged
dimension (`tensor`); the splits are handled on the host, the values stay on their device.

    tensor     the row-splits representation, its checks, and RaggedRange, RaggedGather, RaggedTensorToSparse
    to_tensor  RaggedTensorToTensor (padding or cutting into a dense tensor)
    variant    RaggedTensorToVariant, RaggedTensorFromVariant (a ragged tensor in one DT_VARIANT scalar)
    cross      RaggedCross (tf.ragged.cross and cross_hashed)
"""
