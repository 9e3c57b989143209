"""Kernels of the ops that move, reshape and rearrange tensors without arithmetic on their values.

    identity   Const, Placeholder, the Identity family, NoOp, Assert (the planner presets or aliases most)
    shapes     Shape/Size/Rank, Reshape, Squeeze, ExpandDims, Transpose, Tile, Fill, Range, BroadcastTo, ...
    slicing    Slice, StridedSlice, ReverseV2, Pad/PadV2/MirrorPad: a region cut out, flipped or padded
    indexing   Gather(V2, Nd), ScatterNd, OneHot, Where, TopKV2, MatrixBandPart, v1 Unique: positions given
    joining    Concat(V2), Pack/Unpack, Split/SplitV: tensors joined along an axis or split
    spatial    DepthToSpace, SpaceToDepth, SpaceToBatchND, BatchToSpaceND
    unique     UniqueV2, UniqueWithCountsV2

Small shape-like inputs (axes, sizes, begin/end) are read on the host through kernels.host.
"""
