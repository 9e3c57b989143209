"""Kernels of the ops that hold state across a run or across runs: resource variables, lookup tables, and the
TensorArrays and TensorLists that loops read and write.

    variables      VarHandleOp and the ops on resource variables
    lookup_tables  the hash tables behind vocabularies (HashTableV2, LookupTableFindV2, ...)
    tensor_array   TensorArrayV3 and its ops (TF1 v1 control flow)
    tensor_list    TensorList in a DT_VARIANT scalar and its ops (Keras RNNs, TF2 TensorArrays)
"""
