"""Kernels of the ops that move, reshape and rearrange tensors without arithmetic on their values.

    identity   Const, Placeholder, the Identity family, NoOp, Assert (the planner presets or aliases most)
    shapes     Shape/Size/Rank, Reshape, Squeeze, ExpandDims, Transpose, Tile, Fill, Empty, Range, BroadcastTo, ...
    slicing    Slice, StridedSlice, Reverse(V2), ReverseSequence, Roll, Pad/PadV2/MirrorPad: cut, flip, pad
    indexing   Gather(V2, Nd), ScatterNd, OneHot, Where, TopKV2, MatrixBandPart, v1 Unique: positions given
    indexing_compiled  compiled loops of gathers' index check, integer Unique and TopKV2 (twins: indexing)
    updates    TensorScatter{Update,Add,Sub,Max,Min}, Inplace*, TensorStridedSliceUpdate: a copy, rewritten
    positions  LowerBound/UpperBound (searchsorted), ListDiff, InvertPermutation, UnravelIndex: positions found
    diagonals  Diag, DiagPart, MatrixDiag/MatrixDiagPart/MatrixSetDiag V1-V3
    joining    Concat(V2), Pack/Unpack, ParallelConcat, Split/SplitV: tensors joined along an axis or split
    spatial    DepthToSpace, SpaceToDepth, SpaceToBatch(ND), BatchToSpace(ND), ExtractImage/VolumePatches
    unique     UniqueV2, UniqueWithCountsV2
    xla        XlaDynamic(Update)Slice, XlaPad, XlaGather, XlaSort, XlaKeyValueSort: XLA ops run outside XLA

Small shape-like inputs (axes, sizes, begin/end) are read on the host through kernels.host.
"""
