"""Kernels of the numeric ops: elementwise math, reductions, matrix products and their relatives.

    elementwise     unary and binary math with numpy broadcasting (Abs, Exp, Add, Pow, Cast, BiasAdd, ...)
    special         Erf and Erfc (W. J. Cody's approximations: numpy has no error function)
    complex         Complex, Real, Imag, Angle, ComplexAbs, Conj
    reductions      Sum, Mean, Max, Min, Prod, All, Any, EuclideanNorm, L2Loss, ArgMax/ArgMin, Cumsum/Cumprod
    matmul          MatMul and BatchMatMul V1-V3, through kernels.blas
    einsum          Einsum as one contraction (transposes and a batched matmul)
    segments        the segment reductions (sorted, unsorted and sparse), also behind embedding lookups
    segments_compiled  the sparse segment reductions on float32 as one compiled loop (their numpy twin: segments)
    bincount        Bincount and its dense/sparse/ragged forms (Keras CategoryEncoding)
    discretization  Bucketize (Keras Discretization)
    quantization    FakeQuantWithMinMax{Args,Vars,VarsPerChannel}, QuantizeAndDequantizeV2-V4
    xla_math        XlaDot(V2) (DotGeneral), XlaEinsum, XlaReducePrecision: XLA ops run outside XLA
"""
