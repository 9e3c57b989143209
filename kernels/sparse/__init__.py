"""Kernels of the SparseTensor ops: a SparseTensor is three tensors (indices, values, dense_shape), checked
and ordered as TensorFlow's sparse kernels do (`tensor`).

    tensor        the SparseTensor triple, its checks and orderings, shared by the modules below
    manipulation  SparseToDense, SparseReorder, SparseReshape, SparseFillEmptyRows, SparseConcat, SparseSlice
    index_loops   compiled loops over index rows: SparseFillEmptyRows' regrouping, SparseToDense's positions
    arithmetic    SparseAdd, SparseTensorDenseMatMul, SparseReduceSum/Max (and their sparse outputs)
    cross         SparseCross, SparseCrossV2, SparseCrossHashed (feature crosses)
    cross_compiled  the hashed crosses as one compiled loop over the features' fingerprints (twin: cross)
    sets          SetSize and the Dense/Sparse set operations (tf.sets)
    edit_distance EditDistance (Levenshtein distance between sparse sequences, tf.edit_distance)
"""
