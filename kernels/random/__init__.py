"""Kernels of the random ops, bit for bit TensorFlow's: the generator, then the ops that draw from it.

    philox     Philox4x32-10 and the distributions drawn from it (uniform, normal, truncated normal, ...)
    stateless  the StatelessRandom* ops (v1 seeds, v2 key/counter/algorithm)
"""
