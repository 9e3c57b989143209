"""Kernels of the neural-network ops: convolutions, pooling, normalisation, activations, and the fused ops
the optimizer (engine/passes) writes in their place.

Data flows from the geometry to the bodies to the fused forms:

    window             sliding-window geometry (SAME/VALID/EXPLICIT, taps that skip padding), data formats,
                       and the Epilogue type that finishes an output block in place
    conv               Conv2D (grouped too), DepthwiseConv2dNative, Conv2DBackpropInput: im2col + GEMM by chunks
    depthwise          depthwise convolution as one compiled pass (conv's numpy body is its twin)
    winograd           _TensorgateWinogradConv2D: a 3x3 stride-1 Conv2D as Winograd F(2x2, 3x3)
    pooling            MaxPool, MaxPoolV2, AvgPool
    normalization      FusedBatchNorm V1-V3, LRN, _TensorgateLayerNorm and _TensorgateRmsNorm
    activations        the ReLU family, soft curves, Softmax/LogSoftmax
    gelu               _TensorgateGelu (GELU exact and approximate as one op)
    swish              _TensorgateSwish, _TensorgateHardSwish (EfficientNet's and MobileNetV3's activations)
    compiled_rows      compiled row loops: bias + activation epilogues, softmax, layer normalisation
    transformer_rows   compiled row loops of decoder blocks: RMSNorm, masked softmax, rotate-half, gates
    attention          _TensorgateAttention: scaled dot-product attention (masks, GQA) in any layout
    rotary             _TensorgateRotary: rotary position embeddings, rotate-half form
    projection         _TensorgateProjection, _TensorgateSplitProjection, _TensorgateGatedProjection: dense
                       layers with a bias or an addend, side by side, and gated
    conv_epilogue      a convolution block's bias, residual addend and ReLU-family activation as one compiled pass
    fused              _FusedConv2D, _FusedDepthwiseConv2dNative, _FusedMatMul, _TensorgateDense: a body
                       with its epilogue
    inverted_residual  _TensorgateInvertedResidual: MobileNetV2's block in bands of output rows
    expand_depthwise   _TensorgateExpandDepthwise: an MBConv block's expansion and depthwise step in bands
    separable          _TensorgateSeparableConv2D: a depthwise convolution and its 1x1 convolution in bands
    preactivation      _TensorgatePreactivatedConv2D: a per-channel scale, shift and ReLU before a 1x1 convolution,
                       applied chunk by chunk before its GEMM
    squeeze_excite     _TensorgateSqueezeExcite: a squeeze-and-excitation block with the projection after it
    recurrent          _TensorgateLSTM, _TensorgateGRU: a Keras LSTM/GRU time loop as one op (a compiled
                       step after one BLAS call per step)

Chunks run on the engine's kernel pool (kernels.pool); GEMMs go through kernels.blas.
"""
